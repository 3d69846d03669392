#!/usr/bin/env bash
# Fourteenth session: the Gluon backward's causal programs in head groups (scripts/
# bwd_group.patch: the grid stays (blocks, B·heads); its linear ids are read HEAD_GROUP heads at
# a time, block by block across a group, so each group's longest blocks start first). run66's
# heads-on-x order (bwd_lpt.patch) gained up to 1.11x at B·heads <= 32 and lost up to 15 % at
# 128 and more. test_gluon_bwd.py on the patched tree (HEAD_GROUP 8), then the old kernels and
# HEAD_GROUP 4, 8, 16 and 32 built as five bf16 archives and compared by cycles over both
# shape sets (causal kernels only: the full ones do not change).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
rm -rf /tmp/ab-old && mkdir -p /tmp/ab-old && cp -r aot /tmp/ab-old/
grep -q "HEAD_GROUP = gl.constexpr" aot/kernels/gluon_attn/bwd.py || \
  patch -p1 < docs/device-runs/2026-12-02/scripts/bwd_group.patch || { echo "patch failed"; exit 1; }
for G in 4 16 32; do
  rm -rf /tmp/ab-g$G && mkdir -p /tmp/ab-g$G && cp -r aot /tmp/ab-g$G/
  sed -i "s/^HEAD_GROUP = gl.constexpr(8)/HEAD_GROUP = gl.constexpr($G)/" /tmp/ab-g$G/aot/kernels/gluon_attn/bwd.py
  grep -c "^HEAD_GROUP = gl.constexpr($G)" /tmp/ab-g$G/aot/kernels/gluon_attn/bwd.py
done
FILES=tests/gpu/test_gluon_bwd.py OUT=$L timeout 240 bash build_tools/run_gpu_tests.sh > $L/summary.txt 2>&1
echo "tests rc $? at $SECONDS s"; tail -n 1 $L/summary.txt; cp $L/summary.txt $OUT/
{ grep -E "FAILED|^E  " $L/test_gluon_bwd.log | cut -c1-600 | head -100; tail -n 3 $L/test_gluon_bwd.log; } > $OUT/tests.txt
. build_tools/runtime_env.sh $L
A=attnpack-0.1.0-sm_90.apk
sides=()
for side in old g8 g4 g16 g32; do
  case $side in old) k=/tmp/ab-old/aot/kernels ;; g8) k=$PWD/aot/kernels ;; *) k=/tmp/ab-${side}/aot/kernels ;; esac
  python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
    --kernels $k -o /tmp/ab-$side-apk -j "$(nproc)" > $L/build_$side.log 2>&1 || echo "build $side failed"
  sides+=(--archive $side=/tmp/ab-$side-apk/$A)
done
echo "archives at $SECONDS s"
timeout $((585 - SECONDS)) python3 bench/kernel_ab.py --op bwd --kernel-filter causal "${sides[@]}" \
  --cycles --reps 10 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $OUT/ab_group.json > $OUT/ab_group.txt 2>&1
echo "ab rc $? at $SECONDS s"; grep "^#" $OUT/ab_group.txt
