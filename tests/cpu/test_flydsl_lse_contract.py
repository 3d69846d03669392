"""The LSE contract between the flydsl forward and the triton backward.

The FlyDSL family has no backward: a training step on gfx950 runs its forward, then the triton
family's backward, which recomputes P from the forward's O and LSE. So the forward must write
the LSE the triton forward writes (natural log, float32, contiguous [B, Hq, Sq]). The FlyDSL
kernel cannot run here; its schedule model (aot/kernels/flydsl_attn/model.py: same tiles, same
rescaling, same LSE formula) stands in for it, in the kernel's precision, and the triton gfx950
backward runs on Triton's CPU interpreter with that O and LSE, against float64 gradients.

As in test_triton_attn_interp.py, the interpreter needs a process that imported Triton under
TRITON_INTERPRET=1, so one test re-runs this file in a child pytest. fp16 only (the
interpreter's bf16 is garbage, MACHINE-NOTES).
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

import interpreter

ROOT = Path(__file__).resolve().parents[2]


if not interpreter.active():

    def test_lse_contract_in_child_process():
        interpreter.run_file_in_child(__file__)

else:
    import torch

    from attnpack import jit
    from attnpack.family import FunctionalKey, load_family
    from flydsl_attn_loader import flydsl_attn

    TRITON = load_family(ROOT / "aot" / "kernels" / "triton_attn", interpret=True)
    fa = flydsl_attn()
    TOL = 2e-3  # max abs error / max(1, max |reference|), as the triton family's own test

    def reference(q, k, v, do, causal, scale):
        q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
        group = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        s = q @ kk.transpose(-1, -2) * scale
        if causal:  # top-left, as F.sdpa
            s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        o = torch.softmax(s, -1) @ vv
        o.backward(do.double())
        return o.detach(), torch.logsumexp(s, -1).detach(), q.grad, k.grad, v.grad

    # (B, Hq, Hkv, Sq, Sk, D, causal): GQA, Sq != Sk both ways, a second 256-row workgroup of the
    # forward, tails in the last KV tile
    CASES = {"d64-gqa-causal": (1, 4, 2, 300, 190, 64, True),
             "d128-full": (2, 2, 1, 97, 161, 128, False)}

    @pytest.mark.parametrize("case", list(CASES))
    def test_triton_backward_after_the_flydsl_forward(case):
        B, Hq, Hkv, Sq, Sk, D, causal = CASES[case]
        g = torch.Generator().manual_seed(Sq + Sk)
        q, k, v, do = (torch.randn(B, h, s, D, generator=g).half()
                       for h, s in ((Hq, Sq), (Hkv, Sk), (Hkv, Sk), (Hq, Sq)))
        scale = 1.0 / math.sqrt(D)
        o, lse = fa.model.forward(q, k, v, causal, scale, {}, acc_dtype=torch.float32)
        assert o.dtype == torch.float16 and lse.dtype == torch.float32
        assert lse.shape == (B, Hq, Sq) and lse.is_contiguous()

        key = FunctionalKey("fp16", D, causal)
        [bwd] = [v_ for v_ in TRITON.default_variants("gfx950") if v_.op == "bwd" and v_.key == key]
        dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
        jit.launch(bwd, {"q": q, "k": k, "v": v, "o": o.contiguous(), "lse": lse, "do": do,
                         "dq": dq, "dk": dk, "dv": dv}, scale)

        errors = {}
        for name, got, ref in zip(("o", "lse", "dq", "dk", "dv"), (o, lse, dq, dk, dv),
                                  reference(q, k, v, do, causal, scale)):
            assert not torch.isnan(got).any(), f"{name} has unwritten (NaN) elements"
            errors[name] = ((got.double() - ref).abs().max() / max(1.0, ref.abs().max())).item()
        print(case, {n: f"{e:.1e}" for n, e in errors.items()})
        assert max(errors.values()) < TOL, errors
