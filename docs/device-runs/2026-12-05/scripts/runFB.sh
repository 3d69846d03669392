#!/usr/bin/env bash
# Thirty-eighth session, after runFA.sh (run164: bwd_lazy_zero.patch 0.999x by cycles, 413
# passed): there the load warp zeroed a tile's dQ rows before it handed the tile's slot on, so
# each program's first tiles, which with the spread walks are the ones it zeroes, reached the
# consumers a zeroing later. bwd_lazy_zero2.patch hands the slot on first and zeroes (or waits
# for the zeroing) beside the tile's GEMMs; the consumers wait for a per-slot `zeroed` barrier
# before they give the slot back and add. The same A/B, the bf16 gradient cases, smoke and
# repeatability tests only (the device time left), then the bf16 tma1 kernels by cycles.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFB.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-280} REPS=${REPS:-6} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_lazy_zero2.patch bwd \
  lazy2 tests/gpu/test_gluon_bwd.py -k "bf16 or smoke or repeatable"
