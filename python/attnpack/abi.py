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


def param_type(name: str, workspace_names: tuple[str, ...] = ()) -> str:
    """Wire type of one parameter word: 'ptr', 'i32', 'i64' or 'f32'."""
    if name in TENSORS or name in FP32_BUFFERS or name in workspace_names or name in TRITON_SCRATCH:
        return "ptr"
    if name in STRIDES:
        return "i64"
    if name in SIZES:
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
