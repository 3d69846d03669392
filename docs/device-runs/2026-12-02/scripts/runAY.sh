#!/usr/bin/env bash
# Device call AY (tenth session), the committed tree (d6931fc): the build (no tests), then
# `attnpack bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic` (settling round, two ABBA
# rounds); results.json, results.csv and report.md copied flat into $OUT.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((265 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $L/bench/results.csv $L/bench/report.md $L/bench.txt $L/bench.err $L/summary.txt $OUT/ 2>/dev/null
ls -la $OUT
