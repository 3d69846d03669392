#!/usr/bin/env bash
# On a GPU machine: this tree's runtime, PyTorch extension and default bundle built for the local
# GPU (build_tools/run_gpu_tests.sh with no test file), `attnpack bench` forward and forward +
# backward in bf16 over both shape sets, then tests/gpu/test_torch_sdpa.py. The bench's output
# and results.json and the test summary go to $OUT: what docs/performance.md is made from
# (`attnpack bench --report-only`).
#   usage: build_tools/bench_tree.sh
#   env: OUT (default ./gpu-logs/bench), DEADLINE_S (585: the tests stop there, seconds from
#        this script's start; a caller that already spent some of its call passes less)
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-logs/bench}; mkdir -p "$OUT"
. build_tools/bench_env.sh
timeout 220 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic \
  --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json "$OUT/results.json" 2>/dev/null
timeout $((${DEADLINE_S:-585} - SECONDS)) python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_torch_sdpa.py > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 2 "$OUT/test_torch_sdpa.txt"
