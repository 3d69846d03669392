#!/usr/bin/env bash
# Prepared in the thirty-eighth session (built and verified on the CPU, not run): after
# runFC.sh on the same machine, if its timelines show the dK/dV kernel longer by about what
# bwd_lazy_zero.patch saved in the preprocess. bwd_lazy_zero3.patch runs the load warp's
# tickets a tile ahead of the slots: tile j + 1's ticket, zeroing or wait right after tile j's
# slot is handed on (where the warp would wait for a free slot), a key block's first tile just
# after its own slot, the consumers waiting on one `zero0` barrier before they give that slot
# back and add (docs/gluon-bwd.md, "The accumulator's zeroing moved into the dK/dV kernel").
# build_tools/patch_ab.sh: the whole of test_gluon_bwd.py on the patched tree (poisoned
# workspaces; a missing arrival would hang: the smoke test's deadline), then the bf16 tma1
# kernels of both archives by cycles, whole calls, over both shape sets. On one GPU; say which.
# The patch carries its CPU tests' updates (tests/cpu/test_gluon_bwd_build.py): it lands as it
# is. If kept: runEZ.sh on an H200 benches it for issue 15.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFD.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_lazy_zero3.patch bwd \
  lazy3 tests/gpu/test_gluon_bwd.py
