"""Kernel selection: which kernel serves a problem, or the exact reason none does."""
import ctypes

import pytest

from attnpack import runtime as rt
from test_runtime_fixtures import (attention_kernels, expect_error, kernel, step,  # noqa: F401
                                   synthetic_archive, toy_archives, triton_fwd_archive,
                                   write_synthetic, FWD_WORDS, PER_Q_TILE)

S = rt.Status
BASE = dict(B=2, Hq=8, Hkv=8, Sq=128, Sk=128, D=64)


def problem(op="fwd", dtype="fp16", causal=False, strides=None, pointers=None, kernel=None,
            **sizes):
    return rt.make_problem(op, dtype, causal=causal, strides=strides, pointers=pointers,
                           kernel=kernel, **{**BASE, **sizes})


def bshd(H, S, D):
    """Strides of a [B, S, H, D] tensor viewed as [B, H, S, D]."""
    return (S * H * D, D, H * D, 1)


# (problem, the kernel that serves it or the reason it is not served)
TABLE = [
    (problem(), "synth/fwd/fp16-d64-full/M128"),
    (problem(causal=True), "synth/fwd/fp16-d64-causal/M128"),
    (problem("bwd", "bf16", True, D=128), "synth/bwd/bf16-d128-causal/M128"),
    (problem(Hq=32, Hkv=8, Sq=1, Sk=1000), "synth/fwd/fp16-d64-full/M128"),      # GQA, decode
    (problem(Sq=1000, Sk=17, strides={"q": bshd(8, 1000, 64), "o": bshd(8, 1000, 64)}),
     "synth/fwd/fp16-d64-full/M128"),
    (problem(D=80), "head_dim 80 not built"),
    (problem("bwd", D=256), "head_dim 256 not built"),
    (problem(dtype="fp32"), "dtype fp32 not built"),
    (problem(Hq=6, Hkv=4), "Hq 6 is not a multiple of Hkv 4"),
    (problem(Sq=0), "Sq=0: empty problems are not launched"),
    (problem(B=0), "B=0: empty problems are not launched"),
    (problem(strides={"q": (128 * 128, 128 * 128, 128, 2)}), "q last-dim stride is 2, must be 1"),
    (problem("bwd", strides={"dk": (8 * 128 * 64, 128 * 64, 64, 4)}),
     "dk last-dim stride is 4, must be 1"),
    (problem(strides={"v": (8 * 128 * 64, -64, 64, 1)}), "v_stride_h=-64 is negative"),
    (problem(pointers={"q": 0x10008}), "q is not 16-byte aligned"),
    (problem(pointers={"k": 0x10001}), "k is not 2-byte aligned"),
    (problem(pointers={"lse": 0x10004}), "lse is not 16-byte aligned"),
    (problem(pointers={"lse": 0x10002}), "lse is not 4-byte aligned"),
    (problem(strides={"q": (8 * 128 * 72, 128 * 72, 72, 1)}),
     "q_stride_s=72 is not a multiple of 16 (kernel promise)"),
    (problem("bwd", strides={"do": (8 * 128 * 64, 136, 64, 1)}),
     "do_stride_h=136 is not a multiple of 16 (kernel promise)"),
    # B·Hq past grid y's limit: served in batch slices (test_runtime_launch.py)
    (problem(B=1024, Hq=128, Hkv=128, Sq=16, Sk=16), "synth/fwd/fp16-d64-full/M128"),
    (problem(B=1, Hq=70000, Hkv=70000, Sq=16, Sk=16),
     "grid y of step fwd exceeds 65535 blocks, even for a batch slice"),
]


@pytest.mark.parametrize("case", range(len(TABLE)))
def test_selection_table(synthetic_archive, case):
    prob, expected = TABLE[case]
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        if "/" in expected:
            assert bundle.select(prob).name == expected
            assert bundle.select(prob).family == "synth"
        else:
            assert expect_error(S.UNSUPPORTED, bundle.select, prob) == expected


def test_an_unsupported_problem_is_its_own_exception(synthetic_archive):
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        with pytest.raises(rt.Unsupported) as info:
            bundle.select(problem(D=80))
    assert str(info.value) == "unsupported: head_dim 80 not built"
    assert info.value.reason == "head_dim 80 not built"


def test_what_is_not_built_is_named_precisely(tmp_path, triton_fwd_archive):
    causal_only = [k for k in attention_kernels(dtypes=("fp16",), head_dims=(64,))
                   if k["key"]["causal"]]
    path = write_synthetic(tmp_path / "a.apk", causal_only)
    with rt.Bundle(path, arch="sm_90") as bundle:
        assert expect_error(S.UNSUPPORTED, bundle.select, problem()) == \
            "non-causal fwd not built for fp16 head_dim 64"
        assert bundle.select(problem(causal=True)).name == "synth/fwd/fp16-d64-causal/M128"
    with rt.Bundle(triton_fwd_archive, arch="sm_90") as bundle:  # the real family, fwd only
        assert expect_error(S.UNSUPPORTED, bundle.select, problem("bwd")) == "op bwd not built"
        assert bundle.select(problem(causal=True)).name.startswith("triton/fwd/fp16-d64-causal/")
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(dtype="bf16")) == \
            "dtype bf16 not built"


def test_invalid_problems_are_invalid_arguments_not_unsupported(synthetic_archive):
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        assert expect_error(S.INVALID_ARGUMENT, bundle.select, rt.make_problem(
            "fwd", 7, **BASE)) == "dtype 7 is not an attnpack_dtype"
        assert expect_error(S.INVALID_ARGUMENT, bundle.select, rt.make_problem(
            0, "fp16", **BASE)) == "op 0 is not an attnpack_op"
        short = problem()
        short.struct_size = 16
        assert expect_error(S.INVALID_ARGUMENT, bundle.select, short) == (
            f"attnpack_problem.struct_size is 16; version 1 of the struct has "
            f"{rt.Problem.kernel.offset} bytes — set struct_size = sizeof(attnpack_problem)")
        null = ctypes.cast(None, ctypes.POINTER(rt.Problem))
        assert bundle._lib.attnpack_select(bundle.handle, null, None) == S.INVALID_ARGUMENT
        assert rt.library().attnpack_last_error().decode() == "problem is NULL"
    assert rt.library().attnpack_select(None, ctypes.byref(problem()), None) == S.INVALID_ARGUMENT
    assert rt.library().attnpack_last_error().decode() == "bundle is NULL"


def test_a_larger_struct_from_a_newer_caller_is_accepted(synthetic_archive):
    class NewerProblem(ctypes.Structure):
        _fields_ = [("v1", rt.Problem), ("future_field", ctypes.c_int64)]
    newer = NewerProblem(problem(), 123)
    newer.v1.struct_size = ctypes.sizeof(NewerProblem)
    kernel_info = rt.KernelInfo(struct_size=ctypes.sizeof(rt.KernelInfo))
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        assert bundle._lib.attnpack_select(bundle.handle, ctypes.cast(
            ctypes.byref(newer), ctypes.POINTER(rt.Problem)), ctypes.byref(kernel_info)) == S.OK
        assert kernel_info.name.decode() == "synth/fwd/fp16-d64-full/M128"  # lives until close


def test_an_older_callers_struct_has_no_kernel_field(synthetic_archive):
    # A version-1 caller's struct ends before `kernel`: whatever lies past its struct_size
    # (here a name the archive lacks) is not read, so the selection is the usual one.
    old = problem(kernel="synth/no/such/kernel")
    old.struct_size = rt.Problem.kernel.offset
    assert rt.Problem.flags.offset == rt.Problem.kernel.offset + 8
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        assert bundle.select(old).name == "synth/fwd/fp16-d64-full/M128"
        old.struct_size = ctypes.sizeof(rt.Problem)
        assert expect_error(S.INVALID_ARGUMENT, bundle.select, old) == \
            f"no kernel named 'synth/no/such/kernel' in {synthetic_archive}"


def test_explain_tells_the_decision(synthetic_archive):
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        text = bundle.explain(problem("bwd", "bf16", True, B=3, Hq=32, Hkv=8, Sq=1000, Sk=1000,
                                      D=128))
        assert text == (
            "problem: bwd bf16 B=3 Hq=32 Hkv=8 Sq=1000 Sk=1000 D=128 causal\n"
            f"archive: {synthetic_archive} (sm_90, bundle 0.1.0, format 3.0, triton=3.6.0)\n"
            "  tuning key: none (the archive has no tuning buckets)\n"
            "  default synth/bwd/bf16-d128-causal/M128: chosen\n"
            "kernel: synth/bwd/bf16-d128-causal/M128 (family synth, tile=M128)\n"
            "served by: default\n"
            "  step bwd_preprocess: sym0 grid [ceil(Sq/128), B*Hq, 1] = [8,96,1] block [128,1,1] "
            "cluster [1,1,1] shared 0 B, 13 params (96 B)\n"
            "  step bwd: sym0 grid [ceil(Sk/64), B*Hkv, 1] = [16,24,1] block [128,1,1] "
            "cluster [1,1,1] shared 0 B, 38 params (280 B)\n"
            "workspace: delta, 384000 bytes\n")
        text = bundle.explain(problem(pointers={"q": 0x10008}))
        assert text.endswith("  default synth/fwd/fp16-d64-full/M128: rejected, q is not 16-byte "
                             "aligned\n  unsupported: q is not 16-byte aligned\n"
                             "not served: q is not 16-byte aligned\n")
        assert bundle.explain(problem(D=80)).endswith(
            "  unsupported: head_dim 80 not built\nnot served: head_dim 80 not built\n")


def test_workspace_size(synthetic_archive, toy_archives):
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        assert bundle.workspace_size(problem()) == 0
        # delta: float32 [B, Hq, Sq]
        assert bundle.workspace_size(problem("bwd", B=3, Hq=32, Hkv=8, Sq=1000)) == 4 * 3 * 32 * 1000
        assert expect_error(S.UNSUPPORTED, bundle.workspace_size, problem(D=80)) == \
            "head_dim 80 not built"
    with rt.Bundle(toy_archives["sm_90"], arch="sm_90") as bundle:
        assert bundle.workspace_size(problem("bwd", B=2, Hq=4, Hkv=4, Sq=100, Sk=100, D=32)) == 3200


# ---- a forced kernel (attnpack_problem.kernel, for `attnpack tune`) --------------------------

TOY_FWD16 = "toy/fwd/fp16-d32-full/BLOCK16_warps1"   # the default
TOY_FWD32 = "toy/fwd/fp16-d32-full/BLOCK32_warps2"   # only ever forced in this archive


def toy_problem(op="fwd", kernel=None, **sizes):
    pointers = {"q": 0x10000, "o": 0x20000, "do": 0x30000, "dq": 0x40000}
    return rt.make_problem(op, "fp16", kernel=kernel, pointers=pointers,
                           **{**dict(B=2, Hq=4, Hkv=4, Sq=100, Sk=100, D=32), **sizes})


def test_a_forced_kernel_is_used_exactly(toy_archives):
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        assert bundle.select(toy_problem()).name == TOY_FWD16
        assert bundle.select(toy_problem(kernel=TOY_FWD32)).name == TOY_FWD32
        bundle.forward(toy_problem(kernel=TOY_FWD32))
        bundle.forward(toy_problem())
        forced, default = bundle.recorded_launches()["launches"]
        assert (forced["grid"], forced["block"]) == ([4, 8, 1], [64, 1, 1])    # ceil(100/32)
        assert (default["grid"], default["block"]) == ([7, 8, 1], [32, 1, 1])  # ceil(100/16)
        assert bundle.stats()["calls"] == {TOY_FWD16: 1, TOY_FWD32: 1}
        text = bundle.explain(toy_problem(kernel=TOY_FWD32))
        assert f"  forced {TOY_FWD32}: chosen\n" in text
        assert "served by: forced name (attnpack_problem.kernel)\n" in text
        assert "tuning key" not in text  # a forced name skips the lookup
        bwd = "toy/bwd/fp16-d32-causal/BLOCK16_warps1"
        assert bundle.workspace_size(toy_problem("bwd", kernel=bwd, causal=True)) == 3200


def test_a_forced_kernel_the_archive_lacks_is_an_invalid_argument(toy_archives):
    path = toy_archives["sm_90"]
    with rt.Bundle(path, recording=True) as bundle:
        for call in (bundle.select, bundle.explain, bundle.workspace_size, bundle.forward):
            assert expect_error(S.INVALID_ARGUMENT, call, toy_problem(kernel="toy/fwd/nope")) == \
                f"no kernel named 'toy/fwd/nope' in {path}"
        assert expect_error(S.INVALID_ARGUMENT, bundle.backward, toy_problem(
            "bwd", kernel=TOY_FWD16[:-1])) == f"no kernel named '{TOY_FWD16[:-1]}' in {path}"
        assert bundle.recorded_launches()["launches"] == []


def test_a_forced_kernel_for_another_key_or_layout_is_unsupported(synthetic_archive):
    with rt.Bundle(synthetic_archive, recording=True) as bundle:
        other = "synth/bwd/bf16-d128-causal/M128"
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(kernel=other)) == (
            f"kernel {other} is for bwd bf16 d128 causal, the problem is fwd fp16 d64 full")
        fwd_causal = "synth/fwd/fp16-d64-causal/M128"
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(kernel=fwd_causal)) == (
            f"kernel {fwd_causal} is for fwd fp16 d64 causal, the problem is fwd fp16 d64 full")
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(
            "bwd", D=128, kernel="synth/fwd/fp16-d128-full/M128")) == (
            "kernel synth/fwd/fp16-d128-full/M128 is for fwd fp16 d128 full, the problem is bwd "
            "fp16 d128 full")
        # its layout checks still apply
        fwd = "synth/fwd/fp16-d64-full/M128"
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(
            kernel=fwd, pointers={"q": 0x10008})) == "q is not 16-byte aligned"
        assert expect_error(S.UNSUPPORTED, bundle.forward, problem(
            kernel=fwd, strides={"q": (128 * 128, 128 * 128, 128, 2)})) == \
            "q last-dim stride is 2, must be 1"
        # and so do the problem's own checks
        assert expect_error(S.UNSUPPORTED, bundle.select, problem(kernel=fwd, Sq=0)) == \
            "Sq=0: empty problems are not launched"
        assert bundle.explain(problem(kernel=other)).endswith(
            f"not served: kernel {other} is for bwd bf16 d128 causal, the problem is fwd fp16 "
            "d64 full\n")
        assert bundle.stats()["unsupported"] == {"q last-dim stride is 2, must be 1": 1}


def test_the_torch_helpers_pass_the_kernel_name(toy_archives, monkeypatch):
    """runtime.forward/backward as `attnpack tune` calls them, on CPU tensors (recording)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(rt, "_stream", lambda t: 0)  # CPU tensors have no CUDA stream

    def aligned_workspace(bundle, problem, device):  # as CUDA allocations are; CPU ones not
        size = bundle.workspace_size(problem)
        raw = torch.empty(size + 256, dtype=torch.uint8)
        return raw[-raw.data_ptr() % 256:][:size] if size else None
    monkeypatch.setattr(rt, "_workspace", aligned_workspace)
    B, H, S, D = 1, 2, 50, 32
    q, k, v, do = (torch.zeros(B, H, S, D, dtype=torch.float16) for _ in range(4))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, dtype=torch.float32)
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        rt.forward(bundle, q, k, v, causal=False, scale=0.5, out=o, lse=lse, kernel=TOY_FWD32)
        [launch] = bundle.recorded_launches()["launches"]
        assert (launch["grid"], launch["block"]) == ([2, 2, 1], [64, 1, 1])
        bwd = "toy/bwd/fp16-d32-causal/BLOCK16_warps1"
        dq, dk, dv = rt.backward(bundle, do, q, k, v, o, lse, causal=True, scale=0.5,
                                 kernel=bwd)
        assert dq.shape == q.shape and dk.shape == k.shape
        assert [x["symbol"] for x in bundle.recorded_launches()["launches"]] == [
            "row_sums", "scale_rows"]
        assert bundle.stats()["calls"] == {TOY_FWD32: 1, bwd: 1}
        with pytest.raises(rt.Unsupported, match=f"kernel {bwd} is for bwd fp16 d32 causal, "
                                                 "the problem is bwd fp16 d32 full"):
            rt.backward(bundle, do, q, k, v, o, lse, causal=False, kernel=bwd)
        prob = rt.problem_from_tensors("fwd", q, k, v, o, lse, kernel=TOY_FWD32)
        assert bundle.select(prob).name == TOY_FWD32
