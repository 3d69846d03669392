"""How a kernel family declares its variant space, and how the builder walks it.

A family is one folder `aot/kernels/<name>/` holding its kernel sources and a `family.py` that
defines `SPEC = FamilySpec(...)`. The space is functional keys (what a caller's problem must
match: dtype, head dim, causal) times configs (tile sizes, warps, stages, arch knobs), minus the
per-arch exclusions. Each (op, key, config) becomes one `Variant`: a short list of launch steps
(one Triton kernel each) plus the float32 workspace buffers the steps share.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import itertools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from attnpack import abi

KNOWN_ARCHS = ("sm_90", "gfx942", "gfx950")
OPS = ("fwd", "bwd")

# One grid dimension is a product of factors; a factor (var, d) means ceil(var / d).
GridDim = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class FunctionalKey:
    dtype: str
    head_dim: int
    causal: bool

    @property
    def tag(self) -> str:
        return f"{self.dtype}-d{self.head_dim}-{'causal' if self.causal else 'full'}"

    def as_dict(self) -> dict[str, Any]:
        return {"causal": self.causal, "dtype": self.dtype, "head_dim": self.head_dim}


@dataclass(frozen=True)
class TensorMap:
    """A host TMA descriptor (CUtensorMap) a step takes by value; the runtime encodes it.

    In `Step.args` the descriptor is one word, `name`; the kernel declares it as a Triton/Gluon
    tensor descriptor, which the compiled kernel receives as the 128-byte descriptor followed by
    the viewed tensor's shape (i32 each) and strides (i64 each). The builder writes that
    expansion into the launch spec with the tensor's own words, so the runtime passes exactly
    what Triton's launcher would.
    """
    name: str                        # the parameter word, e.g. "q_desc"
    tensor: str                      # an element tensor of attnpack.abi.TENSORS, viewed [b, h, s, d]
    block: tuple[int, ...]           # box per axis, outermost first: (1, 1, rows, head_dim)
    layout: Any                      # the shared layout (gluon NVMMASharedLayout) tiles land in
    l2_promotion: int = 128          # bytes; Triton's launcher always asks for 128
    oob_fill: str = "zero"           # rows past the tensor read as zero; stores there are dropped

    @property
    def swizzle(self) -> int:
        return int(getattr(self.layout, "swizzle_byte_width", 0))


@dataclass(frozen=True)
class Step:
    """One kernel launch of a variant."""
    name: str                        # what the step does: "fwd", "bwd_preprocess", "bwd_dkdv", ...
    fn: Any                          # the @triton.jit (or @gluon.jit) function
    args: tuple[str, ...]            # runtime parameters in order, words from attnpack.abi
    grid: tuple[GridDim, GridDim, GridDim]
    constexprs: Mapping[str, Any]
    num_warps: int
    num_stages: int
    divisible_by_16: tuple[str, ...] = ()    # integer args promised to be multiples of 16
    options: Mapping[str, Any] = field(default_factory=dict)  # extra compiler options (AMD knobs)
    tensormaps: tuple[TensorMap, ...] = ()   # descriptors named in `args` (CUDA only)

    def tensormap(self, word: str) -> TensorMap | None:
        return next((m for m in self.tensormaps if m.name == word), None)


@dataclass(frozen=True)
class Workspace:
    """A contiguous float32 buffer the caller allocates and the steps share."""
    name: str
    shape: tuple[str, ...]           # size words from attnpack.abi.SIZES


@dataclass(frozen=True)
class Variant:
    family: str
    op: str
    arch: str
    key: FunctionalKey
    config: Mapping[str, Any]
    steps: tuple[Step, ...]
    workspace: tuple[Workspace, ...]

    @property
    def config_tag(self) -> str:
        return "_".join(f"{k}{v}" for k, v in self.config.items())

    @property
    def name(self) -> str:
        return f"{self.family}/{self.op}/{self.key.tag}/{self.config_tag}"


@dataclass(frozen=True)
class FamilySpec:
    name: str
    archs: tuple[str, ...]
    ops: tuple[str, ...]
    functional: Mapping[str, tuple]                       # dtype / head_dim / causal -> values
    configs: Mapping[str, tuple[Mapping[str, Any], ...]]  # op -> configs, in declared order
    steps: Callable[[str, str, FunctionalKey, Mapping[str, Any]], tuple[Step, ...]]
    default_config: Callable[[str, str, FunctionalKey], Mapping[str, Any]]
    excluded: Callable[[str, str, FunctionalKey, Mapping[str, Any]], str | None] = lambda *a: None
    # op -> buffers; or a function (arch, op, key, config) -> buffers, for families whose
    # variants of one op need different workspace (the gluon backward's dQ accumulator)
    workspace: Mapping[str, tuple[Workspace, ...]] | Callable[..., tuple[Workspace, ...]] = \
        field(default_factory=dict)
    provenance: Mapping[str, str] = field(default_factory=dict)  # license, origin
    # When several families declare a default for one functional key, the lowest priority
    # serves it (until a tuning database decides); equal priorities are a build error.
    priority: int = 100
    source_dir: Path | None = None

    def keys(self) -> list[FunctionalKey]:
        f = self.functional
        return [FunctionalKey(d, h, c) for d, h, c in
                itertools.product(f["dtype"], f["head_dim"], f["causal"])]

    def variant(self, arch: str, op: str, key: FunctionalKey, config: Mapping[str, Any]) -> Variant:
        steps = self.steps(arch, op, key, config)
        workspace = (self.workspace(arch, op, key, config) if callable(self.workspace)
                     else self.workspace.get(op, ()))
        ws_names = tuple(w.name for w in workspace)
        for w in workspace:
            if not set(w.shape) <= set(abi.WORKSPACE_SIZES):
                raise KeyError(f"{self.name}: workspace {w.name} shape {w.shape} has words "
                               f"outside abi.WORKSPACE_SIZES {abi.WORKSPACE_SIZES}")
        for step in steps:
            for m in step.tensormaps:
                if m.tensor not in abi.TENSORS:
                    raise KeyError(f"{self.name}: tensor map {m.name} views '{m.tensor}'; only "
                                   f"element tensors {abi.TENSORS} have descriptor words")
                if len(m.block) != 4 or not all(1 <= e <= 256 for e in m.block):
                    raise ValueError(f"{self.name}: tensor map {m.name} box {m.block} is not "
                                     "4 extents (b, h, s, d) of 1..256")
                if m.swizzle not in abi.TENSORMAP_SWIZZLES or \
                        m.l2_promotion not in abi.TENSORMAP_L2_PROMOTIONS or \
                        m.oob_fill not in abi.TENSORMAP_OOB_FILLS:
                    raise ValueError(f"{self.name}: tensor map {m.name} has swizzle {m.swizzle}, "
                                     f"l2_promotion {m.l2_promotion}, oob_fill {m.oob_fill!r}")
                if arch.startswith("gfx"):
                    raise ValueError(f"{self.name}: tensor maps are CUDA-only ({arch})")
            for word in step.args:
                if step.tensormap(word) is None:
                    abi.param_type(word, ws_names)  # raises on a word outside the vocabulary
            for dim in step.grid:
                for var, _ in dim:
                    if var not in abi.GRID_VARS:
                        raise KeyError(f"{self.name}: grid factor '{var}' is not in abi.GRID_VARS")
        return Variant(self.name, op, arch, key, dict(config), steps, workspace)

    def all_variants(self, arch: str) -> list[Variant]:
        """The whole declared space for one arch (for tuning), exclusions removed."""
        out = []
        for op in self.ops:
            for key in self.keys():
                for config in self.configs[op]:
                    if self.excluded(arch, op, key, config) is None:
                        out.append(self.variant(arch, op, key, config))
        return out

    def default_variants(self, arch: str) -> list[Variant]:
        """One documented default per (op, functional key): the bundle before any tuning."""
        out = []
        for op in self.ops:
            for key in self.keys():
                config = self.default_config(arch, op, key)
                reason = self.excluded(arch, op, key, config)
                if reason is not None:
                    raise ValueError(f"{self.name}: default config for {op} {key.tag} on {arch} "
                                     f"is excluded ({reason})")
                out.append(self.variant(arch, op, key, config))
        return out


def kernels_root() -> Path:
    return Path(__file__).resolve().parents[2] / "aot" / "kernels"


def load_family(folder: Path, interpret: bool = False) -> FamilySpec:
    """Import the family folder as a package and return `family.SPEC`.

    The folder is a Python package, so `family.py` imports its kernel sources relatively
    (`from .kernels import attn_fwd`) and two families never clash on module names.
    With `interpret=True` the kernels are imported a second time, under another package name,
    with TRITON_INTERPRET=1, so they run on Triton's CPU interpreter while the compiled
    copies stay usable in the same process (the builder needs those).
    """
    # One package per folder path: two checkouts (or test copies) of a family never share
    # modules, while repeated loads of one folder reuse them.
    tag = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:10]
    pkg_name = f"attnpack_kernels_{'interp_' if interpret else ''}{folder.name}_{tag}"
    if pkg_name not in sys.modules:
        init = folder / "__init__.py"
        if not init.is_file():
            raise FileNotFoundError(f"{init}: a kernel family folder must be a package")
        spec = importlib.util.spec_from_file_location(
            pkg_name, init, submodule_search_locations=[str(folder)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[pkg_name] = package
        spec.loader.exec_module(package)
    if interpret:
        # Triton imports Gluon lazily and Gluon refuses to load in interpreter mode once
        # plain kernels exist; load it now, before the switch.
        import triton.experimental.gluon  # noqa: F401
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        module = importlib.import_module(f"{pkg_name}.family")
    finally:
        if saved is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = saved
    fam: FamilySpec = module.SPEC
    return FamilySpec(**{**fam.__dict__, "source_dir": folder})


def load_families(root: Path | None = None) -> dict[str, FamilySpec]:
    root = root or kernels_root()
    fams = {}
    for folder in sorted(p for p in root.iterdir() if (p / "family.py").is_file()):
        fam = load_family(folder)
        fams[fam.name] = fam
    return fams
