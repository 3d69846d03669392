"""The FlyDSL gfx950 forward on a real MI350-class GPU, against PyTorch's math SDPA in fp32.

Skipped unless torch sees a HIP device whose gcnArchName starts with gfx950. It launches the
code object exactly as libattnpack would: hipModuleLoadData, then hipModuleLaunchKernel with
one packed kernarg buffer filled by the launch words (no FlyDSL runtime involved). Written on a
machine without an AMD GPU: built, not run.
"""
import ctypes
import math
import struct
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))
from flydsl_attn_loader import flydsl_attn, toolchain_missing  # noqa: E402


def _gfx950() -> bool:
    if not (torch.version.hip and torch.cuda.is_available()):
        return False
    return torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950")


pytestmark = [pytest.mark.skipif(not _gfx950(), reason="needs a gfx950 GPU (MI350/MI355X)"),
              pytest.mark.skipif(toolchain_missing() is not None, reason=str(toolchain_missing()))]

# (B, Hq, Hkv, Sq, Sk): the families' usual grid, plus odd tails and Sq != Sk both ways
SHAPES = [(2, 8, 8, 1024, 1024), (1, 16, 4, 777, 1031), (4, 8, 2, 256, 4096),
          (1, 4, 1, 1, 300), (2, 6, 6, 300, 1), (1, 32, 8, 4096, 4096)]
_HIP_LAUNCH_PARAM_BUFFER_POINTER = ctypes.c_void_p(1)
_HIP_LAUNCH_PARAM_BUFFER_SIZE = ctypes.c_void_p(2)
_HIP_LAUNCH_PARAM_END = ctypes.c_void_p(3)


class Hip:
    def __init__(self):
        self.lib = ctypes.CDLL("libamdhip64.so")
        self.modules = {}

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with hipError {status}")

    def function(self, image: bytes, entry: str):
        if (image, entry) not in self.modules:
            module, fn = ctypes.c_void_p(), ctypes.c_void_p()
            self.check(self.lib.hipModuleLoadData(ctypes.byref(module), image), "hipModuleLoadData")
            self.check(self.lib.hipModuleGetFunction(ctypes.byref(fn), module, entry.encode()),
                       "hipModuleGetFunction")
            self.modules[(image, entry)] = fn
        return self.modules[(image, entry)]

    def launch(self, fn, grid, block, lds_dynamic, kernarg: bytes, stream):
        buf = ctypes.create_string_buffer(kernarg, len(kernarg))
        size = ctypes.c_size_t(len(kernarg))
        extra = (ctypes.c_void_p * 5)(_HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.cast(buf, ctypes.c_void_p),
                                      _HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.cast(ctypes.pointer(size), ctypes.c_void_p),
                                      _HIP_LAUNCH_PARAM_END)
        self.check(self.lib.hipModuleLaunchKernel(
            fn, *[ctypes.c_uint(g) for g in grid], *[ctypes.c_uint(b) for b in block],
            ctypes.c_uint(lds_dynamic), ctypes.c_void_p(stream), None, extra), "hipModuleLaunchKernel")


def resolve(word, q, k, v, o, lse, scale):
    """The value of one launch word for this problem (attnpack/abi.py vocabulary)."""
    B, Hq, Sq, D = q.shape
    sizes = {"B": B, "Hq": Hq, "Hkv": k.shape[1], "Sq": Sq, "Sk": k.shape[2], "D": D}
    tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
    if word in tensors:
        return tensors[word].data_ptr()
    if word in sizes:
        return sizes[word]
    if word == "sm_scale_log2":
        return scale * 1.4426950408889634
    if word == "sm_scale":
        return scale
    name, _, axis = word.partition("_stride_")
    return tensors[name].stride("bhs".index(axis))


def pack(obj, *tensors_and_scale):
    buf = bytearray(obj.kernarg_size)
    fmt = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}
    for w in obj.launch_words:
        struct.pack_into(fmt[w.wire_type], buf, w.offset, resolve(w.word, *tensors_and_scale))
    return bytes(buf)


def grid_of(obj, B, Hq, Sq, Sk):
    vars_ = {"B": B, "Hq": Hq, "Sq": Sq, "Sk": Sk}
    return tuple(math.prod(-(-vars_[v] // d) for v, d in dim) if dim else 1 for dim in obj.grid)


@pytest.fixture(scope="module")
def hip():
    return Hip()


def launch(hip, q, k, v, causal, scale):
    """(o, lse) of the FlyDSL forward for these tensors (views allowed), poisoned beforehand."""
    dtype = "bf16" if q.dtype == torch.bfloat16 else "fp16"
    obj = flydsl_attn().backend.compile_forward("gfx950", dtype, q.shape[-1], causal, {})
    B, Hq, Sq, _ = q.shape
    o = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, Sq), float("nan"), device="cuda", dtype=torch.float32)
    fn = hip.function(obj.image, obj.entry)
    hip.launch(fn, grid_of(obj, B, Hq, Sq, k.shape[2]), obj.block, 0,
               pack(obj, q, k, v, o, lse, scale), torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return o, lse


def reference(q, k, v, causal, scale):
    Hq, Hkv, Sq, Sk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    qf, kf, vf = (t.float() for t in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale,
                                             enable_gqa=Hq != Hkv)
    s = qf @ kf.repeat_interleave(Hq // Hkv, 1).transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    return ref, torch.logsumexp(s, -1)


def check(o, lse, ref, ref_lse, dtype):
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert not o.isnan().any() and not lse.isnan().any()
    assert (o.float() - ref).abs().max().item() < tol
    assert (lse - ref_lse).abs().max().item() < 1e-3


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk", SHAPES)
def test_forward_matches_math_sdpa(hip, dtype, D, causal, B, Hq, Hkv, Sq, Sk):
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float16
    torch.manual_seed(B * 1000 + Sq + Sk)
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=tdt)
    k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=tdt)
    v = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=tdt)
    scale = D ** -0.5
    o, lse = launch(hip, q, k, v, causal, scale)
    check(o, lse, *reference(q, k, v, causal, scale), tdt)


BIG_HEADS, BIG_SEQ = 64, 131072 + 300   # BSHD, 64 heads of 128: one head spans > 2 GiB


@pytest.mark.parametrize("long_side", ["queries", "keys"])
def test_a_head_spanning_more_than_2_gib(hip, long_side):
    """Buffer offsets are 32-bit: the kernel bases its resources at each wave's rows and each
    KV tile (fwd.py, "64-bit heads, 32-bit offsets"). Head 63 of a 128k-token BSHD tensor with
    64 heads of 128 starts 16 KiB in and ends past 2 GiB."""
    torch.manual_seed(3)
    D, short = 128, 300
    big = lambda: torch.randn(1, BIG_SEQ, BIG_HEADS, D, device="cuda", dtype=torch.bfloat16)
    small = lambda: torch.randn(1, 1, short, D, device="cuda", dtype=torch.bfloat16)
    if long_side == "queries":
        q, k, v = big()[:, :, -1:].transpose(1, 2), small(), small()
    else:
        q, k, v = small(), big()[:, :, -1:].transpose(1, 2), big()[:, :, -1:].transpose(1, 2)
    assert (q if long_side == "queries" else k).stride(2) * BIG_SEQ * 2 > 2**31
    o, lse = launch(hip, q, k, v, True, D ** -0.5)
    check(o, lse, *reference(q, k, v, True, D ** -0.5), torch.bfloat16)


def test_a_row_stride_past_the_offset_range_gives_nan(hip):
    """stride_s >= 2^24 elements: the kernel cannot address 64 rows in 31 bits; it makes the
    scale NaN, so the output is NaN, never quietly wrong (docs/flydsl-family.md)."""
    D, S = 128, 70
    wide = torch.randn(1, S, (1 << 24) // D, D, device="cuda", dtype=torch.bfloat16)
    k = wide[:, :, :1].transpose(1, 2)                      # stride_s = 2^24
    q = torch.randn(1, 1, S, D, device="cuda", dtype=torch.bfloat16)
    o, lse = launch(hip, q, k, k, False, D ** -0.5)
    assert o.isnan().all() and lse.isnan().all()
