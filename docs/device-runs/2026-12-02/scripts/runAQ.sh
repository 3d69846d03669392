#!/usr/bin/env bash
# Device call AQ (ninth session): the bench-vs-ncu gap on short forward rows (.carry/flush_gap.py)
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_bench.py" OUT=$L timeout 250 bash build_tools/run_gpu_tests.sh -k nothing_matches_this > $L/summary.txt 2>&1
echo "build rc $? at $SECONDS s"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((400 - SECONDS)) python3 .carry/flush_gap.py > $L/flush_gap.jsonl 2> $L/flush_gap.err
echo "diag rc $? at $SECONDS s"; cat $L/flush_gap.jsonl | cut -c1-400; tail -3 $L/flush_gap.err
cp $L/flush_gap.* $L/summary.txt $OUT/ 2>/dev/null
