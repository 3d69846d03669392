"""attnpack build: enumerate the variants to ship, compile them, pack one archive per arch.

Nothing here knows a compiler: each step goes to its family's backend
(attnpack.builder.backends), which returns the image and the step's launch spec.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnpack import __version__
from attnpack.archive import Image, archive_filename, write_archive
from attnpack.builder.backends import backend
from attnpack.builder.compile import CompileCache, CompileJob, CompileStats, compile_jobs
from attnpack.family import (DefaultConflict, FamilySpec, Variant, declared_variants,
                             default_variants, kernels_root, load_families)
from attnpack.targets import UnknownTarget, target
from attnpack.tune.db import DbError, TuningDb, entry_key, load_db, load_gpu_dbs


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
    path = _db_folder(req) / f"{arch}.jsonl"
    if not path.is_file():
        return None
    try:
        db = load_db(path)
    except DbError as e:
        raise BuildError(str(e)) from None
    if db.arch != arch:
        raise BuildError(f"{path}: header says arch {db.arch!r}, the file name says {arch!r}")
    return db


def load_arch_gpu_dbs(req: BuildRequest, arch: str) -> dict[str, TuningDb]:
    """The GPU models' own entries of `arch` (tuning_db/<arch>/*.jsonl), by GPU name."""
    try:
        return load_gpu_dbs(_db_folder(req), arch)
    except DbError as e:
        raise BuildError(str(e)) from None


def _db_folder(req: BuildRequest) -> Path:
    return Path(req.tuning_db_dir or (req.kernels_root or kernels_root()).parent / "tuning_db")


def plan_variants(req: BuildRequest, arch: str, families: dict[str, FamilySpec],
                  db: TuningDb | None = None, gpu_dbs: dict[str, TuningDb] | None = None
                  ) -> tuple[list[Variant], list[Variant]]:
    """(variants to build, the default per functional key) for one arch.

    The default build is what the tuning database and the GPU models' own databases
    (`gpu_dbs`) select plus one documented default per functional key (which serves shapes and
    keys the databases do not cover); `--all` adds the whole declared space for tuning.
    """
    try:
        target(arch)
    except UnknownTarget as e:
        raise BuildError(str(e)) from None
    unknown = set(req.families) - set(families)
    if unknown:
        raise BuildError(f"unknown famil{'ies' if len(unknown) > 1 else 'y'} "
                         f"{', '.join(sorted(unknown))} (known: {', '.join(sorted(families))})")
    chosen = [f for n, f in sorted(families.items())
              if arch in f.archs and (not req.families or n in req.families)]
    try:
        best = default_variants(arch, {f.name: f for f in chosen}, lambda v: _wanted(req, v))
    except DefaultConflict as e:
        raise BuildError(str(e)) from None
    defaults = list(best.values())
    variants = {v.name: v for v in defaults}
    dbs = ([db] if db is not None else []) + list((gpu_dbs or {}).values())
    if dbs:
        # Entries are checked against every family, then filtered like the other filters:
        # `--family gluon` drops the entries that select other families' kernels.
        declared = declared_variants(arch, families)
        chosen_names = {f.name for f in chosen}
        for source, entry in ((d, e) for d in dbs for e in d.entries.values()):
            for field in ("kernel", "deterministic_kernel"):
                if field not in entry:
                    continue
                v = declared.get(entry[field])
                if v is None:
                    raise BuildError(f"{source.path}: entry {entry_key(entry).text} selects "
                                     f"{entry[field]}, which no family declares for {arch} — "
                                     "re-run `attnpack tune` or fix the entry")
                if field == "deterministic_kernel" and not v.deterministic:
                    raise BuildError(f"{source.path}: entry {entry_key(entry).text} names "
                                     f"{v.name} as its deterministic kernel, but its family "
                                     "does not declare it deterministic — fix the entry")
                if v.family in chosen_names and _wanted(req, v):
                    variants[v.name] = v
    if req.all_variants:
        for f in chosen:
            variants.update({v.name: v for v in f.all_variants(arch) if _wanted(req, v)})
    if not variants:
        raise BuildError(f"empty variant selection for {arch}: no family/op/dtype/head-dim "
                         "matches the filters")
    return sorted(variants.values(), key=lambda v: v.name), defaults


def _step_record(job: CompileJob, compiled, image_index: int) -> dict:
    """One launch step of the index (docs/ARCHIVE.md): the generic part, plus the backend's."""
    try:
        spec = job.backend.launch_spec(job, compiled)
    except (ValueError, TypeError, KeyError) as e:
        raise BuildError(f"{job.label}: {e}") from None
    return {"name": job.step.name, "image": image_index,
            "grid": [[[var, div] for var, div in dim] for dim in job.step.grid], **spec}


def build_archives(req: BuildRequest, progress: Callable[[int, str], Callable[[int], None]]
                   = lambda total, label: (lambda n: None)) -> list[Path]:
    """Build one archive per arch in `req.archs`; returns their paths.

    `progress(total, label)` returns a callback advanced by the number of steps finished.
    """
    families = load_families(req.kernels_root)
    cache = CompileCache(req.cache_dir)
    dbs = {arch: load_arch_db(req, arch) for arch in req.archs}
    gpu_dbs = {arch: load_arch_gpu_dbs(req, arch) for arch in req.archs}
    plans = {arch: plan_variants(req, arch, families, dbs[arch], gpu_dbs[arch])
             for arch in req.archs}
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
                    "config": dict(v.config), "deterministic": v.deterministic,
                    "steps": steps_of[v.name],
                    "workspace": [{"name": w.name, "shape": list(w.shape)} for w in v.workspace],
                    # only where declared: format 2.1's one kernel field (docs/ARCHIVE.md)
                    **({"requires": [r.record() for r in v.requires]} if v.requires else {})}
                   for v in variants]
        selection = [{"op": v.op, **v.key.as_dict(), "kernel": v.name} for v in defaults]
        used: dict[str, set[str]] = {}
        for v in variants:
            used.setdefault(v.family, set()).update(v.backends)
        try:
            fams = {name: families[name].policy(tuple(sorted(b))) for name, b in used.items()}
        except (OSError, RuntimeError, ValueError) as e:  # a notice that needs its source
            raise BuildError(f"{arch}: a family's policy or notice: {e}") from None
        compilers = {}
        for name in sorted(set().union(*used.values())):
            compilers.update(backend(name).versions())
        path = req.out_dir / archive_filename(__version__, arch)
        names = {v.name for v in variants}
        tuning = (dbs[arch] or TuningDb(arch, {"status": "none"})).compiled(gpu_dbs[arch])
        # `--family`/`--op` filters drop entries whose kernels were not built; an alternate
        # that was not built is dropped alone.
        for table in [tuning] + tuning.get("by_gpu", []):
            table["entries"] = [e if e.get("deterministic_kernel") in names else
                                {k: v for k, v in e.items() if k != "deterministic_kernel"}
                                for e in table["entries"] if e["kernel"] in names]
        kept = [g for g in tuning.pop("by_gpu", []) if g["entries"]]
        if kept:
            tuning["by_gpu"] = kept
        paths.append(write_archive(path, arch=arch, target=target(arch).meta(),
                                   bundle_version=__version__, compilers=compilers, images=images,
                                   kernels=kernels, selection=selection, families=fams,
                                   tuning=tuning))
    return paths
