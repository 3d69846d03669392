"""Compile launch steps to GPU images, in parallel, through a content-addressed cache.

What a step compiles to is its family's backend's business (attnpack.builder.backends); this
module only runs backends' compiles in worker processes and caches their images. Each compile
runs in a forked worker so that a per-kernel timeout can really stop it (a compile stuck
inside MLIR never returns to Python, so an in-process alarm would not fire).
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.connection
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnpack.family import Step, Variant


@dataclass
class CompileJob:
    variant: Variant
    step: Step

    @property
    def label(self) -> str:
        return f"{self.variant.arch}:{self.variant.name}:{self.step.name}"

    @property
    def backend(self):
        from attnpack.builder.backends import backend
        return backend(self.variant.backend)

    def cache_key(self) -> str:
        return self.backend.cache_key(self)


@dataclass
class CompiledStep:
    """A backend's product for one step: the image and what the backend needs later to write
    the step's launch spec (`Backend.launch_spec`). Cached as image + meta.json."""
    image: bytes
    kind: str          # the target's image kind: cubin / hsaco
    symbol: str
    meta: dict         # backend-specific, JSON-serialisable


def _compile(job: CompileJob) -> CompiledStep:
    out = job.backend.compile(job)
    if not out.image:
        raise RuntimeError(f"the {job.variant.backend} backend produced an empty {out.kind}")
    return out


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
