#!/usr/bin/env bash
# Prepared in the thirteenth session for the next one (not run): the Gluon backward's causal
# grids with the heads on x (scripts/bwd_lpt.patch), so every (batch, head)'s longest block
# starts before any shorter one across the whole grid (a list-scheduling model of 132 SMs:
# GQA-8 dK/dV grids of 256-1024 programs finish at 1.14-1.38x the ideal head by head, 1.01x
# longest first; scripts/schedule_model.py). build_tools/patch_ab.sh: test_gluon_bwd.py on the
# patched tree, old and patched bf16 Gluon backward archives, bench/kernel_ab.py --op bwd
# --cycles over both shape sets; /tmp/ab_state reads "lpt" if it is kept.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
OUT=$OUT bash build_tools/patch_ab.sh docs/device-runs/2026-12-02/scripts/bwd_lpt.patch bwd lpt \
  tests/gpu/test_gluon_bwd.py
