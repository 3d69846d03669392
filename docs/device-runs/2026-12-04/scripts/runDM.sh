#!/usr/bin/env bash
# Twenty-fourth session: runDI.sh's first part alone, for the device time left (about 770 s): the
# 23 forward keys of keys_fwd_class64_rest.json that run102 and run104 did not reach (fp16,
# head dims 128 and 256), resumed from run104's output, merged at 1 % over the tree's database.
# STOP_S/KILL_S count from tune_merge.sh's start (the tuning archive's build, about 100 s, first).
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
mkdir -p .carry/tuned
cp docs/device-runs/2026-12-03/run104_class64_rest2/fwd_class64_rest.jsonl .carry/tuned/
bash build_tools/tune_merge.sh fwd_class64_rest .carry/keys_fwd_class64_rest.json 420 450
