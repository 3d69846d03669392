#!/usr/bin/env bash
# Prepared in the thirty-fourth session (runEL.sh), remade in the thirty-sixth for main with the
# early convert in it. bwd_causal_descend.patch: the causal dK/dV programs of 64-row query tiles
# walk their key block's query tiles from the last row down, the group's heads inside each row
# (docs/gluon-bwd.md, "The H100, and the causal walk from the last rows"), so the programs of a
# head's key blocks read the same Q/dO tile and add into the same dQ rows together (our reading
# of the H100's GQA 7/8 causal rows: their fp32 dQ adds leave L2 on the ascending walk). With
# the early convert the patch also makes a consumer publish its tiles in the walk's order
# (bwd._block_tile). On one GPU (say which): build_tools/patch_ab.sh with the whole of
# test_gluon_bwd.py on the patched tree (a wrong tile count would hang the early convert: the
# smoke test's deadline, then STOP_ON_TEST_FAIL), then the committed and the patched bf16
# causal kernels of 64-row tiles by cycles over both shape sets. The patch stays applied only if
# kept, so a later step of the same call tunes what the A/B chose (apply_kept in later calls).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runES.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
P=docs/device-runs/2026-12-04/scripts/bwd_causal_descend.patch
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-6} STOP_ON_TEST_FAIL=1 KERNEL_FILTER='causal/M64_' \
  bash build_tools/patch_ab.sh $P bwd descend tests/gpu/test_gluon_bwd.py
if [ "$(cat /tmp/ab_state_descend)" != descend ]; then patch -p1 -R -s < $P && echo "descend reverted"; fi
