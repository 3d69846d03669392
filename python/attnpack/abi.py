"""The fixed vocabulary a kernel's launch spec is written in.

A launch spec never holds code: it names kernel parameters, grid factors and workspace
buffers with the words below, and the runtime (C++) or a test launcher (Python) resolves each
word against the SDPA problem being served. Adding a word means teaching every launcher; adding
a kernel family must not.
"""
from __future__ import annotations

# Element tensors take the problem's dtype (fp16/bf16). Their strides are in elements, [b, h, s];
# the last dim must be contiguous. lse and every workspace buffer are contiguous float32.
TENSORS = ("q", "k", "v", "o", "do", "dq", "dk", "dv")
FP32_BUFFERS = ("lse",)
STRIDE_AXES = ("b", "h", "s")

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


def stride_name(tensor: str, axis: str) -> str:
    return f"{tensor}_stride_{axis}"


STRIDES = tuple(stride_name(t, a) for t in TENSORS for a in STRIDE_AXES)
# The last-dim strides (always 1: launchers refuse anything else). Only a tensor descriptor's
# stride list needs them, because Triton passes all of a descriptor's strides.
LAST_DIM_STRIDES = tuple(stride_name(t, "d") for t in TENSORS)

# Host TMA descriptors (CUtensorMap): 128 bytes by value, `.align 64` in the PTX. On sm_90 the
# parameters start at constant-bank offset 0x210 (the cubin's EIATTR_PARAM_CBANK) and ptxas
# aligns against that absolute address, so a descriptor's argument offset is 48 mod 64.
TENSORMAP_BYTES = 128
TENSORMAP_ALIGN = 64
CUDA_PARAM_BASE = 0x210
# The argument layout of each wire type: (size, alignment) in bytes.
WIRE_LAYOUT = {"ptr": (8, 8), "i64": (8, 8), "i32": (4, 4), "f32": (4, 4),
               "tensormap": (TENSORMAP_BYTES, TENSORMAP_ALIGN)}
# Tensor-map options (docs/runtime.md, "Tensor maps").
TENSORMAP_SWIZZLES = (0, 32, 64, 128)
TENSORMAP_L2_PROMOTIONS = (0, 64, 128, 256)
TENSORMAP_OOB_FILLS = ("zero", "nan")


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
            + [(stride_name(tensor, a), "i64") for a in STRIDE_AXES + ("d",)])


def kernarg_layout(types: list[str], arch: str) -> tuple[list[int], int]:
    """(argument offsets, kernarg size) of parameters of these wire types, as the compiler lays
    them out: natural alignment against the parameters' base address (0x210 in the constant bank
    on CUDA, 0 on AMD), the end padded to 8. The runtime (src/launch.cpp) computes the same."""
    base = CUDA_PARAM_BASE if arch.startswith("sm_") else 0
    offsets, offset = [], 0
    for t in types:
        size, align = WIRE_LAYOUT[t]
        offset = -(-(base + offset) // align) * align - base
        offsets.append(offset)
        offset += size
    return offsets, -(-offset // 8) * 8


def param_type(name: str, workspace_names: tuple[str, ...] = ()) -> str:
    """Wire type of one parameter word: 'ptr', 'i32', 'i64' or 'f32'."""
    if name in TENSORS or name in FP32_BUFFERS or name in workspace_names or name in TRITON_SCRATCH:
        return "ptr"
    if name in STRIDES or name in LAST_DIM_STRIDES:
        return "i64"
    if name in SIZES or name == HEAD_DIM:
        return "i32"
    if name in FLOATS:
        return "f32"
    raise KeyError(f"'{name}' is not a launch-spec word; see attnpack/abi.py for the vocabulary")


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
