"""Compile launch steps to GPU images, in parallel, through a content-addressed cache.

Each compile runs in a forked worker process so that a per-kernel timeout can really stop it
(a compile stuck inside MLIR never returns to Python, so an in-process alarm would not fire).
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnpack import abi
from attnpack.family import Step, Variant

# Bump when the cached record's shape changes.
CACHE_SCHEMA = 1
# Line info embeds absolute source paths in the image; without it builds are path-independent.
os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")


def gpu_target(arch: str):
    from triton.backends.compiler import GPUTarget
    if arch.startswith("sm_"):
        return GPUTarget("cuda", int(arch[3:]), 32)
    return GPUTarget("hip", arch, 64)


@dataclass
class CompileJob:
    variant: Variant
    step: Step

    @property
    def label(self) -> str:
        return f"{self.variant.arch}:{self.variant.name}:{self.step.name}"

    def runtime_params(self):
        fn = self.step.fn
        return [p for p in fn.params if not p.is_constexpr]

    def source(self):
        from triton.compiler import ASTSource
        fn, step, variant = self.step.fn, self.step, self.variant
        ws = tuple(w.name for w in variant.workspace)
        runtime = self.runtime_params()
        if len(runtime) != len(step.args):
            raise ValueError(f"{self.label}: kernel {fn.__name__} takes {len(runtime)} runtime "
                             f"parameters but the step declares {len(step.args)} args")
        signature, attrs = {}, {}
        for p, word in zip(runtime, step.args):
            tmap = step.tensormap(word)
            if tmap is not None:
                # A host descriptor: Gluon reads the block shape and shared layout from the type.
                elem = abi.triton_type(tmap.tensor, variant.key.dtype, ws).lstrip("*")
                block = ",".join(str(e) for e in tmap.block)
                signature[p.name] = f"tensordesc<{elem}[{block}],{tmap.layout!r}>"
                continue
            signature[p.name] = abi.triton_type(word, variant.key.dtype, ws)
            if abi.param_type(word, ws) == "ptr" or word in step.divisible_by_16:
                attrs[(p.num,)] = [["tt.divisibility", 16]]
        for p in fn.params:
            if p.is_constexpr:
                if p.name not in step.constexprs:
                    raise ValueError(f"{self.label}: constexpr {p.name} has no value")
                signature[p.name] = "constexpr"
        if getattr(fn, "is_gluon", lambda: False)():
            from triton.experimental.gluon._runtime import GluonASTSource
            return GluonASTSource(fn=fn, signature=signature, constexprs=dict(step.constexprs),
                                  attrs=attrs)
        return ASTSource(fn=fn, signature=signature, constexprs=dict(step.constexprs), attrs=attrs)

    def options(self) -> dict:
        return {"num_warps": self.step.num_warps, "num_stages": self.step.num_stages,
                **self.step.options}

    def cache_key(self) -> str:
        import triton
        text = json.dumps({"schema": CACHE_SCHEMA, "triton": triton.__version__,
                           "ast": self.source().hash(), "arch": self.variant.arch,
                           "options": self.options(),
                           "line_info": os.environ.get("TRITON_DISABLE_LINE_INFO")},
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class CompiledStep:
    image: bytes
    kind: str          # cubin / hsaco
    symbol: str
    meta: dict         # num_warps, warp_size, shared, num_ctas, scratch sizes/aligns, and
                       # tensordesc_meta (how Triton's launcher would encode each descriptor)


def _compile(job: CompileJob) -> CompiledStep:
    import triton
    kernel = triton.compile(job.source(), target=gpu_target(job.variant.arch),
                            options=job.options())
    md = kernel.metadata._asdict()
    kind = "cubin" if job.variant.arch.startswith("sm_") else "hsaco"
    image = kernel.asm[kind]
    if not image:
        raise RuntimeError(f"compiler produced an empty {kind}")
    meta = {k: md.get(k, d) for k, d in (
        ("num_warps", 4), ("warp_size", 32), ("shared", 0), ("num_ctas", 1),
        ("global_scratch_size", 0), ("global_scratch_align", 1),
        ("profile_scratch_size", 0), ("profile_scratch_align", 1))}
    if md.get("tensordesc_meta"):
        meta["tensordesc_meta"] = [dict(m) for m in md["tensordesc_meta"]]
    return CompiledStep(bytes(image), kind, md["name"], meta)


class CompileCache:
    """Entries live at <dir>/<key[:2]>/<key>/{image, meta.json}; written atomically."""

    def __init__(self, directory: Path | None):
        self.dir = Path(directory) if directory else None

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / key

    def get(self, key: str) -> CompiledStep | None:
        if self.dir is None:
            return None
        path = self._path(key)
        try:
            meta = json.loads((path / "meta.json").read_text())
            image = (path / "image").read_bytes()
        except (OSError, ValueError):
            return None
        if hashlib.sha256(image).hexdigest() != meta.get("sha256"):
            return None  # a damaged entry is a miss, never a wrong image
        return CompiledStep(image, meta["kind"], meta["symbol"], meta["meta"])

    def put(self, key: str, step: CompiledStep) -> None:
        if self.dir is None:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent))
        (tmp / "image").write_bytes(step.image)
        (tmp / "meta.json").write_text(json.dumps(
            {"kind": step.kind, "symbol": step.symbol, "meta": step.meta,
             "sha256": hashlib.sha256(step.image).hexdigest()}, sort_keys=True))
        try:
            tmp.rename(path)
        except OSError:  # another build stored it first
            shutil.rmtree(tmp, ignore_errors=True)


class CompileFailure(Exception):
    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        lines = [f"{len(failures)} kernel(s) failed to compile:"]
        for label, error in failures:
            lines.append(f"  {label}:\n    " + "\n    ".join(error.strip().splitlines()[-25:]))
        super().__init__("\n".join(lines))


def _worker(job: CompileJob, conn) -> None:
    try:
        result = _compile(job)
        conn.send(("ok", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


@dataclass
class CompileStats:
    compiled: int = 0
    cache_hits: int = 0


def compile_jobs(jobs: list[tuple[str, CompileJob]], cache: CompileCache, workers: int,
                 timeout: float, on_done: Callable[[int], None] = lambda n: None,
                 stats: CompileStats | None = None) -> dict[str, CompiledStep]:
    """Compile every (cache key, job), deduplicated by key; returns key -> CompiledStep.

    The first failure or timeout stops the build: the remaining workers are killed and the
    failing kernels are reported by name with the compiler's error.
    """
    stats = stats if stats is not None else CompileStats()
    results: dict[str, CompiledStep] = {}
    pending: list[tuple[str, CompileJob]] = []
    queued: set[str] = set()
    for key, job in jobs:
        if key in results or key in queued:
            on_done(1)
            continue
        hit = cache.get(key)
        if hit is not None:
            results[key] = hit
            stats.cache_hits += 1
            on_done(1)
        else:
            pending.append((key, job))
            queued.add(key)

    ctx = multiprocessing.get_context("fork")
    running: dict = {}  # conn -> (key, job, process, start)
    failures: list[tuple[str, str]] = []
    try:
        while (pending or running) and not failures:
            while pending and len(running) < workers:
                key, job = pending.pop(0)
                parent, child = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(job, child), daemon=True)
                proc.start()
                child.close()
                running[parent] = (key, job, proc, time.monotonic())
            for conn in multiprocessing.connection.wait(list(running), timeout=0.5):
                key, job, proc, _ = running.pop(conn)
                try:
                    status, payload = conn.recv()
                except EOFError:
                    status, payload = "error", f"compiler process died (exit code {proc.exitcode})"
                proc.join()
                if status == "ok":
                    cache.put(key, payload)
                    results[key] = payload
                    stats.compiled += 1
                    on_done(1)
                else:
                    failures.append((job.label, payload))
            now = time.monotonic()
            for conn, (key, job, proc, start) in list(running.items()):
                if now - start > timeout:
                    failures.append((job.label, f"timed out after {timeout:.0f} s"))
    finally:
        for conn, (_, _, proc, _) in running.items():
            proc.kill()
            proc.join()
    if failures:
        raise CompileFailure(failures)
    return results
