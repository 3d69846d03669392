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

Two parametric forms are parsed rather than listed (`parse`; the runtime parses them the same
way, runtime/src/launch.cpp):
- `const:<literal>`: a literal value, for argument slots a hand-written kernel wants filled
  with a fixed number. An integer literal (`const:5`, `const:-1`) may be passed as i32, i64,
  f32, or as ptr when it is 0 (a null pointer); a decimal one (`const:1.4426950408889634`) only
  as f32, rounded from the nearest double.
- `<word>*<n>`: an integer-valued word times a literal integer n >= 2, e.g.
  `q_stride_s_bytes*256` (the bytes of 256 rows of q: an argument struct's tile stride). It
  takes the word's wire types; a product that does not fit them is unsupported, never wrapped.

Kernel requirements (`Requirement`, the index's `requires`) are checked by the runtime before
a kernel is chosen: `[word, op, operand, why]` over the integer facts in REQUIREMENT_WORDS.
"""
from __future__ import annotations

import re
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
# dQ accumulator [B, Hq, Sq, D]). Format 2.2 adds `<size>/<n>`, ceil(size / n) as a grid factor
# counts programs (a split-KV kernel's partial results: one per ceil(Sk / chunk) program).
# Format 2.6 adds the device's multiprocessor count `num_sms` and literals `const:<n>`, n in
# 1..MAX_EXTENT_DIVISOR (a persistent kernel's per-program buffers: [num_sms, const:256, D]).
WORKSPACE_SIZES = SIZES + (HEAD_DIM, "num_sms")
MAX_EXTENT_DIVISOR = 1 << 20
WORKSPACE_CONSTANT = "const"


def workspace_extent(word: str) -> tuple[str, int]:
    """(size word, divisor) of a workspace extent: `Sq` is ("Sq", 1), `Sk/256` ("Sk", 256),
    ceil(Sk / 256); (2.6) `const:256` is ("const", 256), the literal. ValueError for anything
    else."""
    if word.startswith(CONSTANT_PREFIX):
        text = word[len(CONSTANT_PREFIX):]
        if not re.fullmatch(r"[1-9][0-9]*", text) or int(text) > MAX_EXTENT_DIVISOR:
            raise ValueError(f"'{word}' is not a workspace extent: const:<n> takes an integer n "
                             f"in 1..{MAX_EXTENT_DIVISOR}")
        return WORKSPACE_CONSTANT, int(text)
    name, sep, divisor = word.partition("/")
    if not sep:
        if name not in WORKSPACE_SIZES:
            raise ValueError(f"'{word}' is not a workspace extent: one of {WORKSPACE_SIZES}, "
                             "<size>/<n> or const:<n>")
        return name, 1
    if name not in SIZES or not re.fullmatch(r"[1-9][0-9]*", divisor) \
            or not 2 <= int(divisor) <= MAX_EXTENT_DIVISOR:
        raise ValueError(f"'{word}' is not a workspace extent: <size>/<n> takes a size of {SIZES} "
                         f"and an integer n in 2..{MAX_EXTENT_DIVISOR}")
    return name, int(divisor)


def workspace_extent_value(word: str, values: dict[str, int]) -> int:
    """The extent `word` (workspace_extent) takes where the size words, D and num_sms have
    `values`."""
    name, n = workspace_extent(word)
    return n if name == WORKSPACE_CONSTANT else -(-values[name] // n)

# Float scalars: the softmax scale and the same scale times log2(e) (kernels use exp2).
FLOATS = ("sm_scale", "sm_scale_log2")

# Triton >= 3.4 appends two pointers to every kernel: global scratch and profile scratch.
TRITON_SCRATCH = ("global_scratch", "profile_scratch")

# Grid factors may also name the device's multiprocessor count (for persistent grids).
GRID_VARS = SIZES + ("num_sms",)

# Derived integer words: the GQA group size Hq / Hkv (the selector has checked Hq % Hkv == 0).
GQA_GROUP = "Hq_per_Hkv"

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
           "sm_scale_log2", "global_scratch", "profile_scratch", "tensor_map", "gqa_group",
           "lse_stride", "constant", "workspace_stride")
# bytes: the value times the element size (the problem's dtype; 4 for lse's float32)
TRANSFORMS = ("none", "bytes")
# Sources whose value is an integer: they may be scaled (`<word>*<n>`) and be requirement words.
INTEGER_SOURCES = ("stride", "size", "head_dim", "gqa_group", "lse_stride")
CONSTANT_PREFIX = "const:"


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
    # lse is contiguous float32 [B, Hq, Sq]: its strides are Hq*Sq, Sq, 1 (bytes: times 4)
    for a, axis in enumerate(STRIDE_AXES):
        words.append(Word(f"lse_stride_{axis}", "lse_stride", ("i64", "i32"), axis=a))
        words.append(Word(f"lse_stride_{axis}_bytes", "lse_stride", ("i64", "i32"), axis=a,
                          transform="bytes"))
    words += [Word(name, name, ("ptr",)) for name in TRITON_SCRATCH]
    words += [Word(size, "size", ("i32",), index=i) for i, size in enumerate(SIZES)]
    words.append(Word(HEAD_DIM, "head_dim", ("i32",)))
    words.append(Word(GQA_GROUP, "gqa_group", ("i32",)))
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


# An integer literal, or a decimal one (with a point or an exponent); no inf, nan or hex.
_INT_LITERAL = re.compile(r"^-?[0-9]+$")
_FLOAT_LITERAL = re.compile(r"^-?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?$")
MAX_MULTIPLIER = 1 << 20
F32_MAX = 3.4028234663852886e38


@dataclass(frozen=True)
class ParsedWord:
    """A parameter word resolved: a vocabulary word times `multiplier`, or a constant."""
    name: str
    word: Word | None             # None for a constant
    multiplier: int = 1
    constant: int | float | None = None

    @property
    def wires(self) -> tuple[str, ...]:
        if self.word is not None:
            return self.word.wires
        if isinstance(self.constant, float):
            return ("f32",)
        return ("i32", "i64", "f32") + (("ptr",) if self.constant == 0 else ())

    def fits(self, wire: str) -> bool:
        """Whether a constant fits `wire` (the runtime refuses the kernel otherwise); words'
        values are checked per problem by the runtime."""
        if wire not in self.wires:
            return False
        if self.word is None and wire == "i32":
            return -(1 << 31) <= self.constant < (1 << 31)
        return True


def parse(name: str) -> ParsedWord:
    """A launch-spec word, including the parametric forms `const:<literal>` and `<word>*<n>`;
    raises KeyError naming the word and the rule it breaks."""
    if name in VOCABULARY:
        return ParsedWord(name, VOCABULARY[name])
    if name.startswith(CONSTANT_PREFIX):
        text = name[len(CONSTANT_PREFIX):]
        if _INT_LITERAL.match(text):
            value = int(text)
            if not -(1 << 63) <= value < (1 << 63):
                raise KeyError(f"'{name}': the constant does not fit 64 bits")
            return ParsedWord(name, None, constant=value)
        if _FLOAT_LITERAL.match(text):
            value = float(text)
            if not abs(value) <= F32_MAX:
                raise KeyError(f"'{name}': the constant does not fit float32")
            return ParsedWord(name, None, constant=value)
        raise KeyError(f"'{name}' is not a constant: write const:<integer> or const:<decimal>")
    base, star, factor = name.rpartition("*")
    if star and base in VOCABULARY and _INT_LITERAL.match(factor):
        if VOCABULARY[base].source not in INTEGER_SOURCES:
            raise KeyError(f"'{name}': only integer words ({', '.join(INTEGER_SOURCES)}) may "
                           "be scaled")
        if not 2 <= int(factor) <= MAX_MULTIPLIER:
            raise KeyError(f"'{name}': a multiplier is an integer in 2..{MAX_MULTIPLIER}")
        return ParsedWord(name, VOCABULARY[base], multiplier=int(factor))
    return ParsedWord(name, word(name))  # raises, naming the vocabulary


def workspace_stride(name: str, workspace_names: tuple[str, ...]) -> tuple[str, int] | None:
    """(buffer, dim) of a `<workspace>_stride_<axis>` word, axis b, h, s, d naming dims 0..3;
    None for any other word. Format 2.4: the element stride of that dim of the contiguous
    float32 buffer, which Triton passes after a tensor map over the buffer. Like workspace
    names, these are the kernel's own words, not vocabulary rows; the runtime refuses one past
    the buffer's rank."""
    buffer, sep, axis = name.rpartition("_stride_")
    if sep and buffer in workspace_names and axis in AXES:
        return buffer, AXES.index(axis)
    return None


def param_types(name: str, workspace_names: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The wire types a parameter word may be passed as (workspace buffers are pointers, their
    strides integers)."""
    if name in VOCABULARY:
        return VOCABULARY[name].wires
    if name in workspace_names:
        return ("ptr",)
    if workspace_stride(name, workspace_names):
        return ("i64", "i32")
    return parse(name).wires  # raises, naming the vocabulary


# ---- kernel requirements ------------------------------------------------------------------
# The integer facts of a problem a requirement may test: the sizes, the head dim, the GQA group
# size, and the device's multiprocessor / compute-unit count (num_sms; unknown without a
# device, and then the requirement fails, docs/ARCHIVE.md).
REQUIREMENT_WORDS = SIZES + (HEAD_DIM, GQA_GROUP, "num_sms")
REQUIREMENT_OPS = ("==", "!=", "<", "<=", ">", ">=", "multiple_of", "in")
MAX_IN_VALUES = 16


@dataclass(frozen=True)
class Requirement:
    """A condition a problem must meet for a kernel to serve it (the index's `requires`):
    `word op operand`, with `why` said when it fails. The operand is an integer, another
    requirement word (not for `in` and `multiple_of`), or for `in` a tuple of integers."""
    word: str
    op: str
    operand: int | str | tuple[int, ...]
    why: str = ""

    def __post_init__(self):
        where = f"requirement {self.text}"
        if self.word not in REQUIREMENT_WORDS:
            raise ValueError(f"{where}: '{self.word}' is not one of {REQUIREMENT_WORDS}")
        if self.op not in REQUIREMENT_OPS:
            raise ValueError(f"{where}: '{self.op}' is not one of {REQUIREMENT_OPS}")
        operand = self.operand
        if self.op == "in":
            if not (isinstance(operand, tuple) and 1 <= len(operand) <= MAX_IN_VALUES
                    and all(_is_int(v) for v in operand)):
                raise ValueError(f"{where}: `in` takes a tuple of 1..{MAX_IN_VALUES} integers")
        elif isinstance(operand, str):
            if operand not in REQUIREMENT_WORDS or self.op == "multiple_of":
                raise ValueError(f"{where}: the operand '{operand}' is not a requirement word "
                                 "(multiple_of takes an integer)")
        elif not _is_int(operand) or (self.op == "multiple_of" and operand < 1):
            raise ValueError(f"{where}: the operand must be an integer"
                             + (" >= 1" if self.op == "multiple_of" else ""))
        if not isinstance(self.why, str):
            raise ValueError(f"{where}: `why` must be text")

    @property
    def text(self) -> str:
        operand = (f"{{{', '.join(map(str, self.operand))}}}" if isinstance(self.operand, tuple)
                   else self.operand)
        return f"{self.word} {self.op} {operand}"

    def record(self) -> list:
        """[word, op, operand, why] as the index holds it (docs/ARCHIVE.md)."""
        operand = list(self.operand) if isinstance(self.operand, tuple) else self.operand
        return [self.word, self.op, operand, self.why]

    @classmethod
    def of(cls, record) -> "Requirement":
        word, op, operand, *why = record
        return cls(word, op, tuple(operand) if isinstance(operand, list) else operand,
                   *(why[:1]))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


def param_type(name: str, workspace_names: tuple[str, ...] = ()) -> str:
    """The wire type Triton kernels take a parameter word as: 'ptr', 'i32', 'i64' or 'f32'."""
    return param_types(name, workspace_names)[0]


def tensor_shape_words(tensor: str) -> tuple[str, str, str, str]:
    """The extents of an element tensor [b, h, s, d] as words."""
    kv = tensor in ("k", "v", "dk", "dv")
    return ("B", "Hkv" if kv else "Hq", "Sk" if kv else "Sq", HEAD_DIM)


def tensormap_params(param: str, tensor: str,
                     workspace_shape: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """(word, wire type) of what a compiled kernel takes for one host tensor descriptor: the
    128-byte CUtensorMap, then the tensor's shape (i32 each) and strides (i64 each), outermost
    first. That is Triton 3.6's expansion (backends/nvidia/driver.py, make_launcher and
    make_tensordesc_arg) of a `tensordesc<...>` argument lowered to a TMA descriptor. A
    workspace buffer (format 2.4) passes its `workspace_shape` words, which must be plain size
    words or D, and its `<buffer>_stride_<axis>` words."""
    if workspace_shape is None:
        shape, axes = tensor_shape_words(tensor), AXES
    else:
        if len(workspace_shape) > len(AXES) or \
                any(w not in SIZES + (HEAD_DIM,) for w in workspace_shape):
            raise ValueError(f"a tensor map views workspace {tensor} {list(workspace_shape)}: "
                             f"at most {len(AXES)} extents, each a size word or D")
        shape, axes = workspace_shape, AXES[:len(workspace_shape)]
    return ([(param, "tensormap")] + [(w, "i32") for w in shape]
            + [(stride_name(tensor, a), "i64") for a in axes])


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
