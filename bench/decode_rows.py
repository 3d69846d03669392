"""Every forward kernel of a tuning archive at each decode row of a shape file, at the row's own
shape, against the kernel the archive's database picks for it and against cuDNN.

    PYTHONPATH=python python3 bench/decode_rows.py --archive tuning/attnpack-0.1.0-sm_90.apk \\
        [--shapes bench/model_shapes.json] [--kernel-filter decode1] [--json decode_rows.json]

A decode key is tuned at one batch a streams class (the tuner's DECODE_SEQUENCES, 4 to 64
sequences of 8 KV heads), while the model set's decode rows run 32 to 1024 streams. This
measures whether the winner at a row's own batch is the kernel the database picks: run81 found
it was not at 512 and 1024 streams (1.13-1.14x), when the largest class was 128, which is why
the classes 256 and 512 exist (attnpack.tune.buckets). It times each candidate as `attnpack tune`
does (attnpack.tune.runner: its correctness bound against float32 math, its Bench, cuDNN and
flash timed the same way) and prints, per row, the picked kernel's time, the fastest kernel's
and cuDNN's.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.bench.shapes import BENCH_DIR, load_shape_file
from attnpack.tune import runner
from attnpack.tune.db import problem_key

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
MAX_ERROR = 3e-2


def measure_row(shape, index: dict, bundle, bench, kernel_filter: str = "") -> dict:
    """The row's kernels (those whose requires take its shape, correct within MAX_ERROR) and
    PyTorch's backends, in microseconds (medians), and the kernel the database picks."""
    B, Hq, Hkv, Sk, D = shape.batch, shape.heads_q, shape.heads_kv, shape.seqlen_k, shape.head_dim
    key = problem_key("fwd", shape.dtype, D, shape.causal, B, Hq, Hkv, shape.seqlen_q, Sk)
    scale = 1.0 / math.sqrt(D)
    q, k, v, _ = runner._inputs(torch, DTYPES[shape.dtype], B, Hq, Hkv, shape.seqlen_q, Sk, D,
                                False)
    ref = runner._reference(torch, q, k, v, None, shape.causal)
    problem = rt.make_problem("fwd", shape.dtype, B=B, Hq=Hq, Hkv=Hkv, Sq=shape.seqlen_q, Sk=Sk,
                              D=D, causal=shape.causal)
    picked = bundle.select(problem).name
    times, wrong = {}, {}
    for c in runner.candidates(index, key):
        if kernel_filter not in c["name"] and c["name"] != picked:
            continue
        cand = runner.Candidate(rt, bundle, c["name"], key, scale)
        try:
            error = cand.error(torch, q, k, v, None, ref)
        except rt.AttnpackError as e:
            if e.status != rt.Status.UNSUPPORTED:
                wrong[c["name"]] = str(e)
            continue  # its `requires` refuse this shape
        if not error <= MAX_ERROR:
            wrong[c["name"]] = f"error {error:.3g}"
            continue
        times[c["name"]] = statistics.median(bench.samples_us(cand.timed(torch, q, k, v, None)))
    natives = {n: statistics.median(s) for n, s in
               runner.native_samples(torch, bench, key, q, k, v, None).items() if s}
    return {"name": shape.label, "key": key.text, "streams": B * Hkv, "picked": picked,
            "times_us": times, "natives_us": natives, "wrong": wrong}


def print_row(row: dict) -> None:
    times, natives = row["times_us"], row["natives_us"]
    if not times:
        print(f"{row['name']}: no kernel ran ({row['wrong']})")
        return
    best = min(times, key=times.get)
    picked = times.get(row["picked"])
    cudnn = natives.get("cudnn")
    text = (f"{row['name']:34} {row['streams']:4} streams | picked {row['picked'].split('/')[-1]} "
            f"{picked:.1f} us" if picked else f"{row['name']:34} picked {row['picked']} (not timed)")
    text += f" | fastest {best.split('/')[-1]} {times[best]:.1f} us"
    if picked:
        text += f" ({picked / times[best]:.3f}x the picked one's speed)"
    if cudnn:
        text += f" | cuDNN {cudnn:.1f} us, fastest/cuDNN {cudnn / times[best]:.3f}x"
    print(text)
    if row["wrong"]:
        print(f"  wrong or refused: {row['wrong']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--archive", type=Path, required=True,
                    help="an archive of every variant (attnpack build --all), with the database")
    ap.add_argument("--shapes", type=Path, default=BENCH_DIR / "model_shapes.json")
    ap.add_argument("--kernel-filter", default="",
                    help="only kernel names containing this (and the picked one), e.g. decode1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    index = read_archive(args.archive).index
    bench = runner.Bench(torch)
    bench.settle()
    rows = []
    with rt.Bundle(args.archive) as bundle:
        for shape in load_shape_file(args.shapes):
            if shape.seqlen_q > 16:
                continue
            rows.append(measure_row(shape, index, bundle, bench, args.kernel_filter))
            print_row(rows[-1])
            sys.stdout.flush()
            torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
