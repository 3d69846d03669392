"""Benchmark the triton family against PyTorch's own SDPA backends, side by side in one run.

    PYTHONPATH=python python3 bench/triton_family.py                 # defaults vs cuDNN/flash/efficient
    PYTHONPATH=python python3 bench/triton_family.py --sweep         # every sm_90 config, per shape
    PYTHONPATH=python python3 bench/triton_family.py --sweep --select 6,7   # shapes 6 and 7 only
    PYTHONPATH=python python3 bench/triton_family.py --warm -j 12    # compile in parallel, then exit

Our kernels are launched through attnpack.jit from the family's launch specs (the default
variant of each functional key unless --sweep), not through the bundle: `attnpack bench`
measures what F.sdpa runs. Timing, FLOPs, inputs and the PyTorch side are attnpack.bench's
(timing.Timer: warm-up, L2 flush, CUDA events, median; the tuner's FLOP count; F.sdpa with
cuDNN, flash or efficient forced, grouped-query heads as they are). Every row says which
variant served it.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from attnpack import jit
from attnpack.bench.measure import backend, make_inputs, time_op
from attnpack.bench.report import geomean
from attnpack.bench.shapes import DEFAULT_SHAPE_FILES, Shape, dims_label, load_shape_file, shape_flops
from attnpack.bench.timing import Timer, matmul_tflops
from attnpack.family import FunctionalKey, kernels_root, load_family

ARCH = "sm_90"
SHAPES = DEFAULT_SHAPE_FILES[0]
NATIVE = ("cudnn", "flash", "efficient")


def family():
    return load_family(kernels_root() / "triton_attn")


def key_of(shape: Shape) -> FunctionalKey:
    return FunctionalKey(shape.dtype, shape.head_dim, shape.causal)


def ours(q, k, v, do, fwd, bwd, scale):
    """(fwd thunk, bwd thunk, output, bwd tensors) for one pair of variants."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    fwd_args = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
    bwd_args = {**fwd_args, "do": do, "dq": dq, "dk": dk, "dv": dv}
    run_fwd = lambda: jit.launch(fwd, fwd_args, scale)  # noqa: E731
    run_bwd = lambda: jit.launch(bwd, bwd_args, scale)  # noqa: E731
    return run_fwd, run_bwd, o, bwd_args


def cudnn_output(shape: Shape, q, k, v):
    with backend("cudnn"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal,
                                              enable_gqa=shape.gqa)


# ---------------------------------------------------------------- compile warm-up (parallel)
def _warm_one(todo):
    spec = family()
    for op, dtype, d, causal, config in todo:
        key = FunctionalKey(dtype, d, causal)
        variant = spec.variant(ARCH, op, key, config)
        q, k, v, do = make_inputs(Shape(1, 2, 1, 200, 200, d, causal, dtype))
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda")
        tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do, "dq": torch.empty_like(q),
                   "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
        jit.launch(variant, tensors, 0.1)
    torch.cuda.synchronize()
    return len(todo)


def warm(spec, jobs: int, sweep: bool, head_dims, dtypes):
    """Compile through the JIT in `jobs` processes so later runs hit Triton's disk cache."""
    todo = []
    for v in spec.default_variants(ARCH):
        if v.key.head_dim in head_dims and v.key.dtype in dtypes:
            todo.append((v.op, v.key.dtype, v.key.head_dim, v.key.causal, dict(v.config)))
    if sweep:
        for v in spec.all_variants(ARCH):
            if v.key.head_dim in (64, 128, 256) and v.key.dtype == "bf16":
                todo.append((v.op, v.key.dtype, v.key.head_dim, v.key.causal, dict(v.config)))
    uniq = list({json.dumps(t, sort_keys=True): t for t in todo}.values())
    t0 = time.time()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(jobs) as pool:
        done = sum(pool.map(_warm_one, [uniq[i::jobs] for i in range(jobs)]))
    print(f"warmed {done} variants in {time.time() - t0:.0f} s with {jobs} processes", flush=True)


# ---------------------------------------------------------------- benchmarks
def bench_defaults(spec, shapes, timer: Timer):
    defaults = {(v.op, v.key): v for v in spec.default_variants(ARCH)}
    rows = []
    for shape in shapes:
        q, k, v, do = tensors = make_inputs(shape)
        scale = 1.0 / math.sqrt(shape.head_dim)
        key = key_of(shape)
        fwd, bwd = defaults[("fwd", key)], defaults[("bwd", key)]
        row = {"shape": dims_label(shape), "fwd_variant": fwd.config_tag, "bwd_variant": bwd.config_tag}
        run_fwd, run_bwd, out, _ = ours(q, k, v, do, fwd, bwd, scale)
        run_fwd()
        row["attnpack"] = {"fwd": shape_flops(shape, "fwd") / timer.median_ms(run_fwd) / 1e9,
                           "bwd": shape_flops(shape, "bwd") / timer.median_ms(run_bwd) / 1e9}
        for name in NATIVE:
            row[name] = {}
            with backend(name):
                for op in ("fwd", "bwd"):
                    timing = time_op(name, op, shape, tensors, timer)
                    ms = timing.get("ms")
                    row[name][op] = shape_flops(shape, op) / ms / 1e9 if ms else None
                    if "error" in timing:
                        row[name]["error"] = timing["error"][:80]
        if row["cudnn"].get("fwd"):
            ref = cudnn_output(shape, q, k, v)
            row["max_abs_diff_vs_cudnn"] = (out.float() - ref.float()).abs().max().item()
        rows.append(row)
        print_row(row, flush=True)
        del q, k, v, do, tensors, run_fwd, run_bwd, out
        torch.cuda.empty_cache()
    return rows


def fmt(x):
    return "   -" if x is None else f"{x:4.0f}"


def ratio_summary(label: str, ratios: list[float]) -> str:
    """'# <label> min, geomean, max' of ratios against cuDNN measured in the same run."""
    return f"# {label} min {min(ratios):.2f}, geomean {geomean(ratios):.2f}, max {max(ratios):.2f}"


def run_preamble(reps: int, warmup: int):
    """Prints the run's first two lines (the GPU and the software; a dense bf16 matmul's
    TFLOP/s, the yardstick of the tables' "of matmul") and returns (device properties, the
    timer, that rate)."""
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, {time.strftime('%Y-%m-%d')}")
    timer = Timer(reps=reps, warmup=warmup)
    rate = matmul_tflops(timer)
    print(f"# dense bf16 matmul 8192^3: {rate:.0f} TFLOP/s")
    return props, timer, rate


def print_header():
    print(f"{'shape':<32} | {'fwd TFLOP/s: ours cuDNN flash eff':>34} {'ours/cuDNN':>10} | "
          f"{'bwd TFLOP/s: ours cuDNN flash eff':>34} {'ours/cuDNN':>10} | variant fwd ; bwd")


def print_row(row, flush=False):
    r = lambda op: (row["attnpack"][op] / row["cudnn"][op]) if row["cudnn"].get(op) else None  # noqa: E731
    cols = []
    for op in ("fwd", "bwd"):
        vals = " ".join(fmt(row[n].get(op)) for n in ("attnpack", "cudnn", "flash", "efficient"))
        ratio = r(op)
        cols.append(f"{vals:>34} {('%.2f' % ratio) if ratio else '-':>10}")
    print(f"{row['shape']:<32} | {cols[0]} | {cols[1]} | {row['fwd_variant']} ; {row['bwd_variant']}",
          flush=flush)


def bench_sweep(spec, shapes, timer: Timer):
    """Every declared sm_90 config on each shape; correctness spot-check vs cuDNN's output."""
    results = []
    for shape in shapes:
        q, k, v, do = make_inputs(shape)
        scale = 1.0 / math.sqrt(shape.head_dim)
        key = key_of(shape)
        ref = cudnn_output(shape, q, k, v)
        fwd_default = spec.default_config(ARCH, "fwd", key)
        bwd_default = spec.default_config(ARCH, "bwd", key)
        for op in ("fwd", "bwd"):
            for config in spec.configs[op]:
                if spec.excluded(ARCH, op, key, config) is not None:
                    continue
                variant = spec.variant(ARCH, op, key, config)
                other = spec.variant(ARCH, "bwd" if op == "fwd" else "fwd", key,
                                     bwd_default if op == "fwd" else fwd_default)
                fwd, bwd = (variant, other) if op == "fwd" else (other, variant)
                run_fwd, run_bwd, out, tensors = ours(q, k, v, do, fwd, bwd, scale)
                run_fwd()
                err = (out.float() - ref.float()).abs().max().item()
                ms = timer.median_ms(run_fwd if op == "fwd" else run_bwd)
                res = {"shape": dims_label(shape), "hd": shape.head_dim, "causal": shape.causal,
                       "op": op, "config": variant.config_tag,
                       "tflops": shape_flops(shape, op) / ms / 1e9, "fwd_err_vs_cudnn": err}
                if op == "bwd":  # where the backward's time goes, step by step
                    res["step_ms"] = {}
                    for step in variant.steps:
                        alone = dataclasses.replace(variant, steps=(step,))
                        res["step_ms"][step.name] = timer.median_ms(
                            lambda: jit.launch(alone, tensors, scale))
                results.append(res)
                steps = " ".join(f"{n[4:]} {t:.3f}" for n, t in res.get("step_ms", {}).items())
                print(f"{res['shape']:<32} {op} {res['config']:<46} {res['tflops']:6.0f} TFLOP/s"
                      f"  |o - cuDNN| {err:.1e}  {steps}", flush=True)
        del q, k, v, do, ref
        torch.cuda.empty_cache()
    print("\ngeometric mean TFLOP/s per (op, head dim, causal) and config:")
    groups = {}
    for r in results:
        groups.setdefault((r["op"], r["hd"], r["causal"]), {}).setdefault(r["config"], []).append(
            r["tflops"])
    for (op, hd, causal), configs in sorted(groups.items()):
        ranked = sorted(((geomean(t), c) for c, t in configs.items()), reverse=True)
        print(f"  {op} d{hd} {'causal' if causal else 'full'}: " +
              ", ".join(f"{c} {g:.0f}" for g, c in ranked))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=Path, default=SHAPES)
    ap.add_argument("--sweep", action="store_true", help="time every declared sm_90 config")
    ap.add_argument("--warm", action="store_true", help="only compile (parallel), then exit")
    ap.add_argument("-j", "--jobs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    ap.add_argument("--reps", type=int, default=30, help="timed calls; the median counts")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--select", help="comma-separated indices into the shape list")
    args = ap.parse_args(argv)
    spec = family()
    shapes = load_shape_file(args.shapes)
    if args.select:
        shapes = [shapes[int(i)] for i in args.select.split(",")]
    if args.warm:
        warm(spec, args.jobs, args.sweep, head_dims=(32, 64, 96, 128, 256), dtypes=("bf16", "fp16"))
        return 0
    props, timer, rate = run_preamble(args.reps, args.warmup)
    if args.sweep:
        results = bench_sweep(spec, shapes, timer)
    else:
        print_header()
        results = bench_defaults(spec, shapes, timer)
        ratios = {op: [r["attnpack"][op] / r["cudnn"][op] for r in results if r["cudnn"].get(op)]
                  for op in ("fwd", "bwd")}
        for op, rs in ratios.items():
            if rs:
                print(ratio_summary(f"{op}: ours/cuDNN", rs))
    if args.json:
        args.json.write_text(json.dumps({"device": props.name, "matmul_tflops": rate,
                                         "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
