#!/usr/bin/env bash
# Prepared in the forty-third session, for an H200, after runFM.sh: the bench of both shape sets
# (build_tools/bench_tree.sh) on the tree's database with the entries named in .carry/picks.json
# switched to another of their timed candidates ([{"key": {TuneKey fields}, "kernel": name}]),
# written from runFM's times at the rows' own shapes. Compare with a bench of the database as
# committed on the same machine (`attnpack bench --compare`) before anything is committed.
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFN.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}+picks OUT PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == *H200* ]] || { echo "not an H200: nothing done"; exit 0; }
PYTHONPATH=$PWD/python python3 .carry/apply_picks.py .carry/picks.json aot/tuning_db/sm_90.jsonl || exit 1
cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_picks.txt"
DEADLINE_S=${DEADLINE_S:-585} bash build_tools/bench_tree.sh
