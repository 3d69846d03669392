"""How a kernel family declares its variant space, and how the builder walks it.

A family is one folder `aot/kernels/<name>/` holding its kernel sources and a `family.py` that
defines `SPEC = FamilySpec(...)`. The space is functional keys (what a caller's problem must
match: dtype, head dim, causal) times configs (tile sizes, warps, stages, arch knobs), minus the
per-arch exclusions. Each (op, key, config) becomes one `Variant`: a short list of launch steps
plus the float32 workspace buffers the steps share.

A step's launch side (parameter words, grid, tensor maps) is generic; what to compile is the
step's `kernel`, an object of the family's compile backend (`FamilySpec.backend`, one of
`attnpack.builder.backends`): a Triton/Gluon function with its constexprs, or a prebuilt code
object. A step may name another backend of its own (`Step.backend`): a prebuilt assembly
kernel bracketed by two small Triton kernels is one variant. The family also declares its
policy: which family serves a key before tuning (`priority`), whether its backward is
deterministic, and its provenance and license; and, per kernel, the conditions a problem must
meet (`requires`), which the runtime checks before choosing it.
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
from attnpack.abi import Requirement
from attnpack.keys import OPS, FunctionalKey, KernelName, TuneKey, config_tag
from attnpack.targets import target

# One grid dimension is a product of factors; a factor (var, d) means ceil(var / d).
GridDim = tuple[tuple[str, int], ...]

__all__ = ["OPS", "FunctionalKey", "TensorMap", "Step", "Workspace", "Variant", "FamilySpec",
           "Requirement", "default_variants", "kernels_root", "load_family", "load_families"]


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
    tensor: str                      # an element tensor of attnpack.abi.TENSORS, viewed
                                     # [b, h, s, d], or (format 2.4) a workspace buffer
    block: tuple[int, ...]           # box per axis, outermost first: (1, 1, rows, head_dim)
    layout: Any                      # the shared layout (gluon NVMMASharedLayout) tiles land in
    l2_promotion: int = 128          # bytes; Triton's launcher always asks for 128
    oob_fill: str = "zero"           # rows past the tensor read as zero; stores there are dropped

    @property
    def swizzle(self) -> int:
        return int(getattr(self.layout, "swizzle_byte_width", 0))

    @classmethod
    def tile(cls, name: str, tensor: str, block: tuple[int, ...], dtype: str) -> "TensorMap":
        """A map whose boxes land in the shared layout Triton and Gluon pick by default for a
        `block` of `dtype` ("fp16", "bf16" or "fp32"): the NVMMA swizzle the wgmma reads."""
        from triton.experimental.gluon import language as gl
        elem = {"fp16": gl.float16, "bf16": gl.bfloat16, "fp32": gl.float32}[dtype]
        return cls(name=name, tensor=tensor, block=tuple(block),
                   layout=gl.NVMMASharedLayout.get_default_for(list(block), elem))


@dataclass(frozen=True)
class Step:
    """One kernel launch of a variant."""
    name: str                        # what the step does: "fwd", "bwd_preprocess", "bwd_dkdv", ...
    args: tuple[str, ...]            # runtime parameters in order, words from attnpack.abi
    grid: tuple[GridDim, GridDim, GridDim]
    kernel: Any                      # what the step's backend compiles (or takes prebuilt)
    tensormaps: tuple[TensorMap, ...] = ()   # descriptors named in `args` (CUDA only)
    # The compile backend of this step when it is not the family's (`FamilySpec.backend`).
    backend: str | None = None

    def tensormap(self, word: str) -> TensorMap | None:
        return next((m for m in self.tensormaps if m.name == word), None)


@dataclass(frozen=True)
class Workspace:
    """A contiguous float32 buffer the caller allocates and the steps share."""
    name: str
    shape: tuple[str, ...]           # extents: attnpack.abi.workspace_extent words


@dataclass(frozen=True)
class Variant:
    family: str
    backend: str
    op: str
    arch: str
    key: FunctionalKey
    config: Mapping[str, Any]
    steps: tuple[Step, ...]
    workspace: tuple[Workspace, ...]
    deterministic: bool              # same inputs give bitwise-equal outputs (no atomics races)
    requires: tuple[Requirement, ...] = ()   # checked by the runtime before choosing it

    @property
    def config_tag(self) -> str:
        return config_tag(self.config)

    @property
    def backends(self) -> tuple[str, ...]:
        """Every compile backend its steps use."""
        return tuple(sorted({s.backend or self.backend for s in self.steps}))

    @property
    def name(self) -> str:
        return str(KernelName(self.family, self.op, self.key, self.config_tag))


@dataclass(frozen=True)
class FamilySpec:
    name: str
    backend: str                                          # attnpack.builder.backends name
    archs: tuple[str, ...]
    ops: tuple[str, ...]
    functional: Mapping[str, tuple]                       # dtype / head_dim / causal -> values
    configs: Mapping[str, tuple[Mapping[str, Any], ...]]  # op -> configs, in declared order
    steps: Callable[[str, str, FunctionalKey, Mapping[str, Any]], tuple[Step, ...]]
    default_config: Callable[[str, str, FunctionalKey], Mapping[str, Any]]
    # provenance: "license" and "origin" at least (the index and NOTICE carry them)
    provenance: Mapping[str, str]
    excluded: Callable[[str, str, FunctionalKey, Mapping[str, Any]], str | None] = lambda *a: None
    # op -> buffers; or a function (arch, op, key, config) -> buffers, for families whose
    # variants of one op need different workspace (the gluon backward's dQ accumulator)
    workspace: Mapping[str, tuple[Workspace, ...]] | Callable[..., tuple[Workspace, ...]] = \
        field(default_factory=dict)
    # Before a tuning database decides, the family with the lowest priority that declares a
    # functional key serves it (`default_variant`: the builder and `db seed` share the rule);
    # equal priorities are a build error. A family meant to serve only where tuning picks it
    # takes a priority above every portable family's.
    priority: int = 100
    # Where the family serves within its functional keys, for a family that is fast or valid
    # only for some shapes (a minimum sequence length, say): (arch, tuning key) -> the reason it
    # does not serve that bucketed key, or None. Such a family is never the per-functional
    # catch-all default; `db seed` gives it the buckets it serves (by priority, as ever).
    serves: Callable[[str, TuneKey], str | None] | None = None
    # Whether a backward variant is deterministic: a bool for the whole family, or a function of
    # the config for families with both kinds. Forwards are always deterministic.
    deterministic_backward: bool | Callable[[Mapping[str, Any]], bool] = False
    # Functional keys of the space that the family does not have on an arch for an op:
    # (arch, op, key) -> the reason, or None. For a family whose keys differ per arch and op
    # (prebuilt objects exist for some); its other keys need a non-excluded default config.
    key_excluded: Callable[[str, str, FunctionalKey], str | None] = lambda *a: None
    # What a problem must meet for a kernel to serve it: (arch, op, key, config) -> the
    # requirements the runtime checks before choosing the kernel (docs/ARCHIVE.md, `requires`).
    requires: Callable[[str, str, FunctionalKey, Mapping[str, Any]], tuple[Requirement, ...]] = \
        lambda *a: ()
    # The notice that must travel with the family's kernels (a licence's attribution), written
    # into the index of every archive holding one; called only then (it may fetch a source).
    notice: Callable[[], str] | None = None
    source_dir: Path | None = None

    def __post_init__(self):
        missing = [k for k in ("license", "origin") if not self.provenance.get(k)]
        if missing:
            raise ValueError(f"family {self.name}: provenance lacks {missing}")
        for op in self.ops:
            if op not in OPS:
                raise ValueError(f"family {self.name}: op {op!r} is not one of {OPS}")
        for arch in self.archs:
            target(arch)  # raises, naming the targets table

    def keys(self, arch: str | None = None, op: str | None = None) -> list[FunctionalKey]:
        """The functional space; with arch and op, less the keys `key_excluded` removes."""
        f = self.functional
        keys = [FunctionalKey(d, h, c) for d, h, c in
                itertools.product(f["dtype"], f["head_dim"], f["causal"])]
        if arch is None:
            return keys
        return [k for k in keys if self.key_excluded(arch, op, k) is None]

    def is_deterministic(self, op: str, config: Mapping[str, Any]) -> bool:
        if op != "bwd":
            return True
        rule = self.deterministic_backward
        return bool(rule(config) if callable(rule) else rule)

    def variant(self, arch: str, op: str, key: FunctionalKey, config: Mapping[str, Any]) -> Variant:
        steps = self.steps(arch, op, key, config)
        workspace = (self.workspace(arch, op, key, config) if callable(self.workspace)
                     else self.workspace.get(op, ()))
        ws_names = tuple(w.name for w in workspace)
        vendor = target(arch).vendor
        for w in workspace:
            for extent in w.shape:
                try:
                    abi.workspace_extent(extent)
                except ValueError as e:
                    raise KeyError(f"{self.name}: workspace {w.name}: {e}") from None
        shapes = {w.name: tuple(w.shape) for w in workspace}
        for step in steps:
            for m in step.tensormaps:
                if m.tensor not in abi.TENSORS and m.tensor not in shapes:
                    raise KeyError(f"{self.name}: tensor map {m.name} views '{m.tensor}', which "
                                   f"is neither an element tensor {abi.TENSORS} nor a workspace "
                                   f"buffer of the variant {ws_names}")
                rank = len(shapes.get(m.tensor, abi.AXES))
                if m.tensor in shapes:
                    try:
                        abi.tensormap_params(m.name, m.tensor, shapes[m.tensor])
                    except ValueError as e:
                        raise ValueError(f"{self.name}: {e}") from None
                if len(m.block) != rank or not all(1 <= e <= 256 for e in m.block):
                    raise ValueError(f"{self.name}: tensor map {m.name} box {m.block} is not "
                                     f"{rank} extents (one per dim of {m.tensor}) of 1..256")
                if m.swizzle not in abi.TENSORMAP_SWIZZLES or \
                        m.l2_promotion not in abi.TENSORMAP_L2_PROMOTIONS or \
                        m.oob_fill not in abi.TENSORMAP_OOB_FILLS:
                    raise ValueError(f"{self.name}: tensor map {m.name} has swizzle {m.swizzle}, "
                                     f"l2_promotion {m.l2_promotion}, oob_fill {m.oob_fill!r}")
                if vendor != "nvidia":
                    raise ValueError(f"{self.name}: tensor maps are CUDA-only ({arch})")
            for word in step.args:
                if step.tensormap(word) is None:
                    abi.param_types(word, ws_names)  # raises on a word outside the vocabulary
            for dim in step.grid:
                for var, _ in dim:
                    if var not in abi.GRID_VARS:
                        raise KeyError(f"{self.name}: grid factor '{var}' is not in abi.GRID_VARS")
        requires = tuple(self.requires(arch, op, key, config))
        for r in requires:
            if not isinstance(r, Requirement):
                raise TypeError(f"{self.name}: requirement {r!r} is not an abi.Requirement")
        return Variant(self.name, self.backend, op, arch, key, dict(config), steps, workspace,
                       self.is_deterministic(op, config), requires)

    def all_variants(self, arch: str) -> list[Variant]:
        """The whole declared space for one arch (for tuning), exclusions removed."""
        out = []
        for op in self.ops:
            for key in self.keys(arch, op):
                for config in self.configs[op]:
                    if self.excluded(arch, op, key, config) is None:
                        out.append(self.variant(arch, op, key, config))
        return out

    def default_variants(self, arch: str) -> list[Variant]:
        """One documented default per (op, functional key): the bundle before any tuning."""
        out = []
        for op in self.ops:
            for key in self.keys(arch, op):
                config = self.default_config(arch, op, key)
                reason = self.excluded(arch, op, key, config)
                if reason is not None:
                    raise ValueError(f"{self.name}: default config for {op} {key.tag} on {arch} "
                                     f"is excluded ({reason})")
                out.append(self.variant(arch, op, key, config))
        return out

    def policy(self, backends: tuple[str, ...] = ()) -> dict:
        """What the archive index carries for the family (docs/ARCHIVE.md, `families`); each
        kernel record carries its own `deterministic`. `backends`: those its shipped steps use
        besides the family's own (their compilers are recorded too)."""
        from attnpack.builder.backends import backend
        compilers = []
        for name in (self.backend, *sorted(set(backends) - {self.backend})):
            compilers += [c for c in backend(name).compilers if c not in compilers]
        out = {"backend": self.backend, "compilers": compilers, "priority": self.priority,
               "provenance": dict(self.provenance)}
        if self.notice is not None:
            out["notice"] = self.notice()
        return out


class DefaultConflict(ValueError):
    pass


def declared_variants(arch: str, families: Mapping[str, FamilySpec]) -> dict[str, Variant]:
    """Every variant any family declares for `arch`, by name: what a tuning entry may name."""
    return {v.name: v for f in families.values() if arch in f.archs for v in f.all_variants(arch)}


def default_variants(arch: str, families: Mapping[str, FamilySpec],
                     wanted: Callable[[Variant], bool] = lambda v: True,
                     tune_key: TuneKey | None = None) -> dict[tuple, Variant]:
    """(op, functional key) -> the variant that serves it before tuning: the default config of
    the family with the lowest priority that declares the key for `arch`. The builder's
    per-functional selection and `attnpack db seed` both use this one rule.

    Without `tune_key` (the catch-all for every shape), only families that serve all of their
    keys' buckets count; with one (a seeded database entry), a family counts where its
    `serves` accepts that bucketed key."""
    best: dict[tuple, tuple[int, Variant]] = {}
    for fam in families.values():
        if arch not in fam.archs:
            continue
        if fam.serves is not None and (tune_key is None or fam.serves(arch, tune_key) is not None):
            continue
        for v in fam.default_variants(arch):
            if not wanted(v) or (tune_key is not None and (v.op, v.key) != (tune_key.op,
                                                                          tune_key.functional)):
                continue
            held = best.get((v.op, v.key))
            if held is not None and held[0] == fam.priority:
                raise DefaultConflict(
                    f"{arch}: {held[1].name} and {v.name} are both the default for {v.op} "
                    f"{v.key.tag} at priority {fam.priority}; give one family a lower priority")
            if held is None or fam.priority < held[0]:
                best[(v.op, v.key)] = (fam.priority, v)
    return {k: v for k, (_, v) in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1].tag))}


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
