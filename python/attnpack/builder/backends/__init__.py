"""Compile backends: how one family's launch step becomes a GPU image and a launch spec.

A family names its backend (`FamilySpec.backend`); a step's `kernel` is that backend's
declaration of what to compile. A backend provides:

- `compilers`: the keys it records in the archive meta's `compilers` map (verify checks them);
- `versions()`: those compilers' exact versions;
- `cache_key(job)`: a content hash of everything that determines the image;
- `compile(job) -> CompiledStep`: the image, entry symbol and backend metadata (runs in a
  worker process; the result is cached by key);
- `launch_spec(job, compiled) -> dict`: the step record's backend part (docs/ARCHIVE.md):
  `symbol`, `params` as [word, type, divisibility, offset] with the offsets read from the
  image, `kernarg_size`, `block`, `shared`, `cluster`, `scratch`, `tensormaps`, and `pdl`
  where the kernel may start before the grid ahead of it ends.

Backends are looked up by name; a family with a backend of its own (FlyDSL's compiler, say)
registers it from its folder with `register`, so adding one touches no generic code.
"""
from __future__ import annotations

from typing import Protocol

from attnpack.builder.compile import CompiledStep, CompileJob


class Backend(Protocol):
    name: str
    compilers: tuple[str, ...]

    def versions(self) -> dict[str, str]: ...
    def cache_key(self, job: CompileJob) -> str: ...
    def compile(self, job: CompileJob) -> CompiledStep: ...
    def launch_spec(self, job: CompileJob, compiled: CompiledStep) -> dict: ...


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Make `backend` available under its name (idempotent for the same object's class)."""
    held = _REGISTRY.get(backend.name)
    if held is not None and type(held) is not type(backend):
        raise ValueError(f"two compile backends are named {backend.name!r}")
    _REGISTRY[backend.name] = backend
    return backend


def backend(name: str) -> Backend:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no compile backend named {name!r} (known: {', '.join(sorted(_REGISTRY))}); "
                       "a family's own backend registers itself from its family.py") from None


def declared_kernel(job: CompileJob, cls: type):
    """The step's kernel declaration, which must be of the backend's own class `cls`."""
    kernel = job.step.kernel
    if not isinstance(kernel, cls):
        raise TypeError(f"{job.label}: the {job.variant.backend} backend takes {cls.__name__} "
                        f"steps, got {type(kernel).__name__}")
    return kernel


class LayoutMismatch(ValueError):
    pass


def params_at_image_offsets(image: bytes, symbol: str, params: list[tuple[str, str, int]]
                            ) -> tuple[list[list], int]:
    """([word, type, divisibility, offset] per parameter, kernarg size): the offsets and the
    argument-segment size as the compiled image itself declares them (CUDA's .nv.info
    EIATTR_KPARAM_INFO, AMD's NT_AMDGPU_METADATA .args), so no launcher re-derives a layout.
    The image's parameter sizes must equal the wire types' sizes, in order."""
    from attnpack.abi import WIRE_SIZE
    from attnpack.archive.elf import kernel_facts
    facts = kernel_facts(image, symbol)
    want = [WIRE_SIZE[t] for _, t, _ in params]
    got = [size for _, size in facts.params]
    if want != got:
        raise LayoutMismatch(f"{symbol}: the image's parameters are {got} bytes, the launch "
                             f"spec's words {[w for w, _, _ in params]} need {want}")
    return ([[w, t, d, off] for (w, t, d), (off, _) in zip(params, facts.params)],
            facts.kernarg_size)


# The built-in backends register themselves.
from attnpack.builder.backends import prebuilt, triton  # noqa: E402,F401
