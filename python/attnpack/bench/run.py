"""`attnpack bench` on a GPU: environment, matmul ceiling, every row side by side, dynamic lengths.

The result is one JSON-able dict (RESULTS_SCHEMA below); attnpack.bench.report turns it into
tables, CSV, plots and markdown, here or later on any machine (`attnpack bench --report-only`).
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Callable

from attnpack import __version__
from attnpack.bench.shapes import Shape

RESULTS_SCHEMA = 1


class BenchError(RuntimeError):
    """The bench cannot run here (no GPU, no extension, no bundle); the message says why."""


def _git_commit() -> str | None:
    """$ATTNPACK_COMMIT when the caller knows better (a copied tree whose .git is stale), else
    git's HEAD."""
    if os.environ.get("ATTNPACK_COMMIT"):
        return os.environ["ATTNPACK_COMMIT"]
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, cwd=Path(__file__).resolve().parent)
        return done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    """GPU, driver, torch, cuDNN, CUDA/HIP, triton and attnpack versions, the archive, the date."""
    import torch

    import attnpack.torch as attnpack_torch
    from attnpack.tune.runner import provenance
    env = provenance(torch)
    env.pop("status", None)
    props = torch.cuda.get_device_properties(0)
    env.update({"cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda,
                "hip": torch.version.hip, "attnpack": __version__, "commit": _git_commit(),
                "python": platform.python_version(), "sm_count": props.multi_processor_count,
                "l2_bytes": getattr(props, "L2_cache_size", None),
                "bundle": attnpack_torch.bundle_info()})
    # how many entries of its own each GPU model has in the archive (bundle_info says)
    env["gpu_entries"] = (env["bundle"].get("bundle") or {}).get("gpu_entries", {})
    return env


def preflight() -> None:
    """Fail early, with the fix, when this machine cannot run the bench."""
    import torch
    if not torch.cuda.is_available():
        raise BenchError("no CUDA/ROCm GPU here; measuring needs one. To make the report from a "
                         "recorded run instead: attnpack bench --report-only RESULTS.json")
    import attnpack.torch as attnpack_torch
    try:
        info = attnpack_torch.bundle_info()
    except attnpack_torch.ExtensionError as e:
        raise BenchError(str(e)) from None
    if not info.get("ok"):
        raise BenchError(f"no attnpack bundle serves this GPU: {info}. Point ATTNPACK_BUNDLE_DIR "
                         "at the folder holding attnpack-<version>-<arch>.apk "
                         "(build_tools/run_gpu_tests.sh builds one in build-gpu/bundle)")


def run_bench(planned: list[tuple[str, Shape]], ops, backends, reps: int, warmup: int,
              shape_files, dynamic: dict | None,
              progress: Callable[[int, str], Callable[[int], None]] = lambda n, label: (lambda k: None),
              settle: bool = True, turn_calls: int | None = None,
              lead_cycles: int | None = None) -> dict:
    """Measure `planned` rows (set, shape) for each op on each backend, then the dynamic report
    (`dynamic`: keyword arguments of run_dynamic, or None to skip it).

    With `settle`, the first row is measured once untimed before the rows, so no backend's
    first timing follows the matmul ceiling directly. In run44 the first row (B32 H16 S512 d128
    forward, attnpack timed first) read 155 us against cuDNN's 130; run45, cuDNN timed first,
    read 137 against 133 for the same kernel and flush; run46 read 0.84x in a first pass and
    0.97x in three more, on a machine whose matmul rate drifted 722-793 TFLOP/s between passes
    (docs/performance.md). A mitigation, not a proven cause. `turn_calls`: the timed calls a
    backend makes in one turn (measure.measure_shape), None for measure.TURN_CALLS;
    `lead_cycles`: the GPU spin before each timed call, None for timing.HOST_LEAD_CYCLES."""
    import torch

    from attnpack.bench import dynamic as dyn
    from attnpack.bench.measure import TURN_CALLS, measure_shape
    from attnpack.bench.timing import HOST_LEAD_CYCLES, Timer, matmul_tflops
    preflight()
    timer = Timer(reps=reps, warmup=warmup)
    turn_calls = TURN_CALLS if turn_calls is None else turn_calls
    lead_cycles = HOST_LEAD_CYCLES if lead_cycles is None else lead_cycles
    results = {"schema": RESULTS_SCHEMA, "environment": environment(),
               "settings": {"ops": list(ops), "backends": list(backends), "reps": reps,
                            "warmup": warmup, "turn_calls": turn_calls, "lead_cycles": lead_cycles,
                            "settle": settle,
                            "flush_bytes": timer.flush_bytes,
                            "shape_files": [str(p) for p in shape_files]},
               "matmul": {"n": 8192, "dtype": "bf16", "tflops": matmul_tflops(timer)},
               "rows": []}
    advance = progress(len(planned), "bench")
    first = next((shape for _, shape in planned if shape.wanted_ops(ops)), None)
    if settle and first is not None:
        measure_shape(first, first.wanted_ops(ops), backends, timer, turn_calls, lead_cycles)
    for set_name, shape in planned:
        wanted = shape.wanted_ops(ops)
        if not wanted:  # e.g. a decode row (fwd only) in a run of fwdbwd
            advance(1)
            continue
        measured = measure_shape(shape, wanted, backends, timer, turn_calls, lead_cycles)
        for op in wanted:
            results["rows"].append({"set": set_name, "name": shape.label, "shape": shape.as_dict(),
                                    "op": op, **measured[op]})
        advance(1)
    results["matmul"]["tflops_end"] = matmul_tflops(timer)  # a drift shows clocks or heat moved
    del timer
    torch.cuda.empty_cache()
    if dynamic is not None:
        requests = dynamic.get("requests", 200)
        results["dynamic"] = dyn.run_dynamic(progress=progress(requests * len(dyn.STREAM_BACKENDS),
                                                               "dynamic stream"), **dynamic)
    return results
