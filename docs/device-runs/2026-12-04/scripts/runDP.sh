#!/usr/bin/env bash
# Prepared in the twenty-fourth session for the next one (not run). scripts/bwd_persistent.patch
# weighed by build_tools/patch_ab.sh: persistent dK/dV kernels (bwd.py, PERSISTENT; family.py's
# three `persistent1` backward configs: det0 tma1 at 2 and 3 stages, det1 qN64), one program
# per SM over the key blocks (pairs of them under causal), the next block's K and V loading while
# the last one's dK and dV are stored (docs/gluon-bwd.md, "Where the short rows lose"). Built
# and checked on the CPU only: tests/cpu/test_gluon_bwd_build.py 32 passed on the patched tree
# (the persistent kernels spill 24-104 bytes on 128-wide tiles, outside their tile loops). Here:
# tests/gpu/test_gluon_bwd.py on the patched tree (the smoke test over every kernel, with its
# deadline, names any kernel that hangs; bitwise repeatability; the bf16 gradient grid), then
# the bf16 tma1 and qN64 backward kernels of both trees by cycles over both shape sets.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
P=docs/device-runs/2026-12-04/scripts/bwd_persistent.patch
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} KERNEL_FILTER='tma1|qN64' \
  bash build_tools/patch_ab.sh $P bwd bpers tests/gpu/test_gluon_bwd.py \
  -k "smoke or repeatable or bf16"
