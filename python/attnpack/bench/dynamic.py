"""Dynamic lengths: what an ahead-of-time bundle saves when every request has a new length.

PyTorch's default on the H200 (cuDNN) builds an execution plan for each new shape; attnpack
selects a precompiled kernel by bucket and launches it. Three measurements, all wall time on the
host up to the GPU's completion (the first-call costs are host-side work):
- stream: N causal prefill requests, lengths drawn uniformly from [min, max] with a fixed seed,
  run back to back per backend; each request's latency, its own synchronize included;
- new lengths: the first and second call at lengths that backend has never seen;
- cold start: the first call in a fresh process (attnpack: extension, archive open, image
  inflate and load; PyTorch: its library setup), and the Triton JIT compile time of the kernel
  that attnpack served, in a fresh process with an empty Triton cache: the cost AOT removes.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

import attnpack.torch as attnpack_torch
from attnpack.bench.measure import TORCH_DTYPES, backend
from attnpack.bench.shapes import Shape
from attnpack.bench.timing import wall_ms

STREAM_BACKENDS = ("attnpack", "default", "flash")
COLD_BACKENDS = ("attnpack", "default", "flash")
# Llama-3.1-8B's attention: 32 query heads, 8 KV heads, head dim 128.
DYNAMIC_SHAPE = Shape(batch=1, heads_q=32, heads_kv=8, seqlen_q=1024, seqlen_k=1024, head_dim=128,
                      causal=True, dtype="bf16", name="Llama-3.1-8B prefill")
COLD_TIMEOUT_S = 600


def stream_lengths(count: int, seed: int, low: int = 64, high: int = 4096) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(count)]


def _call_at(shape: Shape, length: int):
    dt = TORCH_DTYPES[shape.dtype]
    q = torch.randn(shape.batch, shape.heads_q, length, shape.head_dim, device="cuda", dtype=dt)
    k = torch.randn(shape.batch, shape.heads_kv, length, shape.head_dim, device="cuda", dtype=dt)
    v = torch.randn_like(k)
    kw = {"is_causal": shape.causal, **({"enable_gqa": True} if shape.gqa else {})}
    return lambda: F.scaled_dot_product_attention(q, k, v, **kw)


def _served(on: bool) -> dict:
    if not on:
        return {}
    stats = attnpack_torch.stats()
    return {"kernels": dict(sorted(stats["calls"].items())),
            "fallbacks": dict(sorted(stats["fallbacks"].items()))}


def request_stream(shape: Shape, lengths: list[int], backends=STREAM_BACKENDS,
                   progress=lambda n: None) -> dict:
    """Per backend, each request's latency (ms) in order, and what served attnpack's."""
    out = {}
    for name in backends:
        with backend(name):
            attnpack_torch.reset_stats()
            latencies = []
            for length in lengths:
                call = _call_at(shape, length)  # inputs are made outside the timed call
                latencies.append(wall_ms(call))
                progress(1)
            out[name] = {"latency_ms": latencies, **_served(name == "attnpack")}
    return out


def new_lengths(shape: Shape, count: int, backends=STREAM_BACKENDS, base: int = 5003) -> dict:
    """First and second call at `count` lengths no backend has seen (above the stream's range,
    distinct per backend), after one warm-up call that loads the kernel or library."""
    out = {}
    for index, name in enumerate(backends):
        with backend(name):
            attnpack_torch.reset_stats()
            wall_ms(_call_at(shape, base - 2 - index))
            first, second = [], []
            for i in range(count):
                call = _call_at(shape, base + 97 * i + 13 * index)
                first.append(wall_ms(call))
                second.append(wall_ms(call))
            out[name] = {"first_ms": first, "second_ms": second, **_served(name == "attnpack")}
    return out


def child_env(extra: dict | None = None) -> dict:
    """The environment of a child: this one (ATTNPACK_* included), with this attnpack package
    first on PYTHONPATH, so a relative PYTHONPATH or another install cannot swap it."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def run_child(args: list[str], env: dict) -> dict:
    try:
        done = subprocess.run([sys.executable, "-m", "attnpack.bench.cold", *args],
                              capture_output=True, text=True, timeout=COLD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {COLD_TIMEOUT_S} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip() or done.stdout.strip() or
                          f"exit {done.returncode}")[-600:]}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"unreadable answer: {lines[-1][:300]}"}


def cold_start(shape: Shape, backends=COLD_BACKENDS, jit: bool = True) -> dict:
    """The first call in a fresh process per backend; then, for the kernel attnpack served,
    its compile time (triton.compile of each launch step) and, where Triton's JIT can launch
    it (no tensor descriptors), the JIT's first call, each with an empty Triton cache."""
    spec = ["--shape", ",".join(str(x) for x in (shape.batch, shape.heads_q, shape.heads_kv,
                                                 shape.seqlen_q, shape.seqlen_k, shape.head_dim)),
            "--dtype", shape.dtype] + (["--causal"] if shape.causal else [])
    out = {name: run_child(["--backend", name, *spec], child_env()) for name in backends}
    kernels = [k for k in out.get("attnpack", {}).get("kernels", {}) if "/fwd/" in k]
    if jit and kernels:
        for mode in ("triton_compile", "triton_jit"):
            with tempfile.TemporaryDirectory(prefix="attnpack-bench-triton-") as cache:
                out[mode] = run_child(["--backend", mode, "--kernel", kernels[0], *spec],
                                       child_env({"TRITON_CACHE_DIR": cache}))
    elif jit:
        out["triton_compile"] = {"error": "attnpack served no forward kernel in its cold start, "
                                          "so there is no kernel to compile"}
    return out


def run_dynamic(shape: Shape = DYNAMIC_SHAPE, requests: int = 200, seed: int = 0,
                lengths_new: int = 10, cold: bool = True, low: int = 64, high: int = 4096,
                progress=lambda n: None) -> dict:
    lengths = stream_lengths(requests, seed, low, high)
    result = {"shape": shape.as_dict() | {"name": shape.name},
              "stream": {"seed": seed, "low": low, "high": high, "lengths": lengths,
                         "backends": request_stream(shape, lengths, progress=progress)},
              "new_lengths": new_lengths(shape, lengths_new)}
    if cold:
        result["cold_start"] = cold_start(shape)
    return result
