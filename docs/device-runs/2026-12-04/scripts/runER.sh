#!/usr/bin/env bash
# Prepared in the thirty-sixth session: the first call of a session, by GPU model.
# On an H200: the early convert (bwd.py READY, on main since c9554c3, in no database entry yet)
# among the candidates of the 27 head-dim-96/128 bf16 backward keys behind bench rows, each in
# its rows' streams class (keys_rows_bwd_early.json: build_tools/row_keys.py's keys at those
# head dims; bench/shapes.json's 14 first, the model rows' 13 after), tuned and merged at 1 %
# into the device copy's database ($OUT/sm_90_merged.txt, build_tools/tune_merge.sh). A key
# left when the time runs out is resumed by the next call from .carry/tuned/rows_early.jsonl.
# Then runET.sh on the same machine: the bench on the merged database (issue 15's figure).
# On an H100 (whose entries the database does not mix in): runES.sh, the descending causal
# walk weighed, then the GQA causal keys of fewest pairs tuned on the H100 and diffed (runEM).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runER.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
if [[ "$gpu" == *H200* ]]; then
  bash build_tools/tune_merge.sh rows_early .carry/keys_rows_bwd_early.json 500 570
  echo "tune and merge at $SECONDS s"
else
  BUDGET_S=330 bash .carry/runES.sh
  bash build_tools/tune_keys.sh gqa_c64 .carry/keys_bwd_gqa_causal_c64.json $((520 - SECONDS)) \
    $((575 - SECONDS))
  . build_tools/runtime_env.sh /tmp/tune-logs  # PYTHONPATH for attnpack.cli
  python3 -m attnpack.cli db diff aot/tuning_db/sm_90.jsonl "$OUT/gqa_c64.jsonl" > "$OUT/diff.txt" 2>&1
  echo "diff rc $? at $SECONDS s"; grep -v "^- " "$OUT/diff.txt" | head -40
fi
