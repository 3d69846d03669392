"""The triton family's decode forward (aot/kernels/triton_attn/decode.py) on the GPU, every
decode kernel forced by name through libattnpack.

A tuning archive of the family's forwards (`attnpack build --all --family triton --op fwd`) is
built for this GPU; each decode variant runs the grid below (GQA groups packed into one Q tile,
several passes where a group has more rows than the tile, BSHD views at B = 3, causal and not,
fp16 and bf16) and O and LSE are compared with PyTorch's math SDPA in fp32. The bound is the
triton family's (tests/gpu/test_triton_attn_jit.py): at most 2x the error of PyTorch's own
flash forward (efficient where flash refuses) against the same reference, or a floor of one ulp
of the largest reference value; LSE within 1e-3 relative. The kernel's `requires` (Sq <= 16)
is checked too: the runtime refuses Sq = 17 with that reason.

ATTNPACK_DECODE_ARCHIVE=<apk> uses an archive built beforehand.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available() or torch.version.hip is not None:
    pytest.skip("needs a CUDA GPU (the decode configs are sm_90's)", allow_module_level=True)

import test_triton_attn_jit as family_check

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.builder import BuildRequest, build_archives

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# (B, Hq, Hkv): GQA 8 (Llama-70B style), GQA 7 (Qwen2-7B: 28/4), MHA, GQA 4 over BSHD views
HEADS = ((2, 64, 8), (1, 28, 4), (2, 8, 8), (3, 32, 8))
SEQS = ((1, 1), (1, 100), (1, 4097), (3, 1000), (16, 777), (16, 16), (5, 3))


def _arch() -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


@pytest.fixture(scope="session")
def archive():
    prebuilt = os.environ.get("ATTNPACK_DECODE_ARCHIVE")
    if prebuilt:
        return Path(prebuilt)
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"triton-decode-{os.getpid()}"
    (path,) = build_archives(BuildRequest(archs=(_arch(),), out_dir=out, jobs=os.cpu_count() or 1,
                                          all_variants=True, families=("triton",), ops=("fwd",)))
    return path


def decode_kernels(archive, dtype, head_dim, causal) -> list[str]:
    return [k["name"] for k in read_archive(archive).kernels
            if k["op"] == "fwd" and k["config"].get("decode")
            and k["key"] == {"dtype": dtype, "head_dim": head_dim, "causal": causal}]


def make(B, H, S, D, dt, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if B == 3:  # BSHD views, as the runtime tests
        return torch.randn(B, S, H, D, device="cuda", dtype=dt, generator=g).transpose(1, 2)
    return torch.randn(B, H, S, D, device="cuda", dtype=dt, generator=g)


def _grid():
    cases = []
    for i, (sq, sk) in enumerate(SEQS):
        for j, (b, hq, hkv) in enumerate(HEADS):
            for d in (64, 96, 128, 256):
                for causal in (False, True):
                    dtype = ("bf16", "fp16")[(i + j + d // 32) % 2]
                    cases.append(pytest.param(b, hq, hkv, sq, sk, d, causal, dtype,
                                              id=f"{dtype}-d{d}-{'causal' if causal else 'full'}"
                                                 f"-B{b}H{hq}/{hkv}-{sq}x{sk}"))
    return cases


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype", _grid())
def test_decode_matches_math_sdpa(archive, B, Hq, Hkv, Sq, Sk, D, causal, dtype):
    names = decode_kernels(archive, dtype, D, causal)
    assert names, f"no decode kernel for {dtype} d{D}"
    dt = DTYPES[dtype]
    q, k, v = make(B, Hq, Sq, D, dt, 1), make(B, Hkv, Sk, D, dt, 2), make(B, Hkv, Sk, D, dt, 3)
    do = torch.randn_like(q)
    scale = 1.0 / math.sqrt(D)
    want_o, want_lse, *_ = family_check.reference(q, k, v, do, causal, scale)
    backend, theirs, *_ = family_check.pytorch_backend(q, k, v, do, causal, scale)
    their_err = (theirs.float() - want_o).abs().max().item()
    bound = max(2 * their_err, family_check.FLOOR[dtype]
                * max(want_o.abs().max().item(), family_check.MIN_SCALE))
    failures = []
    with rt.Bundle(archive) as bundle:
        for name in names:
            o = torch.full_like(q, float("nan"))  # poisoned: unwritten elements fail
            lse = torch.full(q.shape[:3], float("nan"), device="cuda", dtype=torch.float32)
            rt.forward(bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse, kernel=name)
            torch.cuda.synchronize()
            if o.isnan().any() or lse.isnan().any():
                failures.append(f"{name}: NaN (unwritten rows)")
                continue
            err = (o.float() - want_o).abs().max().item()
            lse_err = ((lse - want_lse).abs() / want_lse.abs().clamp(min=1.0)).max().item()
            if not err <= bound:
                failures.append(f"{name}: O error {err:.3e} > {bound:.3e} ({backend} {their_err:.3e})")
            if not lse_err <= 1e-3:
                failures.append(f"{name}: LSE relative error {lse_err:.3e}")
    assert not failures, "\n".join(failures)


def test_requires_at_most_16_query_rows(archive):
    name = decode_kernels(archive, "bf16", 128, False)[0]
    with rt.Bundle(archive) as bundle:
        for sq, served in ((16, True), (17, False)):
            problem = rt.make_problem("fwd", "bf16", B=1, Hq=32, Hkv=8, Sq=sq, Sk=512, D=128,
                                      kernel=name)
            if served:
                assert bundle.select(problem).name == name
            else:
                with pytest.raises(rt.AttnpackError) as info:
                    bundle.select(problem)
                assert info.value.status == rt.Status.UNSUPPORTED
                assert "the decode kernel serves at most 16 query rows per head" in info.value.message
