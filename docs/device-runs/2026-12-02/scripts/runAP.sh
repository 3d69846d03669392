#!/usr/bin/env bash
# Device call AP (ninth session): the build at the re-tuned database (2-stage rings release K
# before V); tests/gpu/test_torch_sdpa.py (F.sdpa forward and backward against fp32 math);
# `attnpack bench --ops fwd,fwdbwd --dtype bf16 --no-cold` of both sets; then, as time allows,
# ncu of the worst public forward row (B32 H16 S512 d128 full) through attnpack and cuDNN.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
FILES="tests/gpu/test_torch_sdpa.py" OUT=$L timeout 280 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "build+tests rc $? at $SECONDS s"; tail -n 1 $L/test_torch_sdpa.log; grep -h "FAILED" $L/test_torch_sdpa.log | head -5
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
cp $L/*.log $L/summary.txt $OUT/ 2>/dev/null
timeout $((520 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic --out $L/bench > $L/bench.txt 2> $L/bench.err; echo "bench rc $? at ${SECONDS}s"
grep "^| shapes\|^| model_shapes" $L/bench.txt | head -6
cp $L/bench/results.json $OUT/results.json 2>/dev/null; cp $L/bench.txt $L/bench.err $OUT/ 2>/dev/null
S="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy"
for be in attnpack default; do
  [ $SECONDS -gt 560 ] && break
  timeout $((590 - SECONDS)) ncu --profile-from-start off --clock-control none $S python3 bench/profile_sdpa.py --shape 32,16,16,512,512,128 --backend $be > $L/ncu_b32_s512_d128_full_$be.txt 2>&1
  echo "ncu $be rc $? at $SECONDS s"
  cp $L/ncu_b32_s512_d128_full_$be.txt $OUT/ 2>/dev/null
done
