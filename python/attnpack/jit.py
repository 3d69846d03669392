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
    return {w.name: torch.empty([extents[s] for s in w.shape], dtype=torch.float32, device=device)
            for w in variant.workspace}


def resolve(word: str, tensors: Mapping[str, torch.Tensor], sizes: Mapping[str, int],
            sm_scale: float):
    if word in sizes:
        return sizes[word]
    if word == "sm_scale":
        return sm_scale
    if word == "sm_scale_log2":
        return sm_scale * LOG2E
    if word in abi.STRIDES:
        tensor, _, axis = word.split("_")
        return tensors[tensor].stride(abi.STRIDE_AXES.index(axis))
    return tensors[word]


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
        args = [resolve(w, all_tensors, sizes, sm_scale) for w in step.args]
        grid = grid_extent(step.grid, sizes)
        step.fn[grid](*args, **step.constexprs, num_warps=step.num_warps,
                      num_stages=step.num_stages, **step.options)
