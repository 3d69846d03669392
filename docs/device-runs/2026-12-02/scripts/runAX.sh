#!/usr/bin/env bash
# Device call AX (tenth session), the committed tree (d6931fc): the build (no tests), then
# order.py: eight forward rows of bench/shapes.json timed by the bench's measure_shape with
# attnpack first, attnpack last, and two ABBA rounds, twice.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES=" " OUT=$L timeout 200 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((330 - SECONDS)) python3 .carry/order.py > $OUT/order.jsonl 2> $L/order.err
echo "order rc $? at $SECONDS s"; cat $OUT/order.jsonl; tail -n 5 $L/order.err
cp $L/summary.txt $L/order.err $OUT/ 2>/dev/null
