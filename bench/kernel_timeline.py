"""The kernels of one F.sdpa call on the GPU's timeline, for a row of the bench's shape files:
each kernel's start (from the call's first kernel), its duration and the gap after the kernel
before it, medians over calls queued as `attnpack bench` queues them (the L2 flush, the GPU
spin, the call), read from torch.profiler's CUDA activity records. What the bench's one number
a call hides: whether a change moved a kernel's own time, or where it starts.

With --compare-pdl it runs itself twice in child processes, the runtime's programmatic launches
on and off (ATTNPACK_PDL, read when the runtime first uses the CUDA driver), and prints both:
docs/performance.md, "Programmatic launch", left open whether a dK/dV kernel runs faster or only
starts earlier when its blocks are placed while the preprocess drains.

    python3 bench/kernel_timeline.py --row "Llama-3.3-70B prefill B1 S8192" --op fwdbwd --compare-pdl

Needs the built extension and bundle (ATTNPACK_TORCH_LIB, ATTNPACK_BUNDLE_DIR as for
`attnpack bench`; build_tools/bench_env.sh sets them).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attnpack.bench.shapes import BENCH_DIR, load_shape_file
from attnpack.bench.timing import HOST_LEAD_CYCLES

SHAPE_FILES = (BENCH_DIR / "shapes.json", BENCH_DIR / "model_shapes.json")
# A queued call is the flush (a fill kernel), the spin (`torch.cuda._sleep`'s kernel), then the
# call's own kernels: the spin marks where each call's kernels begin.
SPIN = "spin_kernel"
FLUSH = "fill"


def find_row(name: str, files=SHAPE_FILES):
    """The shape of the bench row called `name` (its label) in the shape files."""
    rows = {s.label: s for f in files for s in load_shape_file(Path(f))}
    if name not in rows:
        raise SystemExit(f"no row {name!r} in {', '.join(str(f) for f in files)}; rows: "
                         + ", ".join(sorted(rows)))
    return rows[name]


def call_kernels(events: list[tuple[str, float, float]], calls: int) -> list[list[tuple]]:
    """Splits a trace's kernel records (name, start µs, end µs) into the `calls` calls they came
    from: each call's kernels follow a spin kernel, up to the flush (a fill) before the next
    spin. A fill inside a call (a zeroed gradient, say) stays in it. Raises if the trace does
    not hold `calls` spins."""
    spans: list[list[tuple]] = []
    for name, start, end in sorted(events, key=lambda e: e[1]):
        if SPIN in name:
            if spans and spans[-1] and FLUSH in spans[-1][-1][0].lower():
                spans[-1].pop()  # the next call's flush
            spans.append([])
        elif spans:
            spans[-1].append((name, start, end))
    if len(spans) != calls:
        raise ValueError(f"the trace holds {len(spans)} spun calls, {calls} were queued")
    return spans


def timeline(spans: list[list[tuple]]) -> list[dict]:
    """Per kernel position of a call: its name, and the medians over the calls of its start
    from the call's first kernel, its duration and the gap since the kernel before it ended
    (negative where it started before that one ended: a programmatic launch's overlap). Every
    call must have run the same kernels in the same order."""
    names = [k[0] for k in spans[0]]
    for span in spans:
        if [k[0] for k in span] != names:
            raise ValueError(f"the calls ran different kernels: {names} and {[k[0] for k in span]}")
    rows = []
    for i, name in enumerate(names):
        starts = [span[i][1] - span[0][1] for span in spans]
        durations = [span[i][2] - span[i][1] for span in spans]
        gaps = [span[i][1] - span[i - 1][2] for span in spans] if i else [0.0] * len(spans)
        rows.append({"kernel": name, "start_us": statistics.median(starts),
                     "duration_us": statistics.median(durations),
                     "gap_us": statistics.median(gaps)})
    whole = [span[-1][2] - span[0][1] for span in spans]
    rows.append({"kernel": "(first start to last end)", "start_us": 0.0,
                 "duration_us": statistics.median(whole), "gap_us": 0.0})
    return rows


def measure(name: str, op: str, calls: int, warmup: int) -> list[dict]:
    """The row's call `calls` times (after `warmup`), flushed and led by the bench's spin,
    under torch.profiler; its timeline."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import attnpack.torch as attnpack_torch
    from attnpack.bench.measure import make_inputs, sdpa_call
    from attnpack.bench.timing import Timer

    shape = find_row(name)
    q, k, v, do = make_inputs(shape)
    attnpack_torch.enable()
    fn = sdpa_call(op, q, k, v, do, shape.causal)
    timer = Timer(reps=calls, warmup=warmup)
    timer.warm(fn)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            timer.queue(fn, HOST_LEAD_CYCLES)
        torch.cuda.synchronize()
    events = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA and "Memcpy" not in e.name]
    return timeline(call_kernels(events, calls))


def print_timelines(runs: dict[str, list[dict]]) -> None:
    for label, rows in runs.items():
        print(f"\n{label}")
        print(f"{'kernel':60s} {'start us':>10s} {'time us':>10s} {'gap us':>8s}")
        for r in rows:
            print(f"{r['kernel'][:60]:60s} {r['start_us']:10.1f} {r['duration_us']:10.1f} "
                  f"{r['gap_us']:8.1f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", required=True, help="a row's name in the bench's shape files")
    parser.add_argument("--op", default="fwdbwd", choices=("fwd", "bwd", "fwdbwd"))
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--compare-pdl", action="store_true",
                        help="run twice in child processes, ATTNPACK_PDL=1 and =0")
    parser.add_argument("--json", help="write the timeline(s) here")
    args = parser.parse_args(argv)
    if args.compare_pdl:
        runs = {}
        with tempfile.TemporaryDirectory() as tmp:
            for pdl in ("1", "0"):
                out = Path(tmp) / f"pdl{pdl}.json"
                subprocess.run([sys.executable, __file__, "--row", args.row, "--op", args.op,
                                "--calls", str(args.calls), "--warmup", str(args.warmup),
                                "--json", str(out)],
                               env={**os.environ, "ATTNPACK_PDL": pdl}, check=True,
                               capture_output=True, text=True)
                runs[f"{args.row} {args.op}, ATTNPACK_PDL={pdl}"] = json.loads(out.read_text())
    else:
        runs = {f"{args.row} {args.op}": measure(args.row, args.op, args.calls, args.warmup)}
    if args.json:
        Path(args.json).write_text(json.dumps(runs[next(iter(runs))] if len(runs) == 1 else runs))
    print_timelines(runs)


if __name__ == "__main__":
    main()
