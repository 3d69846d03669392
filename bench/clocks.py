"""What clock each backend's kernels run at, and how many cycles a call takes, in two regimes.

    PYTHONPATH=python python3 bench/clocks.py --only "S8192 d128" --ops fwd
    PYTHONPATH=python python3 bench/clocks.py --json > clocks.jsonl

The H200 runs at up to 1.98 GHz and lowers its SM clock to stay under its 700 W power limit;
how far depends on the kernel and on what ran before it. A time ratio between two backends
then mixes two things: the cycles each kernel needs, and the clock each got. This script
measures both, through F.sdpa as `attnpack bench` does (attnpack enabled, or PyTorch's default),
on the same tensors, backends taking turns (A B B A):

- **bench**: the bench's own regime (attnpack.bench.timing.Timer): an L2 flush before every
  call, warm-up calls, then the timed ones;
- **sustained**: calls back to back, no flush, for about `--seconds` each, the way a training
  step or a long prefill keeps the GPU busy.

The clock comes from a probe on the GPU's own stream (attnpack.bench.timing:
`torch.cuda._sleep(n)` spins for n SM cycles, so n / (its event time) is the clock while it
ran). A probe runs right before and right after each timed call (bench) or every
`--probe-every` calls (sustained); a call's clock is the mean of the two around it, and
cycles = time x clock. The probes cost a few tens of microseconds each, outside the timed
interval. One JSON object per (row, op, regime, backend, turn) with --json, else a table.
Needs the built extension and a bundle, as `attnpack bench`.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from attnpack.bench.measure import backend, make_inputs, sdpa_call
from attnpack.bench.shapes import load_shape_file
from attnpack.bench.timing import Timer, sustained_samples


def summary(samples: list[tuple[float, float]]) -> dict:
    ms = statistics.median(s[0] for s in samples)
    ghz = statistics.median(s[1] for s in samples)
    cycles = statistics.median(s[0] * s[1] * 1e6 for s in samples)
    return {"ms": round(ms, 4), "ghz": round(ghz, 3), "mcycles": round(cycles / 1e6, 4),
            "samples": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", action="append", type=Path,
                        help="shape file (repeat); default bench/shapes.json and "
                             "bench/model_shapes.json")
    parser.add_argument("--only", action="append", default=[],
                        help="rows whose name contains this text (repeat: any of them)")
    parser.add_argument("--ops", default="fwd", help="fwd, fwdbwd or both, comma-separated")
    parser.add_argument("--backends", default="attnpack,default")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per turn (bench regime)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of a sustained turn")
    parser.add_argument("--probe-every", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    files = args.shapes or [Path("bench/shapes.json"), Path("bench/model_shapes.json")]
    shapes = [s for f in files for s in load_shape_file(f)
              if not args.only or any(o.lower() in s.label.lower() for o in args.only)]
    backends = args.backends.split(",")
    turns = backends + backends[::-1]
    timer = Timer(reps=args.reps, warmup=5)
    for shape in shapes:
        q, k, v, do = make_inputs(shape)
        for op in shape.wanted_ops(args.ops.split(",")):
            rows = []
            for regime in ("bench", "sustained"):
                for turn, name in enumerate(turns):
                    with backend(name):
                        fn = sdpa_call(op, q, k, v, do, shape.causal)
                        samples = (timer.clocked_samples(fn, args.reps) if regime == "bench"
                                   else sustained_samples(fn, args.seconds, args.probe_every))
                    rows.append({"row": shape.label, "op": op, "regime": regime, "backend": name,
                                 "turn": turn, **summary(samples)})
                    if args.json:
                        print(json.dumps(rows[-1]), flush=True)
            if not args.json:
                _print_table(rows, backends)


def _print_table(rows, backends) -> None:
    head = rows[0]
    print(f"\n{head['row']} ({head['op']})")
    for regime in ("bench", "sustained"):
        per = {b: [r for r in rows if r["regime"] == regime and r["backend"] == b]
               for b in backends}
        cells = []
        for b in backends:
            ms = statistics.mean(r["ms"] for r in per[b])
            ghz = statistics.mean(r["ghz"] for r in per[b])
            mc = statistics.mean(r["mcycles"] for r in per[b])
            cells.append(f"{b} {ms:.4f} ms {ghz:.3f} GHz {mc:.4f} Mcyc")
        base = statistics.mean(r["ms"] for r in per[backends[0]])
        ratios = " ".join(f"{b} time / {backends[0]} time "
                          f"{statistics.mean(r['ms'] for r in per[b]) / base:.3f}"
                          for b in backends[1:])
        print(f"  {regime:9s} " + " | ".join(cells) + f" | {ratios}")


if __name__ == "__main__":
    main()
