"""Host cost of F.sdpa through attnpack, side by side with PyTorch's own backends, in one run.

    PYTHONPATH=python python3 bench/torch_overhead.py            # a table
    PYTHONPATH=python python3 bench/torch_overhead.py --json

1. Per-call host overhead at a tiny shape (B=1 H=8 S=64 D=64 bf16): the GPU work is a few
   microseconds, so back-to-back calls are bound by the host, and the wall time of N calls
   (one synchronize at the end) over N is the host time per call. Median of repeats. Compared
   with PyTorch's flash path (attnpack disabled, flash forced); target: attnpack <= +5 us.
2. The first call at a never-seen sequence length, once the kernel is loaded: attnpack against
   cuDNN (which builds an execution graph per new shape, ~60 ms) and flash. Target < 1 ms.
3. Cold start, in a fresh process: the very first call, including opening the archive and
   loading the kernel image (attnpack), or cuDNN's first graph.
Every attnpack row names the kernel that served it (attnpack.torch.stats()).
Needs the built extension and a bundle for this GPU, where the package finds them (build/ of
this checkout, an installed wheel, or ATTNPACK_TORCH_LIB and ATTNPACK_BUNDLE_DIR; docs/torch.md).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnpack.torch as attnpack_torch

DEV = "cuda"


@contextlib.contextmanager
def attnpack(on: bool):
    (attnpack_torch.enable if on else attnpack_torch.disable)()
    try:
        yield
    finally:
        attnpack_torch.disable()


def host_us_per_call(fn, calls: int, repeats: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def served_kernels() -> str:
    calls = attnpack_torch.stats()["calls"]
    return ", ".join(sorted(calls)) or "-"


def overhead(args) -> list[dict]:
    q = torch.randn(1, 8, 64, 64, device=DEV, dtype=torch.bfloat16)
    qg = q.clone().requires_grad_()
    sdpa = lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)  # noqa: E731
    op = lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)  # noqa: E731

    def train():
        F.scaled_dot_product_attention(qg, qg, qg, is_causal=True).sum().backward()

    rows = []
    for label, fn, calls in (("F.sdpa forward", sdpa, args.calls), ("flash op forward", op, args.calls),
                             ("F.sdpa forward+backward", train, args.calls // 4)):
        with attnpack(False), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            native = host_us_per_call(fn, calls, args.repeats)
        with attnpack(True), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            attnpack_torch.reset_stats()
            mine = host_us_per_call(fn, calls, args.repeats)
            kernels, fallbacks = served_kernels(), attnpack_torch.stats()["fallbacks"]
        rows.append({"what": label, "pytorch_flash_us": native, "attnpack_us": mine,
                     "delta_us": mine - native, "kernels": kernels, "fallbacks": fallbacks})
    return rows


def first_call_ms(fn) -> tuple[float, float]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return first, (time.perf_counter() - start) * 1e3


def new_lengths(args) -> list[dict]:
    def at_length(s):
        q = torch.randn(1, 16, s, 128, device=DEV, dtype=torch.bfloat16)
        return lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True)

    rows = []
    # Each backend gets lengths no other one has seen; 3001 is a warm-up outside the counted set.
    for index, (label, on, backend) in enumerate((("attnpack", True, None),
                                                  ("pytorch cudnn", False, SDPBackend.CUDNN_ATTENTION),
                                                  ("pytorch flash", False, SDPBackend.FLASH_ATTENTION))):
        with attnpack(on), (sdpa_kernel(backend) if backend else contextlib.nullcontext()):
            attnpack_torch.reset_stats()
            first_call_ms(at_length(3001 + index))  # loads the kernel / initializes the library
            firsts, seconds = [], []
            for i in range(args.lengths):
                first, second = first_call_ms(at_length(1000 + 97 * i + 13 * index))
                firsts.append(first)
                seconds.append(second)
            kernels = served_kernels() if on else "-"
        rows.append({"backend": label, "first_median_ms": statistics.median(firsts), "first_max_ms": max(firsts),
                     "second_median_ms": statistics.median(seconds), "kernels": kernels})
    return rows


COLD = """
import time, torch, torch.nn.functional as F, attnpack.torch as T
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.randn(1, 16, 1024, 128, device='cuda', dtype=torch.bfloat16)
torch.cuda.synchronize()
backend = {backend!r}
if backend == 'attnpack':
    T.enable()
ctx = sdpa_kernel(SDPBackend.CUDNN_ATTENTION) if backend == 'cudnn' else sdpa_kernel(SDPBackend.FLASH_ATTENTION)
with ctx:
    start = time.perf_counter()
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.cuda.synchronize()
print((time.perf_counter() - start) * 1e3)
"""


def cold_start() -> list[dict]:
    rows = []
    for backend in ("attnpack", "cudnn", "flash"):
        done = subprocess.run([sys.executable, "-c", COLD.format(backend=backend)], capture_output=True,
                              text=True, timeout=600)
        ms = float(done.stdout.split()[-1]) if done.returncode == 0 else float("nan")
        rows.append({"backend": backend, "first_call_ms": ms,
                     "error": None if done.returncode == 0 else done.stderr[-500:]})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed repeat")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--lengths", type=int, default=10, help="never-seen sequence lengths per backend")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args()

    info = attnpack_torch.bundle_info()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "bundle": info,
              "overhead": overhead(args), "new_length": new_lengths(args), "cold_start": cold_start()}
    if args.json:
        print(json.dumps(result, indent=1))
        return

    print(f"{result['device']}, torch {result['torch']}, bundle {info.get('bundle', {}).get('path', info)}")
    print("\nhost time per call, B=1 H=8 S=64 D=64 bf16 causal (median of "
          f"{args.repeats} x {args.calls} calls; flash forced in both columns)")
    print(f"{'call':<26}{'pytorch flash us':>18}{'attnpack us':>14}{'delta us':>10}  served by")
    for r in result["overhead"]:
        note = r["kernels"] + (f"  fallbacks {r['fallbacks']}" if r["fallbacks"] else "")
        print(f"{r['what']:<26}{r['pytorch_flash_us']:>18.1f}{r['attnpack_us']:>14.1f}"
              f"{r['delta_us']:>+10.1f}  {note}")
    print(f"\nfirst call at a never-seen sequence length, B=1 H=16 D=128 bf16 causal "
          f"({args.lengths} lengths each, kernel already loaded)")
    print(f"{'backend':<16}{'first median ms':>17}{'first max ms':>14}{'second ms':>11}  served by")
    for r in result["new_length"]:
        print(f"{r['backend']:<16}{r['first_median_ms']:>17.3f}{r['first_max_ms']:>14.3f}"
              f"{r['second_median_ms']:>11.3f}  {r['kernels']}")
    print("\ncold start: the first call in a fresh process (S=1024, includes archive open + image load)")
    for r in result["cold_start"]:
        print(f"{r['backend']:<16}{r['first_call_ms']:>10.1f} ms" + (f"  ERROR {r['error']}" if r["error"] else ""))


if __name__ == "__main__":
    main()
