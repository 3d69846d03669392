"""The builder on a toy family: archives, verify, determinism, cache, and failures by name; the
CMake rule's digest of the archives' inputs."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from attnpack.archive import read_archive
from attnpack.archive.verify import verify_archive
from attnpack.builder import BuildError
from attnpack.builder.compile import CompileFailure
from attnpack.family import load_families
from attnpack.keys import KernelName
from attnpack.tune.db import seed_untuned
from attnpack.tune.runner import standard_keys

from conftest import FIXTURES, build


def test_build_writes_one_verified_archive_per_arch(toy_build):
    names = sorted(p.name for p in toy_build.paths)
    assert names == ["attnpack-0.1.0-gfx950.apk", "attnpack-0.1.0-sm_90.apk"]
    for path in toy_build.paths:
        ar, problems, warnings = verify_archive(path)
        assert problems == [] and warnings == []
        assert ar.meta["compilers"]["triton"] == "3.6.0"
    sm90 = read_archive(toy_build.out_dir / "attnpack-0.1.0-sm_90.apk")
    gfx = read_archive(toy_build.out_dir / "attnpack-0.1.0-gfx950.apk")
    # toy: fwd has 2 configs on CUDA, 1 on AMD (per-arch exclusion); bwd 1; causal on/off.
    assert len(sm90.kernels) == 6 and len(gfx.kernels) == 4
    assert {i["kind"] for i in sm90.index["images"]} == {"cubin"}
    assert {i["kind"] for i in gfx.index["images"]} == {"hsaco"}
    # identical images are stored once: causal on/off compile to the same toy kernel
    assert len(sm90.index["images"]) == 3
    assert [s["kernel"] for s in sm90.index["selection"]] == [
        "toy/bwd/fp16-d32-full/BLOCK16_warps1", "toy/bwd/fp16-d32-causal/BLOCK16_warps1",
        "toy/fwd/fp16-d32-full/BLOCK16_warps1", "toy/fwd/fp16-d32-causal/BLOCK16_warps1"]


def test_launch_spec_of_a_step(toy_build):
    ar = read_archive(toy_build.out_dir / "attnpack-0.1.0-sm_90.apk")
    k = ar.kernel("toy/bwd/fp16-d32-full/BLOCK16_warps1")
    assert k["workspace"] == [{"name": "delta", "shape": ["B", "Hq", "Sq"]}]
    s = k["steps"][0]
    assert s["name"] == "bwd_rowsum" and s["symbol"] == "row_sums"
    # [word, type, divisibility, offset], the offsets as the cubin's .nv.info declares them
    assert s["params"] == [["do", "ptr", 16, 0], ["delta", "ptr", 16, 8],
                           ["do_stride_b", "i64", 1, 16], ["do_stride_h", "i64", 1, 24],
                           ["do_stride_s", "i64", 1, 32], ["Hq", "i32", 1, 40], ["Sq", "i32", 1, 44],
                           ["global_scratch", "ptr", 1, 48], ["profile_scratch", "ptr", 1, 56]]
    assert s["grid"] == [[["Sq", 16]], [["B", 1], ["Hq", 1]], []]
    assert s["block"] == [32, 1, 1] and s["cluster"] == [1, 1, 1]
    assert s["kernarg_size"] == 8 + 8 + 3 * 8 + 4 + 4 + 8 + 8
    fwd = ar.kernel("toy/fwd/fp16-d32-full/BLOCK16_warps1")["steps"][0]
    assert ["q_stride_s", "i64", 16] in [p[:3] for p in fwd["params"]]
    assert k["deterministic"] is False and ar.index["families"]["toy"] == {
        "backend": "triton", "compilers": ["triton"], "priority": 100,
        "provenance": {"license": "MIT", "origin": "attnpack test fixture"}}


def test_rebuild_is_byte_identical_and_path_independent(toy_build, tmp_path):
    # No cache, kernels copied to another folder: nothing host-specific may leak in.
    moved = tmp_path / "elsewhere" / "kernels"
    shutil.copytree(FIXTURES / "kernels", moved)
    again = build(tmp_path / "out", moved, None, all_variants=True)
    assert again.stats.compiled == 7 and again.stats.cache_hits == 0
    for path in toy_build.paths:
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes()


def test_rebuild_hits_the_cache(toy_build, tmp_path):
    again = build(tmp_path / "out", FIXTURES / "kernels", toy_build.cache_dir, all_variants=True)
    assert again.stats.compiled == 0
    assert again.stats.cache_hits == 7


def test_changed_source_recompiles_only_what_changed(tmp_path):
    kernels = tmp_path / "kernels"
    shutil.copytree(FIXTURES / "kernels", kernels)
    first = build(tmp_path / "a", kernels, tmp_path / "cache", archs=("sm_90",))
    assert first.stats.compiled == 3
    src = kernels / "toy" / "kernels.py"
    src.write_text(src.read_text().replace("tl.sum(x.to(tl.float32), axis=1)",
                                           "tl.sum(x.to(tl.float32), axis=1) * 1.0"))
    import sys
    for name in [m for m in sys.modules if m.startswith("attnpack_kernels_toy_")]:
        del sys.modules[name]  # re-import the edited source
    second = build(tmp_path / "b", kernels, tmp_path / "cache", archs=("sm_90",))
    assert (second.stats.compiled, second.stats.cache_hits) == (1, 2)


def test_compile_error_fails_the_build_and_names_the_kernel(tmp_path):
    with pytest.raises(CompileFailure) as err:
        build(tmp_path, FIXTURES / "broken", None, archs=("sm_90",))
    message = str(err.value)
    assert "sm_90:bad/fwd/fp16-d64-full/BLOCK16:fwd" in message
    assert "dot" in message  # the compiler's own complaint is carried through
    assert list(tmp_path.iterdir()) == []  # no archive, no temp file


def test_timeout_fails_the_build_and_names_the_kernel(tmp_path, monkeypatch):
    import time
    from attnpack.builder import compile as compile_mod
    monkeypatch.setattr(compile_mod, "_compile", lambda job: time.sleep(60))  # a stuck compiler
    start = time.monotonic()
    with pytest.raises(CompileFailure, match=r"sm_90:toy/\S+ timed out after 1 s|"
                                             r"sm_90:toy/\S+:\n    timed out after 1 s"):
        build(tmp_path, FIXTURES / "kernels", None, archs=("sm_90",), timeout=1.0)
    assert time.monotonic() - start < 20  # the stuck workers were killed, not waited for
    assert not any(tmp_path.glob("*.apk"))


def test_unknown_arch_and_empty_selection_are_errors(tmp_path):
    with pytest.raises(BuildError, match="unknown arch 'sm_75' .known: sm_90, gfx942, gfx950, "
                                         "sm_80, sm_100.; a new target is a row in"):
        build(tmp_path, FIXTURES / "kernels", None, archs=("sm_75",))
    with pytest.raises(BuildError, match="empty variant selection for sm_90"):
        build(tmp_path, FIXTURES / "kernels", None, archs=("sm_90",), head_dims=(999,))
    with pytest.raises(BuildError, match="unknown family nope"):
        build(tmp_path, FIXTURES / "kernels", None, archs=("sm_90",), families=("nope",))


def _second_toy(tmp_path, priority: str) -> Path:
    """The toy family plus a copy named toy2 (same functional keys) at `priority`."""
    root = tmp_path / "kernels"
    shutil.copytree(FIXTURES / "kernels", root)
    shutil.copytree(root / "toy", root / "toy2")
    fam = root / "toy2" / "family.py"
    fam.write_text(fam.read_text().replace('name="toy",', f'name="toy2", priority={priority},'))
    return root


def test_lower_priority_family_serves_a_shared_key(tmp_path):
    # toy2 sorts after toy by name; its lower priority, not the name order, makes it the
    # default, for the builder and for `db seed` alike (one rule: family.default_variants).
    root = _second_toy(tmp_path, "50")
    req = build(tmp_path / "out", root, None, archs=("sm_90",))
    ar = read_archive(req.paths[0])
    assert {KernelName.parse(s["kernel"]).family for s in ar.index["selection"]} == {"toy2"}
    keys = standard_keys(dtypes=("fp16",), head_dims=(32,))
    seeded = seed_untuned("sm_90", keys, load_families(root))
    assert len(seeded.entries) == len(keys) > 0
    assert {e["family"] for e in seeded.entries.values()} == {"toy2"}


def test_equal_priority_defaults_are_a_build_error(tmp_path):
    with pytest.raises(BuildError, match=r"toy/fwd/fp16-d32-full/BLOCK16_warps1 and "
                                         r"toy2/fwd/fp16-d32-full/BLOCK16_warps1 are both the "
                                         r"default for fwd fp16-d32-full at priority 100"):
        build(tmp_path / "out", _second_toy(tmp_path, "100"), None, archs=("sm_90",))


def test_a_family_that_serves_some_buckets_is_seeded_there_and_never_the_catch_all(tmp_path):
    # toy2 (priority 50) serves only Sq >= 1024: the per-functional default stays toy, and the
    # seeded database gives toy2 exactly the buckets it declares it serves.
    root = _second_toy(tmp_path, "50")
    fam = root / "toy2" / "family.py"
    fam.write_text(fam.read_text().replace(
        'name="toy2",', 'name="toy2", serves=lambda arch, key: None if key.sq >= 1024 else '
                        '"needs Sq >= 1024 (256-row tiles)",'))
    req = build(tmp_path / "out", root, None, archs=("sm_90",))
    ar = read_archive(req.paths[0])
    assert {KernelName.parse(s["kernel"]).family for s in ar.index["selection"]} == {"toy"}
    keys = standard_keys(dtypes=("fp16",), head_dims=(32,))
    seeded = seed_untuned("sm_90", keys, load_families(root))
    assert len(seeded.entries) == len(keys)
    for key, entry in seeded.entries.items():
        assert entry["family"] == ("toy2" if key.sq >= 1024 else "toy"), key.text


def _digest(source, stamp):
    script = Path(__file__).resolve().parents[2] / "cmake" / "inputs_digest.cmake"
    subprocess.run(["cmake", f"-DSOURCE_DIR={source}", f"-DSTAMP={stamp}", "-P", str(script)],
                   check=True, capture_output=True)
    return stamp.read_text(), stamp.stat().st_mtime_ns


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
def test_the_archives_stamp_follows_content_not_file_times(tmp_path):
    """cmake/inputs_digest.cmake, which the CMake bundle rule depends on: the stamp is left
    alone (same time) while the inputs' content is the same, and rewritten when a database's
    content changes even though its file time went back (a copy that restores an older file)."""
    db = tmp_path / "aot" / "tuning_db" / "sm_90.jsonl"
    db.parent.mkdir(parents=True)
    db.write_text('{"arch": "sm_90"}\n')
    stamp = tmp_path / "stamp"
    first, t1 = _digest(tmp_path, stamp)
    os.utime(db, ns=(0, 0))  # only the time moves
    again, t2 = _digest(tmp_path, stamp)
    assert (again, t2) == (first, t1)
    db.write_text('{"arch": "sm_90", "provenance": {}}\n')
    os.utime(db, ns=(0, 0))  # new content, an old time
    changed, _ = _digest(tmp_path, stamp)
    assert changed != first and len(changed) == 64
    # the kernel sources and the builder are inputs too (cmake/archive_inputs.cmake), a file
    # outside those globs is not
    seen = {changed}
    for rel in ("aot/kernels/k/family.py", "python/attnpack/cli.py", "notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
        seen.add(_digest(tmp_path, stamp)[0])
    assert len(seen) == 3
