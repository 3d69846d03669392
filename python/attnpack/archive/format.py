"""Constants and encoding rules shared by the archive writer, reader and verifier."""
from __future__ import annotations

import struct
from pathlib import Path

import msgpack

MAGIC = b"ATTNPACK"
# 2.0: launch parameters carry their byte offsets; the meta carries the target row;
# families carry their policy and kernels whether they are deterministic.
# 2.1 (additive): kernels may carry `requires`, steps `padding`, families `notice`; parameter
# words gain const:<literal>, <word>*<n>, Hq_per_Hkv and lse strides.
# 2.2 (additive): a tuning entry may carry `deterministic_kernel`.
# 2.3: the tuning map may carry `buckets.streams`, and then each entry its `streams` class; two
# entries may then differ in that class alone, which a 2.2 reader rejects as a repeated key.
# 2.4 (additive): a tensor map may view a workspace buffer, and parameter words gain
# `<workspace>_stride_<b|h|s|d>` (Triton's expansion of such a descriptor); an older runtime
# marks a kernel using them as one it cannot launch.
# 2.5 (additive): a step may carry `pdl`: its kernel waits for the grid ahead itself, so the
# runtime may launch it with programmatic stream serialization; an older runtime launches it
# plainly, which is also correct.
# 2.6 (additive): workspace extents gain `num_sms` and `const:<n>` (a persistent kernel's
# per-program buffers); an older runtime marks a kernel using them as one it cannot launch.
# 2.7 (additive): the tuning map may carry `by_gpu`, entries that serve one GPU model of the arch
# first; an older runtime ignores it and serves every device by the arch-wide entries.
# 3.0: the index is stored as one zstd frame (the meta gains `index_raw_size`), and may carry a
# zstd `dictionary` the image frames are compressed with; the rest is 2.7's.
FORMAT_MAJOR = 3
FORMAT_MINOR = 0
# magic, major, minor, meta size, sha256(meta)
PREAMBLE = struct.Struct("<8sHHI32s")
ZSTD_LEVEL = 19
# The images' shared dictionary (3.0): trained by zstd's fastCover at fixed parameters (no
# search, one thread, so the same images give the same bytes) and kept where the images with
# it plus the dictionary take fewer bytes than the images without it.
DICTIONARY_BYTES = 112 * 1024
DICTIONARY_K, DICTIONARY_D = 2048, 8
# A reader refuses an index claiming more bytes than this once inflated (a corrupt size field
# must not make it allocate without bound).
MAX_INDEX_BYTES = 256 << 20
SUFFIX = ".apk"


class ArchiveError(Exception):
    """A defect in an archive file; the message names the file, the problem and the fix."""

    def __init__(self, path: Path | str, problem: str, fix: str = "rebuild it with `attnpack build`"):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{Path(path).name}: {problem} — {fix}")


def archive_filename(bundle_version: str, arch: str) -> str:
    return f"attnpack-{bundle_version}-{arch}{SUFFIX}"


def tuning_tables(tuning: dict) -> list[tuple[str | None, list[dict]]]:
    """The entry arrays of an index's tuning map: (None, the arch-wide entries), then (its GPU,
    its entries) for each `by_gpu` list (2.7), in the index's order."""
    return [(None, tuning.get("entries", []))] + [(g.get("gpu"), g.get("entries", []))
                                                  for g in tuning.get("by_gpu", [])]


def canonical(obj):
    """Maps with sorted keys, recursively, so equal content packs to equal bytes."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, (list, tuple)):
        return [canonical(x) for x in obj]
    return obj


def pack(obj) -> bytes:
    return msgpack.packb(canonical(obj), use_bin_type=True)


def unpack(data: bytes):
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
