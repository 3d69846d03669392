"""Measuring one shape through plain F.scaled_dot_product_attention, side by side, in one process.

Backends, timed on the same tensors, taking turns in rounds of alternating order
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
from attnpack.bench.timing import Timer, summarize

BACKENDS = ("attnpack", "default", "flash", "efficient")
NATIVE = ("default", "flash", "efficient")
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


def round_order(backends, rounds: int) -> list[tuple[int, str]]:
    """(round, backend) in the order they are timed: the backends in their order, then in
    reverse, and so on, so that no backend is always timed first or last on a shape, where a
    drift of the GPU's clocks within the shape would favour one side (ABBA)."""
    order = []
    for r in range(rounds):
        order += [(r, name) for name in (backends if r % 2 == 0 else tuple(reversed(backends)))]
    return order


def round_reps(reps: int, rounds: int) -> list[int]:
    """The timed calls of each round: `reps` in all, split as evenly as they go."""
    if rounds < 1 or reps < rounds:
        raise ValueError(f"reps {reps} must be >= rounds {rounds} >= 1")
    return [reps // rounds + (r < reps % rounds) for r in range(rounds)]


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
    """{"ms", "min_ms", "max_ms", "reps"} of `op` under the backend context `name` the caller
    entered, or {"error": PyTorch's reason} when that backend refuses the shape."""
    got = sample_op(op, shape, tensors, timer, timer.reps)
    return got if isinstance(got, dict) else timing(name, [got], shape, tensors)


def sample_op(op: str, shape: Shape, tensors, timer: Timer, reps: int) -> list[float] | dict:
    """The GPU times of `reps` calls of `op` under the backend context the caller entered, or
    {"error": why} when the backend refuses the shape or the timing fails."""
    fn, error = first_call(op, shape, tensors)
    if fn is None:
        return error
    try:
        return timer.samples(fn, reps)
    except RuntimeError as e:  # out of memory, a launch failure: the row says so, the run goes on
        first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return {"error": f"failed while timing: {first_line[:300]}"}


def timing(name: str, rounds: list[list[float]], shape: Shape, tensors) -> dict:
    """A backend's timing from its samples, one list per round, pooled; the default's names the
    backend PyTorch picked. With more than one round, `round_ms` keeps each round's median: a
    backend whose calls drift with its place in the order (the clock it inherits from the
    backend before it) shows there, where the pooled median hides it."""
    result = summarize([s for r in rounds for s in r]).as_dict()
    if len(rounds) > 1:
        result["round_ms"] = [statistics.median(r) for r in rounds]
    if name == "default":
        result["backend"] = default_choice(shape, *tensors[:3])
    return result


def measure_shape(shape: Shape, ops, backends, timer: Timer, rounds: int = 2) -> dict[str, dict]:
    """{op: {"backends": {name: timing or error}, "served": served_summary}} for one shape.
    The backends take turns in `rounds` rounds, in alternating order (round_order), each
    timing round_reps of the timer's reps calls of every op; a backend's timing is the
    median over all its rounds. attnpack's stats are reset before each op of its first round,
    so each op names its own kernels. A backend that refuses an op is not asked again."""
    tensors = make_inputs(shape)
    entry = attnpack_torch.sdpa_entry(shape.dtype, shape.heads_q, shape.heads_kv, shape.seqlen_q,
                                      shape.seqlen_k, shape.head_dim, shape.causal)
    out = {op: {"backends": {}, "served": None} for op in ops}
    samples = {op: {name: [] for name in backends} for op in ops}  # a list per round
    rounds = min(rounds, timer.reps)
    reps = round_reps(timer.reps, rounds)
    for r, name in round_order(backends, rounds):
        with backend(name):
            for op in ops:
                if "error" in out[op]["backends"].get(name, {}):
                    continue
                if name == "attnpack" and r == 0:
                    attnpack_torch.reset_stats()
                got = sample_op(op, shape, tensors, timer, reps[r])
                if isinstance(got, dict):
                    out[op]["backends"][name] = got
                    continue
                samples[op][name].append(got)
                if name == "attnpack" and r == 0:
                    torch.cuda.synchronize()
                    out[op]["served"] = served_summary(attnpack_torch.stats(), op, entry)
    for op in ops:
        for name in backends:
            if "error" not in out[op]["backends"].get(name, {}):
                out[op]["backends"][name] = timing(name, samples[op][name], shape, tensors)
    del tensors
    torch.cuda.empty_cache()
    return out
