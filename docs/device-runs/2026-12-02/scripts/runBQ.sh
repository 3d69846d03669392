#!/usr/bin/env bash
# Thirteenth session, last call (what was left of the device time): l from the tensor cores
# again, the ones tile now stored K-major with the 128-byte swizzle and read transposed, as K
# is (scripts/fwd_tcsum_kmajor.patch; run61's N-major unswizzled tile crashed every kernel).
# The smoke over every kernel, the row-maxima test (every bf16 kernel, head dims 64 and 128,
# against the fp32 reference) and the causal head-dim-128 grid; then the A/B by cycles over
# bench/shapes.json, as far as the time goes.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
rm -rf /tmp/old-tree && mkdir -p /tmp/old-tree && cp -r aot /tmp/old-tree/
grep -q TC_SUM aot/kernels/gluon_attn/fwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/fwd_tcsum_kmajor.patch || { echo "patch failed"; exit 1; }
FILES="tests/gpu/test_gluon_attn.py" OUT=$L timeout 150 bash build_tools/run_gpu_tests.sh \
  -k "smoke or row_maxima or 128-True" > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 1 $L/summary.txt
grep -E "FAILED|^E  " $L/test_gluon_attn.log | cut -c1-600 | head -100 > $OUT/tests_fail.txt
tail -n 3 $L/test_gluon_attn.log >> $OUT/tests_fail.txt
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  --kernels /tmp/old-tree/aot/kernels -o /tmp/old -j 16 > $L/build_old.log 2>&1 || echo "build old failed"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -o /tmp/tc -j 16 > $L/build_tc.log 2>&1 || echo "build tc failed"
echo "archives at $SECONDS s"
timeout $((${BUDGET_S:-330} - SECONDS)) python3 bench/kernel_ab.py --archive old=/tmp/old/$A --archive tc=/tmp/tc/$A \
  --cycles --reps 10 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $OUT/ab_tcsum.json > $OUT/ab_tcsum.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 2 $OUT/ab_tcsum.txt
