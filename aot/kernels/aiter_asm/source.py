"""Where the AITER code objects come from: one pinned, hash-checked PyPI wheel.

AMD's AITER ships its hand-written assembly flash-attention kernels as prebuilt code objects
inside the `amd-aiter` wheel, under `aiter_meta/hsa/<arch>/fmha_v3_fwd|bwd/`. The build fetches
exactly one wheel with pip (`pip download --no-deps`), refuses it unless its sha256 is the pinned
one, keeps it in the attnpack cache, and reads the code objects straight out of the zip. Every
member read is checked once more against the wheel's own RECORD, as pip does on install.

Nothing here runs at run time: the runtime gets the code objects from the archive alone.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "amd-aiter"
VERSION = "0.1.7.post2.dev18"   # the only amd-aiter release on PyPI when this was pinned
WHEEL_NAME = "amd_aiter-0.1.7.post2.dev18-py3-none-any.whl"
# sha256 of the wheel as PyPI served it on 2026-12-01 (pip download, 40 189 929 bytes).
WHEEL_SHA256 = "fe139d74438217c35e87e3b961166bac8db2d381eadccb371da2e63615f05a31"
HSA_ROOT = "aiter_meta/hsa"
LICENSE_MEMBER = "amd_aiter-0.1.7.post2.dev18.dist-info/LICENSE"
RECORD_MEMBER = "amd_aiter-0.1.7.post2.dev18.dist-info/RECORD"
# A local copy of the wheel (still hash-checked), for machines without network access.
WHEEL_ENV = "ATTNPACK_AITER_WHEEL"


class AiterSourceError(RuntimeError):
    """The pinned wheel could not be fetched, or is not the pinned wheel."""


def _default_cache_dir() -> Path:
    # One cache rule for the whole builder (ATTNPACK_CACHE_DIR, XDG_CACHE_HOME, ~/.cache).
    from attnpack.builder.build import default_cache_dir
    return Path(default_cache_dir())


def wheel_cache_dir(cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or _default_cache_dir()) / "aiter"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _check_wheel_hash(path: Path, origin: str) -> None:
    actual = sha256_file(path)
    if actual != WHEEL_SHA256:
        raise AiterSourceError(
            f"{path} ({origin}) is not the pinned AITER wheel {WHEEL_NAME}: sha256 {actual}, "
            f"expected {WHEEL_SHA256}. Delete it and rebuild to fetch it again; if PyPI now "
            f"serves different bytes for {PACKAGE}=={VERSION}, review the new wheel and update "
            f"WHEEL_SHA256 in aot/kernels/aiter_asm/source.py")


def _pip_download(dest: Path, index_url: str | None) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-d", str(dest),
           f"{PACKAGE}=={VERSION}"]
    if index_url:
        cmd += ["--index-url", index_url, "--retries", "0", "--timeout", "5"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise AiterSourceError(f"could not run pip to fetch {WHEEL_NAME}: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise AiterSourceError(
            f"pip could not download {PACKAGE}=={VERSION} ({WHEEL_NAME}); is this machine "
            f"offline? pip said:\n{tail}\nFix: build on a machine with access to PyPI, or "
            f"download {WHEEL_NAME} (sha256 {WHEEL_SHA256}) elsewhere and point {WHEEL_ENV} at it")
    got = dest / WHEEL_NAME
    if not got.is_file():
        raise AiterSourceError(f"pip download of {PACKAGE}=={VERSION} left "
                               f"{sorted(p.name for p in dest.iterdir())}, not {WHEEL_NAME}")
    return got


def fetch_wheel(cache_dir: Path | None = None, index_url: str | None = None) -> Path:
    """The pinned wheel on this machine, hash-checked: $ATTNPACK_AITER_WHEEL if set, else the
    cached copy, else a fresh pip download into the cache."""
    local = os.environ.get(WHEEL_ENV)
    if local:
        path = Path(local)
        if not path.is_file():
            raise AiterSourceError(f"{WHEEL_ENV}={local} is not a file; point it at "
                                   f"{WHEEL_NAME} or unset it to download the wheel")
        _check_wheel_hash(path, f"from {WHEEL_ENV}")
        return path
    folder = wheel_cache_dir(cache_dir)
    cached = folder / WHEEL_NAME
    if cached.is_file():
        _check_wheel_hash(cached, "cached")
        return cached
    folder.mkdir(parents=True, exist_ok=True)
    # Download next to the cache entry and rename, so a killed build never leaves half a wheel.
    with tempfile.TemporaryDirectory(dir=folder, prefix="download-") as tmp:
        got = _pip_download(Path(tmp), index_url)
        _check_wheel_hash(got, f"downloaded by pip from {index_url or 'the default index'}")
        shutil.move(str(got), cached)
    return cached


class AiterWheel:
    """Read access to the members of the pinned wheel."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._zip = zipfile.ZipFile(self.path)
        self._record = self._read_record()

    def _read_record(self) -> dict[str, str]:
        """member -> sha256 hex, from the wheel's RECORD (urlsafe base64 without padding)."""
        text = self._zip.read(RECORD_MEMBER).decode()
        out = {}
        for row in csv.reader(io.StringIO(text)):
            if len(row) >= 2 and row[1].startswith("sha256="):
                digest = row[1][len("sha256="):]
                raw = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))
                out[row[0]] = raw.hex()
        return out

    def members(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._zip.namelist() if n.startswith(prefix))

    def code_objects(self) -> list[str]:
        """Every fmha_v3 forward/backward code object in the wheel, as wheel member paths."""
        return [m for m in self.members(HSA_ROOT + "/") if m.endswith(".co")
                and m.split("/")[3] in ("fmha_v3_fwd", "fmha_v3_bwd")]

    def read(self, member: str) -> bytes:
        try:
            data = self._zip.read(member)
        except KeyError:
            raise AiterSourceError(f"{WHEEL_NAME} has no member {member}") from None
        expected = self._record.get(member)
        actual = hashlib.sha256(data).hexdigest()
        if expected != actual:
            raise AiterSourceError(f"{WHEEL_NAME}: {member} has sha256 {actual}, its RECORD "
                                   f"says {expected}; the wheel is damaged, delete {self.path}")
        return data

    def license_text(self) -> str:
        return self.read(LICENSE_MEMBER).decode()

    def close(self) -> None:
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_wheel(cache_dir: Path | None = None) -> AiterWheel:
    return AiterWheel(fetch_wheel(cache_dir))


@dataclass(frozen=True)
class WheelMember:
    """One code object of the pinned wheel as the prebuilt backend's ObjectSource: `sha256`
    pins its bytes, and the wheel is fetched (or taken from the cache) only when it is read,
    so importing the family, planning a build or a compile-cache hit never downloads it."""
    member: str
    sha256: str

    @property
    def description(self) -> str:
        return f"{WHEEL_NAME}:{self.member}"

    def read(self) -> bytes:
        with open_wheel() as wheel:
            return wheel.read(self.member)


def extract(wheel: AiterWheel, members: list[str], dest: Path) -> dict[str, str]:
    """Write the given members under `dest` (their wheel paths below aiter_meta/hsa kept);
    returns member -> sha256."""
    hashes = {}
    for member in members:
        data = wheel.read(member)
        out = Path(dest) / Path(member).relative_to(HSA_ROOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        hashes[member] = hashlib.sha256(data).hexdigest()
    return hashes


def notice_text(wheel: AiterWheel, members: list[str]) -> str:
    """The NOTICE that travels with every archive holding AITER code objects."""
    lines = [
        "attnpack archives include code objects from AMD AITER.",
        "",
        f"Package:  {PACKAGE} {VERSION} (PyPI)",
        f"Wheel:    {WHEEL_NAME}",
        f"sha256:   {WHEEL_SHA256}",
        "Source:   https://github.com/ROCm/aiter",
        "",
        "Files taken from the wheel, unmodified (sha256, path in the wheel):",
    ]
    lines += [f"  {hashlib.sha256(wheel.read(m)).hexdigest()}  {m}" for m in sorted(members)]
    lines += ["", f"Licence ({LICENSE_MEMBER}):", "", wheel.license_text().rstrip(), ""]
    return "\n".join(lines)
