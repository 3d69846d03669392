#!/usr/bin/env bash
# Prepared in the thirty-eighth session (not run): on an H200, after an A/B kept one of this
# folder's zeroing patches (runFD.sh's bwd_lazy_zero3.patch by default; PATCH= names another):
# the patch applied (a fresh machine gets it too), then build_tools/bench_tree.sh on the
# committed tuning database (the kernel names are unchanged; the bundle built, `attnpack bench`
# bf16 forward and forward + backward over both shape sets, test_torch_sdpa.py): issue 15's
# figures with the tiles zeroed by the dK/dV load warps.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEZ.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
P=${PATCH:-docs/device-runs/2026-12-05/scripts/bwd_lazy_zero3.patch}
patch -p1 -R -f --dry-run < "$P" >/dev/null 2>&1 || patch -p1 < "$P" || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader
DEADLINE_S=${DEADLINE_S:-585} bash build_tools/bench_tree.sh
