#!/usr/bin/env bash
# Thirtieth session, after run132 (runEA.sh: programmatic launches A/B): the decode kernels'
# wait is taken out again (run132: their split rows 1 % slower with it), so only the Gluon
# kernels launch programmatically. On one H200:
# 1. this tree's runtime, extension and default bundle; `attnpack bench` (bf16, fwd + fwdbwd,
#    both shape sets) into $OUT/results.json: docs/performance.md is made from it;
# 2. tests/gpu/test_gluon_bwd.py: the smoke test (every backward kernel, each in a child with a
#    deadline: a wait in the wrong place would hang), the archive's list, repeatability;
# 3. tests/gpu/test_gluon_attn.py: the smoke test over every forward kernel, the persistent
#    units, growing row maxima.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEB.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-logs/runEB}; LOGS=/tmp/runEB; mkdir -p "$OUT" "$LOGS"
. build_tools/bench_env.sh "$LOGS/build"
timeout 200 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic \
  --no-plots --out /tmp/bench > "$LOGS/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | tail -4
cp /tmp/bench/results.json "$OUT/results.json" 2>/dev/null

timeout $((390 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gluon_bwd.py \
  -k "smoke or every_declared or repeatable" > "$LOGS/test_gluon_bwd.txt" 2>&1
echo "test_gluon_bwd rc $? at $SECONDS s"; tail -n 1 "$LOGS/test_gluon_bwd.txt"
timeout $((580 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gluon_attn.py \
  -k "smoke or persistent_units or row_maxima" > "$LOGS/test_gluon_attn.txt" 2>&1
echo "test_gluon_attn rc $? at $SECONDS s"; tail -n 1 "$LOGS/test_gluon_attn.txt"
grep -hE "FAILED|^E  " "$LOGS"/test_*.txt | cut -c1-400 | head -60 > "$OUT/failures.txt"
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" .
