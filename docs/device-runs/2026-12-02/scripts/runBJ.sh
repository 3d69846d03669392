#!/usr/bin/env bash
# Twelfth session, first call (run58): the Gluon forward's epilogue reciprocal (fwd_recip.patch) and the
# lazy rescale (O rescaled only on key tiles where a row's max grew by more than 2^8 in p; the
# working tree) A/B-measured in cycles against 07f2d2b's fwd.py, after the working tree's
# test_gluon_attn.py at head dim 128 and the growing-maxima test.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
for side in old recip; do
  python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
    --kernels .carry/tree_$side/aot/kernels -o /tmp/$side -j 16 > $L/build_$side.log 2>&1 || echo "build $side failed"
done
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -o /tmp/lazy -j 16 > $L/build_lazy.log 2>&1 || echo "build lazy failed"
echo "archives at $SECONDS s"; ls -la /tmp/old/$A /tmp/recip/$A /tmp/lazy/$A
FILES="tests/gpu/test_gluon_attn.py" OUT=$L timeout 250 bash build_tools/run_gpu_tests.sh \
  -k "growing or 128-False or 128-True or smoke" > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 4 $L/summary.txt; cp $L/summary.txt $OUT/tests_summary.txt
grep -h "FAIL\|Error\|assert" $L/*.log 2>/dev/null | head -20 > $OUT/tests_fail.txt
timeout $((590 - SECONDS)) python3 bench/kernel_ab.py --archive old=/tmp/old/$A --archive recip=/tmp/recip/$A \
  --archive lazy=/tmp/lazy/$A --cycles --reps 15 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json $OUT/ab_lazy.json > $OUT/ab_lazy.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 3 $OUT/ab_lazy.txt
cat $L/build_*.log | tail -n 20 > $OUT/build_tail.txt
