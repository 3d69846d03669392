#!/usr/bin/env bash
# Thirty-eighth session. The fast backward's preprocess writes zeros over the whole fp32 dQ
# accumulator (B·Hq·Sq·D floats: 134 MB at every MHA row of bench/shapes.json, about half of the
# step's 66-70 µs in run81). bwd_first_store.patch drops that write for the TMA kernels: each
# query tile's first dQ share is stored, the others added once its store has landed, ordered by
# one ticket word a tile that the preprocess zeroes instead (docs/gluon-bwd.md, "The first
# share stored"). Non-causal key blocks start their walks spread over the query tiles so one
# program reaches each tile first. On one GPU (say which): build_tools/patch_ab.sh, the whole of
# test_gluon_bwd.py on the patched tree with poisoned workspaces (a missed store reads NaN; a
# wrong release hangs: the smoke test's deadline), no A/B if a test failed, then the committed
# and the patched archives' bf16 tma1 kernels by cycles, whole calls (the preprocess included),
# over both shape sets.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEY.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
OUT=$OUT BUDGET_S=${BUDGET_S:-585} REPS=${REPS:-8} STOP_ON_TEST_FAIL=1 \
  KERNEL_FILTER='det0_tma1' \
  bash build_tools/patch_ab.sh docs/device-runs/2026-12-05/scripts/bwd_first_store.patch bwd \
  first tests/gpu/test_gluon_bwd.py
