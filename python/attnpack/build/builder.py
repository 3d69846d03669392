"""attnpack build: enumerate the variants to ship, compile them, pack one archive per arch."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnpack import __version__, abi
from attnpack.archive import Image, archive_filename, write_archive
from attnpack.build.compile import (CompileCache, CompiledStep, CompileJob, CompileStats,
                                    compile_jobs)
from attnpack.family import KNOWN_ARCHS, FamilySpec, Variant, kernels_root, load_families
from attnpack.tune.db import DbError, TuningDb, entry_key, key_text, load_db

# Triton's tensordesc_meta "swizzle" is CUtensorMapSwizzle: NONE, 32B, 64B, 128B.
SWIZZLE_BYTES = (0, 32, 64, 128)
# tensordesc_meta "elem_type" is the device-side TMA dtype enum: 6 float16, 10 bfloat16.
TMA_ELEM_TYPE = {"fp16": 6, "bf16": 10}


class BuildError(Exception):
    pass


@dataclass
class BuildRequest:
    archs: tuple[str, ...]
    out_dir: Path
    all_variants: bool = False            # the whole declared space (for tuning)
    jobs: int = os.cpu_count() or 1
    timeout: float = 600.0                # per kernel, seconds
    cache_dir: Path | None = None
    families: tuple[str, ...] = ()        # empty: every family
    ops: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    head_dims: tuple[int, ...] = ()
    kernels_root: Path | None = None
    tuning_db_dir: Path | None = None     # default: aot/tuning_db next to the kernels
    stats: CompileStats = field(default_factory=CompileStats)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(os.environ.get("ATTNPACK_CACHE_DIR") or Path(base) / "attnpack")


def _wanted(req: BuildRequest, v: Variant) -> bool:
    return ((not req.ops or v.op in req.ops) and (not req.dtypes or v.key.dtype in req.dtypes)
            and (not req.head_dims or v.key.head_dim in req.head_dims))


def load_arch_db(req: BuildRequest, arch: str) -> TuningDb | None:
    folder = req.tuning_db_dir or (req.kernels_root or kernels_root()).parent / "tuning_db"
    path = Path(folder) / f"{arch}.jsonl"
    if not path.is_file():
        return None
    try:
        db = load_db(path)
    except DbError as e:
        raise BuildError(str(e)) from None
    if db.arch != arch:
        raise BuildError(f"{path}: header says arch {db.arch!r}, the file name says {arch!r}")
    return db


def plan_variants(req: BuildRequest, arch: str, families: dict[str, FamilySpec],
                  db: TuningDb | None = None) -> tuple[list[Variant], list[Variant]]:
    """(variants to build, the default per functional key) for one arch.

    The default build is what the tuning database selects plus one documented default per
    functional key (which serves shapes and keys the database does not cover); `--all` adds
    the whole declared space for tuning.
    """
    if arch not in KNOWN_ARCHS:
        raise BuildError(f"unknown arch '{arch}' (known: {', '.join(KNOWN_ARCHS)})")
    unknown = set(req.families) - set(families)
    if unknown:
        raise BuildError(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} "
                         f"{', '.join(sorted(unknown))} (known: {', '.join(sorted(families))})")
    chosen = [f for n, f in sorted(families.items())
              if arch in f.archs and (not req.families or n in req.families)]
    best: dict[tuple, tuple[int, Variant]] = {}
    for f in chosen:
        for v in f.default_variants(arch):
            if not _wanted(req, v):
                continue
            held = best.get((v.op, v.key))
            if held is not None and held[0] == f.priority:
                raise BuildError(f"{arch}: {held[1].name} and {v.name} are both the default for "
                                 f"{v.op} {v.key.tag} at priority {f.priority}; give one family "
                                 "a lower priority")
            if held is None or f.priority < held[0]:
                best[(v.op, v.key)] = (f.priority, v)
    defaults = [v for _, v in best.values()]
    variants = {v.name: v for v in defaults}
    if db is not None:
        # Entries are checked against every family, then filtered like the other filters:
        # `--family gluon` drops the entries that select other families' kernels.
        declared = {v.name: v for f in families.values() if arch in f.archs
                    for v in f.all_variants(arch)}
        chosen_names = {f.name for f in chosen}
        for entry in db.entries.values():
            v = declared.get(entry["kernel"])
            if v is None:
                raise BuildError(f"{db.path}: entry {key_text(entry_key(entry))} selects "
                                 f"{entry['kernel']}, which no family declares for {arch} — "
                                 "re-run `attnpack tune` or fix the entry")
            if v.family in chosen_names and _wanted(req, v):
                variants[v.name] = v
    if req.all_variants:
        for f in chosen:
            variants.update({v.name: v for v in f.all_variants(arch) if _wanted(req, v)})
    if not variants:
        raise BuildError(f"empty variant selection for {arch}: no family/op/dtype/head-dim "
                         "matches the filters")
    return sorted(variants.values(), key=lambda v: v.name), defaults


def _tensormap_records(job: CompileJob, compiled: CompiledStep) -> list[dict]:
    """The step's descriptors as the runtime encodes them, checked against what Triton's own
    launcher would encode for the compiled kernel (its tensordesc_meta, in argument order)."""
    maps = [job.step.tensormap(w) for w in job.step.args if job.step.tensormap(w) is not None]
    meta = compiled.meta.get("tensordesc_meta") or []
    if len(meta) != len(maps):
        raise BuildError(f"{job.label}: the kernel lowers {len(meta)} tensor descriptors to TMA "
                         f"descriptors, the step declares {len(maps)} tensor maps")
    records = []
    for m, md in zip(maps, meta):
        # The box is the compiled kernel's, which may be a slice of the declared block: with a
        # 128-byte swizzle a TMA box row is at most 128 bytes, so a d128 16-bit tile is copied
        # as two 64-wide boxes, and Triton's launcher encodes the 64-wide box.
        box = [int(e) for e in md["block_size"]]
        fits = len(box) == len(m.block) and all(b >= 1 and t % b == 0
                                                for b, t in zip(box, m.block))
        want = {"swizzle": m.swizzle, "elem_type": TMA_ELEM_TYPE[job.variant.key.dtype]}
        got = {"swizzle": SWIZZLE_BYTES[md["swizzle"]], "elem_type": md["elem_type"]}
        if want != got or not fits or md.get("fp4_padded"):
            raise BuildError(f"{job.label}: tensor map {m.name} declares block {list(m.block)} "
                             f"{want}, the compiled kernel's descriptor is {dict(md)}")
        records.append({"param": m.name, "tensor": m.tensor, "box": box,
                        "swizzle": m.swizzle, "l2_promotion": m.l2_promotion,
                        "oob_fill": m.oob_fill})
    return records


def _step_params(job: CompileJob) -> list[list]:
    """[word, wire type, divisibility] per kernel parameter, as the compiled image takes them."""
    ws = tuple(w.name for w in job.variant.workspace)
    params = []
    for w in job.step.args:
        tmap = job.step.tensormap(w)
        if tmap is not None:  # descriptor, shape, strides: the launcher's expansion
            params += [[word, typ, 1] for word, typ in abi.tensormap_params(w, tmap.tensor)]
            continue
        typ = abi.param_type(w, ws)
        params.append([w, typ, 16 if typ == "ptr" or w in job.step.divisible_by_16 else 1])
    return params + [[w, "ptr", 1] for w in abi.TRITON_SCRATCH]


def _step_record(job: CompileJob, compiled: CompiledStep, image_index: int) -> dict:
    params = _step_params(job)
    md = compiled.meta
    return {
        "name": job.step.name, "image": image_index, "symbol": compiled.symbol,
        "params": params,
        "grid": [[[var, div] for var, div in dim] for dim in job.step.grid],
        "block": [md["num_warps"] * md["warp_size"], 1, 1],
        "shared": md["shared"],
        "cluster": [md["num_ctas"], 1, 1],
        "scratch": {"global_size": md["global_scratch_size"],
                    "global_align": md["global_scratch_align"],
                    "profile_size": md["profile_scratch_size"],
                    "profile_align": md["profile_scratch_align"]},
        "tensormaps": _tensormap_records(job, compiled),
        "kernarg_size": abi.kernarg_layout([p[1] for p in params], job.variant.arch)[1],
    }


def _compiler_versions() -> dict[str, str]:
    import triton
    return {"triton": triton.__version__}


def build_archives(req: BuildRequest, progress: Callable[[int, str], Callable[[int], None]]
                   = lambda total, label: (lambda n: None)) -> list[Path]:
    """Build one archive per arch in `req.archs`; returns their paths.

    `progress(total, label)` returns a callback advanced by the number of steps finished.
    """
    families = load_families(req.kernels_root)
    cache = CompileCache(req.cache_dir)
    dbs = {arch: load_arch_db(req, arch) for arch in req.archs}
    plans = {arch: plan_variants(req, arch, families, dbs[arch]) for arch in req.archs}
    jobs = {arch: [CompileJob(v, s) for v in plans[arch][0] for s in v.steps] for arch in req.archs}
    total = sum(len(j) for j in jobs.values())
    advance = progress(total, f"compiling {total} kernels for {', '.join(req.archs)}")
    keyed = {arch: [(job.cache_key(), job) for job in arch_jobs] for arch, arch_jobs in jobs.items()}
    compiled = compile_jobs([pair for arch in req.archs for pair in keyed[arch]], cache,
                            workers=max(1, req.jobs), timeout=req.timeout, on_done=advance,
                            stats=req.stats)
    paths = []
    for arch in req.archs:
        variants, defaults = plans[arch]
        images: list[Image] = []
        image_at: dict[str, int] = {}
        steps_of: dict[str, list[dict]] = {v.name: [] for v in variants}
        for key, job in keyed[arch]:
            out = compiled[key]
            digest = hashlib.sha256(out.image).hexdigest()
            if digest not in image_at:
                image_at[digest] = len(images)
                images.append(Image(out.kind, out.symbol, out.image))
            steps_of[job.variant.name].append(_step_record(job, out, image_at[digest]))
        kernels = [{"name": v.name, "family": v.family, "op": v.op, "key": v.key.as_dict(),
                    "config": dict(v.config), "steps": steps_of[v.name],
                    "workspace": [{"name": w.name, "shape": list(w.shape)} for w in v.workspace]}
                   for v in variants]
        selection = [{"op": v.op, **v.key.as_dict(), "kernel": v.name} for v in defaults]
        fams = {v.family: {"provenance": dict(families[v.family].provenance)} for v in variants}
        path = req.out_dir / archive_filename(__version__, arch)
        names = {v.name for v in variants}
        tuning = (dbs[arch] or TuningDb(arch, {"status": "none"})).compiled()
        tuning["entries"] = [e for e in tuning["entries"] if e["kernel"] in names]
        paths.append(write_archive(path, arch=arch, bundle_version=__version__,
                                   compilers=_compiler_versions(), images=images,
                                   kernels=kernels, selection=selection, families=fams,
                                   tuning=tuning))
    return paths
