#!/usr/bin/env bash
# Prepared in the thirty-fourth session (built and checked on the CPU; its device time was spent
# on runs 142-147, on an H100). On the H100 the four GQA-7/8 causal head-dim-128 model rows of
# fewest (batch, kv head) pairs read 0.85-0.93x cuDNN forward + backward (run142/143), where
# the H200 read 1.02-1.05x (run141), with the same kernels (the dK/dV kernel with dQ by TMA
# reduce-adds, det0_tma1) and cuDNN within 2 % on both: attnpack's backward alone is 15-30 %
# slower on the H100. Our reading, not yet measured: a causal dK/dV program's ascending walk
# spreads the programs side by side over all of a head group's query rows, so their fp32 dQ adds
# (group x Sq x D x 4 bytes, 32 MB at GQA 8 S8192) leave the H100's 50 MB L2 (60 MB on the
# H200). bwd_causal_descend.patch walks causal key blocks' query tiles from the last row down,
# the group's heads inside each row (docs/gluon-bwd.md, "The H100, and the causal walk from the last rows"):
# the programs of a head's blocks then read the same Q/dO tile and add into the same dQ rows
# together. On one GPU (either model; say which): build_tools/patch_ab.sh, test_gluon_bwd.py on
# the patched tree (smoke over every kernel, bitwise repeatability, every causal case), then the
# committed and the patched bf16 causal backward kernels of 64-row query tiles (the ones the
# patch changes) by cycles over both shape sets.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEL.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-6} KERNEL_FILTER='causal/M64_' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/bwd_causal_descend.patch bwd \
  descend tests/gpu/test_gluon_bwd.py -k "smoke or repeatable or True"
