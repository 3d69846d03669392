"""Making plain F.scaled_dot_product_attention reach the flash and efficient ops.

PyTorch >= 2.11 prefers cuDNN on sm_90/sm_100 when cuDNN > 9.15 (TORCH_CUDNN_SDPA_DEPRIORITIZED
unset): on its first CUDA SDPA call it installs the priority order cuDNN, flash, efficient, math,
once per process (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, priority_order()). That
one-shot overwrites any order set before it, so enabling first triggers it, then moves flash and
efficient ahead of cuDNN. Nothing is switched off: what neither serves (a mask with GQA, say)
still reaches cuDNN before math. Only the priority order changes, and only when it must.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.nn.attention import SDPBackend

log = logging.getLogger("attnpack.torch")

FLASH = int(SDPBackend.FLASH_ATTENTION)
EFFICIENT = int(SDPBackend.EFFICIENT_ATTENTION)
CUDNN = int(SDPBackend.CUDNN_ATTENTION)


def has_priority_order() -> bool:
    return hasattr(torch._C, "_get_sdp_priority_order") and hasattr(torch._C, "_set_sdp_priority_order")


def flash_first(order: list[int]) -> list[int]:
    """`order` with flash and efficient, those behind cuDNN, moved to just ahead of it in the
    order they had; every other backend keeps its place. [3, 1, 2, 0, 4] -> [1, 2, 3, 0, 4]."""
    order = list(order)
    if CUDNN not in order:
        return order
    behind = [b for b in order[order.index(CUDNN) + 1:] if b in (FLASH, EFFICIENT)]
    rest = [b for b in order if b not in behind]
    at = rest.index(CUDNN)
    return rest[:at] + behind + rest[at:]


_settled = False


def settle_default_order() -> None:
    """Run PyTorch's one-shot cuDNN-first initialization now (it happens on the first CUDA
    backend selection), so that an order set afterwards is not overwritten by it."""
    global _settled
    if _settled or not torch.cuda.is_available():
        return  # done, or no CUDA selection will ever run in this process
    q = torch.empty(1, 1, 1, 64, device="cuda", dtype=torch.float16)
    torch.ops.aten._fused_sdp_choice(q, q, q)
    _settled = True


@dataclass
class PriorityChange:
    """What enabling changed: the SDPA priority order, from `before` to `after`."""
    before: list[int]
    after: list[int]

    def undo(self) -> None:
        current = list(torch._C._get_sdp_priority_order())
        if current != self.after:
            # Someone set an order of their own since: theirs stays.
            log.warning("attnpack: the SDPA priority order changed while attnpack was enabled "
                        "(%s, attnpack set %s); leaving it as it is", current, self.after)
            return
        torch._C._set_sdp_priority_order(self.before)


def route_sdpa_to_flash() -> PriorityChange | None:
    """Puts flash and efficient ahead of cuDNN; returns what to undo, or None if nothing
    changed (the order already had them ahead, as it does without the cuDNN preference)."""
    if not has_priority_order():
        # Without the priority API (torch < 2.6) PyTorch never preferred cuDNN.
        return None
    settle_default_order()
    before = list(torch._C._get_sdp_priority_order())
    after = flash_first(before)
    if after == before:
        return None
    torch._C._set_sdp_priority_order(after)
    return PriorityChange(before, after)
