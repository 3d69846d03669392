"""Every GPU target attnpack knows, in one table.

A new target is one row here. The builder (compile targets, image kinds), `verify` (ELF
machine and arch, resource ceilings), the ELF reader (arch names), the families (shared
memory budgets) and CMake (the default arch set) read it; the archive's meta carries the
row's runtime-relevant part (`Target.meta()`), so the C++ runtime picks its driver by vendor
and needs no arch list of its own.

    python -m attnpack.targets --default    # the default arch set, ';'-separated (for CMake)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

EM_CUDA = 190
EM_AMDGPU = 224


@dataclass(frozen=True)
class Target:
    arch: str                # "sm_90", "gfx942": the archive's and the device's arch name
    vendor: str              # "nvidia" (CUDA driver) or "amd" (HIP)
    gpus: str                # what it is, for people
    elf_mach: int            # CUDA: the SM number in e_flags; AMD: EF_AMDGPU_MACH
    shared_bytes: int        # dynamic shared memory / LDS one block may use
    max_registers: int       # per thread: CUDA registers, AMD VGPR + AGPR
    default: bool            # in the default build (ATTNPACK_TARGET_ARCHS)
    verified: str            # how far this target is proven: "run on the H200", "built, not run"
    max_threads: int = 1024

    @property
    def image_kind(self) -> str:
        return "cubin" if self.vendor == "nvidia" else "hsaco"

    @property
    def elf_machine(self) -> int:
        return EM_CUDA if self.vendor == "nvidia" else EM_AMDGPU

    @property
    def wave_size(self) -> int:
        return 32 if self.vendor == "nvidia" else 64

    @property
    def param_base(self) -> int:
        """Where a kernel's parameters start: constant bank 0 offset 0x210 on CUDA (the cubin's
        EIATTR_PARAM_CBANK; ptxas aligns `.align 64` against that address), 0 in AMD's kernarg
        segment."""
        return 0x210 if self.vendor == "nvidia" else 0

    def meta(self) -> dict:
        """The part of the row the runtime reads from the archive (docs/ARCHIVE.md, meta)."""
        return {"vendor": self.vendor, "image_kind": self.image_kind,
                "wave_size": self.wave_size, "shared_bytes": self.shared_bytes}


_ROWS = (
    Target("sm_90", "nvidia", "H100/H200", elf_mach=90, shared_bytes=227 * 1024,
           max_registers=255, default=True, verified="run on the H200"),
    Target("gfx942", "amd", "MI300X/MI308X", elf_mach=0x04C, shared_bytes=64 * 1024,
           max_registers=512, default=True, verified="built, not run"),
    Target("gfx950", "amd", "MI350X/MI355X", elf_mach=0x04F, shared_bytes=160 * 1024,
           max_registers=512, default=True, verified="built, not run"),
    # Opt-in (ATTNPACK_TARGET_ARCHS): proof that a target is a row, not a code change.
    Target("sm_80", "nvidia", "A100", elf_mach=80, shared_bytes=163 * 1024,
           max_registers=255, default=False, verified="built, not run"),
    Target("sm_100", "nvidia", "B200", elf_mach=100, shared_bytes=227 * 1024,
           max_registers=255, default=False, verified="built, not run"),
)
TARGETS: dict[str, Target] = {t.arch: t for t in _ROWS}
DEFAULT_ARCHS: tuple[str, ...] = tuple(t.arch for t in _ROWS if t.default)
VENDORS = ("nvidia", "amd")


class UnknownTarget(KeyError):
    def __str__(self) -> str:
        return self.args[0]


def target(arch: str) -> Target:
    try:
        return TARGETS[arch]
    except KeyError:
        raise UnknownTarget(f"unknown arch '{arch}' (known: {', '.join(TARGETS)}); a new target "
                            "is a row in python/attnpack/targets.py") from None


def by_elf(machine: int, mach: int) -> Target | None:
    """The target an ELF's machine and arch field name, if it is one of ours."""
    return next((t for t in _ROWS if t.elf_machine == machine and t.elf_mach == mach), None)


def _main(argv: list[str]) -> int:
    if argv == ["--default"]:
        print(";".join(DEFAULT_ARCHS))
        return 0
    if argv == ["--all"]:
        print(";".join(TARGETS))
        return 0
    print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
