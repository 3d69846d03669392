#!/usr/bin/env bash
# Prepared in the thirty-fifth session (no device lent; built and checked on the CPU). The
# public row furthest below cuDNN forward + backward on the H200 is B16 H16 S1024 head dim 128
# without a mask (0.968x, run141), and its neighbours at S2048-S4096 read 1.00-1.01x; their
# backward is served by the non-persistent `dqq1` kernels (dQ queued behind dV and dK), one
# program per key block: a block's prologue (K and V) and epilogue (dK and dV from registers)
# leave the SM's tensor cores idle, once every 16 query tiles at S1024. The persistent tma1
# kernels overlap the next block's loads with that epilogue but issue dQ after dV and dK; the
# tuner ranked them 0.6-3 % behind the dqq1 ones there. bwd_persistent_dqq.patch declares the
# two together (2 and 3 stages, head dims 96 and 128 without a mask: 8 kernels); their SASS has
# the dqq1 kernels' tile loops and the persistent tma1 kernels' spills (a few counters once a
# key block). On one GPU (say which): build_tools/patch_ab.sh, test_gluon_bwd.py on the patched
# tree (smoke over every kernel, bitwise repeatability, every case without a mask), then the
# committed and the patched archives' bf16 tma1 kernels at head dims 96/128 without a mask,
# the fastest per row by cycles over both shape sets (the old side lacks the new kernels).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEO.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} \
  KERNEL_FILTER='d(96|128)-full/M64_stages[23]_det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-04/scripts/bwd_persistent_dqq.patch bwd \
  pdqq tests/gpu/test_gluon_bwd.py -k "smoke or repeatable or False"
