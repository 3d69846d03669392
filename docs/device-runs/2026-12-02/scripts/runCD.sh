#!/usr/bin/env bash
# Prepared in the fourteenth session for the next one (not run; the second call on the machine
# runCC.sh used). The Gluon forward's non-persistent causal grid read in groups of 8 heads,
# longest first across a group (scripts/fwd_group.patch): the grid's own order ran each head's
# row blocks shortest first, so the last heads' longest tiles ran alone at the end (a
# list-scheduling model: 1.04x the ideal makespan at Llama-3.3-70B B1 S8192 and Qwen2-7B B2
# S8192, 1.08-1.16x at Gemma-2-9B's 32 heads; 1.00x grouped). Those rows are served by
# non-persistent causal kernels. build_tools/patch_ab.sh: test_gluon_attn.py's smoke, growing
# maxima and head-dim-64/128 causal grids on the patched tree, the committed and patched bf16
# forward archives by cycles over both shape sets (causal kernels only); /tmp/ab_state_fgroup
# reads "fgroup" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT BUDGET_S=${BUDGET_S:-560} KERNEL_FILTER=causal bash build_tools/patch_ab.sh \
  docs/device-runs/2026-12-02/scripts/fwd_group.patch fwd fgroup \
  tests/gpu/test_gluon_attn.py -k "smoke or row_maxima or 128-True or 64-True"
