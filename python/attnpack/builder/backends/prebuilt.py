"""The prebuilt-object backend: a code object someone else compiled, taken as it is.

A step's kernel is a `PrebuiltKernel`: where the object comes from (a source pinned by
sha256), its entry symbol, and its argument buffer written out field by field: each
parameter word with its wire type and byte offset, and the buffer's size. Nothing is compiled.
At build time the object's own metadata (AMD NT_AMDGPU_METADATA `.args` and
`.kernarg_segment_size`, CUDA .nv.info) is read and every declared offset and size is
checked against it, never guessed. Vendor assembly (AITER) comes in this way.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from attnpack import abi
from attnpack.builder.backends import declared_kernel, register
from attnpack.builder.compile import CompiledStep, CompileJob
from attnpack.targets import target

CACHE_SCHEMA = 1


class ObjectSource(Protocol):
    """Where a code object comes from. `sha256` pins its content; `read()` returns the bytes
    or raises an error naming the source and the fix."""
    sha256: str
    description: str

    def read(self) -> bytes: ...


@dataclass(frozen=True)
class ObjectFile:
    """A code object in a file (a family folder's own, or an extracted one)."""
    path: Path
    sha256: str

    @property
    def description(self) -> str:
        return str(self.path)

    def read(self) -> bytes:
        try:
            return Path(self.path).read_bytes()
        except OSError as e:
            raise FileNotFoundError(f"{self.path}: cannot read the prebuilt code object "
                                    f"({e.strerror})") from None


@dataclass(frozen=True)
class Param:
    word: str            # a launch-spec word (attnpack.abi) or the kernel's workspace name
    type: str            # wire type: ptr, i64, i32, f32
    offset: int          # bytes into the argument buffer
    divisibility: int = 1


@dataclass(frozen=True)
class PrebuiltKernel:
    source: ObjectSource
    symbol: str
    params: tuple[Param, ...]
    kernarg_size: int            # the whole argument buffer, padding included
    block: tuple[int, int, int]
    shared: int = 0              # dynamic shared memory / LDS beyond the object's static use


class PrebuiltError(ValueError):
    pass


def _kernel(job: CompileJob) -> PrebuiltKernel:
    return declared_kernel(job, PrebuiltKernel)


def check_layout(job: CompileJob, image: bytes) -> None:
    """The declared buffer against the object: ELF machine and arch, entry symbol, kernarg
    size, and each declared field's offset and size where the object lists its arguments."""
    from attnpack.archive.elf import kernel_facts
    kernel, where = _kernel(job), job.label
    facts = kernel_facts(image, kernel.symbol)
    t = target(job.variant.arch)
    if facts.arch != t.arch:
        raise PrebuiltError(f"{where}: {kernel.source.description} is built for {facts.arch}, "
                            f"the step is for {t.arch}")
    if kernel.symbol not in facts.symbols:
        raise PrebuiltError(f"{where}: entry symbol {kernel.symbol} is not in "
                            f"{kernel.source.description}")
    if facts.kernarg_size != kernel.kernarg_size:
        raise PrebuiltError(f"{where}: {kernel.symbol} declares a {facts.kernarg_size}-byte "
                            f"argument segment, the family says {kernel.kernarg_size}")
    declared = [(p.offset, abi.WIRE_SIZE[p.type]) for p in kernel.params]
    if t.vendor == "nvidia" and declared != facts.params:
        # CUDA launches with one pointer per parameter, in order: the list must be complete.
        raise PrebuiltError(f"{where}: declared fields {declared} (offset, size) are not "
                            f"{kernel.symbol}'s parameters {facts.params}, in order")
    if facts.params:
        # The object lists its arguments: every declared field must be one of them, exactly.
        listed = set(facts.params)
        wrong = [(p.word, p.offset, abi.WIRE_SIZE[p.type]) for p in kernel.params
                 if (p.offset, abi.WIRE_SIZE[p.type]) not in listed]
        if wrong:
            raise PrebuiltError(f"{where}: fields {wrong} (word, offset, size) are not arguments "
                                f"of {kernel.symbol}, which lists {sorted(listed)}")
    ends = sorted(declared)
    for (a_off, a_size), (b_off, _) in zip(ends, ends[1:]):
        if a_off + a_size > b_off:
            raise PrebuiltError(f"{where}: declared fields overlap at byte {b_off}")
    if ends and ends[-1][0] + ends[-1][1] > kernel.kernarg_size:
        raise PrebuiltError(f"{where}: a declared field ends past the {kernel.kernarg_size}-byte "
                            "argument buffer")


class PrebuiltBackend:
    name = "prebuilt"
    compilers = ()  # nothing compiles; each family records its objects' provenance

    def versions(self) -> dict[str, str]:
        return {}

    def cache_key(self, job: CompileJob) -> str:
        kernel = _kernel(job)
        text = json.dumps({"schema": CACHE_SCHEMA, "backend": self.name,
                           "object": kernel.source.sha256, "symbol": kernel.symbol,
                           "arch": job.variant.arch}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def compile(self, job: CompileJob) -> CompiledStep:
        kernel = _kernel(job)
        image = kernel.source.read()
        digest = hashlib.sha256(image).hexdigest()
        if digest != kernel.source.sha256:
            raise PrebuiltError(f"{kernel.source.description}: sha256 {digest}, the family pins "
                                f"{kernel.source.sha256} — the object changed; re-fetch it or "
                                "update the pin after checking it")
        check_layout(job, image)
        return CompiledStep(image, target(job.variant.arch).image_kind, kernel.symbol, {})

    def launch_spec(self, job: CompileJob, compiled: CompiledStep) -> dict:
        kernel = _kernel(job)
        check_layout(job, compiled.image)  # a cached image is checked as a fresh one
        return {
            "symbol": kernel.symbol,
            "params": [[p.word, p.type, p.divisibility, p.offset] for p in kernel.params],
            "kernarg_size": kernel.kernarg_size,
            "block": list(kernel.block), "shared": kernel.shared, "cluster": [1, 1, 1],
            "scratch": {"global_size": 0, "global_align": 1, "profile_size": 0,
                        "profile_align": 1},
            "tensormaps": [],
        }


register(PrebuiltBackend())
