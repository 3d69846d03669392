"""libattnpack's archive reader: opening, verifying, and every way an archive can be bad.

Each bad archive must give its exact status and a message naming the file; never a crash.
"""
import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.format import PREAMBLE
from test_runtime_fixtures import (expect_error, flipped, patched, resealed,  # noqa: F401
                                   synthetic_archive, toy_archives, triton_fwd_archive,
                                   write_synthetic, attention_kernels, run_threads)

S = rt.Status


def open_sm90(path, **kw):
    return rt.Bundle(path, arch="sm_90", **kw)


# ---- sha256 --------------------------------------------------------------------------------

def test_sha256_matches_hashlib():
    tool = rt.library_path().parent / "tests" / "attnpack_sha256"
    assert tool.is_file(), f"{tool} missing: build the runtime with its tests (the default)"
    rng = random.Random(7)
    # every padding case around the 55/56/64-byte block boundaries, and multi-chunk inputs
    for size in [0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 4093, 4094, 8186, 100_003]:
        data = bytes(rng.getrandbits(8) for _ in range(size))
        out = subprocess.run([str(tool)], input=data, capture_output=True, check=True)
        assert out.stdout.decode().strip() == hashlib.sha256(data).hexdigest(), size


# ---- a sound archive -----------------------------------------------------------------------

def test_open_reports_what_the_archive_holds(toy_archives):
    with open_sm90(toy_archives["sm_90"]) as bundle:
        assert bundle.info() == {
            "path": str(toy_archives["sm_90"]), "arch": "sm_90", "bundle_version": "0.1.0",
            "format": (3, 0), "compilers": "triton=3.6.0", "driver": "cuda", "kernels": 6,
            "images": 3, "tuned_on": "", "gpu_entries": {}}
    with rt.Bundle(toy_archives["gfx950"], arch="gfx950") as bundle:
        assert bundle.info()["driver"] == "hip" and bundle.info()["kernels"] == 4


def test_info_names_the_gpu_the_tuning_database_was_measured_on(tmp_path):
    """attnpack_bundle_info's version-2 field: the tuning header's `gpu` where the database was
    measured, "" where it is untuned; a caller with the version-1 struct still gets the rest,
    and the field is left alone; a shorter struct is refused by name."""
    import ctypes
    for status, gpu, shown in (("tuned", "NVIDIA H200", "NVIDIA H200"),
                               ("untuned", "none (not measured)", "")):
        path = write_synthetic(tmp_path / f"{status}.apk", attention_kernels(("bf16",), (64,)),
                               tuning={"buckets": {}, "entries": [],
                                       "provenance": {"gpu": gpu, "status": status}})
        with open_sm90(path) as bundle:
            assert bundle.info()["tuned_on"] == shown
            version1 = rt.BundleInfo(struct_size=rt.BundleInfo.tuned_on.offset)
            rt.check(bundle._lib.attnpack_bundle_info_get(bundle.handle, ctypes.byref(version1)))
            assert version1.tuned_on is None and version1.arch == b"sm_90"
            short = rt.BundleInfo(struct_size=rt.BundleInfo.tuned_on.offset - 1)
            message = expect_error(rt.Status.INVALID_ARGUMENT, lambda: rt.check(
                bundle._lib.attnpack_bundle_info_get(bundle.handle, ctypes.byref(short))))
            assert "attnpack_bundle_info.struct_size" in message


def test_every_image_inflates_to_the_readers_bytes(toy_archives, triton_fwd_archive):
    for path in (*toy_archives.values(), triton_fwd_archive):
        ar = read_archive(path)
        with rt.Bundle(path, arch=ar.arch) as bundle:
            bundle.verify_images()
            for k in ar.kernels:
                for i, s in enumerate(k["steps"]):
                    assert bundle.kernel_image(k["name"], i) == ar.image(s["image"])
            message = expect_error(S.INVALID_ARGUMENT, bundle.kernel_image, ar.kernels[0]["name"], 9)
            assert "there is no step 9" in message
            message = expect_error(S.INVALID_ARGUMENT, bundle.kernel_image, "toy/none")
            assert message == f"archive {path}: has no kernel toy/none"


def test_a_newer_minor_version_still_opens(toy_archives, tmp_path):
    # minors are additive: unknown keys are ignored, so 3.4 reads as 3.x
    path = patched(toy_archives["sm_90"], tmp_path / "a.apk", 8, struct.pack("<HH", 3, 4))
    with open_sm90(path) as bundle:
        assert bundle.info()["format"] == (3, 4)


# ---- bad archives ------------------------------------------------------------------------

def test_a_newer_major_version_asks_to_rebuild_or_update(toy_archives, tmp_path):
    # The preamble's version is outside every hash, so patching it is all a newer writer does.
    path = patched(toy_archives["sm_90"], tmp_path / "attnpack-0.3.0-sm_90.apk", 8,
                   struct.pack("<HH", 4, 0))
    message = expect_error(S.ARCHIVE_VERSION, open_sm90, path)
    assert message == (f"archive {path} has format 4.0; this runtime reads 3.x — rebuild the "
                       "bundle or update the runtime")
    # and archives of the formats before are refused too: 2.x (its index stored plain, which
    # this runtime would take for a corrupt frame) and 1.x (parameters without offsets)
    for major, minor in ((2, 7), (1, 0)):
        path = patched(toy_archives["sm_90"], tmp_path / f"attnpack-0.0.{major}-sm_90.apk", 8,
                       struct.pack("<HH", major, minor))
        message = expect_error(S.ARCHIVE_VERSION, open_sm90, path)
        assert message == (f"archive {path} has format {major}.{minor}; this runtime reads 3.x "
                           "— rebuild the bundle or update the runtime")


def test_wrong_magic(toy_archives, tmp_path):
    path = patched(toy_archives["sm_90"], tmp_path / "a.apk", 0, b"NOTPACK!")
    message = expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)
    assert message.startswith(f"archive {path}: is not an attnpack archive")


def _layout(path: Path):
    ar = read_archive(path)
    _, _, _, meta_size, _ = PREAMBLE.unpack_from(path.read_bytes())
    return ar, meta_size


def test_a_corrupt_meta_byte_fails_its_sha256(toy_archives, tmp_path):
    src = toy_archives["sm_90"]
    _, meta_size = _layout(src)
    path = flipped(src, tmp_path / "a.apk", PREAMBLE.size + meta_size // 2)
    message = expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)
    assert message.startswith(f"archive {path}: meta map fails its sha256 check")


def test_a_corrupt_sha_in_the_preamble_fails_the_meta_check(toy_archives, tmp_path):
    path = flipped(toy_archives["sm_90"], tmp_path / "a.apk", 20)
    assert "meta map fails its sha256 check" in expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)


def test_a_corrupt_index_byte_fails_its_sha256(toy_archives, tmp_path):
    src = toy_archives["sm_90"]
    ar, _ = _layout(src)
    path = flipped(src, tmp_path / "a.apk", ar.meta["index_offset"] + ar.meta["index_size"] // 3)
    message = expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)
    assert message.startswith(f"archive {path}: index fails its sha256 check")


def test_a_corrupt_image_is_caught_at_its_first_load_not_at_open(toy_archives, tmp_path):
    src = toy_archives["sm_90"]
    ar, _ = _layout(src)
    fwd = ar.kernel("toy/fwd/fp16-d32-full/BLOCK16_warps1")
    image = fwd["steps"][0]["image"]
    rec = ar.index["images"][image]
    start = ar.meta["images_offset"] + rec["offset"]
    for where, offset in (("frame header", start + 6), ("payload", start + rec["size"] // 2)):
        path = flipped(src, tmp_path / f"{where}.apk", offset)
        with rt.Bundle(path, arch="sm_90", recording=True) as bundle:  # open checks no image
            problem = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=32,
                                      pointers={"q": 1 << 20, "o": 2 << 20})
            message = expect_error(S.ARCHIVE_CORRUPT, bundle.forward, problem)
            assert message.startswith(f"archive {path}: image {image} ({rec['symbol']}, used by ")
            assert message.endswith("— re-copy or rebuild the bundle"), message
            assert expect_error(S.ARCHIVE_CORRUPT, bundle.verify_images) == message
            assert expect_error(S.ARCHIVE_CORRUPT, bundle.kernel_image, fwd["name"]) == message
            assert bundle.stats()["modules_loaded"] == 0  # nothing reached the driver


def test_an_image_whose_bytes_disagree_with_its_index_record(toy_archives, tmp_path):
    src = toy_archives["sm_90"]
    rec = read_archive(src).index["images"][1]

    def wrong_sha(index):
        index["images"][1]["sha256"] = bytes(32)

    def wrong_size(index):
        index["images"][1]["raw_size"] += 1

    for name, edit, problem in (("sha", wrong_sha, "fails its sha256 check"),
                                ("size", wrong_size, f"inflates to {rec['raw_size']} bytes, the "
                                                     f"index says {rec['raw_size'] + 1}")):
        path = resealed(src, tmp_path / f"{name}.apk", edit_index=edit)
        with open_sm90(path) as bundle:
            message = expect_error(S.ARCHIVE_CORRUPT, bundle.verify_images)
            assert message.startswith(f"archive {path}: image 1 ({rec['symbol']}, used by ")
            assert f") {problem} — re-copy or rebuild the bundle" in message


def test_any_arch_of_a_known_vendor_opens_and_an_unknown_vendor_is_refused(toy_archives, tmp_path):
    # The runtime keeps no arch list: an arch it has never heard of opens, by its vendor.
    path = resealed(toy_archives["sm_90"], tmp_path / "a.apk",
                    edit_meta=lambda meta: meta.update(arch="sm_91"))
    with rt.Bundle(path, arch="sm_91", recording=True) as bundle:
        assert bundle.info()["arch"] == "sm_91" and bundle.info()["driver"] == "recording"
    assert expect_error(S.ARCH_MISMATCH, open_sm90, path).startswith(
        f"archive {path} targets sm_91 but sm_90 was asked for")
    path = resealed(toy_archives["sm_90"], tmp_path / "b.apk",
                    edit_meta=lambda meta: meta["target"].update(vendor="vulkan"))
    assert expect_error(S.ARCHIVE_CORRUPT, open_sm90, path) == (
        f"archive {path}: targets sm_90 of vendor 'vulkan', for which this runtime has no driver "
        "(it knows nvidia and amd) — update the runtime")


def test_a_malformed_index_names_the_field(tmp_path):
    kernels = attention_kernels(dtypes=("fp16",), head_dims=(64,))
    del kernels[1]["steps"][0]["grid"]  # bwd/fp16-d64-full, its first step
    path = write_synthetic(tmp_path / "a.apk", kernels)
    kernel_position = sorted(k["name"] for k in kernels).index(kernels[1]["name"])
    assert expect_error(S.ARCHIVE_CORRUPT, open_sm90, path) == (
        f"archive {path}: index.kernels[{kernel_position}].steps[0] has no 'grid' — the archive "
        "and this runtime disagree on format 3.x; rebuild the bundle")
    kernels = attention_kernels(dtypes=("fp16",), head_dims=(64,))
    kernels[0]["steps"][0]["image"] = 5
    from attnpack.archive import Image
    path = write_synthetic(tmp_path / "b.apk", kernels, images=[Image("cubin", "sym0", b"x" * 99)])
    assert "image is out of range" in expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)


@pytest.mark.parametrize("keep", ["4", "10", "30", "meta/2", "index/2", "-1"])
def test_a_truncated_archive_says_so(toy_archives, tmp_path, keep):
    src = toy_archives["sm_90"]
    ar, meta_size = _layout(src)
    raw = src.read_bytes()
    cut = {"4": 4, "10": 10, "30": 30, "meta/2": PREAMBLE.size + meta_size // 2,
           "index/2": ar.meta["index_offset"] + ar.meta["index_size"] // 2,
           "-1": len(raw) - 1}[keep]
    path = tmp_path / "attnpack-0.1.0-sm_90.apk"
    path.write_bytes(raw[:cut])
    message = expect_error(S.ARCHIVE_CORRUPT, open_sm90, path)
    assert message.startswith(f"archive {path}: ")
    assert "truncated?" in message


def test_bytes_after_the_last_image(toy_archives, tmp_path):
    path = tmp_path / "a.apk"
    path.write_bytes(toy_archives["sm_90"].read_bytes() + b"\0" * 3)
    assert expect_error(S.ARCHIVE_CORRUPT, open_sm90, path) == (
        f"archive {path}: has 3 bytes after its last image — re-copy or rebuild the bundle")


def test_an_empty_file_and_a_missing_file(tmp_path):
    empty = tmp_path / "empty.apk"
    empty.write_bytes(b"")
    assert "truncated?" in expect_error(S.ARCHIVE_CORRUPT, open_sm90, empty)
    missing = tmp_path / "missing.apk"
    message = expect_error(S.ARCHIVE_NOT_FOUND, open_sm90, missing)
    assert message == f"archive {missing} cannot be opened (No such file or directory) — check the path"


def test_an_archive_for_another_arch(toy_archives):
    path = toy_archives["sm_90"]
    message = expect_error(S.ARCH_MISMATCH, rt.Bundle, path, arch="gfx950")
    assert message == (f"archive {path} targets sm_90 but gfx950 was asked for — use an "
                       "attnpack-*-gfx950.apk archive")


def _has_cuda_driver() -> bool:
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(_has_cuda_driver(), reason="this machine has a CUDA driver")
def test_no_driver_is_a_status_not_a_crash(toy_archives):
    # No arch given: the runtime asks the device, and there is none here.
    message = expect_error(S.NO_DRIVER, rt.Bundle, toy_archives["sm_90"])
    assert "no CUDA driver found (libcuda.so.1: " in message
    assert "no HIP driver found (libamdhip64.so: " in message
    # Opened for an explicit arch, it loads the driver only when a kernel must run.
    with open_sm90(toy_archives["sm_90"]) as bundle:
        problem = rt.make_problem("fwd", "fp16", B=1, Hq=2, Hkv=2, Sq=16, Sk=16, D=32,
                                  pointers={"q": 1 << 20, "o": 2 << 20})
        assert bundle.select(problem).name == "toy/fwd/fp16-d32-full/BLOCK16_warps1"
        message = expect_error(S.NO_DRIVER, bundle.forward, problem)
        assert message.startswith("no CUDA driver found (libcuda.so.1: ")
        assert expect_error(S.NO_DRIVER, bundle.preload) == message


# ---- finding the archive -----------------------------------------------------------------

def test_the_bundle_folder_is_searched_by_arch(toy_archives, tmp_path, monkeypatch):
    folder = tmp_path / "bundles"
    folder.mkdir()
    for path in toy_archives.values():
        shutil.copy(path, folder / path.name)
    with rt.Bundle(directory=str(folder), arch="gfx950") as bundle:
        assert bundle.info()["path"] == str(folder / "attnpack-0.1.0-gfx950.apk")
    monkeypatch.setenv("ATTNPACK_BUNDLE_DIR", str(folder))
    with rt.Bundle(arch="sm_90") as bundle:
        assert bundle.info()["path"] == str(folder / "attnpack-0.1.0-sm_90.apk")

    message = expect_error(S.ARCHIVE_NOT_FOUND, rt.Bundle, arch="gfx942")
    assert message == (f"no attnpack-*-gfx942.apk in {folder} — build one with `attnpack build "
                       "--arch gfx942`, or set ATTNPACK_BUNDLE_DIR")
    shutil.copy(toy_archives["sm_90"], folder / "attnpack-0.2.0-sm_90.apk")
    message = expect_error(S.ARCHIVE_NOT_FOUND, rt.Bundle, arch="sm_90")
    assert message == (f"several archives for sm_90 in {folder} (attnpack-0.1.0-sm_90.apk, "
                       "attnpack-0.2.0-sm_90.apk) — keep one, or open one by path")
    monkeypatch.setenv("ATTNPACK_BUNDLE_DIR", str(tmp_path / "nowhere"))
    assert expect_error(S.ARCHIVE_NOT_FOUND, rt.Bundle, arch="sm_90") == (
        f"no attnpack-*-sm_90.apk found: the bundle folder {tmp_path / 'nowhere'} cannot be read "
        "— install the bundle beside libattnpack.so or set ATTNPACK_BUNDLE_DIR")


def test_without_a_folder_the_library_looks_beside_itself(monkeypatch):
    monkeypatch.delenv("ATTNPACK_BUNDLE_DIR", raising=False)
    message = expect_error(S.ARCHIVE_NOT_FOUND, rt.Bundle, arch="gfx942")
    # "...the bundle folder DIR cannot be read..." or "no attnpack-*-gfx942.apk in DIR — ..."
    folder = re.search(r"(?:bundle folder | in )(\S+/attnpack)(?: cannot| —)", message).group(1)
    assert Path(folder).resolve() == rt.library_path().resolve().parent / "attnpack"


# ---- threads ------------------------------------------------------------------------------

def test_many_threads_open_and_select_at_once(toy_archives, synthetic_archive):
    expected = {"sm_90": "toy/fwd/fp16-d32-causal/BLOCK16_warps1",
                "synth": "synth/fwd/bf16-d128-full/M128"}
    problems = {"sm_90": rt.make_problem("fwd", "fp16", B=2, Hq=4, Hkv=2, Sq=64, Sk=64, D=32,
                                         causal=True),
                "synth": rt.make_problem("fwd", "bf16", B=2, Hq=4, Hkv=2, Sq=64, Sk=64, D=128)}
    paths = {"sm_90": toy_archives["sm_90"], "synth": synthetic_archive}
    errors, results = [], []
    barrier = threading.Barrier(8)

    def worker(i):
        which = "sm_90" if i % 2 else "synth"
        try:
            barrier.wait()
            for _ in range(25):
                with open_sm90(paths[which]) as bundle:
                    results.append(bundle.select(problems[which]).name == expected[which])
                    try:
                        bundle.select(rt.make_problem("fwd", "fp16", B=1, Hq=6, Hkv=4, Sq=8,
                                                      Sk=8, D=32))
                    except rt.Unsupported as e:  # last-error messages are per thread
                        results.append(e.reason == "Hq 6 is not a multiple of Hkv 4")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    run_threads(worker, 8)
    assert errors == []
    assert len(results) == 8 * 25 * 2 and all(results)
