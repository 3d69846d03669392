"""The launch-spec vocabulary has one source (python/attnpack/abi.py); the C++ runtime's table
is generated from it and must equal it, and the key spellings of both sides agree."""
from pathlib import Path

import pytest

from attnpack import abi
from attnpack.keys import FunctionalKey, KernelName, TuneKey

VOCABULARY_INC = Path(__file__).resolve().parents[2] / "runtime" / "src" / "vocabulary.inc"


def test_the_runtime_table_is_generated_from_the_python_vocabulary():
    assert VOCABULARY_INC.read_text() == abi.cpp_table(), (
        "runtime/src/vocabulary.inc is stale: run "
        "`PYTHONPATH=python python -m attnpack.abi --cpp > runtime/src/vocabulary.inc`")


def test_the_table_has_one_row_per_word_with_its_source_and_wire_types():
    rows = [line for line in abi.cpp_table().splitlines() if line.startswith("{")]
    assert len(rows) == len(abi.VOCABULARY)
    # 8 tensors x (ptr + 4 element strides + 3 byte strides), lse and its 3 + 3 byte strides,
    # 2 scratch, 5 sizes, D, Hq_per_Hkv, 2 floats
    assert len(abi.VOCABULARY) == 8 * 8 + 1 + 6 + 2 + 5 + 1 + 1 + 2
    assert '{"k_stride_s_bytes", ParamSource::Stride, kWireI64 | kWireI32, 1, 2, Transform::Bytes},' in rows
    assert '{"Hkv", ParamSource::Size, kWireI32, 2, 0, Transform::None},' in rows
    assert '{"sm_scale_log2", ParamSource::SmScaleLog2, kWireF32, 0, 0, Transform::None},' in rows
    # the C++ ParamSource enum lists the sources in abi.SOURCES order
    launch_hpp = (VOCABULARY_INC.parent / "launch.hpp").read_text()
    enum = launch_hpp[launch_hpp.index("enum class ParamSource"):]
    enum = enum[:enum.index("};")]
    camel = ["".join(p.capitalize() for p in s.split("_")) for s in abi.SOURCES]
    positions = [enum.index(f"  {c},") for c in camel]
    assert positions == sorted(positions)


def test_param_types_and_unknown_words():
    assert abi.param_types("q_stride_h") == ("i64", "i32")
    assert abi.param_type("q_stride_h") == "i64"   # what Triton kernels take
    assert abi.param_types("delta", ("delta",)) == ("ptr",)
    with pytest.raises(KeyError, match="'q_descale' is not a launch-spec word"):
        abi.param_types("q_descale")


def test_one_spelling_of_keys_and_names():
    key = FunctionalKey("bf16", 128, True)
    assert key.tag == "bf16-d128-causal" and key.text == "bf16 d128 causal"
    assert FunctionalKey.parse_tag(key.tag) == key
    name = KernelName("gluon", "fwd", key, "M64_N128_stages2")
    assert str(name) == "gluon/fwd/bf16-d128-causal/M64_N128_stages2"
    assert KernelName.parse(str(name)) == name
    tune = TuneKey("bwd", "fp16", 64, False, 4, 1024, 2048, 128)
    assert tune.functional == FunctionalKey("fp16", 64, False)
    assert tune.text == "bwd fp16 d64 full gqa4 sq1024 sk2048 streams128"
    assert TuneKey.of(tune.as_dict()) == tune
    for bad in ("gluon/fwd/bf16-d128", "gluon/fwd/bf16-d128-maybe/x", "a/b/c/d/e"):
        with pytest.raises(ValueError):
            KernelName.parse(bad)
