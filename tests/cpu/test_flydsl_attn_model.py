"""The FlyDSL kernel's schedule, run by its PyTorch model (aot/kernels/flydsl_attn/model.py),
against PyTorch's math SDPA: same tiles, same two-group phase order through the 3-slot LDS ring,
same base-2 online softmax and rescaling. The kernel itself cannot run here (no AMD GPU)."""
import pytest
import torch
import torch.nn.functional as F

from flydsl_attn_loader import flydsl_attn

fa = flydsl_attn()


def reference(q, k, v, causal, scale):
    """(o, lse) from math SDPA and an explicit logsumexp, in q's dtype (fp64 here)."""
    Hq, Hkv = q.shape[1], k.shape[1]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                           enable_gqa=Hq != Hkv)
    s = q @ k.repeat_interleave(Hq // Hkv, 1).transpose(-1, -2) * scale
    if causal:  # top-left aligned, as F.sdpa
        s = s.masked_fill(torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
    return o, torch.logsumexp(s, -1)


# (B, Hq, Hkv, Sq, Sk, D, causal, config): odd lengths, Sq != Sk both ways, GQA 1 and 4,
# a second workgroup (Sq > 256), every config choice, tails in the last KV tile.
SHAPES = [
    (1, 2, 2, 37, 53, 64, True, {}),
    (1, 4, 1, 45, 97, 128, False, {}),
    (2, 4, 1, 61, 29, 64, True, {"waves_per_group": 2, "block_n": 32}),
    (1, 1, 1, 300, 70, 128, True, {}),
    (1, 1, 1, 77, 260, 128, False, {"block_n": 64, "waves_per_group": 2}),
    (1, 2, 1, 33, 1, 64, False, {}),
]


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,config", SHAPES)
def test_model_matches_sdpa_fp64(B, Hq, Hkv, Sq, Sk, D, causal, config):
    torch.manual_seed(Sq * 131 + Sk)
    q = torch.randn(B, Hq, Sq, D, dtype=torch.float64)
    k = torch.randn(B, Hkv, Sk, D, dtype=torch.float64)
    v = torch.randn(B, Hkv, Sk, D, dtype=torch.float64)
    scale = D ** -0.5
    o, lse = fa.model.forward(q, k, v, causal, scale, config, acc_dtype=torch.float64)
    ref_o, ref_lse = reference(q, k, v, causal, scale)
    assert (o - ref_o).abs().max().item() < 1e-12
    assert (lse.double() - ref_lse).abs().max().item() < 1e-5  # lse is stored as float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_model_in_kernel_precision(dtype):
    """bf16/fp16 inputs, fp32 accumulation, P rounded to the input type before P·V: within
    the usual flash-attention error of the fp32 reference on the same rounded inputs."""
    torch.manual_seed(7)
    B, Hq, Hkv, Sq, Sk, D = 1, 4, 1, 70, 133, 128
    q, k, v = (torch.randn(B, h, s, D).to(dtype) for h, s in ((Hq, Sq), (Hkv, Sk), (Hkv, Sk)))
    o, lse = fa.model.forward(q, k, v, True, 0.1, {}, acc_dtype=torch.float32)
    ref_o, ref_lse = reference(q.double(), k.double(), v.double(), True, 0.1)
    assert o.dtype == dtype
    err = (o.double() - ref_o).abs().max().item()
    assert err < (2e-2 if dtype == torch.bfloat16 else 4e-3), err
    assert (lse.double() - ref_lse).abs().max().item() < 1e-3


def test_schedule_check_catches_a_hazard(monkeypatch):
    """The ring check is live: if group 1 wrote the tile group 0 writes (one tile too early
    for its slot), the model must refuse."""
    monkeypatch.setattr(fa.tiles, "tile_written_in", lambda group, j: j + 2)
    q = torch.randn(1, 1, 40, 64, dtype=torch.float64)
    k = torch.randn(1, 1, 300, 64, dtype=torch.float64)
    with pytest.raises(fa.model.ScheduleError):
        fa.model.forward(q, k, k, False, 0.125, {}, acc_dtype=torch.float64)


def test_kernel_and_model_share_tile_constants():
    """The kernel (fwd.py) and the model take every tile constant from tiles.py; pin that the
    derived numbers are what the kernel was written for."""
    t = fa.tiles
    src = (fa.model.__file__, fa.backend.__file__)
    fwd_text = open(t.__file__.replace("tiles.py", "fwd.py")).read()
    assert "from . import tiles" in fwd_text and "from . import tiles" in open(src[0]).read()
    for D in t.HEAD_DIMS:
        cfg = t.check_config(D, "bf16", {})
        assert t.block_m(cfg) == 256 and t.threads(cfg) == 512
        assert t.lds_bytes(D, cfg) <= t.LDS_LIMIT
        assert t.loads_per_lane(D, cfg) >= 1
    assert (t.MFMA_M, t.MFMA_N, t.MFMA_K, t.ROWS_PER_WAVE, t.KV_STAGES) == (32, 32, 16, 32, 3)
    with pytest.raises(ValueError, match="block_n"):
        t.check_config(64, "bf16", {"block_n": 32})   # 4 waves cannot split a 16x64 half tile
    with pytest.raises(ValueError, match="256 registers"):
        t.check_config(128, "bf16", {"block_n": 64})
    with pytest.raises(ValueError, match="unknown config keys"):
        t.check_config(64, "bf16", {"stages": 2})
