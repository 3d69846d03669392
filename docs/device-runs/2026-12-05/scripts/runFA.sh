#!/usr/bin/env bash
# Thirty-eighth session, after runEY.sh (runs 161-163): storing each query tile's first dQ
# share and making the other programs wait for it cost 10-23 % on long rows (the waits sit on
# the consumers' path a tile after the store). bwd_lazy_zero.patch keeps the consumers as they
# are: the dK/dV load warp that first takes a tile's ticket zeroes the tile's accumulator rows
# (16-byte stores, into L2 shortly before the tile's first adds) and sets a bit; a later load
# warp waits for the bit before it hands the tile's slot on, STAGES tiles ahead of its
# consumers' adds. The preprocess zeroes the ticket words instead of 134 MB of rows. Non-causal
# walks start spread over the tiles, as in runEY's patch. The same A/B as runEY.sh: the whole
# of test_gluon_bwd.py on the patched tree (poisoned workspaces), then the bf16 tma1 kernels
# of both archives by cycles, whole calls, over both shape sets.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFA.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_lazy_zero.patch bwd \
  lazy tests/gpu/test_gluon_bwd.py
