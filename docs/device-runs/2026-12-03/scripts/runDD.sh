#!/usr/bin/env bash
# Twenty-second session, after run99 kept the forward's named-barrier slot releases:
# 1. scripts/bwd_named_free.patch weighed by build_tools/patch_ab.sh: the backward's ring slots
#    (the dK/dV kernels' (Q, dO) ring, the dQ kernels' K/V ring, head dim 256's wide kernels
#    too) released on named barriers the same way (named_barrier.py, shared with the forward
#    now). tests/gpu/test_gluon_bwd.py whole on the patched tree, then every bf16 backward
#    kernel of both trees by cycles.
# 2. build_tools/bench_tree.sh on the tree as the verdict leaves it (patched if kept): the bench
#    of both shape sets with the committed database, and test_torch_sdpa.py.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
P=docs/device-runs/2026-12-03/scripts/bwd_named_free.patch
OUT=$OUT BUDGET_S=${BUDGET_S:-370} REPS=${REPS:-8} bash build_tools/patch_ab.sh \
  $P bwd nfreeb tests/gpu/test_gluon_bwd.py
if [ "$(cat /tmp/ab_state)" != nfreeb ]; then patch -p1 -R < $P; fi
echo "benching $(cat /tmp/ab_state) at $SECONDS s"
OUT=$OUT/bench DEADLINE_S=$((592 - SECONDS)) bash build_tools/bench_tree.sh
