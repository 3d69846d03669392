#!/usr/bin/env bash
# Nineteenth session (2026-12-03). One exp2 in eight off the MUFU unit at head dim 64
# (scripts/fwd_poly.patch, docs/gluon-family.md item 15): at head dim 64 a score's two GEMMs take
# as long as its exp2 on the MUFU (16 a clock an SM against 2048 multiply-adds), so the softmax is
# as long as the GEMMs it should hide behind; the patch computes every eighth score's exp2 by a
# cubic on the FMA units (9 instructions). On the CPU: 72 head-dim-64 forward kernels build with
# no spills and no serialized wgmma; the key-tile loop 58 MUFU.EX2 instead of 66. Here:
# test_gluon_attn.py's smoke, growing maxima and the whole head-dim-64 grid (fp16 and bf16) on the
# patched tree, then the committed and patched bf16 forward archives by cycles over both shape
# sets (head-dim-64 kernels); /tmp/ab_state_poly reads "poly" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-565} KERNEL_FILTER=d64 bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/fwd_poly.patch fwd poly \
  tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 64-True or 64-False"
