#!/usr/bin/env bash
# Prepared in the thirtieth session, not run (its device time was spent). Since format 2.5 the
# Gluon backward's launches are programmatic, which moved two long GQA rows 5 % and two long
# MHA rows 1.5-2 % (run132, docs/performance.md, "Programmatic launch"); the backward keys were
# all tuned with plain launches. On one H200:
# 1. `attnpack tune` of the 38 backward keys behind the bench rows (keys_rows_bwd.json, run124's
#    list) on this tree, launches programmatic, into $OUT/rows_bwd.jsonl (run124: 246 s);
# 2. that output merged at 1 % over the committed database in this (disposable) copy of the
#    tree, then build_tools/bench_tree.sh: the bundle on it, `attnpack bench`, test_torch_sdpa.
# Afterwards, on the CPU: the same merge into aot/tuning_db/sm_90.jsonl if the bench agrees.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEC.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_keys.sh rows_bwd .carry/keys_rows_bwd.json 300 320
PYTHONPATH=/tmp/attnpack-site:$PWD/python python3 -m attnpack.cli db merge --min-gain 1.01 \
  aot/tuning_db/sm_90.jsonl "$OUT/rows_bwd.jsonl" -o aot/tuning_db/sm_90.jsonl
echo "merge rc $? at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
