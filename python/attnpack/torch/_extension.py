"""Finding and loading libattnpack_torch, the C++ half of attnpack.torch, and its C entry points.

The library holds the overriding kernels; Python only switches them on and off and reads
counters, through the plain C functions below (ctypes: no Python on any SDPA call).
"""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import torch

from attnpack import _locate

BUILD_HINT = (
    "build it with `bash build_tools/setup.sh` (a source checkout: build/torch/), or install the "
    "wheel (attnpack/lib/), or build the extension alone:\n"
    "  cmake -S python/attnpack/torch/csrc -B build/torch -G Ninja -DCMAKE_BUILD_TYPE=Release \\\n"
    "        -DCMAKE_PREFIX_PATH=\"$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')\"\n"
    "  cmake --build build/torch\n"
    "or point ATTNPACK_TORCH_LIB at a built libattnpack_torch.so")


class ExtensionError(RuntimeError):
    """libattnpack_torch is missing, or was built for another torch."""


def library_path() -> Path:
    """$ATTNPACK_TORCH_LIB, else the first of attnpack/lib/ and the checkout's build/torch/ that
    holds libattnpack_torch.so (attnpack/_locate.py); the first candidate if none does."""
    candidates = _locate.torch_library_candidates()
    return next((c for c in candidates if c.is_file()), candidates[0])


def bundle_directory() -> str:
    """Where archives are looked for (attnpack/_locate.py): $ATTNPACK_BUNDLE_DIR, else the
    installed attnpack/lib/attnpack/, else the checkout's build/bundle/; "" lets the runtime
    choose (<dir of libattnpack.so>/attnpack)."""
    return _locate.bundle_directory()


def _base_version(version: str) -> str:
    return version.split("+")[0]


class Extension:
    """The loaded library. One per process (see load())."""

    def __init__(self, path: Path):
        # A runtime named explicitly (the GPU test script sets it) is loaded first, so the
        # extension's dependency on libattnpack.so.<major>.<minor> resolves to that copy.
        runtime = os.environ.get("ATTNPACK_RUNTIME_LIB")
        try:
            if runtime:
                ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise ExtensionError(f"cannot load {path}: {e}. It must be built against this torch "
                                 f"({torch.__version__}); {BUILD_HINT}") from e
        self.path = path
        self._lib = lib
        size_t, i64, char_p = ctypes.c_size_t, ctypes.c_int64, ctypes.c_char_p
        err = (ctypes.c_char_p, size_t)
        signatures = {
            "attnpack_torch_activate": (ctypes.c_int, (char_p, i64, *err)),
            "attnpack_torch_deactivate": (ctypes.c_int, err),
            "attnpack_torch_is_active": (ctypes.c_int, ()),
            "attnpack_torch_originals": (size_t, (char_p, size_t)),
            "attnpack_torch_stats": (size_t, (char_p, size_t)),
            "attnpack_torch_reset_stats": (None, ()),
            "attnpack_torch_set_logging": (None, (ctypes.c_int,)),
            "attnpack_torch_logging": (ctypes.c_int, ()),
            "attnpack_torch_built_with": (char_p, ()),
            "attnpack_torch_preload": (ctypes.c_int, (i64, *err)),
            "attnpack_torch_bundle_info": (size_t, (i64, char_p, size_t)),
            "attnpack_torch_explain": (size_t, (ctypes.c_int, char_p, ctypes.POINTER(i64), ctypes.c_int,
                                                ctypes.c_double, ctypes.c_int, ctypes.c_int,
                                                ctypes.c_double, ctypes.c_int, ctypes.c_int, i64,
                                                char_p, char_p, char_p, size_t)),
        }
        for name, (restype, argtypes) in signatures.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, list(argtypes)
        self.built_with = lib.attnpack_torch_built_with().decode()
        if _base_version(self.built_with) != _base_version(torch.__version__):
            raise ExtensionError(f"{path} was built against torch {self.built_with}, this is torch "
                                 f"{torch.__version__}; rebuild it: {BUILD_HINT}")

    # ---- calls that fail with a message
    def _checked(self, fn, *args) -> None:
        error = ctypes.create_string_buffer(4096)
        if fn(*args, error, len(error)) != 0:
            raise RuntimeError(error.value.decode(errors="replace"))

    @staticmethod
    def _text(fn, *args) -> str:
        capacity = 1 << 14
        while True:
            buffer = ctypes.create_string_buffer(capacity)
            length = fn(*args, buffer, capacity)
            if length < capacity:
                return buffer.value.decode(errors="replace")
            capacity = length + 1

    def activate(self, bundle_dir: str, efficient_lse_align: int) -> None:
        self._checked(self._lib.attnpack_torch_activate, bundle_dir.encode(), efficient_lse_align)

    def deactivate(self) -> None:
        self._checked(self._lib.attnpack_torch_deactivate)

    def is_active(self) -> bool:
        return bool(self._lib.attnpack_torch_is_active())

    def originals(self) -> dict:
        return json.loads(self._text(self._lib.attnpack_torch_originals))

    def stats(self) -> dict:
        return json.loads(self._text(self._lib.attnpack_torch_stats))

    def reset_stats(self) -> None:
        self._lib.attnpack_torch_reset_stats()

    def set_logging(self, on: bool) -> None:
        self._lib.attnpack_torch_set_logging(int(on))

    def logging(self) -> bool:
        return bool(self._lib.attnpack_torch_logging())

    def preload(self, device: int) -> None:
        self._checked(self._lib.attnpack_torch_preload, device)

    def bundle_info(self, device: int) -> dict:
        return json.loads(self._text(self._lib.attnpack_torch_bundle_info, device))

    def explain(self, entry: int, dtype: str, shape, causal: bool, dropout_p: float,
                return_debug_mask: bool, scale: float | None, has_attn_bias: bool,
                deterministic: int, device: int, archive: str | None, arch: str | None) -> dict:
        dims = (ctypes.c_int64 * 6)(*shape)
        return json.loads(self._text(
            self._lib.attnpack_torch_explain, entry, dtype.encode(), dims, int(causal),
            float(dropout_p), int(return_debug_mask), int(scale is not None),
            float(scale or 0.0), int(has_attn_bias), int(deterministic), device,
            (archive or "").encode(), (arch or "").encode()))


_loaded: Extension | None = None


def load() -> Extension:
    """The extension, loaded on first use; ExtensionError says how to build it."""
    global _loaded
    if _loaded is None:
        path = library_path()
        if not path.is_file():
            looked = ", ".join(map(str, _locate.torch_library_candidates()))
            raise ExtensionError(f"attnpack's PyTorch extension is not built (looked for {looked}); "
                                 f"{BUILD_HINT}")
        _loaded = Extension(path)
    return _loaded


def loaded() -> Extension | None:
    """The extension if something already loaded it (stats() must not load it)."""
    return _loaded
