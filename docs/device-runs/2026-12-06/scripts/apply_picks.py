"""Switch tuning-database entries to another of their timed candidates, for a bench of the
switch beside the committed database (runFN.sh, runFP.sh).

    python3 apply_picks.py PICKS.json DB.jsonl      (rewrites DB.jsonl in place)

PICKS.json is [{"key": {TuneKey fields}, "kernel": name}, ...]. Each key must have an entry
whose candidates include the kernel, and neither kernel may be a deterministic (det1) one:
switching across the entry's determinism would change what it declares."""
import json
import sys

from attnpack.keys import TuneKey
from attnpack.tune.db import load_db, save_db


def main(picks_path: str, db_path: str) -> None:
    picks, db = json.load(open(picks_path)), load_db(db_path)
    for p in picks:
        key = TuneKey(**p["key"])
        e = db.entries.get(key)
        if e is None:
            sys.exit(f"{key.text}: no entry")
        if "det1" in p["kernel"] + e["kernel"]:
            sys.exit(f"{key.text}: only det0 kernels are switched here (the entry says which is deterministic)")
        if p["kernel"] not in e["candidates"]:
            sys.exit(f"{p['kernel']} was not timed for {key.text}")
        print(f"{key.text}: {e['kernel']} -> {p['kernel']}")
        e["kernel"], e["time_us"] = p["kernel"], e["candidates"][p["kernel"]]
    save_db(db, db_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
