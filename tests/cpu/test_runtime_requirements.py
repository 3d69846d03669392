"""Format 2.1's (and 2.2's) generic additions in the runtime, on synthetic archives (stand-in images):
kernel requirements (the index's `requires`), the parametric words `const:<literal>` and
`<word>*<n>`, the words Hq_per_Hkv and lse strides, workspace shapes with D, and the recording
driver's $ATTNPACK_RECORDING_NUM_SMS. Python's abi and verify must agree with the runtime."""
import math
import struct

import pytest

from attnpack import abi
from attnpack import runtime as rt
from attnpack.archive.verify import verify_archive
from test_runtime_fixtures import PER_Q_TILE, expect_error, kernel, write_synthetic

PTR = {"q": 0x100000, "k": 0x200000, "v": 0x300000, "o": 0x400000, "lse": 0x500000}
PACK = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}

# [word, type, offset] placed by hand, with a hole at 8..16 (padding the runtime leaves zero)
WORDS = [("q", "ptr", 0), ("const:0", "ptr", 16), ("const:-7", "i32", 24),
         ("const:1.4426950408889634", "f32", 28), ("const:3", "f32", 32),
         ("const:9000000000", "i64", 40), ("q_stride_s_bytes*256", "i32", 48),
         ("Hq_per_Hkv", "i32", 52), ("lse_stride_b", "i64", 56), ("lse_stride_h_bytes", "i32", 64),
         ("lse_stride_s", "i32", 68), ("D*3", "i32", 72), ("Sq*2", "i32", 76),
         ("k_stride_b_bytes", "i64", 80), ("o", "ptr", 88), ("lse", "ptr", 96)]
KERNARG = 112


def _step(words=WORDS, kernarg=KERNARG, image=0):
    return {"name": "fwd", "image": image, "symbol": f"sym{image}",
            "params": [[w, t, 1, off] for w, t, off in words],
            "grid": [[list(f) for f in dim] for dim in PER_Q_TILE], "block": [256, 1, 1],
            "shared": 0, "cluster": [1, 1, 1],
            "scratch": {"global_size": 0, "global_align": 1, "profile_size": 0, "profile_align": 1},
            "tensormaps": [], "kernarg_size": kernarg}


def _kernel(causal=False, requires=None, words=WORDS, kernarg=KERNARG, config="M128",
            workspace=(), op="fwd"):
    k = kernel("synth", op, "bf16", 128, causal, [_step(words, kernarg)], config=config)
    if requires is not None:
        k["requires"] = requires
    k["workspace"] = [{"name": n, "shape": list(shape)} for n, shape in workspace]
    return k


def _archive(tmp_path, kernels, name="attnpack-0.1.0-gfx950.apk", **kw):
    return write_synthetic(tmp_path / name, kernels, arch="gfx950", **kw)


def _index_problems(path):
    """python verify's findings other than the stand-in images' (they are not ELF files)."""
    return [p for p in verify_archive(path)[1] if ": image " not in p]


def _problem(causal=False, kernel=None, **sizes):
    shape = {"B": 2, "Hq": 8, "Hkv": 2, "Sq": 384, "Sk": 384, "D": 128, **sizes}
    return rt.make_problem("fwd", "bf16", causal=causal, scale=0.125, pointers=PTR,
                           kernel=kernel, **shape)


def test_parametric_words_are_packed_at_their_offsets(tmp_path):
    path = _archive(tmp_path, [_kernel()])
    assert _index_problems(path) == []
    B, Hq, Hkv, Sq, Sk, D = 2, 8, 2, 384, 300, 128
    with rt.Bundle(path, recording=True) as bundle:
        bundle.forward(_problem(Sk=Sk))
        [launch] = bundle.recorded_launches()["launches"]
    values = {"q": PTR["q"], "const:0": 0, "const:-7": -7,
              "const:1.4426950408889634": 1.4426950408889634, "const:3": 3.0,
              "const:9000000000": 9000000000,
              "q_stride_s_bytes*256": 256 * D * 2,          # 256 rows of q in bytes, [B, H, S, D]
              "Hq_per_Hkv": Hq // Hkv, "lse_stride_b": Hq * Sq,
              "lse_stride_h_bytes": Sq * 4, "lse_stride_s": 1, "D*3": 3 * D, "Sq*2": 2 * Sq,
              "k_stride_b_bytes": Hkv * Sk * D * 2, "o": PTR["o"], "lse": PTR["lse"]}
    expected = bytearray(KERNARG)
    for word, typ, off in WORDS:
        struct.pack_into(PACK[typ], expected, off, values[word])
    assert bytes.fromhex(launch["args"]) == bytes(expected)
    assert bytes.fromhex(launch["args"])[8:16] == bytes(8)      # the hole stays zero


def test_a_word_whose_value_passes_its_32_bit_slot_is_unsupported(tmp_path):
    path = _archive(tmp_path, [_kernel()])
    with rt.Bundle(path, recording=True) as bundle:
        # rows 2^22 bf16 elements apart: 2^23 bytes, and 2^31 for a tile of 256 rows
        row = 1 << 22
        assert bundle.select(_problem(strides={"q": (8 * 384 * row, 384 * row, row - 8, 1)}))
        big = _problem(strides={"q": (8 * 384 * row, 384 * row, row, 1)})
        with pytest.raises(rt.Unsupported) as e:
            bundle.select(big)
        assert e.value.message == ("q_stride_s_bytes*256=2147483648 does not fit the kernel's "
                                   "32-bit parameter")


REQUIRES = [["Sq", "==", "Sk", "bottom-right mask"], ["Hq", "multiple_of", 8, ""],
            ["Sq", "<=", 16384, "schedule"], ["Hq_per_Hkv", "in", [1, 2, 4], "groups"],
            ["D", "!=", 96, ""], ["B", ">=", 1, ""], ["Sk", ">", 16, ""], ["Hkv", "<", 64, ""]]


def test_requirements_choose_and_refuse_with_their_reason(tmp_path):
    path = _archive(tmp_path, [_kernel(causal=True, requires=REQUIRES)])
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.select(_problem(causal=True, Hq=16, Hkv=4)).name.startswith("synth/fwd")
        for sizes, reason in [
            ({"Sk": 512}, "requires Sq == Sk (bottom-right mask): Sq=384, Sk=512"),
            ({"Hq": 12, "Hkv": 3}, "requires Hq multiple_of 8: Hq=12"),
            ({"Sq": 16400, "Sk": 16400}, "requires Sq <= 16384 (schedule): Sq=16400"),
            ({"Hq": 8, "Hkv": 1}, "requires Hq_per_Hkv in {1, 2, 4} (groups): Hq_per_Hkv=8"),
            ({"Sq": 16, "Sk": 16}, "requires Sk > 16: Sk=16"),
            ({"Hq": 64, "Hkv": 64}, "requires Hkv < 64: Hkv=64"),
        ]:
            with pytest.raises(rt.Unsupported) as e:
                bundle.select(_problem(causal=True, **sizes))
            assert e.value.message == reason
        text = bundle.explain(_problem(causal=True, Sk=512))
        assert ("default synth/fwd/bf16-d128-causal/M128: rejected, requires Sq == Sk "
                "(bottom-right mask): Sq=384, Sk=512") in text
        stats_before = bundle.stats()["unsupported"]
        with pytest.raises(rt.Unsupported):
            bundle.forward(_problem(causal=True, Sk=512))
        assert bundle.stats()["unsupported"] == {
            **stats_before, "requires Sq == Sk (bottom-right mask): Sq=384, Sk=512": 1}


def test_a_device_count_requirement_reads_the_device(tmp_path, monkeypatch):
    path = _archive(tmp_path, [_kernel(requires=[["num_sms", "==", 304, "a 304-CU build"]])])
    with rt.Bundle(path, recording=True) as bundle:   # the recording driver's 132 SMs
        with pytest.raises(rt.Unsupported) as e:
            bundle.forward(_problem())
        assert e.value.message == "requires num_sms == 304 (a 304-CU build): this device has 132"
    monkeypatch.setenv("ATTNPACK_RECORDING_NUM_SMS", "304")
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.select(_problem()).name.startswith("synth/fwd")
        bundle.forward(_problem())
        assert len(bundle.recorded_launches()["launches"]) == 1
    # No device to ask (a HIP bundle on a machine without HIP): the count is unknown, and the
    # requirement is not taken as met.
    with rt.Bundle(path, arch="gfx950") as bundle:
        with pytest.raises(rt.Unsupported) as e:
            bundle.select(_problem())
        assert e.value.message == ("requires num_sms == 304 (a 304-CU build): the device's "
                                   "multiprocessor count is not known here (no device was asked)")
        assert "not served: requires num_sms == 304" in bundle.explain(_problem())
    monkeypatch.setenv("ATTNPACK_RECORDING_NUM_SMS", "many")
    message = expect_error(rt.Status.INVALID_ARGUMENT, rt.Bundle, path, recording=True)
    assert message == ("ATTNPACK_RECORDING_NUM_SMS=many is not a multiprocessor count "
                       "(1..100000); unset it for 132")


def test_a_refused_tuned_kernel_falls_back_to_the_default(tmp_path, monkeypatch):
    from attnpack.tune.db import TuningDb
    fast = _kernel(config="fast", requires=[["num_sms", "in", [80, 64], "an 80/64-CU build"]])
    plain = _kernel(config="plain")
    db = TuningDb("gfx950", {"status": "untuned"})
    db.put({"op": "fwd", "dtype": "bf16", "head_dim": 128, "causal": False, "gqa": 4, "sq": 512,
            "sk": 512, "family": "synth", "kernel": fast["name"]})
    tuning = db.compiled()
    path = _archive(tmp_path, [fast, plain], tuning=tuning,
                    selection=[{"op": "fwd", "dtype": "bf16", "head_dim": 128, "causal": False,
                                "kernel": plain["name"]}])
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.select(_problem()).name == plain["name"]
        assert (f"tuned {fast['name']}: rejected, requires num_sms in {{80, 64}} "
                "(an 80/64-CU build): this device has 132") in bundle.explain(_problem())
    monkeypatch.setenv("ATTNPACK_RECORDING_NUM_SMS", "80")
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.select(_problem()).name == fast["name"]


@pytest.mark.parametrize("requirement,defect", [
    (["Sq", "~", 1, ""], "requirement 0 has op '~', which this runtime does not know"),
    (["L", "==", 1, ""], "requirement 0 tests 'L', which is not in this runtime's vocabulary"),
    (["Sq", "in", 3, ""], "requirement 0 has an operand its op in does not take"),
    (["Sq", "==", [3], ""], "requirement 0 has an operand its op == does not take"),
    (["Sq", "multiple_of", "Sk", ""], "requirement 0 has operand 'Sk', which its op does not take"),
    (["Sq", "multiple_of", 0, ""], "requirement 0 takes multiples of 0"),
    (["Sq", "==", "q", ""], "requirement 0 has operand 'q', which its op does not take"),
])
def test_a_requirement_this_runtime_cannot_evaluate_is_a_kernel_defect(tmp_path, requirement,
                                                                        defect):
    path = _archive(tmp_path, [_kernel(requires=[requirement])])
    with rt.Bundle(path, recording=True) as bundle:
        message = expect_error(rt.Status.BAD_LAUNCH_SPEC, bundle.verify)
        assert f"kernel synth/fwd/bf16-d128-full/M128 {defect}" in message
    assert any("requirement" in p for p in _index_problems(path))


@pytest.mark.parametrize("requires,where", [
    ([["Sq", "==", 1]], "index.kernels[0].requires[0] is not [word, op, operand, why]"),
    ([["Sq", "in", list(range(17)), ""]], "index.kernels[0].requires[0][2] does not hold 1 to 16"),
    ([["Sq", "in", [], ""]], "index.kernels[0].requires[0][2] does not hold 1 to 16"),
    ([["Sq", "==", 1, 5]], "index.kernels[0].requires[0][3] is not a string"),
    ([["Sq", "==", True, ""]], "index.kernels[0].requires[0][2] is not a non-negative integer"),
    ("Sq", "index.kernels[0].requires is not an array"),
])
def test_a_malformed_requirement_is_a_corrupt_archive(tmp_path, requires, where):
    path = _archive(tmp_path, [_kernel(requires=requires)])
    message = expect_error(rt.Status.ARCHIVE_CORRUPT, rt.Bundle, path, recording=True)
    assert where in message
    assert _index_problems(path)


@pytest.mark.parametrize("word,typ,defect", [
    ("const:abc", "i32", "parameter word 'const:abc' is not in this runtime's vocabulary"),
    ("const:1e39", "f32", "parameter word 'const:1e39' is not in this runtime's vocabulary"),
    ("const:3000000000", "i32", "parameter const:3000000000 does not fit its i32 type"),
    ("const:1", "ptr", "parameter const:1 has type ptr, which its word cannot take"),
    ("const:0.5", "i32", "parameter const:0.5 has type i32, which its word cannot take"),
    ("q*2", "ptr", "parameter word 'q*2' is not in this runtime's vocabulary"),
    ("sm_scale*2", "f32", "parameter word 'sm_scale*2' is not in this runtime's vocabulary"),
    ("Sq*1", "i32", "parameter word 'Sq*1' is not in this runtime's vocabulary"),
    ("Sq*", "i32", "parameter word 'Sq*' is not in this runtime's vocabulary"),
    ("Sq*2000000", "i32", "parameter word 'Sq*2000000' is not in this runtime's vocabulary"),
])
def test_parametric_words_the_runtime_refuses_python_refuses_too(tmp_path, word, typ, defect):
    words = [("q", "ptr", 0), (word, typ, 8)]
    path = _archive(tmp_path, [_kernel(words=words, kernarg=16)])
    with rt.Bundle(path, recording=True) as bundle:
        assert defect in expect_error(rt.Status.BAD_LAUNCH_SPEC, bundle.verify)
    assert any(word in p for p in _index_problems(path))


def test_workspace_shapes_may_name_the_head_dim(tmp_path):
    k = _kernel(workspace=[("acc", ("B", "Hq", "Sq", "D")), ("rows", ("B", "Hq", "Sq"))],
                words=[("q", "ptr", 0), ("acc", "ptr", 8), ("rows", "ptr", 16)], kernarg=24)
    path = _archive(tmp_path, [k])
    B, Hq, Sq, D = 2, 8, 384, 128
    with rt.Bundle(path, recording=True) as bundle:
        acc = B * Hq * Sq * D * 4
        assert bundle.workspace_size(_problem()) == acc + B * Hq * Sq * 4   # acc is 256-aligned
        bundle.forward(_problem(), workspace=0x7000000, workspace_size=1 << 30)
        [launch] = bundle.recorded_launches()["launches"]
        assert struct.unpack_from("<QQ", bytes.fromhex(launch["args"]), 8) == (
            0x7000000, 0x7000000 + math.ceil(acc / 256) * 256)


def test_python_parses_the_same_words():
    assert abi.parse("const:-7").constant == -7 and abi.parse("const:0").wires[-1] == "ptr"
    assert abi.parse("const:1.5").wires == ("f32",)
    assert abi.parse("q_stride_s_bytes*256").multiplier == 256
    assert not abi.parse("const:3000000000").fits("i32")
    assert abi.parse("const:3000000000").fits("i64")
    for bad in ("const:abc", "const:1e39", "q*2", "sm_scale*2", "Sq*1", "Sq*", "Sq*2000000",
                "lse_stride_d"):
        with pytest.raises(KeyError):
            abi.parse(bad)
    assert abi.param_types("Hq_per_Hkv") == ("i32",)
    assert abi.param_types("lse_stride_h_bytes") == ("i64", "i32")
    r = abi.Requirement("num_sms", "in", (80, 64), "MI308")
    assert r.text == "num_sms in {80, 64}" and abi.Requirement.of(r.record()) == r
    for args in (("L", "==", 1), ("Sq", "~", 1), ("Sq", "in", 3), ("Sq", "==", (3,)),
                 ("Sq", "multiple_of", "Sk"), ("Sq", "multiple_of", 0), ("Sq", "==", True),
                 ("Sq", "in", tuple(range(17)))):
        with pytest.raises(ValueError):
            abi.Requirement(*args)


# ---- format 2.2: workspace extents <size>/<n> = ceil(size / n) ---------------------------------

def test_a_divided_workspace_extent_rounds_up_as_grid_factors_do(tmp_path):
    k = _kernel(workspace=[("part", ("B", "Hq", "Sq", "Sk/512", "D")), ("lse_part", ("B", "Sk/512"))],
                words=[("q", "ptr", 0), ("part", "ptr", 8), ("lse_part", "ptr", 16)], kernarg=24)
    path = _archive(tmp_path, [k])
    assert _index_problems(path) == []
    B, Hq, Sq, D = 2, 8, 384, 128
    with rt.Bundle(path, recording=True) as bundle:
        for Sk, chunks in ((1, 1), (512, 1), (513, 2), (4097, 9)):
            part = B * Hq * Sq * chunks * D * 4
            assert bundle.workspace_size(_problem(Sk=Sk)) == \
                math.ceil(part / 256) * 256 + B * chunks * 4, Sk


# ---- format 2.6: workspace extents num_sms and const:<n> -------------------------------------

@pytest.mark.parametrize("sms", [132, 78])
def test_a_workspace_over_the_devices_programs_takes_its_count(tmp_path, monkeypatch, sms):
    """A persistent kernel's per-program buffers: [num_sms, const:n, D] floats, sized by the
    device's multiprocessor count at launch (the recording driver's, here)."""
    k = _kernel(workspace=[("part", ("num_sms", "const:256", "D")),
                           ("ctr", ("num_sms", "const:16"))],
                words=[("q", "ptr", 0), ("part", "ptr", 8), ("ctr", "ptr", 16)], kernarg=24)
    path = _archive(tmp_path, [k])
    assert _index_problems(path) == []
    monkeypatch.setenv("ATTNPACK_RECORDING_NUM_SMS", str(sms))
    with rt.Bundle(path, recording=True) as bundle:
        part = sms * 256 * 128 * 4
        assert bundle.workspace_size(_problem()) == math.ceil(part / 256) * 256 + sms * 16 * 4
    assert abi.workspace_extent("const:256") == ("const", 256)
    assert abi.workspace_extent_value("const:256", {}) == 256
    assert abi.workspace_extent_value("num_sms", {"num_sms": sms}) == sms


@pytest.mark.parametrize("extent", ["Sk/1", "Sk/0", "Sk/", "Sk/02", "D/4", "Sk/2097152", "Sk*2",
                                    "num_sms/4", "L", "const:0", "const:", "const:01",
                                    "const:1048577", "const:-2", "const:2.5"])
def test_a_workspace_extent_the_runtime_refuses_python_refuses_too(tmp_path, extent):
    k = _kernel(workspace=[("part", ("B", extent))], words=[("q", "ptr", 0), ("part", "ptr", 8)],
                kernarg=16)
    path = _archive(tmp_path, [k])
    with rt.Bundle(path, recording=True) as bundle:
        assert f"has size word '{extent}', which is not in this runtime's vocabulary" in \
            expect_error(rt.Status.BAD_LAUNCH_SPEC, bundle.verify)
    assert any(f"unknown size words ['{extent}']" in p for p in _index_problems(path))
    with pytest.raises(ValueError):
        abi.workspace_extent(extent)
    assert abi.workspace_extent("Sk/512") == ("Sk", 512) and abi.workspace_extent("D") == ("D", 1)
