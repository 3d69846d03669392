"""Benchmark the Gluon ping-pong forward against the triton family and PyTorch's own backends.

    PYTHONPATH=python python3 bench/gluon_family.py                 # every shape of shapes.json
    PYTHONPATH=python python3 bench/gluon_family.py --select 0,4    # shapes 0 and 4 only
    PYTHONPATH=python python3 bench/gluon_family.py --archives out/ # archives built beforehand

Forward only (the family has no backward). Both families run through libattnpack, from two
archives built here (or found in --archives): `--family gluon --all` (every Gluon kernel is
timed, forced by name, and the fastest correct one is reported) and the triton family's
default forwards. Before timing, each Gluon kernel's output is compared with cuDNN's; a kernel
off by more than --max-diff is reported as wrong and not timed. Timing, FLOPs, inputs and the
PyTorch side are attnpack.bench's (warm-up, L2 flush, CUDA events, median; the tuner's FLOP
count, visible pairs under causal). Every row names the kernel that served it; ratios are
against cuDNN measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from triton_family import (NATIVE, SHAPES, cudnn_output, fmt, ratio_summary,  # noqa: E402
                           run_preamble)

from attnpack import runtime as rt  # noqa: E402
from attnpack.archive import read_archive  # noqa: E402
from attnpack.bench.measure import backend, make_inputs, time_op  # noqa: E402
from attnpack.bench.shapes import dims_label, load_shape_file, shape_flops  # noqa: E402
from attnpack.bench.timing import Timer  # noqa: E402
from attnpack.builder import BuildRequest, build_archives  # noqa: E402


def archives(folder: Path | None) -> tuple[Path, Path]:
    """(gluon --all archive, triton default-forward archive)."""
    if folder is not None:
        gluon, triton_ = folder / "gluon", folder / "triton"
        found = [next(p.glob("attnpack-*-sm_90.apk"), None) for p in (gluon, triton_)]
        if all(found):
            return found[0], found[1]
    root = folder or Path("bench-archives")
    jobs = os.cpu_count() or 1
    (gluon,) = build_archives(BuildRequest(archs=("sm_90",), out_dir=root / "gluon", jobs=jobs,
                                           all_variants=True, families=("gluon",)))
    (triton_,) = build_archives(BuildRequest(archs=("sm_90",), out_dir=root / "triton",
                                             jobs=jobs, families=("triton",), ops=("fwd",)))
    return gluon, triton_


def runtime_fwd(bundle, q, k, v, causal, scale, kernel=None):
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    run = lambda: rt.forward(bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse,
                             kernel=kernel)
    return run, o


def bench(shapes, gluon_path, triton_path, timer: Timer, max_diff):
    gluon_names = [k for k in read_archive(gluon_path).kernels]
    rows = []
    with rt.Bundle(gluon_path) as gluon, rt.Bundle(triton_path) as triton_:
        for shape in shapes:
            if shape.head_dim not in (64, 128):
                continue
            q, k, v, do = tensors = make_inputs(shape)
            causal, scale = shape.causal, 1.0 / math.sqrt(shape.head_dim)
            f = shape_flops(shape, "fwd")
            row = {"shape": dims_label(shape), "gluon": {}, "wrong": {}}
            want = cudnn_output(shape, q, k, v)
            key = {"dtype": shape.dtype, "head_dim": shape.head_dim, "causal": causal}
            for rec in (r for r in gluon_names if r["key"] == key):
                run, o = runtime_fwd(gluon, q, k, v, causal, scale, rec["name"])
                run()
                torch.cuda.synchronize()
                diff = (o.float() - want.float()).abs().max().item()
                if not diff <= max_diff:  # NaN fails too
                    row["wrong"][rec["name"]] = diff
                    continue
                row["gluon"][rec["name"]] = f / timer.median_ms(run) / 1e9
            best = max(row["gluon"].items(), key=lambda kv: kv[1], default=(None, None))
            row["gluon_kernel"], row["gluon_tflops"] = best
            run, _ = runtime_fwd(triton_, q, k, v, causal, scale)
            run()
            row["triton_kernel"] = triton_.select(rt.problem_from_tensors(
                "fwd", q, k, v, torch.empty_like(q),
                torch.empty(q.shape[:3], device="cuda"), causal=causal)).name
            row["triton_tflops"] = f / timer.median_ms(run) / 1e9
            for name in NATIVE:
                with backend(name):
                    timing = time_op(name, "fwd", shape, tensors, timer)
                row[name] = f / timing["ms"] / 1e9 if "ms" in timing else None
            rows.append(row)
            print_row(row)
            torch.cuda.empty_cache()
    return rows


def print_row(row):
    ratio = lambda x: f"{x / row['cudnn']:.2f}" if x and row.get("cudnn") else "   -"
    wrong = f"  WRONG: {', '.join(row['wrong'])}" if row["wrong"] else ""
    print(f"{row['shape']:<32} | {fmt(row['gluon_tflops'])} {fmt(row['triton_tflops'])} "
          f"{fmt(row['cudnn'])} {fmt(row['flash'])} | {ratio(row['gluon_tflops']):>5} "
          f"{ratio(row['triton_tflops']):>5} | {row['gluon_kernel']} ; {row['triton_kernel']}"
          f"{wrong}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=Path, default=SHAPES)
    ap.add_argument("--select", help="comma-separated indices into the shape list")
    ap.add_argument("--archives", type=Path, help="folder with gluon/ and triton/ archives")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    ap.add_argument("--reps", type=int, default=30, help="timed calls; the median counts")
    ap.add_argument("--max-diff", type=float, default=3e-2,
                    help="largest |O - cuDNN's O| a kernel may show and still be timed")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    shapes = load_shape_file(args.shapes)
    if args.select:
        shapes = [shapes[int(i)] for i in args.select.split(",")]
    gluon, triton_ = archives(args.archives)
    props, timer, rate = run_preamble(args.reps, args.warmup)
    print(f"{'shape':<32} | {'fwd TFLOP/s: gluon triton cuDNN flash':>21} | {'/cuDNN g t':>11} | "
          "kernels: gluon ; triton")
    rows = bench(shapes, gluon, triton_, timer, args.max_diff)
    for fam in ("gluon", "triton"):
        rs = [r[f"{fam}_tflops"] / r["cudnn"] for r in rows if r[f"{fam}_tflops"] and r["cudnn"]]
        if rs:
            print(ratio_summary(f"{fam}/cuDNN:", rs))
    if args.json:
        args.json.write_text(json.dumps({"device": props.name, "matmul_tflops": rate,
                                         "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
