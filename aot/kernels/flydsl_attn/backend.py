"""The FlyDSL compile backend: the FlyDSL forward compiled offline into a gfx950 code object,
and the launch spec read back from that object's own metadata.

    compile_forward(arch, dtype, head_dim, causal, config) -> CompiledObject   (direct use)
    FlyDSLKernel, FlyDSLBackend                         (the builder's view: family.py steps)

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
Every field is one word of attnpack/abi.py; B and D appear once per tensor, which the runtime
packs like any other word.
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
    divisibility: int = 1  # what the runtime checks before launching (see DIVISIBILITY)

    def param(self) -> list:
        """The launch spec's [word, type, divisibility, offset] (docs/ARCHIVE.md)."""
        return [self.word, self.wire_type, self.divisibility, self.offset]


# Promises the runtime checks per problem (a problem that breaks one goes to the next candidate,
# the triton default): Q/K/V/O move in 16-byte chunks (buffer_load_dwordx4 / ds_write_b128), so
# their base pointers are 16-byte aligned and every element stride is a multiple of 8 (16 bytes
# of bf16/fp16); LSE is written one float at a time.
DIVISIBILITY = {"ptr": 16, "lse": 4, "stride": 8}


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
    cache_key: str = ""
    meta: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["image"] = None
        return json.dumps(d, sort_keys=True)


def flydsl_version() -> str:
    """The installed flydsl's version, without importing it (the builder's parent process only
    hashes; compiles run in worker processes)."""
    import importlib.metadata
    try:
        return importlib.metadata.version("flydsl")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("flydsl_attn: the flydsl package is not installed, and the gfx950 "
                           "archive holds FlyDSL kernels; run build_tools/install_flydsl.sh "
                           "(build_tools/setup.sh does), or build with --family triton") from None


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


def linker() -> Path:
    """FlyDSL links with $ROCM_PATH/llvm/bin/ld.lld; ours is the private ROCM_PATH's, linked on
    first use to Debian's ld.lld-19 or, on a ROCm machine, to ROCm's own ld.lld."""
    link = rocm_path() / "llvm" / "bin" / "ld.lld"
    if link.exists():
        return link
    candidates = [shutil.which("ld.lld-19")] + [str(Path(root) / "llvm" / "bin" / "ld.lld") for root
                                                in (os.environ.get("ROCM_PATH"), "/opt/rocm") if root]
    found = next((c for c in candidates if c and Path(c).is_file()), None)
    if found is None:
        raise RuntimeError(f"flydsl_attn: {link} is missing, and there is no ld.lld-19 on PATH "
                           "nor a ROCm ld.lld; run build_tools/install_flydsl.sh")
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():  # dangling: its target was removed
        link.unlink()
    try:
        link.symlink_to(found)
    except FileExistsError:  # a parallel compile linked it first
        pass
    return link


def linker_version() -> str:
    """The linker's identity, part of the cache key (another linker may emit other bytes)."""
    import subprocess
    out = subprocess.run([str(linker()), "--version"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else "unknown"


def _prepare_environment(arch: str) -> None:
    linker()
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
            words.append(LaunchWord(a.offset, 8, "ptr", a.name,
                                    DIVISIBILITY["lse" if a.name == "lse" else "ptr"]))
        elif a.name.endswith("_layout"):
            tensor = a.name[:-len("_layout")]
            words += [LaunchWord(a.offset + off, size, wire, word,
                                 DIVISIBILITY["stride"] if "_stride_" in word else 1)
                      for off, size, wire, word in layout_struct_fields(tensor)]
        elif a.name == "sm_scale_log2":
            words.append(LaunchWord(a.offset, 4, "f32", "sm_scale_log2"))
        else:
            raise KeyError(a.name)
    return words


def words_in_order() -> tuple[str, ...]:
    """The launch words of every kernarg field, in argument order (a step's `args`); their
    offsets come from the compiled object (launch_words)."""
    out = []
    for name, _, _ in EXPECTED_ARGS:
        if name.endswith("_layout"):
            out += [word for _, _, _, word in layout_struct_fields(name[:-len("_layout")])]
        else:
            out.append(name)
    return tuple(out)


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
        cache_key=key,
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


# ---- the builder's view: a step's kernel and the compile backend ------------------------------
CACHE_SCHEMA = 1  # bump when CompiledStep.meta's shape changes


@dataclass(frozen=True)
class FlyDSLKernel:
    """What one launch step of the flydsl family compiles: a specialization of fwd.py.

    The compile and the launch-parameter read are methods of this class, so a step always runs
    the code of the folder that declared it (the registered backend only dispatches)."""
    dtype: str
    head_dim: int
    causal: bool
    config: tuple          # the full tile config as sorted (key, value) pairs (hashable)

    def compile(self, arch: str) -> CompiledObject:
        # The builder caches the image itself (keyed by FlyDSLBackend.cache_key); this
        # module's own cache is for direct use (tests, the GPU test).
        return compile_forward(arch, self.dtype, self.head_dim, self.causal, dict(self.config),
                               use_cache=False)

    def cache_key(self, arch: str) -> str:
        return cache_key(source_hash(), flydsl_version(), arch,
                         {"schema": CACHE_SCHEMA, "dtype": self.dtype, "head_dim": self.head_dim,
                          "causal": self.causal, "linker": linker_version(), **dict(self.config)})

    def launch(self, image: bytes, symbol: str) -> tuple[list[list], int]:
        """([word, type, divisibility, offset] per field, kernarg size), from the image's own
        NT_AMDGPU_METADATA (a cached image is read again, as a fresh one)."""
        args, kernarg_size = amdgpu_args(image, symbol)
        return [w.param() for w in launch_words(args)], kernarg_size


def _kernel(job) -> FlyDSLKernel:
    kernel = job.step.kernel
    # by class name: a second copy of this folder (a test's) has its own FlyDSLKernel class
    if type(kernel).__name__ != "FlyDSLKernel":
        raise TypeError(f"{job.label}: the flydsl backend compiles FlyDSLKernel steps, got "
                        f"{type(kernel).__name__}")
    return kernel


class FlyDSLBackend:
    """attnpack.builder.backends protocol for FlyDSL (registered by family.py)."""
    name = "flydsl"
    compilers = ("flydsl",)

    def versions(self) -> dict[str, str]:
        return {"flydsl": flydsl_version()}

    def cache_key(self, job) -> str:
        return _kernel(job).cache_key(job.variant.arch)

    def compile(self, job):
        from attnpack.builder.compile import CompiledStep
        from attnpack.targets import target
        obj = _kernel(job).compile(job.variant.arch)
        return CompiledStep(obj.image, target(job.variant.arch).image_kind, obj.entry,
                            {"block": list(obj.block), "resources": obj.resources,
                             "flydsl": obj.flydsl_version})

    def launch_spec(self, job, compiled) -> dict:
        params, kernarg_size = _kernel(job).launch(compiled.image, compiled.symbol)
        return {
            "symbol": compiled.symbol, "params": params, "kernarg_size": kernarg_size,
            "block": list(compiled.meta["block"]),
            # LDS is static (the code object's group segment); nothing dynamic to ask for
            "shared": 0,
            "cluster": [1, 1, 1],
            "scratch": {"global_size": 0, "global_align": 1, "profile_size": 0,
                        "profile_align": 1},
            "tensormaps": [],
        }
