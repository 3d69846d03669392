#!/usr/bin/env bash
# Thirtieth session: programmatic dependent launch (archive format 2.5, a step's `pdl`; every
# Gluon kernel and the sm_90 decode kernels wait for the grid ahead with griddepcontrol.wait and
# the runtime launches them with programmatic stream serialization). On one H200:
# 1. this tree's runtime, extension and default bundle (build_tools/bench_env.sh);
# 2. `attnpack bench` (bf16, fwd + fwdbwd, both shape sets) three times in turn: programmatic
#    launches on, off (ATTNPACK_PDL=0, the runtime's switch; the same kernels, whose wait is then
#    a no-op), on again: the on/off ratio per row, with the two "on" runs as the noise floor;
# 3. with programmatic launches on: tests/gpu/test_torch_sdpa.py (every kernel chain of the
#    bundle through F.sdpa against PyTorch's math, CUDA graph capture too) and
#    test_runtime_attention.py, then test_torch_contracts.py.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEA.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-logs/runEA}; LOGS=/tmp/runEA; mkdir -p "$OUT" "$LOGS"
. build_tools/bench_env.sh "$LOGS/build"

bench() {  # bench NAME PDL: one `attnpack bench` with ATTNPACK_PDL=PDL
  ATTNPACK_PDL=$2 timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 \
    --no-cold --no-dynamic --no-plots --out "/tmp/bench_$1" > "$LOGS/bench_$1.txt" 2>&1
  echo "bench $1 (ATTNPACK_PDL=$2) rc $? at $SECONDS s"
  grep -A 8 "^## Summary" "/tmp/bench_$1/report.md" | tail -4
  cp "/tmp/bench_$1/results.json" "$OUT/results_$1.json" 2>/dev/null
}
bench on 1
bench off 0
bench on2 1

timeout $((520 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_sdpa.py tests/gpu/test_runtime_attention.py > "$LOGS/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 1 "$LOGS/test_torch_sdpa.txt"
timeout $((565 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_contracts.py > "$LOGS/test_contracts.txt" 2>&1
echo "test_torch_contracts rc $? at $SECONDS s"; tail -n 1 "$LOGS/test_contracts.txt"
grep -hE "FAILED|^E  " "$LOGS"/test_*.txt | cut -c1-400 | head -60 > "$OUT/failures.txt"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
