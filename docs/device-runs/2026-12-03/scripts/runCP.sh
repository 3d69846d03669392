#!/usr/bin/env bash
# Nineteenth session (2026-12-03), after run87 (one exp2 in eight by a polynomial at head dim 64:
# 0.969x by cycles, dropped; our reading: a consumer's softmax is bound by its own warp's
# instruction stream, not by the MUFU's throughput). scripts/fwd_tree_mask.patch shortens that
# stream's dependences and length instead: (1) a row's max and sum as trees (fwd._tree_max,
# _tree_sum: the same FMNMX/FADD, 8 and 7 deep instead of 34 and 33 in the persistent N128
# kernel's key-tile loop); (2) the causal mask as one compare a score against min(row, Sk - 1)
# (the two conditions had been two FSELs a score: 95 fewer instructions on a 128-key diagonal
# tile). On the CPU: 172 forward kernels built, verified, none serialized. Here: test_gluon_attn's
# smoke, growing maxima and the causal grids at head dims 64/96/128 on the patched tree, then the
# committed and patched bf16 forward archives by cycles over both shape sets (every kernel).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-570} REPS=${REPS:-8} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/fwd_tree_mask.patch fwd tree \
  tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-True or 96-True"
