"""The launch path without a GPU: the recording driver captures what would reach the driver.

Argument bytes, grids, clusters, workspace carving, Triton's scratch pointers and host tensor
maps are checked against an independent reading of the launch spec written here in Python.
"""
import math
import struct
import threading

import pytest

from attnpack import abi
from attnpack import runtime as rt
from attnpack.archive import read_archive
from test_runtime_fixtures import (PARAM_ALIGN, attention_kernels, expect_error,  # noqa: F401
                                   kernarg_size, kernel, param_offsets, step, strides_of, synthetic_archive,
                                   toy_archives, triton_fwd_archive, write_synthetic, FWD_WORDS,
                                   PER_Q_TILE, run_threads)

S = rt.Status
LOG2E = 1.4426950408889634
NUM_SMS = 132  # the recording driver's device
PACK = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def word_values(prob: rt.Problem, workspace: dict[str, int] | None = None) -> dict:
    """Every launch-spec word's value for `prob`, read from the ctypes struct."""
    values = {"B": prob.batch, "Hq": prob.heads_q, "Hkv": prob.heads_kv, "Sq": prob.seqlen_q,
              "Sk": prob.seqlen_k, "lse": prob.lse or 0, "global_scratch": 0, "profile_scratch": 0}
    scale = f32(prob.softmax_scale or 1 / math.sqrt(prob.head_dim))
    values.update(sm_scale=scale, sm_scale_log2=f32(scale * LOG2E))
    for field, word in zip(rt.TENSOR_FIELDS, abi.TENSORS):
        t = getattr(prob, field)
        values[word] = t.data or 0
        for axis in abi.STRIDE_AXES:
            values[abi.stride_name(word, axis)] = getattr(t, f"stride_{axis}")
    values.update(workspace or {})
    return values


def expected_args(step_record: dict, values: dict) -> bytes:
    """Each value at the offset the index gives it, zeros elsewhere. The offsets of these
    Triton images follow natural alignment, checked here independently of the runtime."""
    params = step_record["params"]
    assert [p[3] for p in params] == param_offsets([p[1] for p in params])
    out = bytearray(step_record["kernarg_size"])
    for word, typ, _, offset in params:
        struct.pack_into(PACK[typ], out, offset, values[word])
    assert len(out) == kernarg_size(p[1] for p in params)
    return bytes(out)


def expected_grid(step_record: dict, values: dict) -> list[int]:
    return [math.prod(-(-values[w] // d) for w, d in dim) * c
            for dim, c in zip(step_record["grid"], step_record["cluster"])]


def recorded(bundle) -> list[dict]:
    return bundle.recorded_launches()["launches"]


def test_triton_forward_arguments_grid_and_resources(triton_fwd_archive):
    ar = read_archive(triton_fwd_archive)
    # BSHD views with GQA, Sq != Sk, an explicit scale
    B, Hq, Hkv, Sq, Sk, D = 3, 32, 8, 1000, 17, 64
    prob = rt.make_problem("fwd", "fp16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, causal=True,
                           scale=0.3, strides={"q": (Sq * Hq * D, D, Hq * D, 1),
                                               "o": (Sq * Hq * D, D, Hq * D, 1),
                                               "k": (Sk * Hkv * D, D, Hkv * D, 1),
                                               "v": (Sk * Hkv * D, D, Hkv * D, 1)},
                           pointers={"q": 0x7f0000001000, "k": 0x7f0000101000,
                                     "v": 0x7f0000201000, "o": 0x7f0000301000,
                                     "lse": 0x7f0000401000})
    with rt.Bundle(triton_fwd_archive, recording=True) as bundle:
        name = bundle.select(prob).name  # the tuning db's pick for this bucket, or the default
        bundle.forward(prob, stream=0x1234)
        [launch] = recorded(bundle)
    assert name.startswith("triton/fwd/fp16-d64-causal/")
    spec = ar.kernel(name)["steps"][0]
    values = word_values(prob)
    assert launch["symbol"] == spec["symbol"] == "attn_fwd"
    assert bytes.fromhex(launch["args"]) == expected_args(spec, values)
    assert launch["grid"] == expected_grid(spec, values)
    assert launch["block"] == spec["block"] and launch["cluster"] == [1, 1, 1]
    assert launch["shared"] == spec["shared"] > 0
    assert launch["stream"] == 0x1234
    assert launch["tensormaps"] == []


def test_backward_carves_the_workspace_in_declared_order(toy_archives):
    ar = read_archive(toy_archives["sm_90"])
    k = ar.kernel("toy/bwd/fp16-d32-causal/BLOCK16_warps1")
    prob = rt.make_problem("bwd", "fp16", B=2, Hq=4, Hkv=4, Sq=100, Sk=100, D=32, causal=True,
                           pointers={"do": 0x10000, "dq": 0x20000})
    base = 0x7f0000000000
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        size = bundle.workspace_size(prob)
        assert size == 4 * 2 * 4 * 100
        bundle.backward(prob, workspace=base, workspace_size=size)
        launches = recorded(bundle)
    assert [launch["symbol"] for launch in launches] == [s["symbol"] for s in k["steps"]]
    values = word_values(prob, {"delta": base})
    for launch, spec in zip(launches, k["steps"]):
        assert bytes.fromhex(launch["args"]) == expected_args(spec, values)
        assert launch["grid"] == expected_grid(spec, values) == [7, 8, 1]


def test_a_batch_past_the_grid_limit_launches_in_slices(toy_archives):
    """B·Hq = 17·4096 is past grid y's 65535 blocks: the backward runs as two whole problems,
    B=15 then B=2, each with every tensor and the LSE moved to its first batch element, and the
    workspace the larger one needs, reused (the slices run in order on one stream)."""
    ar = read_archive(toy_archives["sm_90"])
    k = ar.kernel("toy/bwd/fp16-d32-causal/BLOCK16_warps1")
    B, H, S, D = 17, 4096, 100, 32
    names = ("q", "k", "v", "o", "do", "dq", "dk", "dv")
    pointers = {name: 0x100000000 * (i + 1) for i, name in enumerate(names)}
    pointers["lse"] = 0x900000000
    make = lambda b0, n: rt.make_problem(  # noqa: E731
        "bwd", "fp16", B=n, Hq=H, Hkv=H, Sq=S, Sk=S, D=D, causal=True,
        pointers={**{t: p + b0 * H * S * D * 2 for t, p in pointers.items() if t != "lse"},
                  "lse": pointers["lse"] + b0 * H * S * 4})
    base = 0x7f0000000000
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        prob = make(0, B)
        assert bundle.select(prob).name == k["name"]
        size = bundle.workspace_size(prob)
        assert size == 4 * 15 * H * S  # delta, for the larger slice
        assert "batch: B=17 past the grid limits, launched as 2 slices of up to 15\n" in \
            bundle.explain(prob)
        bundle.backward(prob, workspace=base, workspace_size=size)
        launches = recorded(bundle)
    steps = k["steps"]
    assert len(launches) == 2 * len(steps)
    for i, (b0, n) in enumerate(((0, 15), (15, 2))):
        values = word_values(make(b0, n), {"delta": base})
        for launch, spec in zip(launches[i * len(steps):], steps):
            assert bytes.fromhex(launch["args"]) == expected_args(spec, values)
            assert launch["grid"] == expected_grid(spec, values)
            assert launch["grid"][1] == n * H


def test_batch_slices_keep_the_lse_aligned_and_refuse_what_no_slice_fits(synthetic_archive):
    """A slice's LSE starts b0·Hq·Sq floats in: with Hq·Sq odd the slices hold a multiple of 4
    batch elements, so each LSE stays 16-byte aligned. A grid one batch element overflows is
    refused as before."""
    H, D = 1023, 64
    base = {"q": 0x100000, "k": 0x200000, "v": 0x300000, "o": 0x400000, "lse": 0x500000}
    make = lambda b0, n: rt.make_problem(  # noqa: E731
        "fwd", "fp16", B=n, Hq=H, Hkv=H, Sq=1, Sk=16, D=D,
        pointers={"q": base["q"] + b0 * H * D * 2, "o": base["o"] + b0 * H * D * 2,
                  "k": base["k"] + b0 * H * 16 * D * 2, "v": base["v"] + b0 * H * 16 * D * 2,
                  "lse": base["lse"] + b0 * H * 4})
    huge = rt.make_problem("fwd", "fp16", B=1, Hq=70000, Hkv=70000, Sq=16, Sk=16, D=64)
    with rt.Bundle(synthetic_archive, recording=True) as bundle:
        odd = make(0, 301)
        name = bundle.select(odd).name
        # 64 x 1023 = 65472 fits grid y, and 64 is a multiple of 4 (65 x 1023 does not fit)
        assert "launched as 5 slices of up to 64\n" in bundle.explain(odd)
        bundle.forward(odd)
        launches = recorded(bundle)
        assert expect_error(S.UNSUPPORTED, bundle.select, huge) == \
            "grid y of step fwd exceeds 65535 blocks, even for a batch slice"
    spec = read_archive(synthetic_archive).kernel(name)["steps"][0]
    slices = [(b0, min(64, 301 - b0)) for b0 in range(0, 301, 64)]
    assert len(launches) == len(slices) == 5
    for launch, (b0, n) in zip(launches, slices):
        values = word_values(make(b0, n))
        assert bytes.fromhex(launch["args"]) == expected_args(spec, values)
        assert values["lse"] % 16 == 0 and launch["grid"][1] == n * H


def test_workspace_mistakes_are_invalid_arguments(toy_archives):
    prob = rt.make_problem("bwd", "fp16", B=2, Hq=4, Hkv=4, Sq=100, Sk=100, D=32,
                           pointers={"do": 0x10000, "dq": 0x20000})
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        assert expect_error(S.INVALID_ARGUMENT, bundle.backward, prob) == (
            "the workspace is 0 bytes; toy/bwd/fp16-d32-full/BLOCK16_warps1 needs 3200 for this "
            "problem (attnpack_workspace_size)")
        assert "is 3199 bytes" in expect_error(S.INVALID_ARGUMENT, bundle.backward, prob,
                                               workspace=0x100000, workspace_size=3199)
        assert expect_error(S.INVALID_ARGUMENT, bundle.backward, prob, workspace=0x100010,
                            workspace_size=4096) == "the workspace is not 256-byte aligned"
        assert recorded(bundle) == []


def test_null_pointers_and_the_wrong_entry_point(toy_archives):
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        fwd = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=32,
                              pointers={"q": 0x10000})
        assert expect_error(S.INVALID_ARGUMENT, bundle.forward, fwd) == "o is NULL"
        fwd.o.data = 0x20000
        assert expect_error(S.INVALID_ARGUMENT, bundle.backward, fwd) == \
            "attnpack_backward needs problem->op = ATTNPACK_OP_BWD"
        bundle.forward(fwd)
        assert len(recorded(bundle)) == 1
        assert bundle._lib.attnpack_forward(bundle.handle, None, None) == S.INVALID_ARGUMENT
        assert rt.library().attnpack_last_error().decode() == "problem is NULL"


def test_lse_pointer_is_required_when_the_kernel_writes_it(synthetic_archive):
    prob = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=64,
                           pointers={t: 0x10000 * (i + 1) for i, t in enumerate("qkvo")})
    with rt.Bundle(synthetic_archive, recording=True) as bundle:
        assert expect_error(S.INVALID_ARGUMENT, bundle.forward, prob) == "lse is NULL"


def test_unsupported_launches_are_counted_per_reason(synthetic_archive):
    with rt.Bundle(synthetic_archive, recording=True) as bundle:
        good = rt.make_problem("fwd", "bf16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=128,
                               pointers={t: 0x10000 * (i + 1) for i, t in enumerate(
                                   ["q", "k", "v", "o", "lse"])})
        for _ in range(3):
            bundle.forward(good)
        for d in (80, 80, 96):
            with pytest.raises(rt.Unsupported):
                bundle.forward(rt.make_problem("fwd", "bf16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=d))
        assert bundle.stats() == {
            "calls": {"synth/fwd/bf16-d128-full/M128": 3},
            "unsupported": {"head_dim 80 not built": 2, "head_dim 96 not built": 1},
            "modules_loaded": 1}
        with pytest.raises(rt.Unsupported):  # select is introspection: it counts nothing
            bundle.select(rt.make_problem("fwd", "bf16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=80))
        assert bundle.stats()["unsupported"]["head_dim 80 not built"] == 2
        bundle.reset_stats()
        assert bundle.stats() == {"calls": {}, "unsupported": {}, "modules_loaded": 1}


# ---- synthetic specs: clusters, scratch, persistent grids, tensor maps ---------------------

def _fwd_problem(D=64, dtype="bf16", **kw):
    pointers = {t: 0x7f0000000000 + 0x1000000 * i for i, t in enumerate(["q", "k", "v", "o", "lse"])}
    return rt.make_problem("fwd", dtype, B=2, Hq=4, Hkv=2, Sq=300, Sk=300, D=D, pointers=pointers,
                           **kw)


def test_clusters_scratch_and_persistent_grids(tmp_path):
    scratch = {"global_size": 96, "global_align": 128, "profile_size": 40, "profile_align": 8}
    persistent = ((("num_sms", 1),), (), ())
    steps = [step("fwd", 0, FWD_WORDS, PER_Q_TILE, cluster=(2, 1, 1), scratch=scratch,
                  workspace=["delta"], shared=200_000),
             step("fwd_persistent", 1, FWD_WORDS, persistent, scratch=dict(scratch, profile_size=0))]
    path = write_synthetic(tmp_path / "a.apk", [kernel("synth", "fwd", "bf16", 64, False, steps,
                                                       workspace=["delta"])])
    prob = _fwd_problem()
    ws = 0x7e0000000000
    with rt.Bundle(path, recording=True) as bundle:
        size = bundle.workspace_size(prob)
        # delta [B, Hq, Sq] fp32, then one scratch region the steps share:
        # step 0 runs 3*8 programs x 2-block clusters, step 1 one program per SM
        delta = 4 * 2 * 4 * 300
        base = -(-delta // 256) * 256
        blocks0 = 3 * 8 * 2
        g0 = 96 * blocks0
        p0 = -(-g0 // 256) * 256
        region = max(p0 + 40 * blocks0, 96 * NUM_SMS)
        assert size == base + region
        bundle.forward(prob, workspace=ws, workspace_size=size)
        first, second = recorded(bundle)
        assert bundle.stats()["modules_loaded"] == 2
    values = word_values(prob, {"delta": ws})
    assert first["grid"] == [3 * 2, 8, 1] and first["cluster"] == [2, 1, 1]
    assert first["shared"] == 200_000
    assert bytes.fromhex(first["args"]) == expected_args(
        steps[0], {**values, "global_scratch": ws + base, "profile_scratch": ws + base + p0})
    assert second["grid"] == [NUM_SMS, 1, 1] and second["cluster"] == [1, 1, 1]
    assert bytes.fromhex(second["args"]) == expected_args(
        steps[1], {**values, "global_scratch": ws + base, "profile_scratch": 0})


def _tensormap_kernel(tmp_path, box=(1, 1, 128, 64)):
    maps = [{"param": "q_desc", "tensor": "q", "box": list(box), "swizzle": 128,
             "l2_promotion": 256, "oob_fill": "zero"},
            {"param": "lse_desc", "tensor": "lse", "box": [1, 1, 128], "swizzle": 0,
             "l2_promotion": 0, "oob_fill": "nan"}]
    words = ["q_desc", "k", "v", "o", "lse_desc", "Sq", *strides_of("k", "v", "o"), "sm_scale"]
    s = step("fwd", 0, words, PER_Q_TILE, tensormaps=maps)
    path = write_synthetic(tmp_path / "tma.apk", [kernel("synth", "fwd", "bf16", 64, False, [s])])
    return path, s


def test_host_tensor_maps_are_encoded_from_the_problem(tmp_path):
    path, spec = _tensormap_kernel(tmp_path)
    assert [p[1] for p in spec["params"]][:1] == ["tensormap"]
    B, Hq, Sq, D = 2, 4, 300, 64
    prob = _fwd_problem(strides={"q": (Sq * Hq * D, D, Hq * D, 1)})  # BSHD
    with rt.Bundle(path, recording=True) as bundle:
        bundle.forward(prob)
        [launch] = recorded(bundle)
    q_map, lse_map = launch["tensormaps"]
    assert q_map == {"data_type": 9, "rank": 4, "address": prob.q.data,
                     "dims": [D, Sq, Hq, B],                        # innermost first
                     "strides": [Hq * D * 2, D * 2, Sq * Hq * D * 2],  # bytes, of dims 1..3
                     "box": [64, 128, 1, 1], "element_strides": [1, 1, 1, 1],
                     "interleave": 0, "swizzle": 3, "l2_promotion": 3, "oob_fill": 0}
    assert lse_map == {"data_type": 7, "rank": 3, "address": prob.lse, "dims": [Sq, Hq, B],
                       "strides": [Sq * 4, Hq * Sq * 4], "box": [128, 1, 1],
                       "element_strides": [1, 1, 1], "interleave": 0, "swizzle": 0,
                       "l2_promotion": 0, "oob_fill": 1}
    # Each descriptor sits in its 128-byte slot, 64-byte aligned in the constant bank (whose
    # parameters start at 0x210), so at 48 mod 64 in the argument buffer; the recording driver
    # writes the address there as a stand-in for the opaque bytes.
    args, offsets = bytes.fromhex(launch["args"]), launch["arg_offsets"]
    assert offsets == param_offsets([p[1] for p in spec["params"]])
    assert offsets[0] == 48 and (0x210 + offsets[4]) % 64 == 0
    assert args[:48] == bytes(48)
    assert args[48:56] == struct.pack("<Q", prob.q.data) and args[56:176] == bytes(120)
    assert args[offsets[4]:offsets[4] + 8] == struct.pack("<Q", prob.lse)
    assert len(args) == spec["kernarg_size"] and len(args) % 8 == 0


def _workspace_map_kernel(tmp_path, shape=("B", "Hq", "Sq", "D"), box=(1, 1, 64, 32),
                          rename=None):
    """A kernel whose tensor map views its workspace buffer `acc` (format 2.4), followed by
    Triton's expansion: the buffer's shape words and its `acc_stride_<axis>` words. `rename`
    (old, new) swaps one word of the spec for another."""
    maps = [{"param": "acc_desc", "tensor": "acc", "box": list(box), "swizzle": 128,
             "l2_promotion": 128, "oob_fill": "zero"}]
    words = [w for w, _ in abi.tensormap_params("acc_desc", "acc", shape)] + FWD_WORDS
    s = step("fwd", 0, words, PER_Q_TILE, tensormaps=maps, workspace=["acc"])
    if rename:
        s["params"] = [[rename[1], *p[1:]] if p[0] == rename[0] else p for p in s["params"]]
    k = dict(kernel("synth", "fwd", "bf16", 64, False, [s]),
             workspace=[{"name": "acc", "shape": list(shape)}])
    return write_synthetic(tmp_path / "ws_tma.apk", [k]), s


def test_a_tensor_map_may_view_a_workspace_buffer(tmp_path):
    path, spec = _workspace_map_kernel(tmp_path)
    B, Hq, Sq, D = 2, 4, 300, 64
    base, size = 0x7e0000000000, 4 * B * Hq * Sq * D
    prob = _fwd_problem()
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.workspace_size(prob) == size
        bundle.forward(prob, workspace=base, workspace_size=size)
        [launch] = recorded(bundle)
    [acc_map] = launch["tensormaps"]
    assert acc_map == {"data_type": 7, "rank": 4, "address": base, "dims": [D, Sq, Hq, B],
                       "strides": [D * 4, Sq * D * 4, Hq * Sq * D * 4],  # bytes, dims 1..3
                       "box": [32, 64, 1, 1], "element_strides": [1, 1, 1, 1], "interleave": 0,
                       "swizzle": 3, "l2_promotion": 2, "oob_fill": 0}
    # Triton's expansion after the descriptor: the shape, then the element strides
    args, types = bytes.fromhex(launch["args"]), [p[1] for p in spec["params"]]
    at = dict(zip((p[0] for p in spec["params"]), param_offsets(types)))
    read = lambda word, fmt: struct.unpack_from(fmt, args, at[word])[0]
    assert [read(w, "<i") for w in ("B", "Hq", "Sq", "D")] == [B, Hq, Sq, D]
    assert [read(f"acc_stride_{a}", "<q") for a in "bhsd"] == [Hq * Sq * D, Sq * D, D, 1]


def test_workspace_stride_words_name_a_dim_of_a_workspace_buffer(tmp_path):
    path, _ = _workspace_map_kernel(tmp_path, rename=("acc_stride_d", "acc_stride_x"))
    with rt.Bundle(path, recording=True) as bundle:
        message = expect_error(S.BAD_LAUNCH_SPEC, bundle.select, _fwd_problem())
    assert message.endswith("step fwd parameter word 'acc_stride_x' is not in this runtime's "
                            "vocabulary — update the runtime")
    assert abi.workspace_stride("acc_stride_s", ("acc",)) == ("acc", 2)
    assert abi.workspace_stride("acc_stride_s", ()) is None
    assert abi.param_types("acc_stride_h", ("acc",)) == ("i64", "i32")
    with pytest.raises(ValueError, match="each a size word or D"):
        abi.tensormap_params("acc_desc", "acc", ("B", "Sk/256"))


def test_a_workspace_tensor_map_needs_16_byte_rows(tmp_path):
    path, _ = _workspace_map_kernel(tmp_path, shape=("B", "Hq", "Sq", "Hkv"), box=(1, 1, 64, 2))
    with rt.Bundle(path, recording=True) as bundle:
        # Hkv = 2: 8-byte rows
        assert expect_error(S.UNSUPPORTED, bundle.forward, _fwd_problem(), workspace=0x7e0000000000,
                            workspace_size=1 << 20) == \
            "workspace acc's rows are 8 bytes, not a multiple of 16 (tensor map acc_desc)"


def test_tensor_map_pitches_must_be_multiples_of_16_bytes(tmp_path):
    path, _ = _tensormap_kernel(tmp_path)
    prob = _fwd_problem(strides={"q": (300 * 4 * 64, 300 * 64, 36, 1)})
    with rt.Bundle(path, recording=True) as bundle:
        assert expect_error(S.UNSUPPORTED, bundle.forward, prob) == \
            "q_stride_s=36 is a 72-byte pitch, not a multiple of 16 (tensor map q_desc)"


def test_specs_this_runtime_cannot_launch_are_bad_launch_specs(tmp_path):
    base = step("fwd", 0, FWD_WORDS, PER_Q_TILE)
    cases = {
        "past_end": (dict(base, kernarg_size=base["kernarg_size"] - 8),
                     f"step fwd parameter profile_scratch at byte {base['kernarg_size'] - 8} is "
                     f"misaligned or ends past the {base['kernarg_size'] - 8}-byte argument segment"),
        "misaligned": (dict(base, params=[["q", "ptr", 16, 4]] + base["params"][1:]),
                       f"step fwd parameter q at byte 4 is misaligned or ends past the "
                       f"{base['kernarg_size']}-byte argument segment"),
        "overlap": (dict(base, params=[base["params"][0], [*base["params"][1][:3], 0]]
                         + base["params"][2:]),
                    "step fwd has parameters that overlap at byte 0"),
        "too_big": (dict(base, kernarg_size=8192),
                    "step fwd has 8192 bytes of arguments (more than 4096)"),
        "word": (dict(base, params=base["params"] + [["q_descale", "f32", 1, 0]]),
                 "step fwd parameter word 'q_descale' is not in this runtime's vocabulary — "
                 "update the runtime"),
        "type": (dict(base, params=[["q", "i64", 16, 0]] + base["params"][1:]),
                 "step fwd parameter q has type i64, which its word cannot take"),
        "grid": (dict(base, grid=[[["Sq", 128]], [["heads", 1]], []]),
                 "step fwd grid factor 'heads' is not in this runtime's vocabulary"),
        "symbol": (dict(base, symbol="other"), "step fwd symbol other differs from its image's sym0"),
        # a map whose parameter is missing (a fuzzer's mutant cut the params list after q_desc)
        "unpassed_map": (dict(base, tensormaps=[{"param": "k_desc", "tensor": "k",
                                                 "box": [1, 1, 64, 64], "swizzle": 128,
                                                 "l2_promotion": 0, "oob_fill": "zero"}]),
                         "step fwd tensor map k_desc is passed by no parameter"),
    }
    for name, (bad_step, defect) in cases.items():
        path = write_synthetic(tmp_path / f"{name}.apk",
                               [kernel("synth", "fwd", "fp16", 64, False, [bad_step])])
        with rt.Bundle(path, recording=True) as bundle:
            prob = _fwd_problem(dtype="fp16")
            message = expect_error(S.BAD_LAUNCH_SPEC, bundle.select, prob)
            assert message == f"archive {path}: kernel synth/fwd/fp16-d64-full/M128 {defect}"
            assert expect_error(S.BAD_LAUNCH_SPEC, bundle.forward, prob) == message


def test_hip_launches_take_the_packed_buffer_and_refuse_clusters(toy_archives, tmp_path):
    ar = read_archive(toy_archives["gfx950"])
    spec = ar.kernel("toy/fwd/fp16-d32-full/BLOCK16_warps1")["steps"][0]
    prob = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=40, Sk=40, D=32,
                           pointers={"q": 0x10000, "o": 0x20000})
    with rt.Bundle(toy_archives["gfx950"], recording=True) as bundle:
        bundle.forward(prob)
        [launch] = recorded(bundle)
    assert launch["block"] == [64, 1, 1]  # one wave64 warp
    assert bytes.fromhex(launch["args"]) == expected_args(spec, word_values(prob))
    clustered = step("fwd", 0, FWD_WORDS, PER_Q_TILE, cluster=(2, 1, 1))
    path = write_synthetic(tmp_path / "attnpack-0.1.0-gfx950.apk",
                           [kernel("synth", "fwd", "fp16", 64, False, [clustered])], arch="gfx950")
    with rt.Bundle(path, recording=True) as bundle:
        assert expect_error(S.BAD_LAUNCH_SPEC, bundle.select, _fwd_problem(dtype="fp16")).endswith(
            "step fwd declares clusters, which HIP does not launch")


# ---- loading: lazily, once, and ahead of time ----------------------------------------------

def test_concurrent_first_calls_load_each_image_exactly_once(synthetic_archive):
    problems = [_fwd_problem(D=d, dtype=t) for d in (64, 128) for t in ("fp16", "bf16")]
    with rt.Bundle(synthetic_archive, recording=True) as bundle:
        barrier, errors = threading.Barrier(16), []

        def worker(i):
            try:
                barrier.wait()
                for _ in range(10):
                    bundle.forward(problems[i % len(problems)])
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        run_threads(worker, 16)
        assert errors == []
        stats = bundle.stats()
        # every synthetic kernel shares image 0: one load for 160 launches on 16 threads
        assert stats["modules_loaded"] == 1
        assert sum(stats["calls"].values()) == 160
        assert len(bundle.recorded_launches()["loaded"]) == 1


def test_preload_loads_ahead_so_launches_load_nothing(toy_archives):
    fwd = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=32,
                          pointers={"q": 0x10000, "o": 0x20000})
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        bundle.preload([fwd, rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=80)])
        assert bundle.stats()["modules_loaded"] == 1  # the unsupported one is skipped
        bundle.forward(fwd)
        assert bundle.stats()["modules_loaded"] == 1
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        bundle.preload()  # the whole selection table: scale_rows and row_sums
        loaded = bundle.recorded_launches()["loaded"]
        assert sorted(s.split()[0] for s in loaded) == ["row_sums", "scale_rows"]
        assert bundle.stats()["modules_loaded"] == 2


def test_each_device_loads_its_own_images_and_launches_only_them(toy_archives):
    """Two pretend GPUs (the recording driver's devices are separate contexts): each loads the
    image once, also under concurrent first calls, and a function loaded on device 0 is never
    launched on device 1."""
    fwd = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=32,
                          pointers={"q": 0x10000, "o": 0x20000})
    with rt.Bundle(toy_archives["sm_90"], recording=True) as bundle:
        def worker(i):
            bundle.set_recording_device(i % 2)
            for _ in range(10):
                bundle.forward(fwd)

        run_threads(worker, 8)
        record = bundle.recorded_launches()
        assert bundle.stats()["modules_loaded"] == 2
        # this thread never chose a device: device 0, whose image is loaded already
        bundle.forward(fwd)
        [launch] = bundle.recorded_launches()["launches"]
        assert launch["device"] == 0 and bundle.stats()["modules_loaded"] == 2
        expect_error(rt.Status.INVALID_ARGUMENT, bundle.set_recording_device, -1)
    assert sorted(record["loaded_devices"]) == [0, 1]
    assert len(record["loaded"]) == 2 and record["loaded"][0] == record["loaded"][1]
    assert len(record["launches"]) == 80
    assert sorted(launch["device"] for launch in record["launches"]) == [0] * 40 + [1] * 40
    for launch in record["launches"]:
        assert record["loaded_devices"][launch["function"] - 1] == launch["device"], launch


def test_only_a_recording_bundle_pretends_devices(toy_archives):
    with rt.Bundle(toy_archives["sm_90"], arch="sm_90") as bundle:
        message = expect_error(rt.Status.INVALID_ARGUMENT, bundle.set_recording_device, 1)
    assert "ATTNPACK_OPEN_RECORDING_DRIVER" in message
