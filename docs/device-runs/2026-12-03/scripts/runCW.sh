#!/usr/bin/env bash
# Twentieth session: runCV.sh without its test phase, for the little device time left (the
# GPU tests build the bundle first, about two minutes). scripts/bwd_dq_early2.patch on this tree,
# then the committed and the patched bf16 fast (det0) backward kernels by cycles over both shape
# sets (bench/kernel_ab.py checks each kernel against cuDNN before timing it). A win here still
# needs tests/gpu/test_gluon_bwd.py on the patched tree before it is kept (runCV.sh does both).
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p "$L"
rm -rf /tmp/ab-old && mkdir -p /tmp/ab-old && cp -r aot /tmp/ab-old/
patch -p1 < docs/device-runs/2026-12-03/scripts/bwd_dq_early2.patch || exit 1
. build_tools/runtime_env.sh "$L"
A=attnpack-0.1.0-sm_90.apk
for side in old dqearly2; do
  kernels=(); [ $side = old ] && kernels=(--kernels /tmp/ab-old/aot/kernels)
  python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
    "${kernels[@]}" -o /tmp/ab-$side-apk -j "$(nproc)" > $L/build_$side.log 2>&1 \
    || echo "build $side failed"
done
echo "archives at $SECONDS s"
timeout $((${BUDGET_S:-160} - SECONDS)) python3 bench/kernel_ab.py --op bwd --kernel-filter det0 \
  --archive old=/tmp/ab-old-apk/$A --archive dqearly2=/tmp/ab-dqearly2-apk/$A --cycles --reps 6 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json $OUT/ab_dqearly2.json \
  > $OUT/ab_dqearly2.txt 2>&1
echo "ab rc $? at $SECONDS s"; tail -n 2 $OUT/ab_dqearly2.txt
