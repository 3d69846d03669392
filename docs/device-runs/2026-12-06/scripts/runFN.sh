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
PYTHONPATH=$PWD/python python3 - .carry/picks.json aot/tuning_db/sm_90.jsonl <<'PY' || exit 1
import json, sys
from attnpack.keys import TuneKey
from attnpack.tune.db import load_db, save_db
picks, db = json.load(open(sys.argv[1])), load_db(sys.argv[2])
for p in picks:
    key = TuneKey(**p["key"])
    e = db.entries.get(key)
    if e is None:
        sys.exit(f"{key.text}: no entry")
    if "det1" in p["kernel"] + e["kernel"]:
        sys.exit(f"{key.text}: only det0 kernels are switched here (the entry says which is deterministic)")
    if p["kernel"] not in e["candidates"]:
        sys.exit(f"{p['kernel']} was not timed for {key.text}")
    print(f"{e['kernel']} -> {p['kernel']}")
    e["kernel"], e["time_us"] = p["kernel"], e["candidates"][p["kernel"]]
save_db(db, sys.argv[2])
PY
cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_picks.txt"
DEADLINE_S=${DEADLINE_S:-585} bash build_tools/bench_tree.sh
