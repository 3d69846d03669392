"""The triton family's sm_90 default variants on the GPU, launched through Triton's JIT from the
same launch specs the archive holds, against PyTorch's math SDPA in fp32 on upcast inputs.

Pass criterion per output (O, dQ, dK, dV): max abs error <= 2x the error of PyTorch's own flash
backend against the same reference, or 1e-3 x max|reference| if that is larger (so shapes where
flash is exact, e.g. Sk = 1, do not demand exactness). Flash refuses causal with Sq != Sk
(PyTorch aligns causal top-left, FA2 bottom-right); there the efficient backend is the yardstick.
Flash and efficient get K/V expanded with repeat_interleave for GQA; our kernels read the Hkv
heads directly. LSE is checked against the fp32 logsumexp of the masked scores.
"""
from __future__ import annotations

import math

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnpack import jit
from attnpack.family import FunctionalKey, kernels_root, load_family

SPEC = load_family(kernels_root() / "triton_attn")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ARCH = "sm_90"
# The bound never goes below one unit in the last place of the output dtype at the reference's
# largest magnitude: a result rounded to bf16/fp16 can be off by that much however exact the
# fp32 accumulation (seen: dq of a 1x17 bf16 problem, 7.4e-7 against flash's lucky 3.1e-7).
# A gradient that is zero in exact arithmetic (Sq=1 causal: the only visible key gets weight 1,
# so dS = P*(dP - delta) = 0) leaves both sides with pure rounding noise; MIN_SCALE keeps the
# floor at the size of the terms that cancelled, not at the size of the noise.
FLOOR = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}   # relative to max(max |reference|, MIN_SCALE)
MIN_SCALE = 1e-2
LSE_TOL = 2e-4        # absolute, natural log; scaled up for |lse| > 1


def default_variants(dtype: str, head_dim: int, causal: bool):
    key = FunctionalKey(dtype, head_dim, causal)
    found = {v.op: v for v in SPEC.default_variants(ARCH) if v.key == key}
    return found["fwd"], found["bwd"]


def reference(q, k, v, do, causal, scale):
    """fp32 math SDPA on upcast inputs: (o, lse, dq, dk, dv)."""
    q, k, v = (t.detach().float().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                           enable_gqa=True)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do.float())
    with torch.no_grad():
        group = q.shape[1] // k.shape[1]
        s = torch.matmul(q, k.repeat_interleave(group, 1).transpose(-1, -2)) * scale
        if causal:
            keep = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
            s.masked_fill_(~keep, float("-inf"))
        lse = torch.logsumexp(s, -1)
        del s
    return o.detach(), lse, dq, dk, dv


def pytorch_backend(q, k, v, do, causal, scale):
    """PyTorch's own fused kernel on the same inputs: (name, o, dq, dk, dv)."""
    group = q.shape[1] // k.shape[1]
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        if name == "flash" and causal and q.shape[2] != k.shape[2]:
            continue  # FA2 would align the causal mask bottom-right
        try:
            with sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal, scale=scale)
        except RuntimeError:
            continue
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        return name, o.detach(), dq, dk, dv
    raise RuntimeError("neither flash nor efficient SDPA runs this shape")


def run_ours(q, k, v, do, causal, scale, dtype):
    fwd, bwd = default_variants(dtype, q.shape[-1], causal)
    o = torch.full_like(q, float("nan"))  # poisoned: unwritten elements fail
    lse = torch.full(q.shape[:3], float("nan"), device=q.device, dtype=torch.float32)
    jit.launch(fwd, {"q": q, "k": k, "v": v, "o": o, "lse": lse}, scale)
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    jit.launch(bwd, {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do,
                     "dq": dq, "dk": dk, "dv": dv}, scale)
    return o, lse, dq, dk, dv


def check(B, Hq, Hkv, Sq, Sk, D, causal, dtype, layout="bhsd", scale=None):
    torch.manual_seed(Sq * 7919 + Sk * 31 + D + Hq + B)
    dev, dt = "cuda", DTYPES[dtype]
    scale = 1.0 / math.sqrt(D) if scale is None else scale

    def make(h, s):
        if layout == "bshd":
            return torch.randn(B, s, h, D, device=dev, dtype=dt).transpose(1, 2)
        return torch.randn(B, h, s, D, device=dev, dtype=dt)

    q, k, v, do = make(Hq, Sq), make(Hkv, Sk), make(Hkv, Sk), make(Hq, Sq)
    ours = run_ours(q, k, v, do, causal, scale, dtype)
    ref = reference(q, k, v, do, causal, scale)
    backend, *theirs = pytorch_backend(q, k, v, do, causal, scale)
    torch.cuda.synchronize()

    report = {"yardstick": backend}
    for name, got in zip(("o", "lse", "dq", "dk", "dv"), ours):
        assert not got.isnan().any(), f"{name}: NaN (unwritten or bad masking)"
    lse_err = (ours[1] - ref[1]).abs().max().item()
    report["lse"] = lse_err
    assert lse_err <= LSE_TOL * max(1.0, ref[1].abs().max().item()), report
    for name, got, want, other in zip(("o", "dq", "dk", "dv"), (ours[0], *ours[2:]),
                                      (ref[0], *ref[2:]), theirs):
        err = (got.float() - want).abs().max().item()
        their_err = (other.float() - want).abs().max().item()
        bound = max(2 * their_err, FLOOR[dtype] * max(want.abs().max().item(), MIN_SCALE))
        report[name] = f"{err:.2e} (theirs {their_err:.2e})"
        assert err <= bound, f"{name}: error {err:.3e} > bound {bound:.3e}; {report}"
    return report


SEQS = (1, 17, 128, 1000, 4096)
BATCH_HEADS = ((1, 8, 8), (1, 32, 8), (3, 8, 8), (3, 32, 8))  # (B, Hq, Hkv)


def _grid():
    """Every (Sq, Sk, head dim, causal) in both dtypes; (B, Hq, Hkv) rotates through its four
    settings so each dtype meets each of them, including B=3, Hq=32 at 4096 x 4096."""
    cases, i = [], 0
    for sq in SEQS:
        for sk in SEQS:
            for d in (64, 128):
                for causal in (False, True):
                    for j, dtype in enumerate(DTYPES):
                        b, hq, hkv = BATCH_HEADS[(i + j) % len(BATCH_HEADS)]
                        cases.append(pytest.param(b, hq, hkv, sq, sk, d, causal, dtype,
                                                  id=f"{dtype}-d{d}-{'causal' if causal else 'full'}"
                                                     f"-B{b}H{hq}/{hkv}-{sq}x{sk}"))
                    i += 1
    return cases


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype", _grid())
def test_matches_math_sdpa(B, Hq, Hkv, Sq, Sk, D, causal, dtype):
    print(check(B, Hq, Hkv, Sq, Sk, D, causal, dtype))


@pytest.mark.parametrize("D", (32, 96, 256))
@pytest.mark.parametrize("causal", (False, True))
def test_other_head_dims(D, causal):
    for dtype in DTYPES:
        print(check(2, 8, 2, 1000, 1000, D, causal, dtype))
        print(check(1, 4, 4, 17, 300, D, causal, dtype))


@pytest.mark.parametrize("causal", (False, True))
def test_bshd_views_and_custom_scale(causal):
    print(check(2, 16, 4, 777, 1000, 128, causal, "bf16", layout="bshd", scale=0.2))


def test_backward_is_deterministic():
    dev, dt = "cuda", torch.bfloat16
    q, do = (torch.randn(2, 32, 2048, 128, device=dev, dtype=dt) for _ in range(2))
    k, v = (torch.randn(2, 8, 2048, 128, device=dev, dtype=dt) for _ in range(2))
    first = run_ours(q, k, v, do, True, 0.088, "bf16")
    for _ in range(3):
        again = run_ours(q, k, v, do, True, 0.088, "bf16")
        for a, b in zip(first, again):
            assert torch.equal(a, b)
