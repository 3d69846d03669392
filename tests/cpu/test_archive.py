"""Every defect an archive can have is refused with a message naming the file and the fix."""
import shutil
import struct

import pytest
from click.testing import CliRunner

from attnpack.archive import ArchiveError, Image, read_archive, write_archive
from attnpack.archive.format import PREAMBLE
from attnpack.archive.verify import verify_archive
from attnpack.targets import target
from attnpack.cli import main


@pytest.fixture
def sm90(toy_build, tmp_path):
    """A private copy of the toy sm_90 archive, free to damage."""
    path = tmp_path / "attnpack-0.1.0-sm_90.apk"
    shutil.copy(toy_build.out_dir / path.name, path)
    return path


def flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def run_verify(path):
    return CliRunner().invoke(main, ["verify", str(path)])


def test_sound_archive_verifies(sm90):
    result = run_verify(sm90)
    assert result.exit_code == 0
    assert "6 kernels, 3 images verified" in result.output


def test_corrupt_image_byte(sm90):
    ar = read_archive(sm90)
    rec = ar.index["images"][1]
    flip(sm90, ar.meta["images_offset"] + rec["offset"] + rec["size"] // 2)
    ar = read_archive(sm90)  # the structure is still sound: images are checked lazily
    with pytest.raises(ArchiveError, match=r"image 1 \(\w+\) (fails its sha256|does not inflate)"):
        ar.image(1)
    result = run_verify(sm90)
    assert result.exit_code == 1
    assert "attnpack-0.1.0-sm_90.apk: image 1" in result.output


def test_corrupt_index_byte(sm90):
    meta = read_archive(sm90).meta
    flip(sm90, meta["index_offset"] + 10)
    with pytest.raises(ArchiveError, match="attnpack-0.1.0-sm_90.apk: index fails its sha256 check"):
        read_archive(sm90)
    assert run_verify(sm90).exit_code == 1


def test_corrupt_meta_byte(sm90):
    flip(sm90, PREAMBLE.size + 3)
    with pytest.raises(ArchiveError, match="meta map fails its sha256 check"):
        read_archive(sm90)


@pytest.mark.parametrize("keep", [0, 20, PREAMBLE.size + 5, -1])
def test_truncated_file(sm90, keep):
    data = sm90.read_bytes()
    sm90.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    with pytest.raises(ArchiveError, match=r"attnpack-0.1.0-sm_90.apk: .*(shorter than|past the end)"):
        read_archive(sm90)
    result = run_verify(sm90)
    assert result.exit_code == 1 and "truncated?" in result.output


def test_trailing_bytes(sm90):
    sm90.write_bytes(sm90.read_bytes() + b"junk")
    with pytest.raises(ArchiveError, match="has 4 bytes after its last image"):
        read_archive(sm90)


def test_wrong_magic(sm90):
    data = bytearray(sm90.read_bytes())
    data[:8] = b"NOTAPACK"
    sm90.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match="is not an attnpack archive"):
        read_archive(sm90)


def test_newer_format_major(sm90):
    data = bytearray(sm90.read_bytes())
    struct.pack_into("<HH", data, 8, 4, 0)
    sm90.write_bytes(bytes(data))
    with pytest.raises(ArchiveError) as err:
        read_archive(sm90)
    assert str(err.value) == ("attnpack-0.1.0-sm_90.apk: has format 4.0; this attnpack reads 3.x "
                              "— rebuild the bundle or update attnpack")


def _rewrite(src, dst, **changes):
    """Re-pack an archive's content with some fields changed (hashes stay consistent)."""
    ar = read_archive(src)
    images = [Image(r["kind"], r["symbol"], ar.image(i)) for i, r in enumerate(ar.index["images"])]
    args = dict(arch=ar.arch, target=ar.target, bundle_version=ar.meta["bundle_version"],
                compilers=ar.meta["compilers"], images=images, kernels=ar.kernels,
                selection=ar.index["selection"], families=ar.index["families"])
    args.update(changes)
    return write_archive(dst, **args)


def test_unknown_vendor_is_refused_and_unknown_arch_fails_verify(sm90, tmp_path):
    # The reader needs only a vendor it has a driver for; the targets table knows the archs.
    path = _rewrite(sm90, tmp_path / "a" / "attnpack-0.1.0-sm_90.apk",
                    target={**read_archive(sm90).target, "vendor": "intel"})
    with pytest.raises(ArchiveError, match="targets arch 'sm_90' of vendor 'intel'; this "
                                           "attnpack knows vendors nvidia, amd"):
        read_archive(path)
    path = _rewrite(sm90, tmp_path / "b" / "attnpack-0.1.0-sm_75.apk", arch="sm_75")
    assert read_archive(path).arch == "sm_75"
    _, problems, _ = verify_archive(path)
    assert problems == ["attnpack-0.1.0-sm_75.apk: unknown arch 'sm_75' (known: sm_90, gfx942, "
                        "gfx950, sm_80, sm_100); a new target is a row in "
                        "python/attnpack/targets.py"]


@pytest.mark.parametrize("field,value,problem", [
    ("compilers", 7, "`compilers` is not a list of compiler names"),
    ("provenance", "MIT", "provenance is not a map"),
])
def test_malformed_family_policy_is_a_problem_not_a_crash(sm90, tmp_path, field, value, problem):
    # found by the runtime's fuzzer: a mutant whose family policy had an int for `compilers`
    # passed the C++ reader and made verify raise TypeError
    families = read_archive(sm90).index["families"]
    name = next(iter(families))
    bad = {**families, name: {**families[name], field: value}}
    path = _rewrite(sm90, tmp_path / "attnpack-0.1.0-sm_90.apk", families=bad)
    _, problems, _ = verify_archive(path)
    assert problems == [f"attnpack-0.1.0-sm_90.apk: families: {name}: {problem}"]


def test_image_for_another_arch(toy_build, tmp_path):
    # gfx950 code objects in an archive that claims gfx942: the ELF check catches it.
    path = _rewrite(toy_build.out_dir / "attnpack-0.1.0-gfx950.apk",
                    tmp_path / "attnpack-0.1.0-gfx942.apk", arch="gfx942",
                    target=target("gfx942").meta())
    _, problems, _ = verify_archive(path)
    assert problems and all("ELF is built for gfx950, the archive targets gfx942" in p
                            for p in problems)


def test_launch_spec_disagreeing_with_the_elf(sm90, tmp_path):
    ar = read_archive(sm90)
    kernels = ar.kernels
    kernels[0]["steps"][0]["params"].insert(0, ["q", "ptr", 16, 0])
    kernels[0]["steps"][0]["kernarg_size"] += 8
    path = _rewrite(sm90, tmp_path / "x" / sm90.name, kernels=kernels)
    _, problems, _ = verify_archive(path)
    assert any("disagree with the launch spec" in p for p in problems)
    assert any("ELF kernarg size" in p for p in problems)


def test_empty_selection_and_missing_kernel_are_refused_and_nothing_is_written(sm90):
    before = sm90.read_bytes()
    with pytest.raises(ValueError, match="empty variant selection"):
        _rewrite(sm90, sm90, kernels=[])
    bad_sel = [{"op": "fwd", "dtype": "fp16", "head_dim": 32, "causal": False, "kernel": "nope"}]
    with pytest.raises(ValueError, match="selection names kernel 'nope'"):
        _rewrite(sm90, sm90, selection=bad_sel)
    assert sm90.read_bytes() == before
    assert sorted(p.name for p in sm90.parent.iterdir()) == [sm90.name]  # no temp files left


def test_inspect_json(sm90):
    import json
    result = CliRunner().invoke(main, ["inspect", str(sm90), "--json"])
    assert result.exit_code == 0
    summary = json.loads(result.output)
    assert summary["arch"] == "sm_90" and summary["format"] == "3.0"
    assert summary["target"] == {"vendor": "nvidia", "image_kind": "cubin", "wave_size": 32,
                                 "shared_bytes": 232448, "gpus": "H100/H200",
                                 "verified": "run on the H200"}
    assert len(summary["kernels"]) == 6 and summary["images"] == 3
    assert summary["compression_ratio"] > 1.0
    text = CliRunner().invoke(main, ["inspect", str(sm90)]).output
    assert "6 kernels, 3 images" in text
    assert "target sm_90 (H100/H200, nvidia): run on the H200" in text
    assert "family toy: triton backend, default priority 100, MIT licence" in text


def test_cli_reports_unreadable_archive(tmp_path):
    bad = tmp_path / "bad.apk"
    bad.write_bytes(b"x" * 100)
    result = CliRunner().invoke(main, ["inspect", str(bad)])
    assert result.exit_code == 1 and "bad.apk: is not an attnpack archive" in result.output


def test_selection_and_tuning_entries_must_serve_their_key(sm90, tmp_path):
    ar = read_archive(sm90)
    selection = ar.index["selection"]
    fwd_full = next(s for s in selection if s["op"] == "fwd" and not s["causal"])
    fwd_full["kernel"] = "toy/fwd/fp16-d32-causal/BLOCK16_warps1"   # a causal kernel
    tuning = {"buckets": {"seqlen": [128], "gqa": [1]}, "provenance": {},
              "entries": [{"op": "bwd", "dtype": "fp16", "head_dim": 32, "causal": False,
                           "gqa": 1, "sq": 128, "sk": 128,
                           "kernel": "toy/fwd/fp16-d32-full/BLOCK16_warps1"}]}  # a fwd kernel
    path = _rewrite(sm90, tmp_path / "x" / sm90.name, selection=selection, tuning=tuning)
    _, problems, _ = verify_archive(path)
    assert problems == [
        "attnpack-0.1.0-sm_90.apk: selection: entry fwd fp16 d32 full points at "
        "toy/fwd/fp16-d32-causal/BLOCK16_warps1, whose key differs",
        "attnpack-0.1.0-sm_90.apk: tuning: entry bwd fp16 d32 full gqa1 sq128 sk128 points at "
        "toy/fwd/fp16-d32-full/BLOCK16_warps1, whose key differs"]


def test_build_cli_builds_from_another_kernels_folder(toy_build, tmp_path):
    """`attnpack build --kernels DIR` compiles DIR's families, the README's A/B recipe: the same
    kernel names from a copy whose kernel source differs give different images. A folder that
    is not there is refused by name before anything compiles."""
    kernels = tmp_path / "aot" / "kernels"
    shutil.copytree(toy_build.kernels_root, kernels)
    source = kernels / "toy" / "kernels.py"
    text = source.read_text()
    assert text.count("* sm_scale)") == 1
    source.write_text(text.replace("* sm_scale)", "* (sm_scale * 2.0))"))
    out = tmp_path / "out"
    args = ["build", "--arch", "sm_90", "--all", "--op", "fwd", "-j", "2",
            "--cache-dir", str(tmp_path / "cache"), "-o", str(out)]
    result = CliRunner().invoke(main, [*args, "--kernels", str(kernels)])
    assert result.exit_code == 0, result.output
    copy = read_archive(out / "attnpack-0.1.0-sm_90.apk")
    shipped = read_archive(toy_build.out_dir / "attnpack-0.1.0-sm_90.apk")
    names = [k["name"] for k in copy.kernels]
    assert names and set(names) <= {k["name"] for k in shipped.kernels}
    for name in names:
        [mine] = copy.kernel(name)["steps"]
        [theirs] = shipped.kernel(name)["steps"]
        assert copy.image(mine["image"]) != shipped.image(theirs["image"]), name

    missing = CliRunner().invoke(main, [*args, "--kernels", str(tmp_path / "no-such-kernels")])
    assert missing.exit_code == 2 and "no-such-kernels" in missing.output
