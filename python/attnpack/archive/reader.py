"""Read an archive and check its structure; images are inflated only when asked for."""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import zstandard

from attnpack.archive.format import (FORMAT_MAJOR, MAGIC, MAX_INDEX_BYTES, PREAMBLE,
                                     ArchiveError, unpack)
from attnpack.targets import VENDORS


_BUILD_LOCK = threading.Lock()  # the lazily built dictionary, thread locals and decompressors


@dataclass
class Archive:
    path: Path
    format_version: tuple[int, int]
    meta: dict
    index: dict
    _data: bytes

    @property
    def arch(self) -> str:
        return self.meta["arch"]

    @property
    def target(self) -> dict:
        """The target facts the archive carries (vendor, image kind, wave size, shared bytes)."""
        return self.meta["target"]

    @property
    def kernels(self) -> list[dict]:
        return self.index["kernels"]

    def kernel(self, name: str) -> dict:
        for k in self.kernels:
            if k["name"] == name:
                return k
        raise KeyError(f"{self.path.name}: no kernel {name!r}")

    def compressed_image(self, i: int) -> bytes:
        rec = self.index["images"][i]
        start = self.meta["images_offset"] + rec["offset"]
        return self._data[start:start + rec["size"]]

    @property
    def dictionary(self) -> bytes:
        """The zstd dictionary the image frames are compressed with (3.0), or b"" for none."""
        return self.index.get("dictionary", b"")

    @functools.cached_property
    def _zstd_dictionary(self) -> zstandard.ZstdCompressionDict | None:
        return zstandard.ZstdCompressionDict(self.dictionary) if self.dictionary else None

    @functools.cached_property
    def _per_thread(self) -> threading.local:
        return threading.local()

    @property
    def _decompressor(self) -> zstandard.ZstdDecompressor:
        """This thread's decompressor: a ZstdDecompressor must not be shared between threads,
        and building one fills the shared dictionary's decoding tables, so builds take a lock."""
        with _BUILD_LOCK:
            mine = getattr(self._per_thread, "decompressor", None)
            if mine is None:
                mine = zstandard.ZstdDecompressor(dict_data=self._zstd_dictionary)
                self._per_thread.decompressor = mine
            return mine

    def image(self, i: int) -> bytes:
        """The raw image, inflated and checked against its sha256."""
        rec = self.index["images"][i]
        frame = self.compressed_image(i)
        try:  # first, so that the dictionary is built under the lock
            decompressor = self._decompressor
        except zstandard.ZstdError as e:
            raise ArchiveError(self.path, f"index.dictionary is not a zstd dictionary ({e}); "
                                          "rebuild the bundle") from None
        try:
            named = zstandard.get_frame_parameters(frame).dict_id
            have = self._zstd_dictionary.dict_id() if self._zstd_dictionary else 0
        except zstandard.ZstdError as e:
            raise ArchiveError(self.path, f"image {i} ({rec['symbol']}) does not inflate: {e}")
        if named != have:
            raise ArchiveError(self.path, f"image {i} ({rec['symbol']}) was compressed with zstd "
                                          f"dictionary {named}, the index has "
                                          + (f"dictionary {have}" if self.dictionary else "none"))
        try:
            raw = decompressor.decompress(frame)
        except zstandard.ZstdError as e:
            raise ArchiveError(self.path, f"image {i} ({rec['symbol']}) does not inflate: {e}")
        if len(raw) != rec["raw_size"] or hashlib.sha256(raw).digest() != rec["sha256"]:
            raise ArchiveError(self.path, f"image {i} ({rec['symbol']}) fails its sha256 check")
        return raw


def _section(path: Path, data: bytes, offset: int, size: int, what: str) -> bytes:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise ArchiveError(path, f"{what} at bytes {offset}..{offset + size} lies past the end of "
                                 f"the {len(data)}-byte file (truncated?)")
    return data[offset:offset + size]


def _inflate_index(path: Path, stored: bytes, raw_size) -> bytes:
    """The index's msgpack bytes from its one zstd frame, which must inflate to the meta's
    `index_raw_size` (at most MAX_INDEX_BYTES)."""
    try:
        content = zstandard.frame_content_size(stored)
    except zstandard.ZstdError:
        content = -1
    if not isinstance(raw_size, int) or content != raw_size or not 0 < raw_size <= MAX_INDEX_BYTES:
        raise ArchiveError(path, f"index is not a zstd frame of the {raw_size!r} bytes the meta "
                                 "says (corrupt index)")
    try:
        return zstandard.ZstdDecompressor().decompress(stored)
    except zstandard.ZstdError as e:
        raise ArchiveError(path, f"index does not inflate: {e}") from None


def read_archive(path: Path | str) -> Archive:
    """Open and check everything but the images' contents (see `Archive.image`)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ArchiveError(path, f"cannot be read ({e.strerror})", "check the path") from None
    if len(data) < PREAMBLE.size:
        raise ArchiveError(path, f"is {len(data)} bytes, shorter than the {PREAMBLE.size}-byte "
                                 "preamble (truncated?)")
    magic, major, minor, meta_size, meta_sha = PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise ArchiveError(path, f"is not an attnpack archive (magic {magic!r})",
                           "point at an attnpack-*.apk file")
    if major != FORMAT_MAJOR:
        raise ArchiveError(path, f"has format {major}.{minor}; this attnpack reads "
                                 f"{FORMAT_MAJOR}.x", "rebuild the bundle or update attnpack")
    meta_bytes = _section(path, data, PREAMBLE.size, meta_size, "the meta map")
    if hashlib.sha256(meta_bytes).digest() != meta_sha:
        raise ArchiveError(path, "meta map fails its sha256 check (corrupt header)")
    meta = unpack(meta_bytes)
    vendor = (meta.get("target") or {}).get("vendor") if isinstance(meta, dict) else None
    if not isinstance(meta.get("arch"), str) or vendor not in VENDORS:
        raise ArchiveError(path, f"targets arch {meta.get('arch')!r} of vendor {vendor!r}; this "
                                 f"attnpack knows vendors {', '.join(VENDORS)}",
                           "update attnpack or rebuild the bundle")
    index_bytes = _section(path, data, meta["index_offset"], meta["index_size"], "the index")
    if hashlib.sha256(index_bytes).digest() != meta["index_sha256"]:
        raise ArchiveError(path, "index fails its sha256 check (corrupt index)")
    index = unpack(_inflate_index(path, index_bytes, meta.get("index_raw_size")))
    if not isinstance(index, dict) or not isinstance(index.get("dictionary", b""), bytes):
        raise ArchiveError(path, "index is not a map, or its dictionary is not a byte string")
    end = meta["images_offset"]
    for i, rec in enumerate(index["images"]):
        _section(path, data, meta["images_offset"] + rec["offset"], rec["size"], f"image {i}")
        end = max(end, meta["images_offset"] + rec["offset"] + rec["size"])
    if end != len(data):
        raise ArchiveError(path, f"has {len(data) - end} bytes after its last image")
    return Archive(path, (major, minor), meta, index, data)
