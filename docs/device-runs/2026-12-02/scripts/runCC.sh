#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run; the first of four calls on one
# machine: runCC.sh, runCD.sh, runCA.sh, runCB.sh). The Gluon backward's causal grid as
# (heads, blocks, B) (scripts/bwd_grid3.patch): a batch entry's heads start block by block, the
# kernel using its program ids as they come, against the committed reading of the
# (blocks, B·heads) grid in groups of 8 heads (run69: 1.042x over the old order by cycles, but
# 8-16 bytes more spills, which the 3-D grid takes back: docs/gluon-bwd.md). build_tools/patch_ab.sh: test_gluon_bwd.py
# on the patched tree, the committed and patched bf16 backward archives by cycles over both
# shape sets (the causal kernels: the full ones do not change); /tmp/ab_state_grid3 reads
# "grid3" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-570} KERNEL_FILTER=causal bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-02/scripts/bwd_grid3.patch bwd grid3 \
  tests/gpu/test_gluon_bwd.py
