"""Host cost of F.sdpa through attnpack, side by side with PyTorch's own backends, in one run.

    PYTHONPATH=python python3 bench/torch_overhead.py            # a table
    PYTHONPATH=python python3 bench/torch_overhead.py --json

1. Per-call host overhead at a tiny shape (B=1 H=8 S=64 D=64 bf16): the GPU work is a few
   microseconds, so back-to-back calls are bound by the host, and the wall time of N calls
   (one synchronize at the end) over N is the host time per call. Compared with PyTorch's flash
   path (attnpack disabled, flash forced); target: attnpack <= +5 us. The two sides take turns
   sample by sample (attnpack.bench.timing.host_us_turns): each side's median, and the median of
   the paired differences with its quartiles, which is the number to read (the host's speed
   drifts within a process and between processes by more than the difference sought).
2. The first call at a never-seen sequence length, once the kernel is loaded: attnpack against
   cuDNN (which builds an execution graph per new shape, ~60 ms) and flash. Target < 1 ms.
3. Cold start, in a fresh process: the very first call, including opening the archive and
   loading the kernel image (attnpack), or cuDNN's first graph.
Every attnpack row names the kernel that served it (attnpack.torch.stats()). The first-call
and cold-start measurements are attnpack.bench.dynamic's, which `attnpack bench` reports too.
Needs the built extension and a bundle for this GPU, where the package finds them (build/ of
this checkout, an installed wheel, or ATTNPACK_TORCH_LIB and ATTNPACK_BUNDLE_DIR; docs/torch.md).
"""
from __future__ import annotations

import argparse
import contextlib
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnpack.torch as attnpack_torch
from attnpack.bench import dynamic
from attnpack.bench.report import percentile
from attnpack.bench.shapes import Shape
from attnpack.bench.timing import host_us_turns

DEV = "cuda"


@contextlib.contextmanager
def attnpack(on: bool):
    (attnpack_torch.enable if on else attnpack_torch.disable)()
    try:
        yield
    finally:
        attnpack_torch.disable()


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

    def side(on: bool):
        @contextlib.contextmanager
        def context():
            with attnpack(on), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                yield
        return context

    rows = []
    for label, fn, calls in (("F.sdpa forward", sdpa, args.calls), ("flash op forward", op, args.calls),
                             ("F.sdpa forward+backward", train, args.calls // 4)):
        attnpack_torch.reset_stats()
        samples = host_us_turns({"pytorch_flash": (side(False), fn), "attnpack": (side(True), fn)},
                                calls, args.repeats)
        kernels, fallbacks = served_kernels(), attnpack_torch.stats()["fallbacks"]
        deltas = [a - b for a, b in zip(samples["attnpack"], samples["pytorch_flash"])]
        rows.append({"what": label, "pytorch_flash_us": percentile(samples["pytorch_flash"], 50),
                     "attnpack_us": percentile(samples["attnpack"], 50),
                     "delta_us": percentile(deltas, 50), "delta_q1_us": percentile(deltas, 25),
                     "delta_q3_us": percentile(deltas, 75), "samples": samples,
                     "kernels": kernels, "fallbacks": fallbacks})
    return rows


# Each backend gets lengths no other one has seen, after a warm-up call outside the counted set.
NEW_LENGTH_SHAPE = Shape(1, 16, 16, 1024, 1024, 128, True, "bf16")
COLD_SHAPE = Shape(1, 16, 16, 1024, 1024, 128, True, "bf16")
LABELS = {"attnpack": "attnpack", "cudnn": "pytorch cudnn", "flash": "pytorch flash"}


def new_lengths(args) -> list[dict]:
    measured = dynamic.new_lengths(NEW_LENGTH_SHAPE, args.lengths, backends=tuple(LABELS), base=1000)
    rows = []
    for name, rec in measured.items():
        rows.append({"backend": LABELS[name], "first_median_ms": percentile(rec["first_ms"], 50),
                     "first_max_ms": max(rec["first_ms"]),
                     "second_median_ms": percentile(rec["second_ms"], 50),
                     "kernels": ", ".join(sorted(rec.get("kernels", {}))) or "-"})
    return rows


def cold_start() -> list[dict]:
    measured = dynamic.cold_start(COLD_SHAPE, backends=("attnpack", "cudnn", "flash"), jit=False)
    return [{"backend": name, "first_call_ms": rec.get("first_call_ms", float("nan")),
             "error": rec.get("error")} for name, rec in measured.items()]


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
    print("\nhost time per call, B=1 H=8 S=64 D=64 bf16 causal (medians of "
          f"{args.repeats} samples a side, taken in turns, of {args.calls} calls, a quarter of "
          "that for forward+backward; flash forced in both columns; delta: the median of the "
          "paired differences, and its quartiles)")
    print(f"{'call':<26}{'pytorch flash us':>18}{'attnpack us':>14}{'delta us':>10}"
          f"{'quartiles':>18}  served by")
    for r in result["overhead"]:
        note = r["kernels"] + (f"  fallbacks {r['fallbacks']}" if r["fallbacks"] else "")
        quartiles = f"{r['delta_q1_us']:+.1f} .. {r['delta_q3_us']:+.1f}"
        print(f"{r['what']:<26}{r['pytorch_flash_us']:>18.1f}{r['attnpack_us']:>14.1f}"
              f"{r['delta_us']:>+10.1f}{quartiles:>18}  {note}")
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
