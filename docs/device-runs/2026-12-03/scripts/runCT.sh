#!/usr/bin/env bash
# Twentieth session (2026-12-03). scripts/fwd_early_pass.patch: the plain ping-pong forward
# (configs without overlap1) handed the turn to the next consumer only after both its GEMMs had
# finished and it had released the K/V slot (two warpgroup BAR.SYNCs and mbarrier arrives): the
# tensor cores sat idle from its last GEMM to the next consumer's first. The patch hands the
# turn over once QKᵀ(j) and PV(j − 1) are issued, as the overlapped schedule does, and waits for
# both after that; registers and loops as before (+5 instructions a loop, BAR.ARV moved up).
# build_tools/patch_ab.sh: test_gluon_attn's smoke (every kernel), growing maxima, head-dim-128
# causal and head-dim-64 full grids on the patched tree, then the committed and the patched
# bf16 plain-schedule forward kernels (KERNEL_FILTER: names without "overlap") by cycles.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-500} KERNEL_FILTER='^(?!.*overlap)' REPS=${REPS:-8} \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-03/scripts/fwd_early_pass.patch fwd \
  earlypass tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-False"
