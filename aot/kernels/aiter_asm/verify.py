"""Static checks of an AITER code object against its declaration in kernels.py.

Nothing is guessed: every fact comes from the code object itself, through attnpack's ELF
reader (python/attnpack/archive/elf.py):
  - ELF machine AMDGPU and the arch in e_flags (EF_AMDGPU_MACH: gfx942 0x4c, gfx950 0x4f);
  - the entry symbol in the symbol table and an amdhsa.kernels entry of that name;
  - NT_AMDGPU_METADATA's kernarg segment: its size equals the declared buffer, and every slot
    the code object names sits where the table puts it, with the same size and kind
    (global_buffer for pointers, by_value for the rest). AITER's code objects name every slot,
    padding included ("pad"): the declared fields plus the pads must tile the whole segment;
  - the workgroup: .reqd_workgroup_size equals the declared block, wave64, no scratch, LDS
    within the arch's limit.
"""
from __future__ import annotations

import struct

from attnpack.archive.elf import ElfError, kernel_facts
from attnpack.targets import EM_AMDGPU, target

from .kernels import CodeObject
ELFOSABI_AMDGPU_HSA = 64
# e_ident[EI_ABIVERSION] for ELFOSABI_AMDGPU_HSA: 2, 3, 4 are code object v4, v5, v6.
CODE_OBJECT_VERSIONS = {2: 4, 3: 5, 4: 6}
POINTER_KIND = "global_buffer"
PAD_NAME = "pad"


def check_code_object(obj: CodeObject, image: bytes) -> list[str]:
    """Every disagreement between the code object and its declaration (empty: they agree)."""
    where = f"{obj.member} ({obj.symbol})"
    if len(image) < 64 or image[:4] != b"\x7fELF":
        return [f"{where}: not an ELF file"]
    machine = struct.unpack_from("<H", image, 0x12)[0]
    if machine != EM_AMDGPU:
        return [f"{where}: ELF machine {machine}, expected AMDGPU ({EM_AMDGPU})"]
    mach = struct.unpack_from("<I", image, 0x30)[0] & 0xFF
    problems = []
    if image[7] != ELFOSABI_AMDGPU_HSA or image[8] not in CODE_OBJECT_VERSIONS:
        problems.append(f"{where}: ELF OS ABI {image[7]} version {image[8]}, expected an HSA "
                        "code object v4-v6 (OS ABI 64, version 2-4)")
    if mach != target(obj.arch).elf_mach:
        problems.append(f"{where}: EF_AMDGPU_MACH {mach:#x}, {obj.arch} is "
                        f"{target(obj.arch).elf_mach:#x}")
    try:
        facts = kernel_facts(image, obj.symbol)
    except ElfError as e:
        return problems + [f"{where}: {e}"]
    if obj.symbol not in facts.symbols:
        problems.append(f"{where}: entry symbol missing from the ELF symbol table")
    if f"{obj.symbol}.kd" not in facts.symbols:
        problems.append(f"{where}: kernel descriptor {obj.symbol}.kd missing")
    problems += _check_kernargs(obj, facts, where)
    res = facts.resources
    if facts.reqd_workgroup_size not in (None, (obj.block, 1, 1)):
        problems.append(f"{where}: code object requires workgroup {facts.reqd_workgroup_size}, "
                        f"the table launches ({obj.block}, 1, 1)")
    if obj.block > res["max_workgroup_size"]:
        problems.append(f"{where}: block {obj.block} > max_flat_workgroup_size "
                        f"{res['max_workgroup_size']}")
    if res["wavefront_size"] != 64:
        problems.append(f"{where}: wavefront size {res['wavefront_size']}, expected 64")
    if res["scratch_bytes"]:
        problems.append(f"{where}: {res['scratch_bytes']} bytes of scratch")
    lds = target(obj.arch).shared_bytes
    if res["lds_bytes"] > lds:
        problems.append(f"{where}: {res['lds_bytes']} bytes of LDS > {obj.arch}'s {lds}")
    return problems


def code_object_version(image: bytes) -> int:
    """The AMDGPU code object version (the HIP loader must know it: AITER ships v5 and v6)."""
    return CODE_OBJECT_VERSIONS.get(image[8], 0)


def _check_kernargs(obj: CodeObject, facts, where: str) -> list[str]:
    layout, problems = obj.layout, []
    if facts.kernarg_size != layout.size:
        problems.append(f"{where}: kernarg segment {facts.kernarg_size} bytes, the declared "
                        f"buffer ({layout.name}) is {layout.size}")
    if not facts.params:
        # A code object may declare only the segment size; then the size is all we can check.
        problems.append(f"{where}: the metadata names no kernel arguments; only the kernarg "
                        "size could be checked")
        return problems
    meta = {off: (size, name, kind) for (off, size), name, kind
            in zip(facts.params, facts.param_names, facts.param_kinds)}
    declared = {f.offset: f for f in layout.fields}
    for f in layout.fields:
        if f.offset not in meta:
            problems.append(f"{where}: {f.aiter_name} at offset {f.offset}: the metadata has "
                            "no argument there")
            continue
        size, name, kind = meta[f.offset]
        want_kind = POINTER_KIND if f.wire == "ptr" else "by_value"
        if (size, name, kind) != (f.size, f.aiter_name, want_kind):
            problems.append(f"{where}: offset {f.offset}: metadata has {name!r} ({size} bytes, "
                            f"{kind}), the table {f.aiter_name!r} ({f.size} bytes, {want_kind})")
    for off, (size, name, kind) in sorted(meta.items()):
        if name != PAD_NAME and off not in declared:
            problems.append(f"{where}: metadata argument {name!r} at offset {off} ({size} "
                            "bytes) is not in the table")
    # Declared fields and the metadata's pads together cover the segment once, without gaps.
    spans = sorted([(f.offset, f.size) for f in layout.fields] +
                   [(off, size) for off, (size, name, _) in meta.items() if name == PAD_NAME])
    at = 0
    for off, size in spans:
        if off != at:
            problems.append(f"{where}: bytes {min(at, off)}..{max(at, off)} are "
                            f"{'covered twice' if off < at else 'neither a field nor a pad'}")
        at = max(at, off + size)
    if at != facts.kernarg_size:
        problems.append(f"{where}: fields and pads end at {at}, the segment at "
                        f"{facts.kernarg_size}")
    return problems
