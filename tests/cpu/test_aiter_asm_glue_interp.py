"""The aiter_asm family's Triton glue (aot/kernels/aiter_asm/glue.py) on Triton's CPU
interpreter: the backward's prepare step (delta = rowsum(dO * O), dq_acc zeroed) and its dQ
convert, against float64 / exact references, on strided [B, S, H, D] views.

As in test_triton_attn_interp.py, the interpreter needs Triton imported with
TRITON_INTERPRET=1, so unless this process already runs under it, one test re-runs this file
in a child pytest. fp16 only (the interpreter's bf16 is garbage, MACHINE-NOTES).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

import interpreter

ROOT = Path(__file__).resolve().parents[2]
FAMILY_DIR = ROOT / "aot" / "kernels" / "aiter_asm"


if not interpreter.active():

    def test_glue_suite_in_child_process():
        interpreter.run_file_in_child(__file__)

else:
    import torch

    def _glue():
        name = "attnpack_interp_aiter_asm"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                name, FAMILY_DIR / "__init__.py", submodule_search_locations=[str(FAMILY_DIR)])
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return importlib.import_module(f"{name}.glue")

    glue = _glue()

    def _bshd(B, H, S, D, gen):
        """A [B, H, S, D] view of [B, S, H, D] storage: non-contiguous strides."""
        return torch.randn(B, S, H, D, generator=gen, dtype=torch.float32).to(
            torch.float16).transpose(1, 2)

    @pytest.mark.parametrize("D", [64, 96, 128])
    def test_prepare_writes_delta_and_zeros_dq_acc(D):
        gen = torch.Generator().manual_seed(D)
        B, H, S = 2, 3, 100                     # 100 rows: one full and one ragged tile
        o, do = _bshd(B, H, S, D, gen), _bshd(B, H, S, D, gen)
        delta = torch.full((B, H, S), float("nan"))
        dq_acc = torch.full((B, H, S, D), 7.0)
        grid = (-(-S // glue.BLOCK_M), B * H)
        glue.aiter_bwd_prepare[grid](o, do, delta, dq_acc, *o.stride()[:3], *do.stride()[:3],
                                     H, S, HEAD_DIM=D, BLOCK_D=glue.block_d(D),
                                     BLOCK_M=glue.BLOCK_M)
        ref = (o.double() * do.double()).sum(-1)
        assert (delta.double() - ref).abs().max().item() < 1e-5 * max(1.0, ref.abs().max().item())
        assert torch.count_nonzero(dq_acc).item() == 0

    @pytest.mark.parametrize("D", [64, 96])
    def test_convert_rounds_dq_acc_into_strided_dq(D):
        gen = torch.Generator().manual_seed(100 + D)
        B, H, S = 2, 2, 70
        dq_acc = torch.randn(B, H, S, D, generator=gen, dtype=torch.float32) * 3
        dq = torch.zeros(B, S, H, D, dtype=torch.float16).transpose(1, 2)
        grid = (-(-S // glue.BLOCK_M), B * H)
        glue.aiter_bwd_convert_dq[grid](dq_acc, dq, *dq.stride()[:3], H, S, HEAD_DIM=D,
                                        BLOCK_D=glue.block_d(D), BLOCK_M=glue.BLOCK_M)
        assert torch.equal(dq, dq_acc.to(torch.float16))
