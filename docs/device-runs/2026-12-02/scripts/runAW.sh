#!/usr/bin/env bash
# Device call AW (tenth session), the committed tree (d6931fc): the build and test_bench.py
# (tests/gpu, as build_tools/run_gpu_tests.sh runs them), then `attnpack bench` with its settling
# round and two alternating rounds (both sets, fwd and fwdbwd, bf16, no cold starts, no dynamic
# report), then test_torch_sdpa.py and the head-dim-64/96 cases of test_gluon_attn.py's grid
# with what time is left.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_bench.py" OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build+test_bench rc $? at $SECONDS s"; tail -n 2 $L/summary.txt
cp $L/*.log $L/summary.txt $OUT/ 2>/dev/null
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
timeout $((420 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
mkdir -p $OUT/bench; cp -r $L/bench/* $OUT/bench/ 2>/dev/null; cp $L/bench.txt $L/bench.err $OUT/ 2>/dev/null
timeout $((500 - SECONDS)) python3 -X faulthandler -m pytest tests/gpu/test_torch_sdpa.py -q -rfEs --tb=short -p no:cacheprovider > $L/test_torch_sdpa.log 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s: $(tail -n 1 $L/test_torch_sdpa.log)"
cp $L/test_torch_sdpa.log $OUT/ 2>/dev/null
timeout $((588 - SECONDS)) python3 -X faulthandler -m pytest tests/gpu/test_gluon_attn.py -q -rfEs --tb=short -p no:cacheprovider \
  -k "64-False or 64-True or 96-False or 96-True" > $L/test_gluon_attn_d64_d96.log 2>&1
echo "test_gluon_attn d64/d96 rc $? at $SECONDS s: $(tail -n 1 $L/test_gluon_attn_d64_d96.log)"
cp $L/test_gluon_attn_d64_d96.log $OUT/ 2>/dev/null
