"""Measuring one shape through plain F.scaled_dot_product_attention, side by side, in one process.

Backends, timed on the same tensors, taking turns call by call in alternating order
(measure_shape):
- "attnpack": attnpack.torch.enable(), F.sdpa as a user calls it; the kernels that served the
  calls (or the fallback reasons) come from attnpack.torch.stats(), reset before each op;
- "default": attnpack disabled, no backend forced: what PyTorch picks (cuDNN on the H200);
- "flash", "efficient": forced with torch.nn.attention.sdpa_kernel. sdpa_kernel is
  process-global, so nothing here runs on another thread.
A backend that refuses a shape is recorded with PyTorch's reason, not timed.
"""
from __future__ import annotations

import contextlib
import re
import statistics
import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attnpack.torch as attnpack_torch
from attnpack.bench.served import served_summary
from attnpack.bench.shapes import Shape
from attnpack.bench.timing import HOST_LEAD_CYCLES, Timer, elapsed_ms, summarize, turn_order

BACKENDS = ("attnpack", "default", "flash", "efficient")
NATIVE = ("default", "flash", "efficient")
# Timed calls a backend makes in one turn. One: the backends take turns call by call. Run105
# timed two rounds of 15 calls a backend instead (attnpack first in one, last in the other):
# on the long rows attnpack's calls in the round it ran last, right after cuDNN's forward +
# backward, were up to 12 % slower than in the other, while cuDNN's moved little: the clock a
# call gets follows what the GPU ran before it (docs/performance.md, "The order of the turns").
TURN_CALLS = 1
FORCED = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
          "cudnn": SDPBackend.CUDNN_ATTENTION}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SDP_CHOICE_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


@contextlib.contextmanager
def backend(name: str):
    """F.sdpa as `name` serves it: attnpack enabled, PyTorch's default, or one forced backend."""
    if name == "attnpack":
        attnpack_torch.enable()
        try:
            yield
        finally:
            attnpack_torch.disable()
    elif name == "default":
        yield
    else:
        with sdpa_kernel(FORCED[name]):
            yield


def make_inputs(shape: Shape, seed: int = 0, device: str = "cuda"):
    """q, k, v [B, H, S, D] (K/V with heads_kv heads, never expanded) and dO."""
    g = torch.Generator(device=device).manual_seed(seed)
    dt = TORCH_DTYPES[shape.dtype]
    mk = lambda h, s: torch.randn(shape.batch, h, s, shape.head_dim, device=device, dtype=dt,  # noqa: E731
                                  generator=g)
    return mk(shape.heads_q, shape.seqlen_q), mk(shape.heads_kv, shape.seqlen_k), \
        mk(shape.heads_kv, shape.seqlen_k), mk(shape.heads_q, shape.seqlen_q)


def sdpa_call(op: str, q, k, v, do, causal: bool) -> Callable[[], object]:
    """One F.sdpa call of `op`, built under the backend that will run it (the backward op of
    a graph is the one its forward chose). Grouped-query heads go as they are (enable_gqa)."""
    kw = {"is_causal": causal}
    if q.shape[1] != k.shape[1]:
        kw["enable_gqa"] = True
    if op == "fwd":
        return lambda: F.scaled_dot_product_attention(q, k, v, **kw)
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    if op == "bwd":
        out = F.scaled_dot_product_attention(qg, kg, vg, **kw)
        return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    if op == "fwdbwd":
        return lambda: torch.autograd.grad(F.scaled_dot_product_attention(qg, kg, vg, **kw),
                                           (qg, kg, vg), do)
    raise ValueError(f"op {op!r}: one of fwd, bwd, fwdbwd")


def refusal(error: Exception, caught: list) -> str:
    """PyTorch's reason for refusing a forced backend: its warnings say why, the error only
    'No available kernel'."""
    why = [re.sub(r"\s*\(Triggered internally at [^)]*\)", "", str(w.message)).strip()
           for w in caught if issubclass(w.category, UserWarning)]
    why.append(str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__)
    return " ".join(dict.fromkeys(" ".join(w.split()) for w in why if w))[:400]


def default_choice(shape: Shape, q, k, v) -> str:
    """The backend PyTorch's default selection picks for this call (attnpack disabled)."""
    try:
        choice = torch.ops.aten._fused_sdp_choice(q, k, v, None, 0.0, shape.causal,
                                                  enable_gqa=shape.gqa)
        return SDP_CHOICE_NAMES.get(int(choice), str(int(choice)))
    except (RuntimeError, TypeError, AttributeError):
        return "unknown"


def failed(error: Exception) -> dict:
    """A timing that failed, with the first line of its error."""
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return {"error": f"failed while timing: {first_line[:300]}"}


def first_call(op: str, shape: Shape, tensors) -> tuple[Callable[[], object] | None, dict]:
    """(the call, {}) once it ran under the backend context the caller entered, or (None,
    {"error": PyTorch's reason}) when that backend refuses the shape."""
    q, k, v, do = tensors
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = sdpa_call(op, q, k, v, do, shape.causal)
            fn()  # a refused shape raises here, before any timing
            torch.cuda.synchronize()
    except RuntimeError as e:
        return None, {"error": refusal(e, caught)}
    return fn, {}


def time_op(name: str, op: str, shape: Shape, tensors, timer: Timer) -> dict:
    """{"ms", "min_ms", "max_ms", "reps", ...} of `op` alone under the backend context `name`
    the caller entered (its warm-up calls, then the timer's reps back to back), or {"error":
    why} when that backend refuses the shape or the timing fails. For the bench/ scripts that
    time one kernel at a time; measure_shape takes turns between backends instead."""
    fn, error = first_call(op, shape, tensors)
    if fn is None:
        return error
    try:
        samples = timer.samples(fn, timer.reps)
    except RuntimeError as e:  # out of memory, a launch failure: the row says so, the run goes on
        return failed(e)
    return timing(name, samples, shape, tensors)


def timing(name: str, samples: list[float], shape: Shape, tensors) -> dict:
    """A backend's timing from its calls' times, in the order they ran; the default's names the
    backend PyTorch picked. `half_ms` keeps the medians of the first and the second half of the
    calls: a backend whose calls drift within the row shows there, where the median hides it."""
    result = summarize(samples).as_dict()
    if len(samples) > 1:
        half = len(samples) // 2
        result["half_ms"] = [statistics.median(samples[:half]), statistics.median(samples[half:])]
    if name == "default":
        result["backend"] = default_choice(shape, *tensors[:3])
    return result


def measure_shape(shape: Shape, ops, backends, timer: Timer, turn_calls: int = TURN_CALLS,
                  lead_cycles: int = HOST_LEAD_CYCLES) -> dict[str, dict]:
    """{op: {"backends": {name: timing or error}, "served": served_summary}} for one shape.

    One op after the other. Each backend makes its first call (a refusal is recorded and that
    backend is not asked again) and its warm-up calls, then the backends take turns of
    `turn_calls` timed calls each (turn_order) until each made the timer's reps. Nothing waits
    between turns: the GPU runs the calls back to back in turn order, so every backend's calls
    meet the same clocks. Each timed call has a GPU spin of `lead_cycles` after its flush, so a
    host still switching backends has queued the call before its start event fires.
    attnpack's stats are reset before its first call of each op and read after the op."""
    tensors = make_inputs(shape)
    entry = attnpack_torch.sdpa_entry(shape.dtype, shape.heads_q, shape.heads_kv, shape.seqlen_q,
                                      shape.seqlen_k, shape.head_dim, shape.causal)
    out = {op: {"backends": {}, "served": None} for op in ops}
    for op in ops:
        calls = {}
        for name in backends:
            with backend(name):
                if name == "attnpack":
                    attnpack_torch.reset_stats()
                fn, error = first_call(op, shape, tensors)
                if fn is None:
                    out[op]["backends"][name] = error
                    continue
                try:
                    timer.warm(fn)
                except RuntimeError as e:  # out of memory, say: the row says so, and goes on
                    out[op]["backends"][name] = failed(e)
                    continue
                calls[name] = fn
        events = {name: [] for name in calls}
        for name, n in turn_order(tuple(calls), timer.reps, turn_calls):
            if name in events:
                with backend(name):
                    try:
                        events[name] += [timer.queue(calls[name], lead_cycles)
                                         for _ in range(n)]
                    except RuntimeError as e:  # out of memory, say: the row says so, and goes on
                        out[op]["backends"][name] = failed(e)
                        del events[name]
        torch.cuda.synchronize()
        for name in events:
            out[op]["backends"][name] = timing(name, elapsed_ms(events[name]), shape, tensors)
        if "attnpack" in calls:
            out[op]["served"] = served_summary(attnpack_torch.stats(), op, entry)
    del tensors
    torch.cuda.empty_cache()
    return out
