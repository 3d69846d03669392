#!/usr/bin/env bash
# Twentieth session (2026-12-03). scripts/bwd_dq_early.patch: in the fast backward's dK/dV kernel
# a consumer waited for its own dV and dK GEMMs, released the (Q, dO) slot, then waited for the
# other consumer's dSᵀ half and only then issued its dQ GEMM and waited for it: the tensor cores
# got nothing from this consumer between dK and dQ. The patch waits for the other's half while
# dV and dK run and queues the dQ share right behind them (bwd._dkdv_tile). Same loops otherwise
# (build_tools/sass_compare.py: +2..+11 instructions a key-tile loop), no new spills.
# build_tools/patch_ab.sh: tests/gpu/test_gluon_bwd.py whole on the patched tree, then the
# committed and the patched bf16 fast (det0) backward kernels by cycles over both shape sets.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-520} KERNEL_FILTER=det0 REPS=${REPS:-6} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/bwd_dq_early.patch bwd dqearly tests/gpu/test_gluon_bwd.py
