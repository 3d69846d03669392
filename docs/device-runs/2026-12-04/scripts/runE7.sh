#!/usr/bin/env bash
# Twenty-ninth session, after run129 (runE6.sh: 15 of the 132 head-dim-64 backward keys tuned
# with the M128 configs, the 9 behind bench rows among them, merged at 1 % on the CPU: all 15
# changed). On one H200:
# 1. the default bundle on that database, `attnpack bench` of both ops over both shape sets;
# 2. tests/gpu/test_torch_sdpa.py on it (F.sdpa forward and backward through the bundle);
# 3. tests/gpu/test_gluon_bwd.py at head dim 64 (every kernel, fp16 and bf16), the smoke test,
#    the archive's list and the deterministic repeatability (its counts now hold the M128 ones);
# 4. tests/gpu/test_torch_contracts.py, if time is left.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
. build_tools/runtime_env.sh "$L"
. build_tools/bench_env.sh "$L"
timeout $((260 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
timeout $((390 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$L/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$L/test_torch_sdpa.txt"
timeout $((530 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gluon_bwd.py \
  -k "d64 or smoke or every_declared or repeatable" > "$L/test_gluon_bwd.txt" 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s"; tail -n 2 "$L/test_gluon_bwd.txt"
timeout $((575 - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_contracts.py > "$L/test_contracts.txt" 2>&1
echo "test_torch_contracts rc $? at $SECONDS s"; tail -n 1 "$L/test_contracts.txt"
grep -E "FAILED|^E  " "$L"/test_*.txt | cut -c1-400 | head -60 > "$OUT/failures.txt"
cd "$OUT" && tar czf logs.tar.gz logs && rm -rf logs
