"""The fixed vocabulary a kernel's launch spec is written in.

A launch spec never holds code: it names kernel parameters, grid factors and workspace
buffers with the words below, and the runtime (C++) or a test launcher (Python) resolves each
word against the SDPA problem being served. `VOCABULARY` is the single description of the
words: the C++ runtime's table (runtime/src/vocabulary.inc) is generated from it
(`python -m attnpack.abi --cpp`) and a CPU test keeps the committed file equal to it. Adding a
word means regenerating that table; adding a kernel family must not touch this file.

Each word has a source (where its value comes from) and the wire types it may be passed as;
the first is what Triton kernels take. Value transforms are words of their own, e.g.
`q_stride_s_bytes` is `q_stride_s` times the element size (AITER's argument structs take
byte strides).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

# Element tensors take the problem's dtype (fp16/bf16). Their strides are in elements, [b, h, s];
# the last dim must be contiguous. lse and every workspace buffer are contiguous float32.
TENSORS = ("q", "k", "v", "o", "do", "dq", "dk", "dv")
FP32_BUFFERS = ("lse",)
STRIDE_AXES = ("b", "h", "s")
AXES = STRIDE_AXES + ("d",)

# Problem sizes, int32 on the wire.
SIZES = ("B", "Hq", "Hkv", "Sq", "Sk")
# The head dim, int32: only as a parameter (Triton passes a tensor descriptor's shape, whose
# last extent is D, beside the descriptor); never a grid factor or workspace size.
HEAD_DIM = "D"

# Workspace buffer extents: the sizes, and the head dim (a per-row buffer such as an fp32
# dQ accumulator [B, Hq, Sq, D]).
WORKSPACE_SIZES = SIZES + (HEAD_DIM,)

# Float scalars: the softmax scale and the same scale times log2(e) (kernels use exp2).
FLOATS = ("sm_scale", "sm_scale_log2")

# Triton >= 3.4 appends two pointers to every kernel: global scratch and profile scratch.
TRITON_SCRATCH = ("global_scratch", "profile_scratch")

# Grid factors may also name the device's multiprocessor count (for persistent grids).
GRID_VARS = SIZES + ("num_sms",)

DTYPES = ("fp16", "bf16")
TRITON_PTR_TYPE = {"fp16": "*fp16", "bf16": "*bf16", "fp32": "*fp32"}

# Pointers are promised 16-byte aligned; the launcher checks it before launching.
PTR_ALIGN = 16

# Host TMA descriptors (CUtensorMap): 128 bytes by value.
TENSORMAP_BYTES = 128
# Wire types: size in bytes. A parameter's byte offset is written in the index by the builder
# (read from the compiled image), so no launcher derives a layout from these.
WIRE_SIZE = {"ptr": 8, "i64": 8, "i32": 4, "f32": 4, "tensormap": TENSORMAP_BYTES}
# Tensor-map options (docs/runtime.md, "Tensor maps").
TENSORMAP_SWIZZLES = (0, 32, 64, 128)
TENSORMAP_L2_PROMOTIONS = (0, 64, 128, 256)
TENSORMAP_OOB_FILLS = ("zero", "nan")

# Where a word's value comes from. The C++ runtime has one ParamSource per entry, same order;
# "workspace" and "tensormap" words are the kernel's own names, not vocabulary words.
SOURCES = ("tensor", "lse", "workspace", "stride", "size", "head_dim", "sm_scale",
           "sm_scale_log2", "global_scratch", "profile_scratch", "tensor_map")
TRANSFORMS = ("none", "bytes")  # bytes: the value times the problem's element size


@dataclass(frozen=True)
class Word:
    name: str
    source: str                      # one of SOURCES
    wires: tuple[str, ...]           # allowed wire types; the first is Triton's
    index: int = 0                   # tensor (TENSORS) or size (SIZES) position
    axis: int = 0                    # stride axis (AXES)
    transform: str = "none"          # one of TRANSFORMS


def stride_name(tensor: str, axis: str) -> str:
    return f"{tensor}_stride_{axis}"


def _vocabulary() -> dict[str, Word]:
    words = []
    for t, tensor in enumerate(TENSORS):
        words.append(Word(tensor, "tensor", ("ptr",), index=t))
        for a, axis in enumerate(AXES):
            # d (always 1) appears only in a tensor descriptor's expansion, which Triton passes
            # in full; byte strides exist for the [b, h, s] axes
            words.append(Word(stride_name(tensor, axis), "stride", ("i64", "i32"), index=t, axis=a))
            if axis != "d":
                words.append(Word(stride_name(tensor, axis) + "_bytes", "stride", ("i64", "i32"),
                                  index=t, axis=a, transform="bytes"))
    words.append(Word("lse", "lse", ("ptr",)))
    words += [Word(name, name, ("ptr",)) for name in TRITON_SCRATCH]
    words += [Word(size, "size", ("i32",), index=i) for i, size in enumerate(SIZES)]
    words.append(Word(HEAD_DIM, "head_dim", ("i32",)))
    words += [Word(name, name, ("f32",)) for name in FLOATS]
    return {w.name: w for w in words}


VOCABULARY: dict[str, Word] = _vocabulary()
STRIDES = tuple(w.name for w in VOCABULARY.values()
                if w.source == "stride" and w.transform == "none" and AXES[w.axis] != "d")


def word(name: str) -> Word:
    try:
        return VOCABULARY[name]
    except KeyError:
        raise KeyError(f"'{name}' is not a launch-spec word; see attnpack/abi.py for the "
                       "vocabulary") from None


def param_types(name: str, workspace_names: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The wire types a parameter word may be passed as (workspace buffers are pointers)."""
    if name in VOCABULARY:
        return VOCABULARY[name].wires
    if name in workspace_names:
        return ("ptr",)
    return word(name).wires  # raises, naming the vocabulary


def param_type(name: str, workspace_names: tuple[str, ...] = ()) -> str:
    """The wire type Triton kernels take a parameter word as: 'ptr', 'i32', 'i64' or 'f32'."""
    return param_types(name, workspace_names)[0]


def tensor_shape_words(tensor: str) -> tuple[str, str, str, str]:
    """The extents of an element tensor [b, h, s, d] as words."""
    kv = tensor in ("k", "v", "dk", "dv")
    return ("B", "Hkv" if kv else "Hq", "Sk" if kv else "Sq", HEAD_DIM)


def tensormap_params(param: str, tensor: str) -> list[tuple[str, str]]:
    """(word, wire type) of what a compiled kernel takes for one host tensor descriptor: the
    128-byte CUtensorMap, then the tensor's shape (i32 each) and strides (i64 each), outermost
    first. That is Triton 3.6's expansion (backends/nvidia/driver.py, make_launcher and
    make_tensordesc_arg) of a `tensordesc<...>` argument lowered to a TMA descriptor."""
    return ([(param, "tensormap")] + [(w, "i32") for w in tensor_shape_words(tensor)]
            + [(stride_name(tensor, a), "i64") for a in AXES])


def triton_type(name: str, dtype: str, workspace_names: tuple[str, ...] = ()) -> str:
    """Triton signature type of one parameter word for a problem of element type `dtype`."""
    kind = param_type(name, workspace_names)
    if kind != "ptr":
        return {"i32": "i32", "i64": "i64", "f32": "fp32"}[kind]
    if name in TENSORS:
        return TRITON_PTR_TYPE[dtype]
    if name in TRITON_SCRATCH:
        return "*i8"
    return "*fp32"


_WIRE_BITS = {"ptr": "kWirePtr", "i64": "kWireI64", "i32": "kWireI32", "f32": "kWireF32"}


def cpp_table() -> str:
    """runtime/src/vocabulary.inc: one initializer per word, in VOCABULARY order."""
    camel = lambda s: "".join(p.capitalize() for p in s.split("_"))
    lines = ["// Generated by `python -m attnpack.abi --cpp` from python/attnpack/abi.py; do not edit.",
             "// tests/cpu/test_abi.py keeps it equal to the Python vocabulary.",
             "// {word, source, allowed wire types, index, axis, transform}"]
    for w in VOCABULARY.values():
        wires = " | ".join(_WIRE_BITS[t] for t in w.wires)
        lines.append(f'{{"{w.name}", ParamSource::{camel(w.source)}, {wires}, {w.index}, {w.axis}, '
                     f"Transform::{camel(w.transform)}}},")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--cpp"]:
        sys.stdout.write(cpp_table())
    else:
        sys.exit("usage: python -m attnpack.abi --cpp   (prints runtime/src/vocabulary.inc)")
