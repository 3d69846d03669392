#!/usr/bin/env bash
# Prepared in the twenty-third session for the next one (not run). The 23 forward keys of
# keys_fwd_class64_rest.json that run102 and run104 did not reach (fp16, head dims 128 and 256),
# resumed from run104's output (tracked in this tree), then the backward keys of the class
# (runDG.sh's list) with what is left of the call. tune_merge.sh merges each over the tree's
# database; the second merge starts from the first's result. STOP_S and KILL_S count from each
# tune_merge.sh's own start: the first has the archive build (about 90 s) and 23 keys, the second
# what is left of the 600 s call.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p .carry/tuned
cp docs/device-runs/2026-12-03/run104_class64_rest2/fwd_class64_rest.jsonl .carry/tuned/
bash build_tools/tune_merge.sh fwd_class64_rest .carry/keys_fwd_class64_rest.json 330 360
cp "$OUT/sm_90_merged.txt" "$OUT/sm_90_merged_fwd.txt" 2>/dev/null
bash build_tools/tune_merge.sh bwd_class64_rest .carry/keys_bwd_class64_rest.json 200 225
