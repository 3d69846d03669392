"""Static facts read out of a compiled image: ELF machine and arch, symbols, kernel parameters,
and resource use. This is what `attnpack verify` checks for targets we cannot run here."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import msgpack

from attnpack.targets import EM_AMDGPU, EM_CUDA, by_elf

NT_AMDGPU_METADATA = 32
# .nv.info attribute ids (CUDA's EIATTR_*).
EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11     # per-thread stack frame: nonzero means register spills or locals
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_PARAM_CBANK = 0x0A  # (section symbol, u16 offset of the parameters in cbank 0, u16 size)


class ElfError(ValueError):
    pass


@dataclass
class KernelFacts:
    machine: str                 # "cuda" or "amdgpu"
    arch: str                    # "sm_90", "gfx942", ...
    symbols: set[str]
    params: list[tuple[int, int]] = field(default_factory=list)   # (offset, size) in order
    kernarg_size: int = 0
    param_base: int | None = None  # CUDA: where the parameters start in constant bank 0
    resources: dict[str, int] = field(default_factory=dict)
    # AMDGPU only, parallel to `params`: each argument's metadata .name and .value_kind
    # (hand-written code objects name their slots; prebuilt-object checks compare them)
    param_names: list[str] = field(default_factory=list)
    param_kinds: list[str] = field(default_factory=list)
    reqd_workgroup_size: tuple[int, int, int] | None = None   # AMDGPU .reqd_workgroup_size


def _sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """[(name, type, offset, size, link)] of an ELF64 little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = []
    for i in range(shnum):
        name, typ, _flags, _addr, offset, size, link = struct.unpack_from(
            "<IIQQQQI", data, shoff + i * shentsize)
        raw.append((name, typ, offset, size, link))
    str_off = raw[shstrndx][2]
    return [(_cstr(data, str_off + n), t, o, s, l) for n, t, o, s, l in raw]


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def _symbol_table(data: bytes, sections) -> dict[int, str]:
    """Symbol index -> name, from the ELF symbol table."""
    out = {}
    for _name, typ, offset, size, link in sections:
        if typ != 2:  # SHT_SYMTAB
            continue
        str_off = sections[link][2]
        for i, at in enumerate(range(offset, offset + size, 24)):
            st_name = struct.unpack_from("<I", data, at)[0]
            if st_name:
                out[i] = _cstr(data, str_off + st_name)
    return out


def _nv_attributes(data: bytes, section):
    """(attribute id, payload) pairs of one .nv.info section."""
    at, end = section[2], section[2] + section[3]
    while at < end:
        fmt, attr = data[at], data[at + 1]
        if fmt == 4:       # EIFMT_SVAL: u16 length, payload
            length = struct.unpack_from("<H", data, at + 2)[0]
            yield attr, data[at + 4:at + 4 + length]
            at += 4 + length
        elif fmt == 3:     # EIFMT_HVAL: u16 value
            yield attr, data[at + 2:at + 4]
            at += 4
        else:              # EIFMT_NVAL (no value) / EIFMT_BVAL (one byte): 4-byte records too
            # (warp-specialized kernels carry EIATTR_REG_RECONFIG, an NVAL that ptxas pads to
            # 4 bytes; stepping 2 misread every attribute after it)
            yield attr, b""
            at += 4


def _cuda_facts(data: bytes, flags: int, symbol: str) -> KernelFacts:
    sections = _sections(data)
    symbols = _symbol_table(data, sections)
    # The SM number sits in e_flags' low byte in cubins of ELF ABI version 7 (CUDA's format up
    # to sm_90); ABI version 8 (sm_100 and newer, CUDA 12.8+) moved it to bits 8..15.
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    known = by_elf(EM_CUDA, sm)
    facts = KernelFacts("cuda", known.arch if known else f"sm_{sm}", set(symbols.values()))
    info = next((s for s in sections if s[0] == f".nv.info.{symbol}"), None)
    if info is None:
        raise ElfError(f"no .nv.info.{symbol} section (is '{symbol}' the entry point?)")
    params = {}
    for attr, payload in _nv_attributes(data, info):
        if attr == EIATTR_KPARAM_INFO:
            _, ordinal, offset, flag_word = struct.unpack_from("<IHHI", payload)
            params[ordinal] = (offset, (flag_word >> 18) & 0x3FFF)
        elif attr == EIATTR_CBANK_PARAM_SIZE:
            facts.kernarg_size = struct.unpack_from("<H", payload)[0]
        elif attr == EIATTR_PARAM_CBANK and len(payload) == 8:
            facts.param_base = struct.unpack_from("<H", payload, 4)[0]
    facts.params = [params[i] for i in sorted(params)]
    module_info = next((s for s in sections if s[0] == ".nv.info"), None)
    for attr, payload in (_nv_attributes(data, module_info) if module_info else ()):
        # module-wide attributes are (symbol index, value) pairs
        if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(payload) == 8:
            index, value = struct.unpack_from("<II", payload)
            if symbols.get(index) == symbol:
                facts.resources["registers" if attr == EIATTR_REGCOUNT else "stack_bytes"] = value
    local = next((s for s in sections if s[0] == f".nv.local.{symbol}"), None)
    facts.resources["local_bytes"] = local[3] if local else 0
    return facts


def amdgpu_kernel_metadata(data: bytes, symbol: str) -> dict:
    """The `amdhsa.kernels` entry of `symbol` from the NT_AMDGPU_METADATA note (msgpack)."""
    sections = _sections(data)
    note = next((s for s in sections if s[1] == 7), None)  # SHT_NOTE
    if note is None:
        raise ElfError("no note section with AMDGPU code object metadata")
    at, end, meta = note[2], note[2] + note[3], None
    while at < end:
        namesz, descsz, ntype = struct.unpack_from("<III", data, at)
        desc_at = at + 12 + ((namesz + 3) & ~3)
        if ntype == NT_AMDGPU_METADATA:
            meta = msgpack.unpackb(data[desc_at:desc_at + descsz], raw=False)
        at = desc_at + ((descsz + 3) & ~3)
    kernels = [k for k in (meta or {}).get("amdhsa.kernels", []) if k.get(".name") == symbol]
    if not kernels:
        raise ElfError(f"no amdhsa.kernels entry named '{symbol}'")
    return kernels[0]


def _amdgpu_facts(data: bytes, flags: int, symbol: str) -> KernelFacts:
    sections = _sections(data)
    mach = flags & 0xFF  # EF_AMDGPU_MACH (LLVM's AMDGPUUsage)
    known = by_elf(EM_AMDGPU, mach)
    facts = KernelFacts("amdgpu", known.arch if known else f"gfx-unknown-0x{mach:x}", set(_symbol_table(data, sections).values()))
    k = amdgpu_kernel_metadata(data, symbol)
    args = [a for a in k.get(".args", []) if not a[".value_kind"].startswith("hidden_")]
    facts.params = [(a[".offset"], a[".size"]) for a in args]
    facts.param_names = [a.get(".name", "") for a in args]
    facts.param_kinds = [a[".value_kind"] for a in args]
    if ".reqd_workgroup_size" in k:
        facts.reqd_workgroup_size = tuple(k[".reqd_workgroup_size"])
    facts.kernarg_size = k[".kernarg_segment_size"]
    facts.resources = {
        "vgpr": k.get(".vgpr_count", 0), "sgpr": k.get(".sgpr_count", 0),
        "agpr": k.get(".agpr_count", 0), "lds_bytes": k.get(".group_segment_fixed_size", 0),
        "scratch_bytes": k.get(".private_segment_fixed_size", 0),
        "vgpr_spills": k.get(".vgpr_spill_count", 0), "sgpr_spills": k.get(".sgpr_spill_count", 0),
        "wavefront_size": k.get(".wavefront_size", 0),
        "max_workgroup_size": k.get(".max_flat_workgroup_size", 0),
    }
    return facts


def kernel_facts(image: bytes, symbol: str) -> KernelFacts:
    if len(image) < 64:
        raise ElfError(f"{len(image)} bytes is too short for an ELF header")
    machine = struct.unpack_from("<H", image, 0x12)[0]
    flags = struct.unpack_from("<I", image, 0x30)[0]
    if machine == EM_CUDA:
        return _cuda_facts(image, flags, symbol)
    if machine == EM_AMDGPU:
        return _amdgpu_facts(image, flags, symbol)
    raise ElfError(f"ELF machine {machine} is neither CUDA ({EM_CUDA}) nor AMDGPU ({EM_AMDGPU})")
