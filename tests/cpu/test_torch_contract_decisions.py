"""PyTorch's op contracts on a CPU-only torch (issue 18; the GPU half is
tests/gpu/test_torch_contracts.py):

- every input PyTorch's kernels reject stays outside what attnpack serves, so it reaches
  PyTorch's kernel (and its error): each overridden op is called through the dispatcher's CUDA
  entry with CPU tensors, and the recorded reason must be the PyTorch-level one, not "inputs not
  on one CUDA device", which a valid call gets (there is no CUDA kernel of PyTorch's to run here,
  so every call ends in attnpack's "no CUDA kernel ... to fall back to");
- decisions through explain(): positive scales only, head dims PyTorch's flash takes, fp32 off the
  flash op, and determinism: a backward attnpack does not know to be deterministic falls back under
  use_deterministic_algorithms(True) and serves with a warning under warn_only=True;
- the C entry points a libtorch program calls (attnpack_torch_enable/disable).
"""
from __future__ import annotations

import ctypes

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch.nn.attention, "register_flash_attention_impl"):
    pytest.skip("torch without torch.nn.attention.register_flash_attention_impl (< 2.11)",
                allow_module_level=True)

import attnpack.torch as attnpack_torch  # noqa: E402
# the extension (built by setup.sh, or here) and the toy archives
from test_torch_integration import (extension, leave_pytorch_as_found, toy_archive,  # noqa: E402,F401
                                    TOY)

aten = torch.ops.aten
CUDA_ENTRY = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
NOT_ON_GPU = "inputs not on one CUDA device"


def t(*shape, dtype=torch.float16):
    return torch.randn(*shape).to(dtype)


def strided_last(*shape):
    *lead, d = shape
    return t(*lead, 2 * d)[..., ::2]


def flash_fwd(q, k, v, **kw):
    return aten._scaled_dot_product_flash_attention.default.redispatch(
        CUDA_ENTRY, q, k, v, kw.get("dropout_p", 0.0), kw.get("causal", False), False)


def flash_bwd(grad, q, k, v, cum=None, lse=None):
    lse = torch.zeros(q.shape[0], q.shape[1], q.shape[2]) if lse is None else lse
    rng = torch.empty(2, dtype=torch.uint64)
    return aten._scaled_dot_product_flash_attention_backward.default.redispatch(
        CUDA_ENTRY, grad, q, k, v, torch.zeros_like(q), lse, cum, cum, q.shape[2], k.shape[2],
        0.0, False, rng, rng)


def efficient_fwd(q, k, v, bias=None):
    return aten._scaled_dot_product_efficient_attention.default.redispatch(
        CUDA_ENTRY, q, k, v, bias, True, 0.0, False)


def efficient_bwd(grad, q, k, v, mask=(True, True, True, False), bias=None):
    lse = torch.zeros(q.shape[0], q.shape[1], 32)
    seed = torch.empty((), dtype=torch.int64)
    return aten._scaled_dot_product_efficient_attention_backward.default.redispatch(
        CUDA_ENTRY, grad, q, k, v, bias, torch.zeros_like(q), lse, seed, seed, 0.0, list(mask), False)


B, H, S, D = 1, 2, 16, 32
CASES = {
    # (call, the reason attnpack records: the call then goes to PyTorch's kernel)
    "flash_fwd/valid": (lambda: flash_fwd(t(B, H, S, D), t(B, H, S, D), t(B, H, S, D)), NOT_ON_GPU),
    "flash_fwd/fp32": (lambda: flash_fwd(*(t(B, H, S, D, dtype=torch.float32) for _ in range(3))),
                       "dtype fp32 on the flash op"),
    "flash_fwd/head-dim-20": (lambda: flash_fwd(t(B, H, S, 20), t(B, H, S, 20), t(B, H, S, 20)),
                              "head dim not a multiple of 8 up to 256"),
    "flash_fwd/head-dim-264": (lambda: flash_fwd(t(B, H, S, 264), t(B, H, S, 264), t(B, H, S, 264)),
                               "head dim not a multiple of 8 up to 256"),
    "flash_fwd/last-dim-strided": (lambda: flash_fwd(strided_last(B, H, S, D), t(B, H, S, D),
                                                     t(B, H, S, D)), "q, k or v last dim not contiguous"),
    "flash_fwd/heads-6-over-4": (lambda: flash_fwd(t(B, 6, S, D), t(B, 4, S, D), t(B, 4, S, D)),
                                 "Hq not a multiple of Hkv"),
    "flash_fwd/mixed-dtypes": (lambda: flash_fwd(t(B, H, S, D), t(B, H, S, D, dtype=torch.bfloat16),
                                                 t(B, H, S, D)), "inputs of different dtypes"),
    "flash_fwd/three-dims": (lambda: flash_fwd(t(H, S, D), t(H, S, D), t(H, S, D)),
                             "not a 4-D [B, H, S, D] tensor"),
    "flash_bwd/valid": (lambda: flash_bwd(*(t(B, H, S, D) for _ in range(4))), NOT_ON_GPU),
    "flash_bwd/packed-varlen": (lambda: flash_bwd(*(t(B, H, S, D) for _ in range(4)),
                                                  cum=torch.tensor([0, S], dtype=torch.int32)),
                                "cumulative sequence lengths (a packed varlen call)"),
    "flash_bwd/grad-dtype": (lambda: flash_bwd(t(B, H, S, D, dtype=torch.bfloat16),
                                               *(t(B, H, S, D) for _ in range(3))),
                             "inputs of different dtypes"),
    "flash_bwd/lse-fp16": (lambda: flash_bwd(*(t(B, H, S, D) for _ in range(4)), lse=t(B, H, S)),
                           "logsumexp is not float32 [B, Hq, Sq]"),
    "efficient_fwd/valid": (lambda: efficient_fwd(t(B, H, S, D), t(B, H, S, D), t(B, H, S, D)),
                            NOT_ON_GPU),
    "efficient_fwd/heads-4-and-2": (lambda: efficient_fwd(t(B, 4, S, D), t(B, 2, S, D), t(B, 2, S, D)),
                                    "Hq != Hkv on the efficient op"),
    "efficient_fwd/fp64": (lambda: efficient_fwd(*(t(B, H, S, D, dtype=torch.float64) for _ in range(3))),
                           "dtype fp64 not served"),
    "efficient_fwd/bias": (lambda: efficient_fwd(t(B, H, S, D), t(B, H, S, D), t(B, H, S, D),
                                                 bias=t(B, H, S, S)), "attn_bias"),
    "efficient_bwd/valid": (lambda: efficient_bwd(*(t(B, H, S, D) for _ in range(4))), NOT_ON_GPU),
    "efficient_bwd/bias-grad-without-bias": (
        lambda: efficient_bwd(*(t(B, H, S, D) for _ in range(4)), mask=(True, True, True, True)),
        "grad_input_mask asks for a bias gradient"),
    "efficient_bwd/last-dim-strided": (lambda: efficient_bwd(t(B, H, S, D), strided_last(B, H, S, D),
                                                             t(B, H, S, D), t(B, H, S, D)),
                                       "q, k or v last dim not contiguous"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rejected_inputs_go_to_pytorchs_kernel(extension, case):
    call, reason = CASES[case]
    attnpack_torch.enable()
    attnpack_torch.reset_stats()
    with pytest.raises(RuntimeError, match="has no CUDA kernel of aten::.* to fall back to"):
        call()
    stats = attnpack_torch.stats()
    assert stats["fallbacks"] == {reason: 1}, stats
    assert stats["calls"] == {}


# ---- decisions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case, expected", [
    (dict(scale=-0.1), "scale is not positive and finite"),
    (dict(scale=float("nan")), "scale is not positive and finite"),
    (dict(scale=0.3), TOY.format(op="fwd", mask="full")),
    (dict(shape=(1, 2, 2, 16, 16, 20)), "head dim not a multiple of 8 up to 256"),
    (dict(shape=(1, 2, 2, 16, 16, 264), entry="efficient_fwd"), "head dim not a multiple of 8 up to 256"),
    (dict(dtype="fp32", entry="flash_fwd"), "dtype fp32 on the flash op"),
    (dict(dtype="fp32", entry="efficient_fwd"), "dtype fp32 not built"),
], ids=str)
def test_decision(extension, toy_archive, case, expected):
    case = dict(case)
    shape = case.pop("shape", (1, 2, 2, 16, 16, 32))
    dtype = case.pop("dtype", "fp16")
    result = attnpack_torch.explain(shape, dtype, archive=toy_archive, arch="sm_90", **case)
    if expected.startswith("toy/"):
        assert (result["served"], result["kernel"]) == (True, expected), result
    else:
        assert (result["served"], result["reason"]) == (False, expected), result


@pytest.mark.parametrize("mode, served, warns", [
    (False, True, False),
    (True, False, False),        # use_deterministic_algorithms(True): PyTorch's kernel serves
    ("warn_only", True, True),   # ... warn_only=True: served, with PyTorch's kind of warning
])
def test_determinism_follows_the_serving_kernel(extension, toy_archive, mode, served, warns):
    """The toy family declares no deterministic backward (FamilySpec.deterministic_backward)."""
    result = attnpack_torch.explain((1, 2, 2, 16, 16, 32), "fp16", op="bwd", deterministic=mode,
                                    archive=toy_archive, arch="sm_90")
    assert result["served"] is served, result
    assert result["nondeterministic_warning"] is warns
    if not served:
        assert result["reason"] == "deterministic mode: no kernel declared deterministic serves bwd fp16 d32 full"


def test_deterministic_mode_is_read_from_pytorch(extension, toy_archive):
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        result = attnpack_torch.explain((1, 2, 2, 16, 16, 32), "fp16", op="bwd",
                                        archive=toy_archive, arch="sm_90")
    finally:
        torch.use_deterministic_algorithms(False)
    assert result["served"] and result["nondeterministic_warning"]


# ---- the C entry points of a libtorch program ------------------------------------------------------

def test_c_enable_and_disable(extension):
    lib = ctypes.CDLL(str(extension.path))
    lib.attnpack_torch_enable.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.attnpack_torch_disable.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    error = ctypes.create_string_buffer(1024)
    order = list(torch._C._get_sdp_priority_order())
    assert lib.attnpack_torch_enable(None, error, len(error)) == 0, error.value
    try:
        assert extension.is_active()
        assert torch._C._dispatch_has_kernel_for_dispatch_key(
            "aten::_scaled_dot_product_flash_attention", "CUDA")
        assert list(torch._C._get_sdp_priority_order()) == order  # no CUDA: nothing to route
        assert lib.attnpack_torch_enable(None, error, len(error)) == 0  # twice is once
    finally:
        assert lib.attnpack_torch_disable(error, len(error)) == 0, error.value
    assert not extension.is_active()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_scaled_dot_product_flash_attention", "CUDA")
    assert lib.attnpack_torch_disable(error, len(error)) == 0  # disabling when off changes nothing
