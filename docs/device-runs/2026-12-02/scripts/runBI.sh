#!/usr/bin/env bash
# Prepared in the eleventh session for the next one (not run): the Gluon forward's epilogue
# with one reciprocal a row instead of a division an element (scripts/fwd_recip.patch; ptxas
# emitted the full division's range checks for each of a consumer's 64 O elements: 368-376
# fewer instructions per kernel, no spills, CPU-checked). Old and new bf16 Gluon forward
# archives built here; bench/kernel_ab.py --cycles over both shape sets (each kernel checked
# against cuDNN first); then the patched tree's test_gluon_attn.py at head dim 128.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
. build_tools/runtime_env.sh $L
rm -rf /tmp/old-tree && mkdir -p /tmp/old-tree && cp -r aot /tmp/old-tree/
git apply docs/device-runs/2026-12-02/scripts/fwd_recip.patch || { echo "patch failed"; exit 1; }
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 \
  --kernels /tmp/old-tree/aot/kernels -o /tmp/old -j 16 > $L/build_old.log 2>&1
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -o /tmp/new -j 16 > $L/build_new.log 2>&1
echo "archives at $SECONDS s"
A=attnpack-0.1.0-sm_90.apk
timeout 300 python3 bench/kernel_ab.py --archive old=/tmp/old/$A --archive new=/tmp/new/$A --cycles \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json $OUT/ab_recip.json > $OUT/ab_recip.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 3 $OUT/ab_recip.txt
FILES="tests/gpu/test_gluon_attn.py" OUT=$L timeout $((585 - SECONDS)) bash build_tools/run_gpu_tests.sh -k "128-False or 128-True" > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 3 $L/summary.txt
cp $L/summary.txt $L/build_*.log $OUT/ 2>/dev/null
