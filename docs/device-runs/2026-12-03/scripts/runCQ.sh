#!/usr/bin/env bash
# Nineteenth session (2026-12-03), after run88 (scripts/fwd_tree_mask.patch: 0.994x by cycles over
# 44 rows; the short causal rows gained up to 1.095x, the rows without a mask lost up to 5 %: the
# row-max/sum trees cost the steady loop, the one-compare causal mask saves the diagonal tiles).
# scripts/mask.patch keeps the mask alone, in the forward (fwd._softmax) and in the backward
# (bwd._minus_lse, bwd._dq_probabilities): a key is visible to a row iff key <= min(row, Sk - 1),
# one compare and one select a score where `(key < Sk) & (key <= row)` was two selects.
# 1. build_tools/patch_ab.sh on the forward: test_gluon_attn's smoke, growing maxima and causal
#    grids at head dims 64/96/128 on the patched tree, then the committed and patched bf16 causal
#    forward kernels by cycles over both shape sets.
# 2. The backward on the same (patched) tree: tests/gpu/test_gluon_bwd.py whole, then the bf16
#    causal backward kernels of the committed tree (/tmp/ab-old, copied by patch_ab.sh before it
#    patched) and of the patched one by cycles.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-330} KERNEL_FILTER=causal REPS=${REPS:-8} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/mask.patch fwd mask \
  tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-True or 96-True"
L=$OUT/logs_bwd; mkdir -p $L
FILES=tests/gpu/test_gluon_bwd.py OUT=$L timeout 160 bash build_tools/run_gpu_tests.sh \
  > $L/summary.txt 2>&1
echo "bwd tests rc $? at $SECONDS s"; tail -n 1 $L/summary.txt
{ grep -E "FAILED|^E  " $L/test_gluon_bwd.log | cut -c1-600 | head -100
  tail -n 3 $L/test_gluon_bwd.log; } > $OUT/tests_bwd.txt
. build_tools/runtime_env.sh "$L"
A=attnpack-0.1.0-sm_90.apk
for side in old mask; do
  kernels=(); [ $side = old ] && kernels=(--kernels /tmp/ab-old/aot/kernels)
  python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op bwd --dtype bf16 \
    "${kernels[@]}" -o /tmp/abb-$side-apk -j "$(nproc)" > $L/build_bwd_$side.log 2>&1 \
    || echo "bwd build $side failed"
done
echo "bwd archives at $SECONDS s"
timeout $((585 - SECONDS)) python3 bench/kernel_ab.py --op bwd --kernel-filter causal \
  --archive old=/tmp/abb-old-apk/$A --archive mask=/tmp/abb-mask-apk/$A --cycles --reps 6 \
  --shapes bench/shapes.json --shapes bench/model_shapes.json --json $OUT/ab_bwd_mask.json \
  > $OUT/ab_bwd_mask.txt 2>&1
echo "bwd ab rc $? at $SECONDS s"; tail -n 2 $OUT/ab_bwd_mask.txt
