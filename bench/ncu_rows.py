"""The rows of an `attnpack bench` run below some ratio, under Nsight Compute, for both sides.

    # one process a backend, each row one profiler range opened by a marker kernel
    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section WarpStateStats --section LaunchStats \\
        --section Occupancy -o ncu_attnpack -f \\
        python3 bench/ncu_rows.py run --results results.json --backend attnpack \\
        --manifest rows_attnpack.jsonl
    ncu --import ncu_attnpack.ncu-rep --page raw --csv --print-units base > raw_attnpack.csv
    # the same with --backend default, then the table (no GPU needed)
    python3 bench/ncu_rows.py table --manifest rows_attnpack.jsonl \\
        --ours raw_attnpack.csv --theirs raw_default.csv

`run` takes the rows of --sets and --op whose ratio (default / attnpack time) is below --below,
worst first (attnpack.bench.ncu.select_rows; --list prints them and stops). For each: the bench's inputs, three warm-up calls,
then within one profiler range a marker kernel (torch.cuda._sleep) and one call. It writes a
manifest line a row (its name, what served it) and stops starting rows after --stop-after
seconds. Needs the built extension and bundle, as `attnpack bench` does.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from attnpack.bench import ncu


def run(args) -> None:
    rows = ncu.select_rows(json.loads(Path(args.results).read_text()), tuple(args.sets),
                           args.op, args.below)[:args.max_rows]
    if args.list:
        sys.stdout.writelines(f"{row['ratio']:.3f} {row['set']} {row['name']}\n" for row in rows)
        return
    import torch

    import attnpack.torch as attnpack_torch
    from attnpack.bench.measure import backend, make_inputs, sdpa_call
    from attnpack.bench.shapes import shape_from_dict

    start = time.monotonic()
    with open(args.manifest, "w") as manifest:
        for row in rows:
            if time.monotonic() - start > args.stop_after:
                break
            shape = shape_from_dict({**row["shape"], "name": row["name"]}, row["name"])
            q, k, v, do = make_inputs(shape)
            with backend(args.backend):
                call = sdpa_call(args.op, q, k, v, do, shape.causal)
                for _ in range(3):  # kernels loaded, cuDNN plans built
                    call()
                torch.cuda.synchronize()
                attnpack_torch.reset_stats()
                torch.cuda.profiler.start()
                torch.cuda._sleep(1000)  # the marker: ncu's spin_kernel
                call()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
            served = sorted(attnpack_torch.stats()["calls"]) if args.backend == "attnpack" else []
            manifest.write(json.dumps({**row, "backend": args.backend, "served": served}) + "\n")
            manifest.flush()
            del q, k, v, do, call
            torch.cuda.empty_cache()


def table(args) -> None:
    manifest = [json.loads(line) for line in Path(args.manifest).read_text().splitlines() if line]
    ours = ncu.split_at_markers(ncu.read_raw_csv(Path(args.ours).read_text()))
    theirs = ncu.split_at_markers(ncu.read_raw_csv(Path(args.theirs).read_text()))
    served = {row["name"]: row["served"] for row in manifest}
    sys.stdout.write(ncu.render_table(manifest, ours, theirs, served))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="profile the rows (under ncu)")
    r.add_argument("--results", required=True, help="an `attnpack bench` results.json")
    r.add_argument("--backend", choices=("attnpack", "default"), help="needed unless --list")
    r.add_argument("--manifest", help="where to write a JSON line a row (needed unless --list)")
    r.add_argument("--list", action="store_true", help="print the rows it would profile, and stop")
    r.add_argument("--sets", nargs="+", default=["model_shapes"])
    r.add_argument("--op", default="fwd", choices=("fwd", "fwdbwd"))
    r.add_argument("--below", type=float, default=1.0)
    r.add_argument("--max-rows", type=int, default=None)
    r.add_argument("--stop-after", type=float, default=float("inf"),
                   help="seconds after which no row starts")
    t = sub.add_parser("table", help="the markdown table from both sides' raw CSV")
    t.add_argument("--manifest", required=True, help="run's manifest (either side's)")
    t.add_argument("--ours", required=True, help="ncu --page raw --csv of the attnpack run")
    t.add_argument("--theirs", required=True, help="the same for the default")
    args = parser.parse_args(argv)
    if args.command == "run" and not args.list and not (args.manifest and args.backend):
        parser.error("run needs --backend and --manifest (or --list)")
    run(args) if args.command == "run" else table(args)


if __name__ == "__main__":
    main()
