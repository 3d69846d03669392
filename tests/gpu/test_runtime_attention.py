"""Forward and backward through libattnpack on the GPU: the bundle built for this GPU, loaded
and launched by the C runtime (no Triton at run time), against PyTorch's math SDPA in fp32.

The numerical check is test_triton_attn_jit.check, the one the kernel family passes through
Triton's JIT, with the launcher swapped for the runtime: same inputs, reference, yardstick and
bounds, so a difference between the two runs is the runtime's doing.

The bundle comes from $ATTNPACK_BUNDLE_DIR (build_tools/run_gpu_tests.sh builds it for this
GPU) and the library from $ATTNPACK_RUNTIME_LIB or the build folder.
"""
from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

import test_triton_attn_jit as family_check

from attnpack import runtime as rt
from attnpack.archive.format import FORMAT_MAJOR

GRID_SEQS = (1, 17, 128, 1000, 4096)


@pytest.fixture(scope="module")
def bundle():
    # No path and no arch: the runtime asks the device for its arch and finds its archive.
    with rt.Bundle() as opened:
        yield opened


@pytest.fixture
def through_runtime(bundle, monkeypatch):
    """Makes family_check.check launch through libattnpack; yields the kernels that ran."""
    served = []

    def run_ours(q, k, v, do, causal, scale, dtype):
        o = torch.full_like(q, float("nan"))  # poisoned: unwritten elements fail
        lse = torch.full(q.shape[:3], float("nan"), device=q.device, dtype=torch.float32)
        rt.forward(bundle, q, k, v, causal=causal, scale=scale, out=o, lse=lse)
        dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
        rt.backward(bundle, do, q, k, v, o, lse, causal=causal, scale=scale, dq=dq, dk=dk, dv=dv)
        served.append(bundle.select(rt.problem_from_tensors("fwd", q, k, v, o, lse,
                                                            causal=causal)).name)
        return o, lse, dq, dk, dv

    monkeypatch.setattr(family_check, "run_ours", run_ours)
    return served


def _grid():
    """The full product; B=3 cases use BSHD views (non-contiguous), B=1 cases BHSD."""
    cases = []
    for B in (1, 3):
        for Hq, Hkv in ((8, 8), (32, 8)):
            for sq in GRID_SEQS:
                for sk in GRID_SEQS:
                    for d in (64, 128):
                        for causal in (False, True):
                            for dtype in ("bf16", "fp16"):
                                layout = "bshd" if B == 3 else "bhsd"
                                cases.append(pytest.param(
                                    B, Hq, Hkv, sq, sk, d, causal, dtype, layout,
                                    id=f"{dtype}-d{d}-{'causal' if causal else 'full'}-"
                                       f"B{B}H{Hq}/{Hkv}-{sq}x{sk}-{layout}"))
    return cases


@pytest.mark.parametrize("B,Hq,Hkv,Sq,Sk,D,causal,dtype,layout", _grid())
def test_forward_and_backward_match_math_sdpa(through_runtime, B, Hq, Hkv, Sq, Sk, D, causal,
                                              dtype, layout):
    report = family_check.check(B, Hq, Hkv, Sq, Sk, D, causal, dtype, layout=layout)
    family, op, key = through_runtime[-1].split("/")[:3]
    # sm_90: triton or gluon; gfx950: triton or flydsl (a forward whose LSE triton's backward reads)
    assert (family, op) in {("triton", "fwd"), ("gluon", "fwd"), ("flydsl", "fwd")}, through_runtime
    assert key == f"{dtype}-d{D}-{'causal' if causal else 'full'}", through_runtime
    print(through_runtime[-1], report)


def test_views_into_a_packed_qkv_tensor(bundle):
    # q, k, v sliced out of one [B, S, 3, H, D] tensor: seq stride 3*H*D, nothing contiguous
    B, S, H, D = 2, 1000, 16, 128
    torch.manual_seed(0)
    qkv = torch.randn(B, S, 3, H, D, device="cuda", dtype=torch.bfloat16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert q.stride() == (S * 3 * H * D, D, 3 * H * D, 1)
    o, lse = rt.forward(bundle, q, k, v, causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=True)
    assert (o.float() - ref).abs().max().item() < 2e-2


@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_a_batch_past_the_grid_limit_runs_in_slices(bundle, through_runtime, causal):
    """B·Hq = 2100·32 = 67200 blocks is past grid y's 65535, where the triton and Gluon kernels
    put B·Hq: the runtime launches the batch as slices (docs/runtime.md, "Batches past the grid
    limits") instead of refusing it. Forward and backward as selected, checked as the grid
    above; then the forward forced to the selection table's default, whose grid is per tile
    (a tuned persistent forward's grid of num_sms never needs slices)."""
    B, Hq, Hkv, Sq, Sk, D = 2100, 32, 8, 17, 33, 64
    family_check.check(B, Hq, Hkv, Sq, Sk, D, causal, "bf16")
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o, lse = torch.empty_like(q), torch.empty(B, Hq, Sq, device="cuda")
    backward = rt.problem_from_tensors("bwd", q, k, v, o, lse, causal=causal, do=q, dq=q, dk=k,
                                       dv=v)
    assert "past the grid limits, launched as 2 slices of up to" in bundle.explain(backward)
    from attnpack.archive import read_archive
    default = next(e["kernel"] for e in read_archive(bundle.info()["path"]).index["selection"]
                   if (e["op"], e["dtype"], e["head_dim"], e["causal"]) == ("fwd", "bf16", D, causal))
    forced = rt.problem_from_tensors("fwd", q, k, v, o, lse, causal=causal, kernel=default)
    assert "launched as 2 slices" in bundle.explain(forced), bundle.explain(forced)
    o, lse = rt.forward(bundle, q, k, v, causal=causal, kernel=default)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    err = (o.float() - ref).abs().max().item()
    assert err <= family_check.FLOOR["bf16"] * max(ref.abs().max().item(), family_check.MIN_SCALE)


def test_unsupported_inputs_are_refused_not_launched(bundle):
    q = torch.randn(1, 8, 128, 80, device="cuda", dtype=torch.bfloat16)  # head dim 80
    with pytest.raises(rt.Unsupported) as info:
        rt.forward(bundle, q, q, q)
    assert info.value.reason == "head_dim 80 not built"
    q32 = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(rt.Unsupported, match="dtype fp32 not built"):
        rt.forward(bundle, q32, q32, q32)
    q = torch.randn(1, 8, 128, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 3, 128, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(rt.Unsupported, match="Hq 8 is not a multiple of Hkv 3"):
        rt.forward(bundle, q, k, k)
    stats = bundle.stats()["unsupported"]
    assert stats["head_dim 80 not built"] >= 1 and stats["dtype fp32 not built"] >= 1


def test_preloaded_kernels_run_inside_a_cuda_graph(bundle):
    B, H, S, D = 2, 8, 512, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    bundle.preload([rt.problem_from_tensors("fwd", q, k, v, o, lse, causal=True)])
    loaded = bundle.stats()["modules_loaded"]
    rt.forward(bundle, q, k, v, causal=True, out=o, lse=lse)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # launches go to the capturing stream, nothing loads
        rt.forward(bundle, q, k, v, causal=True, out=o, lse=lse)
    assert bundle.stats()["modules_loaded"] == loaded
    for _ in range(2):
        q.normal_()
        o.zero_()
        graph.replay()
        torch.cuda.synchronize()
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                               is_causal=True)
        assert (o.float() - ref).abs().max().item() < 2e-2


def test_an_archive_for_another_arch_is_refused(bundle, tmp_path):
    from attnpack.archive import Image, read_archive, write_archive
    from attnpack.targets import TARGETS
    ours = read_archive(bundle.info()["path"])
    # another target of the same vendor, so that only the arch differs from the device's
    other = next(t for t in TARGETS.values()
                 if t.vendor == ours.target["vendor"] and t.arch != ours.arch)
    path = tmp_path / f"attnpack-0.1.0-{other.arch}.apk"
    write_archive(path, arch=other.arch, target=other.meta(), bundle_version="0.1.0",
                  compilers=ours.meta["compilers"],
                  images=[Image(rec["kind"], rec["symbol"], ours.image(i))
                          for i, rec in enumerate(ours.index["images"])],
                  kernels=ours.kernels, selection=ours.index["selection"],
                  families=ours.index["families"])
    with pytest.raises(rt.AttnpackError) as info:
        rt.Bundle(path)  # the device is asked for its arch
    assert info.value.status == rt.Status.ARCH_MISMATCH
    assert info.value.message.startswith(f"archive {path} targets {other.arch} but the device is ")
    assert info.value.message.endswith(f"— use an attnpack-*-{ours.arch}.apk archive")


def test_the_device_bundle_reports_itself(bundle):
    info = bundle.info()
    props = torch.cuda.get_device_properties(0)
    arch = (props.gcnArchName.split(":")[0] if torch.version.hip
            else f"sm_{props.major}{props.minor}")
    assert info["arch"] == arch
    assert info["driver"] == ("hip" if torch.version.hip else "cuda")
    assert info["kernels"] > 0 and info["format"][0] == FORMAT_MAJOR
