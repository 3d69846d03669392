"""attnpack behind torch.nn.functional.scaled_dot_product_attention, forward and backward.

    import attnpack.torch
    attnpack.torch.enable()    # = torch.nn.attention.activate_flash_attention_impl("ATTNPACK")
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    attnpack.torch.stats()     # calls per kernel, fallbacks per reason
    attnpack.torch.disable()   # = restore_flash_attention_impl(): PyTorch exactly as before

Importing registers "ATTNPACK" with torch.nn.attention and does nothing else. Activating:
- overrides the CUDA kernels of aten::_scaled_dot_product_flash_attention and
  aten::_scaled_dot_product_efficient_attention, and of their backward ops, with the C++ kernels of
  libattnpack_torch (csrc/). Autograd, meta/fake kernels and autocast stay PyTorch's;
- moves flash and efficient ahead of cuDNN in the SDPA priority order when PyTorch put cuDNN
  first (torch >= 2.11, sm_90/sm_100, cuDNN > 9.15), so that plain F.sdpa reaches those ops.
Every call the bundle does not serve runs on PyTorch's own kernel, captured before the override,
and is counted with its reason. docs/torch.md is the user guide.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.attention as _attention

from . import _extension, _routing
from ._extension import ExtensionError, bundle_directory

__all__ = ["IMPL_NAME", "enable", "disable", "is_enabled", "stats", "reset_stats", "set_logging",
           "preload", "bundle_info", "explain", "sdpa_entry", "ExtensionError"]

IMPL_NAME = "ATTNPACK"
log = logging.getLogger("attnpack.torch")


class _Activation:
    """The handle torch.nn.attention keeps while ATTNPACK is active; remove() undoes activation."""

    def __init__(self, extension: _extension.Extension, routing: _routing.PriorityChange | None):
        self.extension = extension
        self.routing = routing
        self.removed = False

    def remove(self) -> None:
        global _live
        if self.removed:
            return
        self.removed = True
        if _live is self:
            _live = None
        try:
            if self.routing is not None:
                self.routing.undo()
        finally:
            self.extension.deactivate()


# The activation in force, if any. Kept here rather than asked of the registry: its internals
# (and current_flash_attention_impl) differ between torch versions.
_live: _Activation | None = None


def _activate() -> _Activation:
    """register_fn of "ATTNPACK": override the kernels, then route SDPA to them."""
    global _live
    if _live is not None:  # a registry that does not restore before activating again
        return _live
    extension = _extension.load()
    extension.activate(bundle_directory(), 1 if torch.version.hip else 32)
    try:
        routing = _routing.route_sdpa_to_flash()
    except BaseException:
        extension.deactivate()
        raise
    _live = _Activation(extension, routing)
    return _live


_HAS_REGISTRY = hasattr(_attention, "register_flash_attention_impl")

if _HAS_REGISTRY:
    _attention.register_flash_attention_impl(IMPL_NAME, register_fn=_activate)


def enable() -> None:
    """Serve F.sdpa from the bundle: activate_flash_attention_impl("ATTNPACK"). Any other
    activated flash implementation (FA4, ...) is restored first, as that function does."""
    if _HAS_REGISTRY:
        _attention.activate_flash_attention_impl(IMPL_NAME)
    elif _live is None:  # torch without the registry (< 2.11)
        _activate()


def disable() -> None:
    """Undo enable(): PyTorch's kernels and SDPA settings exactly as they were. A no-op when
    ATTNPACK is not the active implementation (another one replaced it, or none is active)."""
    if _live is None:
        return
    if _HAS_REGISTRY:
        _attention.restore_flash_attention_impl()  # calls _live.remove()
    if _live is not None:  # activated outside the registry
        _live.remove()


def is_enabled() -> bool:
    return _live is not None and _live.extension.is_active()


def _empty_stats() -> dict:
    ops = ("flash_fwd", "flash_bwd", "efficient_fwd", "efficient_bwd")
    return {"calls": {}, "fallbacks": {}, "devices": {},
            "ops": {op: {"served": 0, "fallback": 0} for op in ops}, "deterministic_backward": 0}


def stats() -> dict:
    """{"calls": {kernel: n}, "fallbacks": {reason: n}, "devices": {"cuda:N": {"calls": {...},
    "fallbacks": {...}}}, "ops": {op: {"served", "fallback"}}, "deterministic_backward": n} since
    the process started or reset_stats(); "devices" splits calls and fallbacks by the device of
    the call's tensors."""
    extension = _extension.loaded()
    return extension.stats() if extension is not None else _empty_stats()


def reset_stats() -> None:
    extension = _extension.loaded()
    if extension is not None:
        extension.reset_stats()


def set_logging(on: bool = True) -> None:
    """Like ATTNPACK_LOG=1: print each new decision once to stderr (key, then kernel or reason)."""
    _extension.load().set_logging(on)


def _device_index(device) -> int:
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device here; to decide against an archive file instead, "
                           "pass archive= and arch= (CLI: --archive, --arch)")
    if device is None:
        return torch.cuda.current_device()
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"{device} is not a CUDA device")
    return device.index if device.index is not None else torch.cuda.current_device()


def preload(device=None) -> None:
    """Load every kernel of the device's archive now, e.g. before CUDA-graph capture (a kernel
    first used during capture would load inside it)."""
    _extension.load().preload(_device_index(device))


def bundle_info(device=None) -> dict:
    """The archive serving `device` (default: the current CUDA device), or why there is none.
    Its `bundle` names the GPU the arch-wide tuning was measured on (`tuned_on`) and how many
    entries of its own each GPU model has (`gpu_entries`), served first on a device whose name
    (torch.cuda.get_device_name) is that model's."""
    return _extension.load().bundle_info(_device_index(device))


_ENTRIES = {"flash_fwd": 0, "flash_bwd": 1, "efficient_fwd": 2, "efficient_bwd": 3}


def sdpa_entry(dtype: str, hq: int, hkv: int, sq: int, sk: int, d: int, causal: bool) -> str | None:
    """Which op F.sdpa (no mask) reaches on CUDA with attnpack enabled: "flash", "efficient",
    or None (cuDNN/math; not served). PyTorch's flash check refuses fp32, head dims over 256
    and causal with Sq != Sk; its efficient op takes no grouped-query heads."""
    if dtype in ("fp16", "bf16") and d <= 256 and not (causal and sq != sk):
        return "flash"
    if hq == hkv and d % (8 if dtype in ("fp16", "bf16") else 4) == 0:
        return "efficient"
    return None


def explain(shape, dtype: str = "bf16", causal: bool = False, op: str = "fwd", *,
            dropout_p: float = 0.0, scale: float | None = None,
            deterministic: bool | str | None = None,
            return_debug_mask: bool = False, attn_bias: bool = False, entry: str | None = None,
            device=None, archive: str | None = None, arch: str | None = None) -> dict:
    """How attnpack decides an F.sdpa call of `shape` = (B, Hq, Hkv, Sq, Sk, D): the aten op it
    reaches, then the kernel that serves it or the reason PyTorch's own kernel does, plus the
    runtime's own explanation. Decided by the same C++ code as real calls, on meta tensors.
    `archive` (+ `arch`) explains against that file with no GPU; otherwise the archive of the
    CUDA `device` (default: current). `entry` forces an op ("flash_fwd", "efficient_bwd", ...);
    `return_debug_mask` and `attn_bias` describe direct calls of those ops. `deterministic`:
    False, True, or "warn_only" (torch.use_deterministic_algorithms(True, warn_only=True)); None
    reads PyTorch's current setting. "nondeterministic_warning" in the result says whether the
    served backward would warn as PyTorch's own kernels do in warn_only mode."""
    b, hq, hkv, sq, sk, d = (int(x) for x in shape)
    if op not in ("fwd", "bwd"):
        raise ValueError("op must be 'fwd' or 'bwd'")
    if entry is None:
        reached = sdpa_entry(dtype, hq, hkv, sq, sk, d, causal)
        if reached is None:
            return {"entry": None, "served": False, "kernel": None, "family": None,
                    "reason": "F.sdpa sends this call to neither the flash nor the efficient op "
                              "(cuDNN or math serves it)", "bundle": None, "runtime": "",
                    "call": f"{dtype} B={b} Hq={hq} Hkv={hkv} Sq={sq} Sk={sk} D={d}"
                            f"{' causal' if causal else ''}"}
        entry = f"{reached}_{op}"
    if entry not in _ENTRIES:
        raise ValueError(f"entry must be one of {sorted(_ENTRIES)}")
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled() and (
            "warn_only" if torch.is_deterministic_algorithms_warn_only_enabled() else True)
    if deterministic not in (False, True, "warn_only"):
        raise ValueError("deterministic must be False, True or 'warn_only'")
    mode = 2 if deterministic == "warn_only" else int(bool(deterministic))
    index = -1 if archive else _device_index(device)
    result = _extension.load().explain(_ENTRIES[entry], dtype, (b, hq, hkv, sq, sk, d), causal,
                                       dropout_p, return_debug_mask, scale, attn_bias,
                                       mode, index,
                                       archive, arch)
    if "error" in result:
        raise RuntimeError(result["error"])
    return result
