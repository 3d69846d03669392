"""Kernel selection: which kernel serves a problem, or the exact reason none does."""
import ctypes

import pytest

from attnpack import runtime as rt
from test_runtime_fixtures import (attention_kernels, expect_error, kernel, step,  # noqa: F401
                                   synthetic_archive, toy_archives, triton_fwd_archive,
                                   write_synthetic, FWD_WORDS, PER_Q_TILE)

S = rt.Status
BASE = dict(B=2, Hq=8, Hkv=8, Sq=128, Sk=128, D=64)


def problem(op="fwd", dtype="fp16", causal=False, strides=None, pointers=None, **sizes):
    return rt.make_problem(op, dtype, causal=causal, strides=strides, pointers=pointers,
                           **{**BASE, **sizes})


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
    (problem(B=1024, Hq=128, Hkv=128, Sq=16, Sk=16), "grid y of step fwd exceeds 65535 blocks"),
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
            f"{ctypes.sizeof(rt.Problem)} bytes — set struct_size = sizeof(attnpack_problem)")
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


def test_explain_tells_the_decision(synthetic_archive):
    with rt.Bundle(synthetic_archive, arch="sm_90") as bundle:
        text = bundle.explain(problem("bwd", "bf16", True, B=3, Hq=32, Hkv=8, Sq=1000, Sk=1000,
                                      D=128))
        assert text == (
            "problem: bwd bf16 B=3 Hq=32 Hkv=8 Sq=1000 Sk=1000 D=128 causal\n"
            f"archive: {synthetic_archive} (sm_90, bundle 0.1.0, format 1.0, triton=3.6.0)\n"
            "  default synth/bwd/bf16-d128-causal/M128: chosen\n"
            "kernel: synth/bwd/bf16-d128-causal/M128 (family synth, tile=M128)\n"
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
