"""Benchmark the triton family against PyTorch's own SDPA backends, side by side in one run.

    PYTHONPATH=python python3 bench/triton_family.py                 # defaults vs cuDNN/flash/efficient
    PYTHONPATH=python python3 bench/triton_family.py --sweep         # every sm_90 config, per shape
    PYTHONPATH=python python3 bench/triton_family.py --sweep --select 6,7   # shapes 6 and 7 only
    PYTHONPATH=python python3 bench/triton_family.py --warm -j 12    # compile in parallel, then exit

Our kernels are launched through attnpack.jit from the family's launch specs (the default
variant of each functional key unless --sweep). Timing: triton.testing.do_bench, median, with
its L2 flush before every repetition. FLOPs: forward 4*B*Hq*Sq*Sk*D, halved when causal;
backward 2.5x forward. PyTorch backends get K/V expanded to Hq heads for GQA (outside the timed
region). Every row says which variant served it.
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
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnpack import jit
from attnpack.family import FunctionalKey, kernels_root, load_family

ARCH = "sm_90"
SHAPES = Path(__file__).with_name("shapes.json")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
BACKENDS = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION))


def family():
    return load_family(kernels_root() / "triton_attn")


def flops(shape, op):
    f = 4 * shape["batch"] * shape["heads_q"] * shape["seqlen_q"] * shape["seqlen_k"] * shape["head_dim"]
    f = f / 2 if shape["causal"] else f
    return f * (2.5 if op == "bwd" else 1.0)


def key_of(shape):
    return FunctionalKey(shape["dtype"], shape["head_dim"], shape["causal"])


def label(shape):
    gqa = f"/{shape['heads_kv']}" if shape["heads_kv"] != shape["heads_q"] else ""
    return (f"B{shape['batch']} H{shape['heads_q']}{gqa} S{shape['seqlen_q']}"
            f"{'' if shape['seqlen_q'] == shape['seqlen_k'] else 'x' + str(shape['seqlen_k'])} "
            f"d{shape['head_dim']} {'causal' if shape['causal'] else 'full'}")


def inputs(shape, device="cuda"):
    torch.manual_seed(0)
    dt = DTYPES[shape["dtype"]]
    b, hq, hkv = shape["batch"], shape["heads_q"], shape["heads_kv"]
    sq, sk, d = shape["seqlen_q"], shape["seqlen_k"], shape["head_dim"]
    q = torch.randn(b, hq, sq, d, device=device, dtype=dt)
    k = torch.randn(b, hkv, sk, d, device=device, dtype=dt)
    v = torch.randn(b, hkv, sk, d, device=device, dtype=dt)
    do = torch.randn(b, hq, sq, d, device=device, dtype=dt)
    return q, k, v, do


def ours(q, k, v, do, fwd, bwd, scale):
    """(fwd thunk, bwd thunk, output, bwd tensors) for one pair of variants."""
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    fwd_args = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
    bwd_args = {**fwd_args, "do": do, "dq": dq, "dk": dk, "dv": dv}
    run_fwd = lambda: jit.launch(fwd, fwd_args, scale)
    run_bwd = lambda: jit.launch(bwd, bwd_args, scale)
    return run_fwd, run_bwd, o, bwd_args


def pytorch(q, k, v, do, causal, scale, backend):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

    def run_fwd():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out = run_fwd()  # raises if the backend refuses the shape
    run_bwd = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    return run_fwd, run_bwd, out.detach()


def timed(fn, warmup, rep) -> float:
    """Median milliseconds."""
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def matmul_rate() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = timed(lambda: a @ a, 25, 200)
    return 2 * 8192 ** 3 / ms / 1e9


# ---------------------------------------------------------------- compile warm-up (parallel)
def _warm_one(todo):
    spec = family()
    for op, dtype, d, causal, config in todo:
        key = FunctionalKey(dtype, d, causal)
        variant = spec.variant(ARCH, op, key, config)
        shape = {"batch": 1, "heads_q": 2, "heads_kv": 1, "seqlen_q": 200, "seqlen_k": 200,
                 "head_dim": d, "causal": causal, "dtype": dtype}
        q, k, v, do = inputs(shape)
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
def bench_defaults(spec, shapes, warmup, rep):
    defaults = {(v.op, v.key): v for v in spec.default_variants(ARCH)}
    rows = []
    for shape in shapes:
        q, k, v, do = inputs(shape)
        scale = 1.0 / math.sqrt(shape["head_dim"])
        key = key_of(shape)
        fwd, bwd = defaults[("fwd", key)], defaults[("bwd", key)]
        row = {"shape": label(shape), "fwd_variant": fwd.config_tag, "bwd_variant": bwd.config_tag}
        run_fwd, run_bwd, out, _ = ours(q, k, v, do, fwd, bwd, scale)
        run_fwd()
        row["attnpack"] = {"fwd": flops(shape, "fwd") / timed(run_fwd, warmup, rep) / 1e9,
                           "bwd": flops(shape, "bwd") / timed(run_bwd, warmup, rep) / 1e9}
        for name, backend in BACKENDS:
            try:
                p_fwd, p_bwd, p_out = pytorch(q, k, v, do, shape["causal"], scale, backend)
            except RuntimeError as e:
                row[name] = {"fwd": None, "bwd": None, "error": str(e).splitlines()[0][:80]}
                continue
            row[name] = {"fwd": flops(shape, "fwd") / timed(p_fwd, warmup, rep) / 1e9,
                         "bwd": flops(shape, "bwd") / timed(p_bwd, warmup, rep) / 1e9}
            if name == "cudnn":
                row["max_abs_diff_vs_cudnn"] = (out.float() - p_out.float()).abs().max().item()
            del p_fwd, p_bwd, p_out
        rows.append(row)
        print_row(row, flush=True)
        del q, k, v, do, run_fwd, run_bwd, out
        torch.cuda.empty_cache()
    return rows


def fmt(x):
    return "   -" if x is None else f"{x:4.0f}"


def ratio_summary(label: str, ratios: list[float]) -> str:
    """'# <label> min, geomean, max' of ratios against cuDNN measured in the same run."""
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return f"# {label} min {min(ratios):.2f}, geomean {geomean:.2f}, max {max(ratios):.2f}"


def print_header():
    print(f"{'shape':<32} | {'fwd TFLOP/s: ours cuDNN flash eff':>34} {'ours/cuDNN':>10} | "
          f"{'bwd TFLOP/s: ours cuDNN flash eff':>34} {'ours/cuDNN':>10} | variant fwd ; bwd")


def print_row(row, flush=False):
    r = lambda op: (row["attnpack"][op] / row["cudnn"][op]) if row["cudnn"].get(op) else None
    cols = []
    for op in ("fwd", "bwd"):
        vals = " ".join(fmt(row[n][op]) for n in ("attnpack", "cudnn", "flash", "efficient"))
        ratio = r(op)
        cols.append(f"{vals:>34} {('%.2f' % ratio) if ratio else '-':>10}")
    print(f"{row['shape']:<32} | {cols[0]} | {cols[1]} | {row['fwd_variant']} ; {row['bwd_variant']}",
          flush=flush)


def bench_sweep(spec, shapes, warmup, rep):
    """Every declared sm_90 config on each shape; correctness spot-check vs cuDNN's output."""
    results = []
    for shape in shapes:
        q, k, v, do = inputs(shape)
        scale = 1.0 / math.sqrt(shape["head_dim"])
        key = key_of(shape)
        _, _, ref = pytorch(q, k, v, do, shape["causal"], scale, SDPBackend.CUDNN_ATTENTION)
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
                ms = timed(run_fwd if op == "fwd" else run_bwd, warmup, rep)
                res = {"shape": label(shape), "hd": shape["head_dim"], "causal": shape["causal"],
                       "op": op, "config": variant.config_tag,
                       "tflops": flops(shape, op) / ms / 1e9, "fwd_err_vs_cudnn": err}
                if op == "bwd":  # where the backward's time goes, step by step
                    res["step_ms"] = {}
                    for step in variant.steps:
                        alone = dataclasses.replace(variant, steps=(step,))
                        res["step_ms"][step.name] = timed(
                            lambda: jit.launch(alone, tensors, scale), warmup, rep)
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
        ranked = sorted(((math.exp(sum(map(math.log, t)) / len(t)), c) for c, t in configs.items()),
                        reverse=True)
        print(f"  {op} d{hd} {'causal' if causal else 'full'}: " +
              ", ".join(f"{c} {g:.0f}" for g, c in ranked))
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=Path, default=SHAPES)
    ap.add_argument("--sweep", action="store_true", help="time every declared sm_90 config")
    ap.add_argument("--warm", action="store_true", help="only compile (parallel), then exit")
    ap.add_argument("-j", "--jobs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warm-up, ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--select", help="comma-separated indices into the shape list")
    args = ap.parse_args(argv)
    spec = family()
    shapes = json.loads(args.shapes.read_text())["shapes"]
    if args.select:
        shapes = [shapes[int(i)] for i in args.select.split(",")]
    if args.warm:
        warm(spec, args.jobs, args.sweep, head_dims=(32, 64, 96, 128, 256), dtypes=("bf16", "fp16"))
        return 0
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, torch {torch.__version__}, triton {triton.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}, {time.strftime('%Y-%m-%d')}")
    rate = matmul_rate()
    print(f"# dense bf16 matmul 8192^3: {rate:.0f} TFLOP/s")
    if args.sweep:
        results = bench_sweep(spec, shapes, args.warmup, args.rep)
    else:
        print_header()
        results = bench_defaults(spec, shapes, args.warmup, args.rep)
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
