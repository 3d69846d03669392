"""Write an archive: preamble, meta, index, then each image zstd-compressed on its own."""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zstandard

from attnpack.archive.format import (FORMAT_MAJOR, FORMAT_MINOR, MAGIC, PREAMBLE,
                                     ZSTD_LEVEL, pack, tuning_tables)


@dataclass(frozen=True)
class Image:
    kind: str      # "cubin" or "hsaco"
    symbol: str    # entry point
    raw: bytes


def write_archive(path: Path, *, arch: str, target: dict, bundle_version: str,
                  compilers: dict[str, str],
                  images: list[Image], kernels: list[dict], selection: list[dict],
                  families: dict[str, dict], tuning: dict | None = None) -> Path:
    """Write atomically: a temporary file in the same folder, then rename over `path`.

    `kernels[*].steps[*].image` are positions in `images`. Nothing is written when an argument
    is inconsistent, so a failed build never leaves a half-written archive behind.
    """
    path = Path(path)
    if not kernels:
        raise ValueError(f"{path.name}: empty variant selection — nothing to put in the archive")
    names = {k["name"] for k in kernels}
    for entry in selection:
        if entry["kernel"] not in names:
            raise ValueError(f"{path.name}: selection names kernel {entry['kernel']!r}, "
                             "which is not in the archive")
    tuning = tuning or {"buckets": {}, "entries": [], "provenance": {}}
    for gpu, entries in tuning_tables(tuning):
        for entry in entries:
            for field in ("kernel", "deterministic_kernel"):
                if field in entry and entry[field] not in names:
                    whose = "" if gpu is None else f" of {gpu!r}"
                    raise ValueError(f"{path.name}: tuning entry{whose} names {field} "
                                     f"{entry[field]!r}, which is not in the archive")
    for image in images:
        if image.kind != target["image_kind"] or not image.raw:
            raise ValueError(f"{path.name}: image {image.symbol!r} is empty or a {image.kind!r}; "
                             f"a {arch} archive holds {target['image_kind']} images")

    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False,
                                          write_content_size=True)
    blobs, image_records, offset = [], [], 0
    for image in images:
        blob = compressor.compress(image.raw)
        image_records.append({"kind": image.kind, "offset": offset, "size": len(blob),
                              "raw_size": len(image.raw), "symbol": image.symbol,
                              "sha256": hashlib.sha256(image.raw).digest()})
        blobs.append(blob)
        offset += len(blob)

    index = pack({"images": image_records,
                  "kernels": sorted(kernels, key=lambda k: k["name"]),
                  "selection": sorted(selection, key=lambda s: (s["op"], s["dtype"], s["head_dim"],
                                                                s["causal"])),
                  "families": families,
                  "tuning": tuning})
    # The meta's own size depends on the offsets it records; settle it in two passes.
    meta_fields = {"arch": arch, "target": target, "bundle_version": bundle_version,
                   "compilers": compilers,
                   "index_sha256": hashlib.sha256(index).digest(), "index_size": len(index)}
    meta = b""
    for _ in range(3):
        index_offset = PREAMBLE.size + len(meta)
        meta = pack({**meta_fields, "index_offset": index_offset,
                     "images_offset": index_offset + len(index)})
    assert PREAMBLE.size + len(meta) == index_offset, "meta size did not settle"
    preamble = PREAMBLE.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, len(meta),
                             hashlib.sha256(meta).digest())

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for part in (preamble, meta, index, *blobs):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
