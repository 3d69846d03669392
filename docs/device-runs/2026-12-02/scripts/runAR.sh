#!/usr/bin/env bash
# Device call AR (ninth session): the first-row effect in `attnpack bench` (.carry/settle.py)
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_bench.py" OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh -k nothing_matches_this > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout 100 python3 .carry/settle.py > $L/settle.jsonl 2> $L/settle.err
echo "settle rc $? at $SECONDS s"; cat $L/settle.jsonl; tail -3 $L/settle.err
cp $L/settle.* $OUT/ 2>/dev/null
