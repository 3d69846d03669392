"""Launch a declared variant through Triton's own JIT, from the same launch spec the archive holds.

Used by the interpreter tests (TRITON_INTERPRET=1), by the device tests that check the kernel
math before any AOT build, and by benchmarks of the family itself. Tensors are logical
[B, H, S, D] views with any strides and a contiguous last dim (BHSD and BSHD both work).
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

from attnpack import abi
from attnpack.family import Variant

LOG2E = 1.4426950408889634


def problem_sizes(q: torch.Tensor, k: torch.Tensor) -> dict[str, int]:
    return {"B": q.shape[0], "Hq": q.shape[1], "Hkv": k.shape[1], "Sq": q.shape[2], "Sk": k.shape[2]}


def grid_extent(grid, sizes: Mapping[str, int]) -> tuple[int, int, int]:
    dims = []
    for dim in grid:
        n = 1
        for var, div in dim:
            n *= -(-sizes[var] // div)
        dims.append(n)
    return tuple(dims)


def workspace_tensors(variant: Variant, sizes: Mapping[str, int], device) -> dict[str, torch.Tensor]:
    extents = {**sizes, abi.HEAD_DIM: variant.key.head_dim}
    return {w.name: torch.empty([abi.workspace_extent_value(s, extents) for s in w.shape],
                                dtype=torch.float32, device=device)
            for w in variant.workspace}


def resolve(word: str, tensors: Mapping[str, torch.Tensor], sizes: Mapping[str, int],
            sm_scale: float):
    """A word's value for Triton's launcher, by the vocabulary's source (attnpack.abi); a
    workspace buffer is a tensor of its own name."""
    if word in tensors:
        return tensors[word]
    parsed = abi.parse(word)
    if parsed.word is None:
        return parsed.constant
    w, factor = parsed.word, parsed.multiplier
    if w.source == "size":
        return sizes[w.name] * factor
    if w.source == "gqa_group":
        return sizes["Hq"] // sizes["Hkv"] * factor
    if w.source == "lse_stride":
        lse = (sizes["Hq"] * sizes["Sq"], sizes["Sq"], 1)[w.axis]
        return lse * (4 if w.transform == "bytes" else 1) * factor
    if w.source == "sm_scale":
        return sm_scale
    if w.source == "sm_scale_log2":
        return sm_scale * LOG2E
    if w.source == "stride":
        t = tensors[abi.TENSORS[w.index]]
        return t.stride(w.axis) * (t.element_size() if w.transform == "bytes" else 1) * factor
    if w.source == "head_dim":
        return tensors["q"].shape[-1] * factor
    if w.source in ("tensor", "lse"):
        return tensors[word]
    raise ValueError(f"word {word} ({w.source}) has no value in a Triton JIT launch")


def descriptor(tmap, tensors: Mapping[str, torch.Tensor]):
    """Triton's host descriptor of a step's tensor map: the whole tensor, the map's box. Rows and
    columns past the tensor read as zeros, as the runtime's CUtensorMap does."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    t = tensors[tmap.tensor]
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(tmap.block))


def launch(variant: Variant, tensors: Mapping[str, torch.Tensor], sm_scale: float | None = None,
           num_sms: int | None = None) -> None:
    """Run every step of `variant` on `tensors` (q, k, v, o, lse, and do/dq/dk/dv for bwd)."""
    q, k = tensors["q"], tensors["k"]
    sizes = problem_sizes(q, k)
    if num_sms is None:
        num_sms = (torch.cuda.get_device_properties(q.device).multi_processor_count
                   if q.is_cuda else 1)
    sizes["num_sms"] = num_sms
    sm_scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    all_tensors = {**tensors, **workspace_tensors(variant, sizes, q.device)}
    for step in variant.steps:
        kernel = step.kernel  # a TritonKernel: this launcher is for the triton backend
        if step.tensormaps and getattr(kernel.fn, "is_gluon", lambda: False)():
            raise ValueError(f"{variant.name}: step {step.name} takes Gluon tensor descriptors, "
                             "which this JIT launcher does not build; launch it from an archive")
        args = [descriptor(step.tensormap(w), all_tensors) if step.tensormap(w)
                else resolve(w, all_tensors, sizes, sm_scale) for w in step.args]
        grid = grid_extent(step.grid, sizes)
        kernel.fn[grid](*args, **kernel.constexprs, num_warps=kernel.num_warps,
                        num_stages=kernel.num_stages, **kernel.options)
