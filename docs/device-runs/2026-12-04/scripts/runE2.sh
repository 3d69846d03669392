#!/usr/bin/env bash
# Twenty-eighth session, after run124 (runE1.sh: the deterministic backward's Δ folded into its
# dQ kernel, test_gluon_bwd.py 413 passed, the 38 backward keys behind the bench rows re-tuned,
# merged at 1 % on the CPU into this tree's database). On one H200:
# 1. the default bundle on that database, `attnpack bench` of both ops over both shape sets;
# 2. tests/gpu/test_torch_sdpa.py on it (F.sdpa forward and backward through the bundle);
# 3. tests/gpu/test_runtime_attention.py and test_torch_contracts.py (deterministic mode serves
#    det1 backwards), if time is left.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
. build_tools/bench_env.sh "$L"
timeout $((300 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
timeout $((450 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$OUT/test_torch_sdpa.txt"
timeout $((570 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_runtime_attention.py tests/gpu/test_torch_contracts.py > "$OUT/test_more.txt" 2>&1
echo "test_runtime_attention + test_torch_contracts rc $? at $SECONDS s"; tail -n 1 "$OUT/test_more.txt"
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
