#!/usr/bin/env bash
# Twentieth session (2026-12-03), after run91 (scripts/bwd_dq_early.patch, 0.967x by cycles: the
# dQ share queued behind dV and dK, but the (Q, dO) slot released only after dQ finished; the
# loss grew with the row's length, 0.93-0.96x at head dim 128 S >= 4096). scripts/bwd_dq_early2.patch
# keeps the queueing and gives the slot back as soon as dV and dK are done (wait(1), release,
# then wait(0) for dQ). build_tools/patch_ab.sh: tests/gpu/test_gluon_bwd.py whole on the
# patched tree, then the committed and patched bf16 fast (det0) backward kernels by cycles.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-330} KERNEL_FILTER=det0 REPS=${REPS:-6} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/bwd_dq_early2.patch bwd dqearly2 tests/gpu/test_gluon_bwd.py
