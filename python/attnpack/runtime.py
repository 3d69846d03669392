"""ctypes binding of libattnpack, the C runtime (runtime/include/attnpack/attnpack.h).

For tests, benchmarks and the tuning CLI; PyTorch's SDPA path links the C API directly.
The library is found as attnpack/_locate.py says: $ATTNPACK_RUNTIME_LIB, then attnpack/lib/
(an installed wheel), then the build folders of this checkout (build/runtime, build/rt).

    from attnpack import runtime
    with runtime.Bundle("out/attnpack-0.1.0-sm_90.apk") as bundle:
        print(bundle.explain(runtime.make_problem("fwd", "bf16", B=1, Hq=8, Hkv=8, Sq=128,
                                                  Sk=128, D=128, causal=True)))
        o, lse = runtime.forward(bundle, q, k, v, causal=True)   # torch tensors [B, H, S, D]
"""
from __future__ import annotations

import ctypes
import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from attnpack import _locate



class Status(enum.IntEnum):
    OK = 0
    UNSUPPORTED = 1
    INVALID_ARGUMENT = 2
    ARCHIVE_NOT_FOUND = 3
    ARCHIVE_CORRUPT = 4
    ARCHIVE_VERSION = 5
    ARCH_MISMATCH = 6
    BAD_LAUNCH_SPEC = 7
    NO_DRIVER = 8
    NO_DEVICE = 9
    DRIVER_ERROR = 10
    INTERNAL = 11


class AttnpackError(RuntimeError):
    """A failed runtime call: `status` (Status) and the runtime's `message`."""

    def __init__(self, status: Status, message: str):
        self.status, self.message = status, message
        super().__init__(f"{status.name.lower()}: {message}")


class Unsupported(AttnpackError):
    """The bundle does not serve this problem; `reason` says why. Callers fall back."""

    @property
    def reason(self) -> str:
        return self.message


OPS = {"fwd": 1, "bwd": 2}
DTYPES = {"fp16": 1, "bf16": 2, "fp32": 3}
OPEN_RECORDING_DRIVER = 0x1

# ---- the C structs, field for field (tests compare them with the C compiler's layout) -----


class OpenParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("path", ctypes.c_char_p), ("directory", ctypes.c_char_p), ("arch", ctypes.c_char_p)]


class BundleInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("format_major", ctypes.c_uint16),
                ("format_minor", ctypes.c_uint16), ("num_kernels", ctypes.c_uint32),
                ("num_images", ctypes.c_uint32), ("path", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("bundle_version", ctypes.c_char_p), ("compilers", ctypes.c_char_p),
                ("driver", ctypes.c_char_p), ("tuned_on", ctypes.c_char_p),
                ("num_gpu_models", ctypes.c_uint32),
                ("gpu_models", ctypes.POINTER(ctypes.c_char_p)),
                ("gpu_entries", ctypes.POINTER(ctypes.c_uint32))]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64), ("stride_h", ctypes.c_int64),
                ("stride_s", ctypes.c_int64), ("stride_d", ctypes.c_int64)]


TENSOR_FIELDS = ("q", "k", "v", "o", "dout", "dq", "dk", "dv")


class Problem(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("op", ctypes.c_int32), ("dtype", ctypes.c_int32),
                ("causal", ctypes.c_int32), ("batch", ctypes.c_int32), ("heads_q", ctypes.c_int32),
                ("heads_kv", ctypes.c_int32), ("seqlen_q", ctypes.c_int32),
                ("seqlen_k", ctypes.c_int32), ("head_dim", ctypes.c_int32),
                ("softmax_scale", ctypes.c_float),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor),
                ("lse", ctypes.c_void_p),
                ("dout", Tensor), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("kernel", ctypes.c_char_p),  # version 2
                ("flags", ctypes.c_uint32)]   # version 3: PROBLEM_DETERMINISTIC


PROBLEM_DETERMINISTIC = 0x1


class KernelInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("num_steps", ctypes.c_uint32),
                ("name", ctypes.c_char_p), ("family", ctypes.c_char_p),
                # version 2: the family's policy
                ("deterministic", ctypes.c_int32), ("priority", ctypes.c_uint32),
                ("backend", ctypes.c_char_p), ("license", ctypes.c_char_p),
                ("origin", ctypes.c_char_p)]


class LaunchParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("stream", ctypes.c_void_p),
                ("workspace", ctypes.c_void_p), ("workspace_size", ctypes.c_uint64)]


# ---- loading the library ------------------------------------------------------------------


def library_candidates() -> list[Path]:
    return _locate.runtime_library_candidates()


_lib: ctypes.CDLL | None = None


def library() -> ctypes.CDLL:
    """libattnpack, loaded once, with every C function's signature declared."""
    global _lib
    if _lib is not None:
        return _lib
    candidates = library_candidates()
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise FileNotFoundError(
            "libattnpack.so not found (looked at " + ", ".join(map(str, candidates)) + "); build it "
            "with `cmake -S runtime -B build/rt && cmake --build build/rt` or set ATTNPACK_RUNTIME_LIB")
    lib = ctypes.CDLL(str(path))
    status, handle, p, size, char_p = (ctypes.c_int, ctypes.c_void_p, ctypes.POINTER,
                                       ctypes.c_size_t, ctypes.c_char_p)
    signatures = {
        "attnpack_version": (ctypes.c_uint32, []),
        "attnpack_version_string": (char_p, []),
        "attnpack_status_name": (char_p, [ctypes.c_int]),
        "attnpack_last_error": (char_p, []),
        "attnpack_open": (status, [p(OpenParams), p(handle)]),
        "attnpack_close": (None, [handle]),
        "attnpack_bundle_info_get": (status, [handle, p(BundleInfo)]),
        "attnpack_verify_images": (status, [handle]),
        "attnpack_verify": (status, [handle]),
        "attnpack_kernel_image": (status, [handle, char_p, ctypes.c_uint32, ctypes.c_void_p, size,
                                           p(size)]),
        "attnpack_select": (status, [handle, p(Problem), p(KernelInfo)]),
        "attnpack_explain": (status, [handle, p(Problem), ctypes.c_char_p, size, p(size)]),
        "attnpack_workspace_size": (status, [handle, p(Problem), p(ctypes.c_uint64)]),
        "attnpack_preload": (status, [handle, p(Problem), size]),
        "attnpack_forward": (status, [handle, p(Problem), p(LaunchParams)]),
        "attnpack_backward": (status, [handle, p(Problem), p(LaunchParams)]),
        "attnpack_stats": (status, [handle, ctypes.c_char_p, size, p(size)]),
        "attnpack_stats_reset": (status, [handle]),
        "attnpack_recorded_launches": (status, [handle, ctypes.c_char_p, size, p(size)]),
        "attnpack_recording_set_device": (status, [handle, ctypes.c_int32]),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    _lib = lib
    return lib


def library_path() -> Path:
    return Path(library()._name)


def version() -> str:
    return library().attnpack_version_string().decode()


def check(status: int) -> None:
    """Raises the runtime's failure as AttnpackError (Unsupported for UNSUPPORTED)."""
    if status == Status.OK:
        return
    message = library().attnpack_last_error().decode()
    status = Status(status)
    raise (Unsupported if status == Status.UNSUPPORTED else AttnpackError)(status, message)


def _text(call) -> str:
    """Runs a (buffer, capacity, length) call, growing the buffer until the text fits."""
    capacity = 4096
    while True:
        buffer = ctypes.create_string_buffer(capacity)
        length = ctypes.c_size_t()
        check(call(buffer, capacity, ctypes.byref(length)))
        if length.value < capacity:
            return buffer.value.decode()
        capacity = length.value + 1


# ---- problems -----------------------------------------------------------------------------


def make_problem(op: str, dtype: str, *, B: int, Hq: int, Hkv: int, Sq: int, Sk: int, D: int,
                 causal: bool = False, scale: float | None = None,
                 strides: Mapping[str, tuple[int, int, int, int]] | None = None,
                 pointers: Mapping[str, int] | None = None, kernel: str | None = None,
                 deterministic: bool = False) -> Problem:
    """A problem by numbers: strides default to contiguous [B, H, S, D]; pointers to NULL.

    `strides`/`pointers` are keyed by tensor name (q k v o do dq dk dv, and lse for pointers).
    `kernel` forces that archive kernel by name instead of the selection (`attnpack tune`).
    `deterministic` selects among deterministic kernels only (ATTNPACK_PROBLEM_DETERMINISTIC).
    """
    problem = Problem(struct_size=ctypes.sizeof(Problem), op=OPS.get(op, op),
                      dtype=DTYPES.get(dtype, dtype), causal=int(causal), batch=B, heads_q=Hq,
                      heads_kv=Hkv, seqlen_q=Sq, seqlen_k=Sk, head_dim=D,
                      softmax_scale=0.0 if scale is None else scale,
                      kernel=kernel.encode() if kernel else None,
                      flags=PROBLEM_DETERMINISTIC if deterministic else 0)
    strides, pointers = dict(strides or {}), dict(pointers or {})
    for field in TENSOR_FIELDS:
        name = "do" if field == "dout" else field
        heads, seq = (Hkv, Sk) if name in ("k", "v", "dk", "dv") else (Hq, Sq)
        sb, sh, ss, sd = strides.get(name, (heads * seq * D, seq * D, D, 1))
        setattr(problem, field, Tensor(pointers.get(name, 0) or None, sb, sh, ss, sd))
    problem.lse = pointers.get("lse", 0) or None
    return problem


@dataclass(frozen=True)
class Kernel:
    name: str
    family: str
    num_steps: int
    deterministic: bool      # the family's declaration, carried by the archive
    priority: int
    backend: str
    license: str
    origin: str


class Bundle:
    """One opened archive. Thread-safe; close() (or `with`) unloads its modules."""

    def __init__(self, path: str | os.PathLike | None = None, *, directory: str | None = None,
                 arch: str | None = None, recording: bool = False):
        self._lib = library()
        params = OpenParams(struct_size=ctypes.sizeof(OpenParams),
                            flags=OPEN_RECORDING_DRIVER if recording else 0,
                            path=os.fsencode(path) if path is not None else None,
                            directory=os.fsencode(directory) if directory is not None else None,
                            arch=arch.encode() if arch else None)
        handle = ctypes.c_void_p()
        check(self._lib.attnpack_open(ctypes.byref(params), ctypes.byref(handle)))
        self._handle = handle

    def close(self) -> None:
        if getattr(self, "_handle", None):
            self._lib.attnpack_close(self._handle)
            self._handle = None

    def __enter__(self) -> "Bundle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        self.close()

    @property
    def handle(self) -> ctypes.c_void_p:
        if not self._handle:
            raise ValueError("the bundle is closed")
        return self._handle

    def info(self) -> dict:
        info = BundleInfo(struct_size=ctypes.sizeof(BundleInfo))
        check(self._lib.attnpack_bundle_info_get(self.handle, ctypes.byref(info)))
        return {"path": info.path.decode(), "arch": info.arch.decode(),
                "bundle_version": info.bundle_version.decode(),
                "format": (info.format_major, info.format_minor),
                "compilers": info.compilers.decode(), "driver": info.driver.decode(),
                "kernels": info.num_kernels, "images": info.num_images,
                "tuned_on": info.tuned_on.decode(),
                "gpu_entries": {info.gpu_models[i].decode(): info.gpu_entries[i]
                                for i in range(info.num_gpu_models)}}

    def select(self, problem: Problem) -> Kernel:
        """The kernel that serves `problem`; raises Unsupported with the reason otherwise."""
        kernel = KernelInfo(struct_size=ctypes.sizeof(KernelInfo))
        check(self._lib.attnpack_select(self.handle, ctypes.byref(problem), ctypes.byref(kernel)))
        return Kernel(kernel.name.decode(), kernel.family.decode(), kernel.num_steps,
                      bool(kernel.deterministic), kernel.priority, kernel.backend.decode(),
                      kernel.license.decode(), kernel.origin.decode())

    def explain(self, problem: Problem) -> str:
        return _text(lambda buf, cap, n: self._lib.attnpack_explain(
            self.handle, ctypes.byref(problem), buf, cap, n))

    def workspace_size(self, problem: Problem) -> int:
        size = ctypes.c_uint64()
        check(self._lib.attnpack_workspace_size(self.handle, ctypes.byref(problem),
                                                ctypes.byref(size)))
        return size.value

    def preload(self, problems: Iterable[Problem] = ()) -> None:
        """Loads the kernels these problems need; with none, every kernel the device can select
        (the selection table's, the arch-wide tuning entries', its own GPU model's entries')."""
        problems = list(problems)
        array = (Problem * len(problems))(*problems) if problems else None
        check(self._lib.attnpack_preload(self.handle, array, len(problems)))

    def _launch_params(self, stream: int | None, workspace: int | None, workspace_size: int):
        return LaunchParams(struct_size=ctypes.sizeof(LaunchParams), stream=stream or None,
                            workspace=workspace or None, workspace_size=workspace_size)

    def forward(self, problem: Problem, *, stream: int | None = None, workspace: int | None = None,
                workspace_size: int = 0) -> None:
        launch = self._launch_params(stream, workspace, workspace_size)
        check(self._lib.attnpack_forward(self.handle, ctypes.byref(problem), ctypes.byref(launch)))

    def backward(self, problem: Problem, *, stream: int | None = None,
                 workspace: int | None = None, workspace_size: int = 0) -> None:
        launch = self._launch_params(stream, workspace, workspace_size)
        check(self._lib.attnpack_backward(self.handle, ctypes.byref(problem),
                                          ctypes.byref(launch)))

    def stats(self) -> dict:
        return json.loads(_text(lambda buf, cap, n: self._lib.attnpack_stats(self.handle, buf, cap, n)))

    def reset_stats(self) -> None:
        check(self._lib.attnpack_stats_reset(self.handle))

    def recorded_launches(self) -> dict:
        """Recording bundles: {"launches": [...], "loaded": [...], "loaded_devices": [...]};
        forgets the launches."""
        return json.loads(_text(lambda buf, cap, n: self._lib.attnpack_recorded_launches(
            self.handle, buf, cap, n)))

    def set_recording_device(self, device: int) -> None:
        """Recording bundles: the calling thread pretends its current device is `device`."""
        check(self._lib.attnpack_recording_set_device(self.handle, device))

    def kernel_image(self, kernel: str, step: int = 0) -> bytes:
        """The raw image a first load of this step hands the driver (inflated, sha256-checked)."""
        size = ctypes.c_size_t()
        check(self._lib.attnpack_kernel_image(self.handle, kernel.encode(), step, None, 0,
                                              ctypes.byref(size)))
        buffer = ctypes.create_string_buffer(size.value)
        check(self._lib.attnpack_kernel_image(self.handle, kernel.encode(), step, buffer,
                                              size.value, ctypes.byref(size)))
        return buffer.raw[:size.value]

    def verify_images(self) -> None:
        check(self._lib.attnpack_verify_images(self.handle))

    def verify(self) -> None:
        """Every kernel's launch spec is launchable here, and every image checks out."""
        check(self._lib.attnpack_verify(self.handle))


# ---- torch helpers (tests, benchmarks, the tuning CLI) ------------------------------------

_TORCH_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _tensor(t) -> Tensor:
    return Tensor(t.data_ptr(), *t.stride()) if t is not None else Tensor()


def problem_from_tensors(op: str, q, k, v, o, lse, *, do=None, dq=None, dk=None, dv=None,
                         causal: bool = False, scale: float | None = None,
                         kernel: str | None = None) -> Problem:
    """A problem over torch tensors, each a logical [B, H, S, D] view (any strides)."""
    B, Hq, Sq, D = q.shape
    dtype = _TORCH_DTYPES.get(str(q.dtype).removeprefix("torch."))
    if dtype is None:
        raise TypeError(f"q has dtype {q.dtype}; attnpack takes float16, bfloat16 (or float32)")
    problem = make_problem(op, dtype, B=B, Hq=Hq, Hkv=k.shape[1], Sq=Sq, Sk=k.shape[2], D=D,
                           causal=causal, scale=scale, kernel=kernel)
    for field, t in zip(TENSOR_FIELDS, (q, k, v, o, do, dq, dk, dv)):
        setattr(problem, field, _tensor(t))
    problem.lse = lse.data_ptr() if lse is not None else None
    return problem


def _stream(t) -> int:
    import torch
    return torch.cuda.current_stream(t.device).cuda_stream


def _device_of(t):
    """The tensor's GPU made current: the runtime loads and launches in the calling thread's
    context, which must be the tensors' (tensors on cuda:1 while cuda:0 is current)."""
    import contextlib

    import torch
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _workspace(bundle: Bundle, problem: Problem, device):
    import torch
    try:
        size = bundle.workspace_size(problem)
    except Unsupported:
        return None  # the launch call itself then reports (and counts) the reason
    # torch allocations are at least 256-byte aligned, as the runtime requires.
    return torch.empty(size, dtype=torch.uint8, device=device) if size else None


def forward(bundle: Bundle, q, k, v, *, causal: bool = False, scale: float | None = None,
            out=None, lse=None, kernel: str | None = None):
    """(o, lse) for q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]; lse is float32 [B, Hq, Sq].

    `kernel` runs that archive kernel by name instead of the selected one (`attnpack tune`).
    """
    import torch
    B, Hq, Sq, _ = q.shape
    o = torch.empty_like(q) if out is None else out
    lse = torch.empty((B, Hq, Sq), dtype=torch.float32, device=q.device) if lse is None else lse
    problem = problem_from_tensors("fwd", q, k, v, o, lse, causal=causal, scale=scale,
                                   kernel=kernel)
    ws = _workspace(bundle, problem, q.device)
    with _device_of(q):
        bundle.forward(problem, stream=_stream(q),
                       workspace=ws.data_ptr() if ws is not None else None,
                       workspace_size=ws.numel() if ws is not None else 0)
    return o, lse


def backward(bundle: Bundle, do, q, k, v, o, lse, *, causal: bool = False,
             scale: float | None = None, dq=None, dk=None, dv=None, kernel: str | None = None):
    """(dq, dk, dv) of attention for the upstream gradient `do` [B, Hq, Sq, D].

    `kernel` runs that archive kernel by name instead of the selected one (`attnpack tune`).
    """
    import torch
    dq = torch.empty_like(q) if dq is None else dq
    dk = torch.empty_like(k) if dk is None else dk
    dv = torch.empty_like(v) if dv is None else dv
    problem = problem_from_tensors("bwd", q, k, v, o, lse, do=do, dq=dq, dk=dk, dv=dv,
                                   causal=causal, scale=scale, kernel=kernel)
    ws = _workspace(bundle, problem, q.device)
    with _device_of(q):
        bundle.backward(problem, stream=_stream(q),
                        workspace=ws.data_ptr() if ws is not None else None,
                        workspace_size=ws.numel() if ws is not None else 0)
    return dq, dk, dv

