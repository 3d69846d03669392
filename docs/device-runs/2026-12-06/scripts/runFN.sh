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
python3 - .carry/picks.json aot/tuning_db/sm_90.jsonl <<'PY' || exit 1
import json, sys
picks, path = json.load(open(sys.argv[1])), sys.argv[2]
lines = open(path).read().splitlines()
out, done = [lines[0]], 0
for line in lines[1:]:
    e = json.loads(line)
    for p in picks:
        if all(e.get(k) == v for k, v in p["key"].items()):
            if "det1" in p["kernel"] + e["kernel"]:
                sys.exit(f"{p['key']}: only det0 kernels are switched here (the entry says which is deterministic)")
            if p["kernel"] not in e["candidates"]:
                sys.exit(f"{p['kernel']} was not timed for {p['key']}")
            print(f"{e['kernel']} -> {p['kernel']}")
            e["kernel"], e["time_us"], done = p["kernel"], e["candidates"][p["kernel"]], done + 1
            line = json.dumps(e, sort_keys=True)
    out.append(line)
if done != len(picks):
    sys.exit(f"{done} of {len(picks)} picks matched an entry")
open(path, "w").write("\n".join(out) + "\n")
PY
cp aot/tuning_db/sm_90.jsonl "$OUT/sm_90_picks.txt"
DEADLINE_S=${DEADLINE_S:-585} bash build_tools/bench_tree.sh
