"""Archive format 3.0's compression, read alike by the Python reader and the runtime: the index
stored as one zstd frame of the size the meta says, and the images compressed with a zstd
dictionary trained on them, kept only where it makes the archive smaller. What a writer or a
copy can get wrong there is refused by name."""
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import zstandard

from attnpack import runtime as rt
from attnpack.archive import ArchiveError, Image, read_archive
from attnpack.archive.format import ZSTD_LEVEL
from attnpack.archive.inspect import render, summarize
from test_runtime_fixtures import (FWD_WORDS, PER_Q_TILE, expect_error, kernel, resealed, step,
                                   write_synthetic)

S = rt.Status
N_IMAGES = 24


def structured_images(n=N_IMAGES, seed=0) -> list[bytes]:
    """Stand-in code objects that share most of their bytes, as one build's images do (an ELF
    layout, a prologue, the same helper code), each with some bytes of its own."""
    rng = random.Random(seed)
    shared = [rng.randbytes(700) for _ in range(6)]
    return [b"".join(shared[(i + j) % 6] + rng.randbytes(120) for j in range(6)) for i in range(n)]


def archive_of(path, raws):
    kernels = [kernel("synth", "fwd", "fp16", 64, False, [step("fwd", i, FWD_WORDS, PER_Q_TILE)],
                      config=f"c{i}") for i in range(len(raws))]
    selection = [{"op": "fwd", **kernels[0]["key"], "kernel": kernels[0]["name"]}]
    images = [Image("cubin", f"sym{i}", raw) for i, raw in enumerate(raws)]
    return write_synthetic(path, kernels, images=images, selection=selection), kernels


def plain_size(raws) -> int:
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False)
    return sum(len(compressor.compress(raw)) for raw in raws)


@pytest.fixture
def dictionary_archive(tmp_path):
    raws = structured_images()
    path, kernels = archive_of(tmp_path / "d-sm_90.apk", raws)
    return path, kernels, raws


def test_a_dictionary_shared_by_the_images_is_kept_where_it_makes_them_smaller(dictionary_archive):
    path, kernels, raws = dictionary_archive
    ar = read_archive(path)
    assert ar.format_version == (3, 0) and ar.dictionary
    frames = [ar.compressed_image(i) for i in range(len(raws))]
    dictionary_id = zstandard.ZstdCompressionDict(ar.dictionary).dict_id()
    assert {zstandard.get_frame_parameters(f).dict_id for f in frames} == {dictionary_id}
    stored = sum(map(len, frames)) + len(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(
        ar.dictionary))
    assert stored < plain_size(raws)
    # both readers give back every image's bytes
    assert [ar.image(i) for i in range(len(raws))] == raws
    with rt.Bundle(path, arch="sm_90", recording=True) as bundle:
        bundle.verify_images()
        for k, raw in zip(kernels, raws):
            assert bundle.kernel_image(k["name"], 0) == raw
    line = render(summarize(ar)).splitlines()[1]
    assert f"with a {len(ar.dictionary) / 1024:.0f} KiB dictionary" in line


def test_threads_read_images_through_one_archive_object(dictionary_archive):
    """Each thread inflates with its own decompressor (one zstd decompressor must not serve
    several threads); every image comes back whole in every thread."""
    path, _, raws = dictionary_archive
    ar = read_archive(path)
    order = list(range(len(raws))) * 8
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(ar.image, order))
    assert got == [raws[i] for i in order]
    assert len({id(d) for d in decompressors_of_live_threads(ar, 3)}) == 3


def decompressors_of_live_threads(ar, n):
    """The decompressor each of n threads gets, all of them alive at once."""
    barrier, out = threading.Barrier(n), []

    def take():
        out.append(ar._decompressor)
        barrier.wait()
    threads = [threading.Thread(target=take) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_images_too_few_to_train_on_are_plain_frames(tmp_path):
    raws = structured_images(3)
    path, kernels = archive_of(tmp_path / "p-sm_90.apk", raws)
    ar = read_archive(path)
    assert ar.dictionary == b"" and "dictionary" not in ar.index
    assert all(zstandard.get_frame_parameters(ar.compressed_image(i)).dict_id == 0
               for i in range(3))
    with rt.Bundle(path, arch="sm_90", recording=True) as bundle:
        assert bundle.kernel_image(kernels[2]["name"], 0) == raws[2]
    assert "dictionary" not in render(summarize(ar)).splitlines()[1]


def test_the_same_images_give_the_same_bytes(tmp_path):
    raws = structured_images()
    first, _ = archive_of(tmp_path / "a" / "x-sm_90.apk", raws)
    second, _ = archive_of(tmp_path / "b" / "x-sm_90.apk", raws)
    assert first.read_bytes() == second.read_bytes()


@pytest.mark.parametrize("delta", [-1, 1])
def test_an_index_of_another_size_than_the_meta_says(dictionary_archive, tmp_path, delta):
    src, _, _ = dictionary_archive
    path = resealed(src, tmp_path / "a-sm_90.apk",
                    edit_meta=lambda meta: meta.update(index_raw_size=meta["index_raw_size"] + delta))
    claimed = read_archive(src).meta["index_raw_size"] + delta
    with pytest.raises(ArchiveError, match=f"index is not a zstd frame of the {claimed} bytes the "
                                           r"meta says \(corrupt index\)"):
        read_archive(path)
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90") == (
        f"archive {path}: index is not a zstd frame of the {claimed} bytes the meta says (corrupt "
        "index) — re-copy or rebuild the bundle")


def test_frames_that_name_another_dictionary_than_the_index_has(dictionary_archive, tmp_path):
    src, kernels, _ = dictionary_archive
    ar = read_archive(src)
    ours = zstandard.ZstdCompressionDict(ar.dictionary).dict_id()
    other = zstandard.train_dictionary(16 * 1024, structured_images(seed=1)).as_bytes()
    theirs = zstandard.ZstdCompressionDict(other).dict_id()
    swapped = resealed(src, tmp_path / "swapped-sm_90.apk",
                       edit_index=lambda index: index.update(dictionary=other))
    dropped = resealed(src, tmp_path / "dropped-sm_90.apk",
                       edit_index=lambda index: index.pop("dictionary"))
    for path, has in ((swapped, f"dictionary {theirs}"), (dropped, "none")):
        with pytest.raises(ArchiveError) as error:
            read_archive(path).image(0)
        assert str(error.value) == (f"{path.name}: image 0 (sym0) was compressed with zstd "
                                    f"dictionary {ours}, the index has {has} — rebuild it with "
                                    "`attnpack build`")
        with rt.Bundle(path, arch="sm_90", recording=True) as bundle:  # open checks no image
            message = expect_error(S.ARCHIVE_CORRUPT, bundle.kernel_image, kernels[0]["name"], 0)
        assert message == (f"archive {path}: image 0 (sym0, used by {kernels[0]['name']}) was "
                           f"compressed with zstd dictionary {ours}, the index has {has} — "
                           "re-copy or rebuild the bundle")


def test_a_dictionary_that_does_not_parse(dictionary_archive, tmp_path):
    src, _, _ = dictionary_archive
    magic = (0xEC30A437).to_bytes(4, "little")  # a zstd dictionary's, then no entropy tables
    path = resealed(src, tmp_path / "bad-sm_90.apk",
                    edit_index=lambda index: index.update(dictionary=magic + b"\0" * 200))
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90") == (
        f"archive {path}: index.dictionary is not a zstd dictionary — the archive and this "
        "runtime disagree on format 3.x; rebuild the bundle")
    # the Python reader parses it when it first inflates an image
    with pytest.raises(ArchiveError, match=r"index.dictionary is not a zstd dictionary \(could not "
                                           r"create decompression dict\); rebuild the bundle"):
        read_archive(path).image(0)
