"""Compile the FlyDSL forward offline into a gfx950 code object, and describe how to launch it.

This is the FlyDSL-specific half of a compile backend (the generic half lives in the builder):
    compile_forward(arch, dtype, head_dim, causal, config) -> CompiledObject
    FLYDSL_VERSION, cache_key(source_hash, flydsl_version, arch, config)

FlyDSL is a build-time dependency only: the code object it produces is a plain AMDGPU ELF that
libattnpack launches through HIP with a packed kernarg buffer, by the offsets below.

Kernel arguments (read back from the code object's NT_AMDGPU_METADATA `.args`; FlyDSL emits no
names, so we name them by position and check every offset and size against what FlyDSL's host
side packs):
    q, k, v, o   each a global pointer (8 bytes) followed by a 40-byte by-value struct of the
                 tensor's dynamic layout, packed without padding as FlyDSL's _LayoutPlan does:
                 the 4 extents (i32) [B, H, S, D], then the 3 non-unit strides (i64) [b, h, s]
    lse          a global pointer (fp32, contiguous [B, Hq, Sq])
    sm_scale_log2  f32
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import tiles

FLYDSL_VERSION_PINNED = "0.4.2"
SUPPORTED_ARCHS = ("gfx950",)   # ds_read_b64_tr_b16 and v_mfma_f32_32x32x16_* are CDNA4-only
KERNEL_NAME = "flydsl_attn_fwd"
ENTRY_SYMBOL = KERNEL_NAME + "_0"  # FlyDSL appends the specialization index
SOURCE_FILES = ("fwd.py", "tiles.py", "backend.py")

# Per-tensor layout struct: (field offset in the struct, size, wire type, word).
_EXTENTS = ("B", "H", "S", "D")
_STRIDES = ("b", "h", "s")
LAYOUT_STRUCT_BYTES = 4 * len(_EXTENTS) + 8 * len(_STRIDES)


def _extent_word(tensor: str, extent: str) -> str:
    kv = tensor in ("k", "v")
    return {"B": "B", "D": "D", "H": "Hkv" if kv else "Hq", "S": "Sk" if kv else "Sq"}[extent]


def layout_struct_fields(tensor: str) -> list[tuple[int, int, str, str]]:
    """(offset in struct, size, wire type, attnpack word) of one tensor's layout struct."""
    fields = [(4 * i, 4, "i32", _extent_word(tensor, e)) for i, e in enumerate(_EXTENTS)]
    base = 4 * len(_EXTENTS)
    fields += [(base + 8 * i, 8, "i64", f"{tensor}_stride_{a}") for i, a in enumerate(_STRIDES)]
    return fields


# The kernel's arguments in order: (name, size, value_kind) as the metadata must show them.
EXPECTED_ARGS = ([arg for t in ("q", "k", "v", "o")
                  for arg in ((t, 8, "global_buffer"), (f"{t}_layout", LAYOUT_STRUCT_BYTES, "by_value"))]
                 + [("lse", 8, "global_buffer"), ("sm_scale_log2", 4, "by_value")])


@dataclass
class KernelArg:
    name: str
    offset: int
    size: int
    value_kind: str


@dataclass
class LaunchWord:
    """One value the launcher writes into the kernarg buffer."""
    offset: int          # absolute byte offset in the kernarg segment
    size: int
    wire_type: str       # ptr / i32 / i64 / f32
    word: str            # attnpack/abi.py vocabulary


@dataclass
class CompiledObject:
    arch: str
    dtype: str
    head_dim: int
    causal: bool
    config: dict
    image: bytes                     # the AMDGPU code object (ELF)
    entry: str
    args: list[KernelArg]
    kernarg_size: int
    launch_words: list[LaunchWord]
    resources: dict                  # lds_bytes, vgpr, agpr, sgpr, scratch_bytes, spills, wavefront_size
    block: tuple[int, int, int]
    # grid in attnpack's factor language: a dim is a product of factors (var, d) = ceil(var / d)
    grid: tuple = ()
    flydsl_version: str = ""
    min_seq_k: int = 1               # where it serves (see SERVES)
    cache_key: str = ""
    meta: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["image"] = None
        return json.dumps(d, sort_keys=True)


SERVES = {
    "archs": SUPPORTED_ARCHS,
    "dtypes": tiles.DTYPES,
    "head_dims": tiles.HEAD_DIMS,
    "causal": (False, True),
    "gqa": "Hq a multiple of Hkv",
    "min_seq_k": 1,
    # Offsets inside one head are 32-bit buffer offsets: a head's span in bytes must stay below
    # 2 GiB (((S - 1) * stride_s + D) * 2), for Q/K/V/O alike.
    "max_head_bytes": 2**31 - 1,
    "why": "Sk >= 1: with no key the softmax of a row is undefined (the kernel would write NaN); "
           "the triton family serves Sk = 0. Short sequences are served correctly, but one "
           "workgroup covers 256 query rows (8 waves x 32), so below a few hundred rows most "
           "of its waves compute padding: the tuning db should prefer triton there (suggested "
           "untuned minimum: Sq >= 256 and Sk >= 256).",
}


def flydsl_version() -> str:
    import importlib.metadata
    return importlib.metadata.version("flydsl")


def source_hash() -> str:
    """sha256 over this family's kernel sources (what a cache key must cover besides config)."""
    h = hashlib.sha256()
    folder = Path(__file__).parent
    for name in SOURCE_FILES:
        h.update(name.encode() + b"\0" + (folder / name).read_bytes())
    return h.hexdigest()


def cache_key(source_text_hash: str, flydsl_version_str: str, arch: str, config: dict) -> str:
    """Stable key of one compiled object; `config` holds everything that selects the
    specialization (dtype, head_dim, causal and the tile config)."""
    blob = json.dumps({"family": "flydsl_attn", "source": source_text_hash,
                       "flydsl": flydsl_version_str, "arch": arch, "config": config},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def rocm_path() -> Path:
    """The private ROCM_PATH made by build_tools/install_flydsl.sh (llvm/bin/ld.lld)."""
    return Path(os.environ.get("ATTNPACK_FLYDSL_ROCM_PATH",
                               Path.home() / ".cache" / "attnpack" / "flydsl-rocm"))


def _prepare_environment(arch: str) -> None:
    linker = rocm_path() / "llvm" / "bin" / "ld.lld"
    if not linker.exists():
        found = shutil.which("ld.lld-19")
        if not found:
            raise RuntimeError(f"flydsl_attn: {linker} is missing and no ld.lld-19 is installed; "
                               "run build_tools/install_flydsl.sh")
        linker.parent.mkdir(parents=True, exist_ok=True)
        linker.symlink_to(found)
    # Both variables: kernel builders read FLYDSL_GPU_ARCH, the backend reads ARCH; with
    # neither FlyDSL silently targets gfx942.
    os.environ["ARCH"] = arch
    os.environ["FLYDSL_GPU_ARCH"] = arch
    os.environ["COMPILE_ONLY"] = "1"
    os.environ["ROCM_PATH"] = str(rocm_path())
    # Our own cache (keyed on source, version, arch, config) replaces FlyDSL's.
    os.environ["FLYDSL_RUNTIME_ENABLE_CACHE"] = "0"


def _code_object_of(artifact) -> bytes:
    """Object 0 of the gpu.binary in FlyDSL's lowered module (what its JIT would load)."""
    from flydsl._mlir import ir
    from flydsl._mlir.dialects import gpu
    from flydsl.compiler.jit_function import _create_mlir_context

    found = []

    def visit(op):
        if op.name == "gpu.binary":
            objects = ir.ArrayAttr(op.attributes["objects"])
            found.append(bytes(gpu.ObjectAttr(objects[0]).object))
        return ir.WalkResult.ADVANCE

    with _create_mlir_context():
        ir.Module.parse(artifact.ir).operation.walk(visit)
    if len(found) != 1:
        raise RuntimeError(f"flydsl_attn: expected one gpu.binary in FlyDSL's module, found {len(found)}")
    return found[0]


def amdgpu_args(image: bytes, symbol: str) -> tuple[list[KernelArg], int]:
    """Explicit kernel arguments (name by position) and kernarg size, from NT_AMDGPU_METADATA.
    Reuses attnpack's ELF reader for the note; checks it against EXPECTED_ARGS."""
    from attnpack.archive.elf import amdgpu_kernel_metadata, kernel_facts
    facts = kernel_facts(image, symbol)
    meta = amdgpu_kernel_metadata(image, symbol)
    explicit = [a for a in meta[".args"] if not a[".value_kind"].startswith("hidden_")]
    if len(explicit) != len(EXPECTED_ARGS):
        raise RuntimeError(f"flydsl_attn: {symbol} has {len(explicit)} kernel arguments, "
                           f"expected {len(EXPECTED_ARGS)} ({[n for n, _, _ in EXPECTED_ARGS]})")
    args = []
    for a, (name, size, kind) in zip(explicit, EXPECTED_ARGS):
        if a[".size"] != size or a[".value_kind"] != kind:
            raise RuntimeError(f"flydsl_attn: argument '{name}' is {a['.size']} bytes "
                               f"{a['.value_kind']}, expected {size} bytes {kind}")
        args.append(KernelArg(name, a[".offset"], a[".size"], a[".value_kind"]))
    if [(a.offset, a.size) for a in args] != facts.params:
        raise RuntimeError(f"flydsl_attn: {symbol}: argument offsets disagree with elf.kernel_facts")
    return args, facts.kernarg_size


def launch_words(args: list[KernelArg]) -> list[LaunchWord]:
    """Every kernarg field with the attnpack word that fills it."""
    words = []
    for a in args:
        if a.name in ("q", "k", "v", "o", "lse"):
            words.append(LaunchWord(a.offset, 8, "ptr", a.name))
        elif a.name.endswith("_layout"):
            tensor = a.name[:-len("_layout")]
            words += [LaunchWord(a.offset + off, size, wire, word)
                      for off, size, wire, word in layout_struct_fields(tensor)]
        elif a.name == "sm_scale_log2":
            words.append(LaunchWord(a.offset, 4, "f32", "sm_scale_log2"))
        else:
            raise KeyError(a.name)
    return words


def grid_rule(config: dict) -> tuple:
    """(cdiv(Sq, BLOCK_M), B * Hq, 1) in the factor language of attnpack/family.py."""
    return ((("Sq", tiles.block_m(config)),), (("B", 1), ("Hq", 1)), ())


def _cache_dir() -> Path:
    return Path(os.environ.get("ATTNPACK_CACHE_DIR", Path.home() / ".cache" / "attnpack")) / "flydsl"


def compile_forward(arch: str, dtype: str, head_dim: int, causal: bool, config: dict,
                    use_cache: bool = True) -> CompiledObject:
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"flydsl_attn: arch '{arch}' not supported (only {SUPPORTED_ARCHS}): "
                         "the kernel uses CDNA4's ds_read_b64_tr_b16 and 32x32x16 MFMA")
    full = tiles.check_config(head_dim, dtype, config)
    version = flydsl_version()
    key = cache_key(source_hash(), version, arch,
                    {"dtype": dtype, "head_dim": head_dim, "causal": bool(causal), **full})
    cached = _cache_dir() / key
    if use_cache and (cached / "meta.json").is_file() and (cached / "image.co").is_file():
        return _from_cache(cached)

    _prepare_environment(arch)
    import torch

    import flydsl.compiler as flyc
    import flydsl.expr as fx

    from .fwd import build_forward
    launch, _ = build_forward(dtype, head_dim, causal, full)
    elem = torch.bfloat16 if dtype == "bf16" else torch.float16
    # CPU placeholders: FlyDSL specializes on dtype, rank and which strides are unit; every
    # extent and the other strides stay dynamic kernel arguments.
    placeholder = torch.empty(1, 1, 1, head_dim, dtype=elem)
    flyc.compile(launch, placeholder, placeholder, placeholder, placeholder,
                 flyc.from_c_void_p(fx.Float32, None), 1.0, 1, 1)
    compiled = getattr(launch, "_last_compiled", None)
    if compiled is None:
        raise RuntimeError("flydsl_attn: FlyDSL produced no artifact (COMPILE_ONLY path changed?)")
    image = _code_object_of(compiled[1])
    args, kernarg_size = amdgpu_args(image, ENTRY_SYMBOL)
    from attnpack.archive.elf import kernel_facts
    res = kernel_facts(image, ENTRY_SYMBOL).resources
    obj = CompiledObject(
        arch=arch, dtype=dtype, head_dim=head_dim, causal=bool(causal), config=full,
        image=image, entry=ENTRY_SYMBOL, args=args, kernarg_size=kernarg_size,
        launch_words=launch_words(args), resources=res,
        block=(tiles.threads(full), 1, 1), grid=grid_rule(full), flydsl_version=version,
        min_seq_k=SERVES["min_seq_k"], cache_key=key,
        meta={"block_m": tiles.block_m(full), "lds_bytes_planned": tiles.lds_bytes(head_dim, full)})
    if use_cache:
        tmp = cached.with_name(key + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "image.co").write_bytes(image)
        (tmp / "meta.json").write_text(obj.to_json())
        try:
            tmp.rename(cached)
        except OSError:  # another process won the race; its copy is equal
            shutil.rmtree(tmp, ignore_errors=True)
    return obj


def _from_cache(folder: Path) -> CompiledObject:
    d = json.loads((folder / "meta.json").read_text())
    d["image"] = (folder / "image.co").read_bytes()
    d["args"] = [KernelArg(**a) for a in d["args"]]
    d["launch_words"] = [LaunchWord(**w) for w in d["launch_words"]]
    d["block"] = tuple(d["block"])
    d["grid"] = tuple(tuple(tuple(f) for f in dim) for dim in d["grid"])
    return CompiledObject(**d)
