"""A family through the prebuilt-object backend (tests/cpu/fixtures/prebuilt/frozen): built with
no compiler, its declared argument buffer checked against each object's own metadata, verified,
and launched by the recording driver exactly as declared."""
import math
import shutil
import struct

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.verify import verify_archive
from attnpack.builder import BuildError

from conftest import FIXTURES, build

PREBUILT = FIXTURES / "prebuilt"
PACK = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f"}


@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    root = tmp_path_factory.mktemp("frozen")
    return build(root / "out", PREBUILT, root / "cache")


def _family():
    from attnpack.family import load_family
    return load_family(PREBUILT / "frozen")


def test_builds_and_verifies_without_a_compiler(frozen):
    fam = _family()
    for path in frozen.paths:
        ar, problems, warnings = verify_archive(path)
        assert problems == [] and warnings == []
        assert ar.meta["compilers"] == {}      # nothing was compiled
        assert ar.index["families"] == {"frozen": {
            "backend": "prebuilt", "compilers": [], "priority": 200, "provenance": dict(fam.provenance)}}
        [kernel] = ar.kernels
        [step] = kernel["steps"]
        assert kernel["name"] == "frozen/fwd/fp16-d64-full/objecttriton"
        assert step["params"] == [[p.word, p.type, p.divisibility, p.offset]
                                  for p in fam.steps(ar.arch, "fwd", None, {})[0].kernel.params]
        assert step["kernarg_size"] == 176 and step["symbol"] == "attn_fwd"
    assert frozen.stats.compiled == 2 and frozen.stats.cache_hits == 0


@pytest.mark.parametrize("arch,threads,rows,shared", [("sm_90", 128, 64, 57344),
                                                       ("gfx950", 256, 128, 16384)])
def test_recording_driver_launches_the_declared_buffer(frozen, arch, threads, rows, shared):
    path = next(p for p in frozen.paths if p.name.endswith(f"-{arch}.apk"))
    B, Hq, Hkv, Sq, Sk, D = 2, 8, 2, 300, 257, 64
    ptr = {"q": 0x10000, "k": 0x20000, "v": 0x30000, "o": 0x40000, "lse": 0x50000}
    prob = rt.make_problem("fwd", "fp16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, scale=0.125,
                           pointers=ptr)
    with rt.Bundle(path, recording=True) as bundle:
        assert bundle.select(prob).name == "frozen/fwd/fp16-d64-full/objecttriton"
        assert bundle.select(prob).backend == "prebuilt"
        bundle.forward(prob)
        [launch] = bundle.recorded_launches()["launches"]
    # hand-packed: BHSD contiguous strides, the scale times log2(e) in f32, null scratch
    strides = {"q": (Hq * Sq * D, Sq * D, D), "o": (Hq * Sq * D, Sq * D, D),
               "k": (Hkv * Sk * D, Sk * D, D), "v": (Hkv * Sk * D, Sk * D, D)}
    values = [*(ptr[t] for t in ("q", "k", "v", "o", "lse")),
              *(s for t in "qkvo" for s in strides[t]), Hq, Hkv, Sq, Sk,
              struct.unpack("<f", struct.pack("<f", 0.125 * math.log2(math.e)))[0], 0, 0]
    expected = bytearray(176)
    for p, value in zip(_family().steps(arch, "fwd", None, {})[0].kernel.params, values):
        struct.pack_into(PACK[p.type], expected, p.offset, value)
    assert bytes.fromhex(launch["args"]) == bytes(expected)
    assert launch["grid"] == [math.ceil(Sq / rows), B * Hq, 1]
    assert launch["block"] == [threads, 1, 1] and launch["shared"] == shared


def _copy(tmp_path, edit):
    root = tmp_path / "kernels"
    shutil.copytree(PREBUILT, root)
    family = root / "frozen" / "family.py"
    family.write_text(edit(family.read_text()))
    return root


def test_a_changed_object_is_refused_by_its_pin(tmp_path):
    root = _copy(tmp_path, lambda text: text)
    obj = root / "frozen" / "attn_fwd_fp16_d64.sm_90.cubin"
    data = obj.read_bytes()
    obj.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(Exception, match=r"attn_fwd_fp16_d64\.sm_90\.cubin: sha256 [0-9a-f]{64}, "
                                         r"the family pins 3f8b3bc5.* — the object changed"):
        build(tmp_path / "out", root, None, archs=("sm_90",))


def test_a_field_the_object_does_not_have_is_refused(tmp_path):
    # sm_scale_log2 moved 4 bytes on: the cubin's own parameter list disagrees
    root = _copy(tmp_path, lambda text: text.replace(
        "        fields.append(Param(word, typ, offset,",
        "        offset += 4 if word == 'sm_scale_log2' else 0\n"
        "        fields.append(Param(word, typ, offset,"))
    with pytest.raises(Exception, match=r"declared fields .* are not attn_fwd's parameters"):
        build(tmp_path / "out", root, None, archs=("sm_90",))
    with pytest.raises(Exception, match=r"fields \[\('sm_scale_log2', 156, 4\)\] \(word, offset, "
                                        r"size\) are not arguments of attn_fwd"):
        build(tmp_path / "out", root, None, archs=("gfx950",))


def test_an_object_for_another_arch_is_refused(tmp_path):
    root = _copy(tmp_path, lambda text: text.replace('"attn_fwd_fp16_d64.sm_90.cubin",',
                                                     '"attn_fwd_fp16_d64.gfx950.hsaco",').replace(
        '"3f8b3bc527f7253783dab36da23cf927cc36702c547e701576824320d11de293"',
        '"23fb6d7cc35fd406eae5b7fb35d5fa07af86b4a76790940a34035c09fe925d3e"'))
    with pytest.raises(Exception, match=r"attn_fwd_fp16_d64\.gfx950\.hsaco is built for gfx950, "
                                        r"the step is for sm_90"):
        build(tmp_path / "out", root, None, archs=("sm_90",))
