"""Benchmark the Gluon backward against cuDNN, flash and the triton family's backward.

    PYTHONPATH=python python3 bench/gluon_bwd.py                  # shapes.json + GQA model shapes
    PYTHONPATH=python python3 bench/gluon_bwd.py --select 0,4     # shapes 0 and 4 only
    PYTHONPATH=python python3 bench/gluon_bwd.py --archives out/  # archives built beforehand

Kernels run through libattnpack from three archives built here (or found in --archives, in
gluon-bwd/, gluon-fwd/ and triton-bwd/): every gluon backward (`--family gluon --op bwd --all`),
the bf16 gluon forwards, and the triton family's default backwards. Per shape:
  - forward: the fastest of the gluon forwards in FWD_CONFIGS; its O and LSE feed every backward;
  - backward: every gluon backward kernel of the key is first compared with cuDNN's gradients
    (a kernel off by more than --max-diff, relative to the largest gradient, is reported wrong
    and not timed), then timed; the fastest `det0` (fp32 atomics) and `det1` (deterministic)
    are reported separately, each with the kernel that served it;
  - triton: the triton family's default backward on the same O and LSE;
  - cuDNN and flash: F.sdpa forward, and its backward through autograd, as `attnpack bench`
    measures them (attnpack.bench.measure: the backend forced, grouped-query heads as they are,
    enable_gqa, so their backward does its own dK/dV group reduction); the gradients to check
    against are cuDNN's (flash's where cuDNN refuses the shape).
Timing: attnpack.bench's Timer (--warmup untimed calls, then --reps timed calls, each after an
L2 flush, between CUDA events; the median counts). FLOPs and inputs are attnpack.bench's too:
the tuner's count, forward 4·B·Hq·D per visible (query, key) pair (all Sq·Sk without a mask;
under causal query i sees keys 0..i), backward 2.5x that. fwd+bwd ratios are time(cuDNN fwd + bwd) /
time(gluon fwd + gluon bwd), so above 1 is faster than cuDNN.
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
from triton_family import SHAPES, fmt, ratio_summary, run_preamble  # noqa: E402

from attnpack import runtime as rt  # noqa: E402
from attnpack.archive import read_archive  # noqa: E402
from attnpack.bench.measure import backend, make_inputs, sdpa_call, time_op  # noqa: E402
from attnpack.bench.shapes import Shape, dims_label, load_shape_file, shape_flops  # noqa: E402
from attnpack.bench.timing import Timer  # noqa: E402
from attnpack.builder import BuildRequest, build_archives  # noqa: E402

# The forwards the sm_90 tuning database picks most often (docs/gluon-family.md).
FWD_CONFIGS = ("M64_N128_stages3_overlap1", "M64_N128_stages3_overlap1_persistent1",
               "M64_N64_stages3_overlap1_persistent1", "M64_N128_stages2_persistent1")
# Model shapes the issue names: GQA 4 and 8, head dim 128, causal, S = 1k..8k, ~16k tokens.
GQA_SHAPES = [Shape(batch=16384 // s, heads_q=32, heads_kv=32 // g, seqlen_q=s, seqlen_k=s,
                     head_dim=128, causal=True, dtype="bf16")
              for g in (4, 8) for s in (1024, 2048, 4096, 8192)]
# PyTorch's backends timed beside ours; the first that gives gradients is the yardstick.
PYTORCH = ("cudnn", "flash")


def archives(folder: Path | None) -> dict[str, Path]:
    root = folder or Path("bench-archives")
    found = {name: next((root / name).glob("attnpack-*-sm_90.apk"), None)
             for name in ("gluon-bwd", "gluon-fwd", "triton-bwd")}
    jobs = os.cpu_count() or 1
    requests = {
        "gluon-bwd": dict(all_variants=True, families=("gluon",), ops=("bwd",)),
        "gluon-fwd": dict(all_variants=True, families=("gluon",), ops=("fwd",), dtypes=("bf16",)),
        "triton-bwd": dict(families=("triton",), ops=("bwd",), dtypes=("bf16",),
                           head_dims=(64, 128)),
    }
    for name, kw in requests.items():
        if found[name] is None:
            (found[name],) = build_archives(BuildRequest(archs=("sm_90",), out_dir=root / name,
                                                         jobs=jobs, **kw))
    return found


def bench_shape(shape: Shape, bundles, names, timer: Timer, max_diff):
    q, k, v, do = tensors = make_inputs(shape)
    causal, scale = shape.causal, 1.0 / math.sqrt(shape.head_dim)
    f_fwd, f_bwd = shape_flops(shape, "fwd"), shape_flops(shape, "bwd")
    tag = key_tag(shape)
    row = {"shape": dims_label(shape), "wrong": {}, "refused": {}, "bwd": {}, "fwd_ms": {},
           "bwd_ms": {}}

    # PyTorch's backends: forward and backward times (a refusal is recorded, not timed), and
    # the first one's gradients as the yardstick (dK/dV with heads_kv heads, as ours)
    want = None
    for name in PYTORCH:
        with backend(name):
            for op in ("fwd", "bwd"):
                timing = time_op(name, op, shape, tensors, timer)
                if "ms" in timing:
                    row[f"{op}_ms"][name] = timing["ms"]
                else:
                    row["refused"][f"{name} {op}"] = timing["error"]
            if want is None and name in row["bwd_ms"]:
                want = sdpa_call("bwd", q, k, v, do, causal)()
    if want is None:
        raise RuntimeError(f"{row['shape']}: neither of {', '.join(PYTORCH)} gives gradients to "
                           f"check the gluon backward against: {row['refused']}")

    # the gluon forward: the fastest of FWD_CONFIGS; its O and LSE feed every backward
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    best = None
    for config in FWD_CONFIGS:
        kernel = f"gluon/fwd/{tag}/{config}"
        if kernel not in names["gluon-fwd"]:
            continue
        run = lambda kernel=kernel: rt.forward(bundles["gluon-fwd"], q, k, v, causal=causal,
                                               scale=scale, out=o, lse=lse, kernel=kernel)
        ms = timer.median_ms(run)
        if best is None or ms < best[1]:
            best = (kernel, ms)
    if best is None:
        raise RuntimeError(f"{row['shape']}: the gluon-fwd archive has none of FWD_CONFIGS "
                           f"for {tag}")
    row["gluon_fwd"], row["fwd_ms"]["gluon"] = best
    rt.forward(bundles["gluon-fwd"], q, k, v, causal=causal, scale=scale, out=o, lse=lse,
               kernel=best[0])

    grads = [torch.empty_like(t) for t in (q, k, v)]

    def backward(bundle, kernel=None):
        return lambda: rt.backward(bundle, do, q, k, v, o, lse, causal=causal, scale=scale,
                                   dq=grads[0], dk=grads[1], dv=grads[2], kernel=kernel)

    for kernel in sorted(n for n in names["gluon-bwd"] if f"/{tag}/" in n):
        run = backward(bundles["gluon-bwd"], kernel)
        run()
        torch.cuda.synchronize()
        diff = max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item()
                   for g, w in zip(grads, want))
        if not diff <= max_diff:  # NaN fails too
            row["wrong"][kernel] = diff
            continue
        row["bwd"][kernel] = timer.median_ms(run)
    for variant in ("det0", "det1"):
        timed_ms = {n: ms for n, ms in row["bwd"].items() if variant in n}
        kernel = min(timed_ms, key=timed_ms.get, default=None)
        row[f"gluon_{variant}"] = kernel
        row["bwd_ms"][f"gluon_{variant}"] = timed_ms.get(kernel)
    run = backward(bundles["triton-bwd"])
    run()
    row["triton_bwd"] = bundles["triton-bwd"].select(rt.problem_from_tensors(
        "bwd", q, k, v, o, lse, do=do, dq=grads[0], dk=grads[1], dv=grads[2],
        causal=causal)).name
    row["bwd_ms"]["triton"] = timer.median_ms(run)

    row["bwd_tflops"] = {n: (f_bwd / ms / 1e9 if ms else None) for n, ms in row["bwd_ms"].items()}
    row["fwd_tflops"] = {n: (f_fwd / ms / 1e9 if ms else None) for n, ms in row["fwd_ms"].items()}
    cudnn = row["fwd_ms"].get("cudnn", 0) + row["bwd_ms"].get("cudnn", 0)
    for variant in ("det0", "det1"):
        ms = row["bwd_ms"].get(f"gluon_{variant}")
        row[f"fwdbwd_vs_cudnn_{variant}"] = (cudnn / (row["fwd_ms"]["gluon"] + ms)
                                             if ms and cudnn else None)
        row[f"bwd_vs_cudnn_{variant}"] = (row["bwd_ms"]["cudnn"] / ms
                                          if ms and "cudnn" in row["bwd_ms"] else None)
    return row


def key_tag(shape: Shape) -> str:
    """The functional key's part of a kernel name: 'bf16-d128-causal'."""
    return f"{shape.dtype}-d{shape.head_dim}-{'causal' if shape.causal else 'full'}"


def print_row(row):
    t = row["bwd_tflops"]
    ratio = lambda x: f"{x:.2f}" if x else "   -"
    tri = (row["bwd_ms"]["cudnn"] / row["bwd_ms"]["triton"]) if "cudnn" in row["bwd_ms"] else None
    wrong = f"  WRONG: {row['wrong']}" if row["wrong"] else ""
    print(f"{row['shape']:<30} | {fmt(t.get('gluon_det0'))} {fmt(t.get('gluon_det1'))} "
          f"{fmt(t.get('triton'))} {fmt(t.get('cudnn'))} {fmt(t.get('flash'))} | "
          f"{ratio(row['bwd_vs_cudnn_det0']):>5} {ratio(row['bwd_vs_cudnn_det1']):>5} "
          f"{ratio(tri):>5} | {ratio(row['fwdbwd_vs_cudnn_det0']):>5} "
          f"{ratio(row['fwdbwd_vs_cudnn_det1']):>5} | {row['gluon_det0']} ; {row['gluon_det1']} ; "
          f"{row['triton_bwd']} ; {row['gluon_fwd']}{wrong}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", type=Path, default=SHAPES)
    ap.add_argument("--select", help="comma-separated indices into the shape list (shapes.json "
                    "first, then the GQA model shapes)")
    ap.add_argument("--no-gqa", action="store_true", help="leave out the GQA model shapes")
    ap.add_argument("--archives", type=Path, help="folder with gluon-bwd/, gluon-fwd/, triton-bwd/")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    ap.add_argument("--reps", type=int, default=30, help="timed calls; the median counts")
    ap.add_argument("--max-diff", type=float, default=2e-2,
                    help="largest |grad - cuDNN's| / max|cuDNN's| a kernel may show and be timed")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)
    shapes = [("public", s) for s in load_shape_file(args.shapes) if s.head_dim in (64, 128)]
    if not args.no_gqa:
        shapes += [("gqa", s) for s in GQA_SHAPES]
    if args.select:
        shapes = [shapes[int(i)] for i in args.select.split(",")]
    paths = archives(args.archives)
    names = {n: {k["name"] for k in read_archive(p).kernels} for n, p in paths.items()}
    props, timer, rate = run_preamble(args.reps, args.warmup)
    print(f"{'shape':<30} | {'bwd TFLOP/s: det0 det1 triton cuDNN flash':>25} | "
          f"{'bwd/cuDNN det0 det1 triton':>17} | {'fwd+bwd/cuDNN det0 det1':>11} | "
          "kernels: det0 ; det1 ; triton ; gluon fwd")
    rows = []
    with rt.Bundle(paths["gluon-bwd"]) as gb, rt.Bundle(paths["gluon-fwd"]) as gf, \
            rt.Bundle(paths["triton-bwd"]) as tb:
        bundles = {"gluon-bwd": gb, "gluon-fwd": gf, "triton-bwd": tb}
        for group, shape in shapes:
            row = bench_shape(shape, bundles, names, timer, args.max_diff)
            row["group"] = group
            rows.append(row)
            print_row(row)
            torch.cuda.empty_cache()
    for group in ("public", "gqa"):
        for what in ("bwd_vs_cudnn_det0", "bwd_vs_cudnn_det1", "fwdbwd_vs_cudnn_det0",
                     "fwdbwd_vs_cudnn_det1"):
            rs = [r[what] for r in rows if r["group"] == group and r[what]]
            if rs:
                print(ratio_summary(f"{group} {what}:", rs))
        rs = [r["bwd_ms"]["cudnn"] / r["bwd_ms"]["triton"] for r in rows
              if r["group"] == group and "cudnn" in r["bwd_ms"]]
        if rs:
            print(ratio_summary(f"{group} bwd_vs_cudnn_triton:", rs))
    if args.json:
        args.json.write_text(json.dumps({"device": props.name, "matmul_tflops": rate,
                                         "results": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
