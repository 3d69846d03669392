#!/usr/bin/env bash
# Prepared in the thirty-third session (built and checked on the CPU; its device time was spent
# on runs 136-141). 24 of the keys behind the bench rows serve rows of another streams class
# than the one their entry was timed in (docs/tuning.md, "Keys in the rows' classes"), among
# them the public row furthest below cuDNN forward + backward (B16 H16 S1024 head dim 128
# without a mask, 0.968x in run141: 256 pairs, served by the class-512 entry timed at 376 and
# 512). keys_rows_other_class.json (`build_tools/row_keys.py --other-class`) names each in its
# rows' class; the tuner times such a key at that class's bound (runner.class_bound_batch).
# On one H200:
# 1. `attnpack tune` of the 24 keys (the full tuning archive first, about 90 s on 16 cores);
# 2. merged at 1 % into this tree's database in the device's copy ($OUT/sm_90_merged.txt);
# 3. build_tools/bench_tree.sh: the bundle on it, `attnpack bench` (bf16, fwd + fwdbwd, both
#    sets), tests/gpu/test_torch_sdpa.py to the deadline.
# Then on the CPU: copy sm_90_merged.txt over aot/tuning_db/sm_90.jsonl if the bench holds,
# build_tools/regen_tuning_doc.py, docs/performance.md from results.json.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runEI.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_merge.sh rows_class .carry/keys_rows_other_class.json 360 380
echo "tune and merge at $SECONDS s"
DEADLINE_S=$((585 - SECONDS)) bash build_tools/bench_tree.sh
