"""A/B of the same kernels built from two or more source trees: every forward (or, with
`--op bwd`, backward) kernel name the given archives hold for a shape's key is run from each
archive that has it, on the same tensors. All of a shape's kernels, from every side, and cuDNN
take turns call by call in alternating order (attnpack.bench.timing.Timer.turns), so the clocks
fall on all of them alike (until 2026-12-04 each kernel made its calls in a block of its own,
and run115 read a long kernel 11 % slower that way than the bench did). A kernel only some
sides have (a patch that adds configs) counts in those sides' fastest kernel, not in the
per-kernel ratio.

    PYTHONPATH=python python3 bench/kernel_ab.py --archive before=a.apk --archive after=b.apk \\
        --shapes bench/shapes.json --shapes bench/model_shapes.json --json ab.json

The older side is built from a copy of aot/ that holds the older kernel source:
`attnpack build --arch sm_90 --all --family gluon --kernels /tmp/old-aot/kernels -o old/`.
With one --archive it times that archive's kernels alone: which kernel wins at which shape (the
tuner's timing shape of a key against the rows the key serves, for instance).

Rows with one query (decode) are skipped: this compares prefill kernels, and a kernel whose
`requires` refuse a shape (the decode kernels, Sq <= 16) is left out of that shape. Before timing, each
kernel's O is compared with cuDNN's (a backward's dQ, dK and dV with cuDNN's gradients, relative
to the largest of each; its O and LSE come from PyTorch's flash forward); a kernel off by more
than --max-diff is reported as wrong and not timed. Timing is attnpack.bench's (warm-up, L2
flush and a GPU spin before every timed call, CUDA events, median of --reps). Per shape, it
prints each side's fastest kernel in TFLOP/s, that rate over the first side's, and the geomean
over kernels of the per-kernel time ratio (first side's time over this side's: above 1 this
side is faster); cuDNN's rate in the same run is the reference column.

With --cycles each kernel makes its calls in a block (A B C, then C B A), each call timed with
a clock probe on either side (attnpack.bench.timing, Timer.clocked_samples), and its median
cycles count instead of its median time: the GPU sets its clock by power and history, by more
than most kernel changes are worth, and a call's cycles do not follow it (docs/performance.md,
"Clocks and cycles"). Rates are then what the cycles would give at NOMINAL_GHZ.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from gluon_family import runtime_fwd  # noqa: E402
from triton_family import cudnn_output  # noqa: E402

from attnpack import runtime as rt  # noqa: E402
from attnpack.archive import read_archive  # noqa: E402
from attnpack.bench.measure import backend, first_call, make_inputs, sdpa_call  # noqa: E402
from attnpack.bench.shapes import load_shape_file, shape_flops  # noqa: E402
from attnpack.bench.timing import HOST_LEAD_CYCLES, Timer  # noqa: E402
from attnpack.bench.report import geomean  # noqa: E402

NOMINAL_GHZ = 1.98   # the H200's highest SM clock: --cycles rates are at this clock


def cycles_ms(timer: Timer, run) -> float:
    """A call's median cycles as ms at NOMINAL_GHZ (--cycles)."""
    samples = timer.clocked_samples(run, timer.reps)
    return statistics.median(ms * ghz for ms, ghz in samples) / NOMINAL_GHZ


def _side(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--archive {spec!r}: expected NAME=PATH")
    return name, Path(path)


def _names(path: Path, op: str) -> dict[tuple, list[str]]:
    """Kernel names of `op` in an archive by (dtype, head_dim, causal)."""
    names: dict[tuple, list[str]] = {}
    for rec in read_archive(path).kernels:
        if rec["op"] == op:
            key = rec["key"]
            names.setdefault((key["dtype"], key["head_dim"], key["causal"]), []).append(rec["name"])
    return names


def _flash_forward(shape, q, k, v, scale):
    """O and LSE (natural log, float32 [B, Hq, Sq]) from PyTorch's flash forward, K and V
    repeated for grouped-query heads."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, shape.causal,
                                                                 scale=scale)[:2]
    return o, lse


def _backward_runs(shape, q, k, v, do, scale):
    """(run maker, error measure) for backward kernels: each side writes its own gradients;
    the error is the largest of dQ, dK and dV's max difference from cuDNN's, relative to that
    gradient's largest element."""
    o, lse = _flash_forward(shape, q, k, v, scale)
    with backend("cudnn"):
        want = sdpa_call("bwd", q, k, v, do, shape.causal)()

    def make(bundle, kernel):
        grads = [torch.empty_like(t) for t in (q, k, v)]
        run = lambda: rt.backward(bundle, do, q, k, v, o, lse, causal=shape.causal, scale=scale,
                                  dq=grads[0], dk=grads[1], dv=grads[2], kernel=kernel)
        return run, grads

    def error(grads):
        return max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
                   for g, w in zip(grads, want))
    return make, error


def _cudnn_call(op: str, shape, tensors):
    """cuDNN's F.sdpa call of `op` on `tensors`, entering its backend at every call (so it can
    take turns with the runtime's kernels), or None when cuDNN refuses the shape."""
    with backend("cudnn"):
        fn, _ = first_call(op, shape, tensors)
    if fn is None:
        return None

    def run():
        with backend("cudnn"):
            return fn()
    return run


def compare_shape(shape, sides, bundles, names, timer: Timer, max_diff: float,
                  op: str = "fwd", cycles: bool = False) -> dict | None:
    key = (shape.dtype, shape.head_dim, shape.causal)
    # every kernel any side has (a patch may add kernels); a side times those it has, and the
    # per-kernel ratio takes the ones both sides share
    have = {side: set(n.get(key, ())) for side, n in zip(sides, names)}
    kernels = sorted(set.union(*have.values()))
    if not kernels:
        return None
    q, k, v, do = tensors = make_inputs(shape)
    scale = 1.0 / math.sqrt(shape.head_dim)
    if op == "fwd":
        want = cudnn_output(shape, q, k, v)
        make = lambda bundle, kernel: runtime_fwd(bundle, q, k, v, shape.causal, scale, kernel)
        error = lambda o: (o.float() - want.float()).abs().max().item()
    else:
        make, error = _backward_runs(shape, q, k, v, do, scale)
    flops = shape_flops(shape, op)
    row = {"shape": shape.label, "tflops": {s: {} for s in sides}, "wrong": {}}
    runs = {}
    for kernel in kernels:
        for side in (x for x in sides if kernel in have[x]):
            run, out = make(bundles[side], kernel)
            try:
                run()
            except rt.Unsupported:   # its `requires` exclude the shape (a decode kernel here)
                break
            torch.cuda.synchronize()
            diff = error(out)
            if not diff <= max_diff:  # NaN fails too
                row["wrong"][f"{side}:{kernel}"] = diff
            else:
                runs[(side, kernel)] = run
    if cycles:
        for kernel in kernels:
            ms = {}
            for order in (sides, sides[::-1]):
                for side in order:
                    if (side, kernel) in runs:
                        ms.setdefault(side, []).append(cycles_ms(timer, runs[(side, kernel)]))
            for side, times in ms.items():
                row["tflops"][side][kernel] = flops / (sum(times) / len(times)) / 1e9
        with backend("cudnn"):
            try:
                ms = cycles_ms(timer, sdpa_call(op, q, k, v, do, shape.causal))
            except RuntimeError:   # cuDNN refuses the shape
                ms = None
    else:
        # every kernel of every side and cuDNN take turns call by call (Timer.turns)
        calls = dict(runs)
        cudnn = _cudnn_call(op, shape, tensors)
        if cudnn is not None:
            calls["cudnn"] = cudnn
        medians = {name: statistics.median(t) for name, t in
                   timer.turns(calls, timer.reps, lead_cycles=HOST_LEAD_CYCLES).items()}
        for (side, kernel), t in ((n, t) for n, t in medians.items() if n != "cudnn"):
            row["tflops"][side][kernel] = flops / t / 1e9
        ms = medians.get("cudnn")
    row["cudnn"] = flops / ms / 1e9 if ms else None
    return row


def print_row(row, sides):
    first = row["tflops"][sides[0]]
    cells = []
    for side in sides:
        rates = row["tflops"][side]
        best = max(rates.values(), default=None)
        shared = [k for k in rates if k in first]
        per_kernel = geomean([rates[k] / first[k] for k in shared]) if shared else None
        over_first = (best or 0) / max(first.values(), default=1)
        cells.append(f"{side} {best or 0:4.0f} ({over_first:.3f}, per-kernel {per_kernel or 0:.3f})")
    cudnn = f"cuDNN {row['cudnn']:4.0f}" if row["cudnn"] else "cuDNN -"
    wrong = f"  WRONG: {row['wrong']}" if row["wrong"] else ""
    print(f"{row['shape']:<40} | {' | '.join(cells)} | {cudnn}{wrong}", flush=True)


def twin_ratios(rows: list[dict], side: str, suffix: str) -> dict[str, list[tuple[str, float]]]:
    """For --twin: per kernel whose name ends in `suffix`, (shape, its rate over its twin's) at
    every row where `side` timed both; the twin is the same name without the suffix (a knob
    against the config without it, e.g. _tail1)."""
    out: dict[str, list[tuple[str, float]]] = {}
    for row in rows:
        rates = row["tflops"].get(side, {})
        for name, rate in rates.items():
            twin = name[:-len(suffix)] if name.endswith(suffix) else None
            if twin and rates.get(twin):
                out.setdefault(name, []).append((row["shape"], rate / rates[twin]))
    return out


def print_twins(rows: list[dict], sides: list[str], suffix: str) -> None:
    for side in sides:
        for name, pairs in sorted(twin_ratios(rows, side, suffix).items()):
            ratios = [r for _, r in pairs]
            cells = ", ".join(f"{shape} {r:.3f}" for shape, r in pairs)
            print(f"# {side}: {name} over its twin: geomean {geomean(ratios):.3f}, min "
                  f"{min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} shapes ({cells})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--archive", type=_side, action="append", required=True,
                    help="NAME=PATH; with two or more the first is the baseline, one times its "
                         "kernels alone (which kernel wins at which shape)")
    ap.add_argument("--shapes", type=Path, action="append", required=True)
    ap.add_argument("--op", choices=("fwd", "bwd"), default="fwd")
    ap.add_argument("--kernel-filter", default="",
                    help="only kernel names this regular expression matches anywhere (re.search):"
                         " a plain word such as causal keeps the names containing it")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--max-diff", type=float, default=3e-2)
    ap.add_argument("--cycles", action="store_true",
                    help=f"compare cycles per call (rates at {NOMINAL_GHZ} GHz), not times")
    ap.add_argument("--twin", default="", metavar="SUFFIX",
                    help="also print each kernel named ...SUFFIX against the same name without "
                         "it (its twin), per shape and as a geomean, e.g. --twin _tail1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    sides = [name for name, _ in args.archive]
    wanted = re.compile(args.kernel_filter)
    names = [{k: [n for n in v if wanted.search(n)]
              for k, v in _names(p, args.op).items()} for _, p in args.archive]
    timer = Timer(reps=args.reps, warmup=args.warmup)
    bundles = {name: rt.Bundle(path) for name, path in args.archive}
    rows = []
    try:
        for path in args.shapes:
            for shape in load_shape_file(path):
                if shape.seqlen_q == 1:
                    continue
                row = compare_shape(shape, sides, bundles, names, timer, args.max_diff,
                                    args.op, args.cycles)
                if row is not None:
                    rows.append(row)
                    print_row(row, sides)
                torch.cuda.empty_cache()
    finally:
        for b in bundles.values():
            b.close()
    for side in sides[1:]:
        best = [max(r["tflops"][side].values()) / max(r["tflops"][sides[0]].values())
                for r in rows if r["tflops"][side] and r["tflops"][sides[0]]]
        if best:
            print(f"# {side}/{sides[0]}, best kernel per shape: geomean {geomean(best):.3f}, "
                  f"min {min(best):.3f}, max {max(best):.3f} over {len(best)} shapes")
    if args.twin:
        print_twins(rows, sides, args.twin)
    if args.json:
        args.json.write_text(json.dumps({"sides": dict((n, str(p)) for n, p in args.archive),
                                         "cycles_at_ghz": NOMINAL_GHZ if args.cycles else None,
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
