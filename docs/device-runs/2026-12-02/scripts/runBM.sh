#!/usr/bin/env bash
# Prepared in the twelfth session for the next one (not run): the Gluon forward with l, the
# row sums of P, from the tensor cores (scripts/fwd_tcsum.patch: P times a tile of ones, one
# m64n8 wgmma beside each PV, where family.fwd_tc_sum says; docs/gluon-family.md, item 11).
# The patch applied to the working tree in place (old kernels built from a copy first); the
# patched test_gluon_attn.py at head dim 128, the row-maxima test and the smoke test; then
# bench/kernel_ab.py --cycles over both shape sets, old against patched (the 20 kernels
# without TC_SUM are the same in both: an A/A control).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
rm -rf /tmp/old-tree && mkdir -p /tmp/old-tree && cp -r aot /tmp/old-tree/
grep -q TC_SUM aot/kernels/gluon_attn/fwd.py || patch -p1 < docs/device-runs/2026-12-02/scripts/fwd_tcsum.patch || { echo "patch failed"; exit 1; }
FILES="tests/gpu/test_gluon_attn.py" OUT=$L timeout 260 bash build_tools/run_gpu_tests.sh \
  -k "row_maxima or 128-False or 128-True or smoke" > $L/summary.txt 2>&1
trc=$?; echo "tests rc $trc at $SECONDS s"; tail -n 2 $L/summary.txt
grep -E "FAILED|^E  " $L/test_gluon_attn.log | cut -c1-600 > $OUT/tests_fail.txt
tail -n 3 $L/test_gluon_attn.log >> $OUT/tests_fail.txt
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  --kernels /tmp/old-tree/aot/kernels -o /tmp/old -j 16 > $L/build_old.log 2>&1 || echo "build old failed"
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -o /tmp/tc -j 16 > $L/build_tc.log 2>&1 || echo "build tc failed"
echo "archives at $SECONDS s"
timeout $((590 - SECONDS)) python3 bench/kernel_ab.py --archive old=/tmp/old/$A --archive tc=/tmp/tc/$A \
  --cycles --reps 15 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $OUT/ab_tcsum.json > $OUT/ab_tcsum.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 2 $OUT/ab_tcsum.txt
# For the next call on the same machine (runBN.sh): keep the patched kernels only if every
# test passed and the best tc kernel per shape is at least 0.5 % faster by geomean.
g=$(grep -o "tc/old, best kernel per shape: geomean [0-9.]*" $OUT/ab_tcsum.txt | awk '{print $NF}')
if [ $trc = 0 ] && grep -q " passed" $L/summary.txt && python3 -c "import sys; sys.exit(0 if float('${g:-0}') >= 1.005 else 1)"; then
  echo "tc" > /tmp/bm_state
else
  echo "old" > /tmp/bm_state
fi
echo "state $(cat /tmp/bm_state) (geomean ${g:-none})" | tee $OUT/state.txt
