#!/usr/bin/env bash
# Twenty-second session: scripts/fwd_named_free.patch weighed by build_tools/patch_ab.sh. The
# forward's consumers release ring slots on named hardware barriers (bar.arrive; the loader's
# warp takes them with bar.sync) instead of mbarrier.arrive, which Triton's barrier pass brackets
# with two warpgroup bar.syncs (it counts an arrive as touching all of shared memory): a 2-stage
# plain-schedule key-tile loop goes from three warpgroup barriers to one, two of them inside
# the turn. Tests on the patched tree: the smoke test (every forward kernel, a deadlock fails
# it), growing maxima, persistent units, every bf16 causal case of the grid and the B1 H8 fp16
# cases without a mask; then every bf16 forward kernel of both trees by cycles.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} REPS=${REPS:-8} bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-03/scripts/fwd_named_free.patch fwd nfree tests/gpu/test_gluon_attn.py \
  -k "smoke or row_maxima or test_persistent_units or True-bf16 or (1-8-8 and False-fp16)"
