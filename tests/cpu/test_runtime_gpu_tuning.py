"""The runtime's per-GPU tuning entries (format 2.7, the tuning map's `by_gpu`).

An H100 and an H200 are both sm_90 and do not rank the kernels alike, so the tuning map may
carry entries timed on one GPU model, each list named by the device's name as its driver
reports it. The recording driver pretends to be the GPU $ATTNPACK_RECORDING_GPU_NAME names
(read when a bundle is opened). These tests pin, on synthetic archives:
- on a device of a list's name, that list's entry for the problem's exact bucketed key serves
  (select, explain and the launch), in deterministic mode through its deterministic_kernel;
- on any other device, and with the variable unset, the arch-wide entries serve as before;
- a key the GPU's list lacks goes by the arch-wide rule: a GPU's entries are never the
  nearest entry of another key;
- the reader refuses a by_gpu list that breaks the format's rules, naming the GPU;
- preload of the whole table loads the device's own list's kernels, no other list's;
- attnpack_bundle_info (version 3) counts each list's entries, whatever the device.
"""

import pytest

from attnpack import runtime as rt
from test_runtime_fixtures import (BWD_PRE_WORDS, BWD_WORDS, FWD_WORDS, PER_KV_TILE,  # noqa: F401
                                   PER_Q_TILE, expect_error, kernel, resealed, step,
                                   write_synthetic)

S = rt.Status
GPU_NAME = "ATTNPACK_RECORDING_GPU_NAME"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def fwd(config: str, causal: bool = False, image: int = 0) -> dict:
    return kernel("synth", "fwd", "fp16", 64, causal, [step("fwd", image, FWD_WORDS, PER_Q_TILE)],
                  config=config)


def bwd(config: str, deterministic: bool) -> dict:
    k = kernel("synth", "bwd", "bf16", 64, False, [
        step("bwd_preprocess", 0, BWD_PRE_WORDS, PER_Q_TILE, workspace=["delta"]),
        step("bwd", 0, BWD_WORDS, PER_KV_TILE, workspace=["delta"])],
        config=config, workspace=["delta"])
    return {**k, "deterministic": deterministic}


# fwd fp16 d64: the default, the arch-wide entries' kernel, the H100's (image 1), the H200's
# (image 2); causal: the default and the H100's. bwd bf16 d64: the default (deterministic), a
# fast kernel that is not deterministic and a deterministic one.
DEFAULT, ARCH, ON_H100, ON_H200 = (f"synth/fwd/fp16-d64-full/{c}" for c in ("M128", "arch", "h100", "h200"))
CAUSAL_DEFAULT, CAUSAL_H100 = "synth/fwd/fp16-d64-causal/M128", "synth/fwd/fp16-d64-causal/h100"
BWD_DEFAULT, FAST, DET = (f"synth/bwd/bf16-d64-full/{c}" for c in ("M128", "fast", "det"))
KERNELS = [fwd("M128"), fwd("arch"), fwd("h100", image=1), fwd("h200", image=2),
           fwd("M128", causal=True), fwd("h100", causal=True, image=1),
           bwd("M128", True), bwd("fast", False), bwd("det", True)]
SELECTION = [{"op": "fwd", "dtype": "fp16", "head_dim": 64, "causal": False, "kernel": DEFAULT},
             {"op": "fwd", "dtype": "fp16", "head_dim": 64, "causal": True, "kernel": CAUSAL_DEFAULT},
             {"op": "bwd", "dtype": "bf16", "head_dim": 64, "causal": False, "kernel": BWD_DEFAULT}]
BUCKETS = {"seqlen": [128, 1024, 4096], "gqa": [1, 4], "streams": [16, 64]}


def entry(kernel_name: str, sq: int, sk: int, *, gqa=1, streams=16, **alternate) -> dict:
    """A tuning entry for the key of `kernel_name` ("synth/<op>/<dtype>-d64-<mask>/<config>")."""
    _, op, tag, _ = kernel_name.split("/")
    return {"op": op, "dtype": tag.split("-")[0], "head_dim": 64, "causal": tag.endswith("causal"),
            "gqa": gqa, "sq": sq, "sk": sk, "streams": streams, "kernel": kernel_name, **alternate}


def tuning() -> dict:
    """Arch-wide entries, and a list each for the H100 and the H200 (sorted by name)."""
    return {"buckets": BUCKETS, "provenance": {"gpu": "NVIDIA H200", "status": "tuned"},
            "entries": [entry(ARCH, 128, 128), entry(ARCH, 1024, 1024),
                        entry(FAST, 1024, 1024), entry(DET, 4096, 4096)],
            "by_gpu": [
                {"gpu": H100, "provenance": {"gpu": H100, "status": "tuned"},
                 "entries": [entry(ON_H100, 1024, 1024), entry(ON_H100, 4096, 4096),
                             entry(CAUSAL_H100, 1024, 1024),
                             entry(FAST, 1024, 1024, deterministic_kernel=DET),
                             entry(FAST, 4096, 4096)]},
                {"gpu": H200, "provenance": {"gpu": H200, "status": "tuned"},
                 "entries": [entry(ON_H200, 1024, 1024)]}]}


def archive(tmp_path, tuning_map=None, name="a"):
    return write_synthetic(tmp_path / f"{name}-sm_90.apk", KERNELS, selection=SELECTION,
                           tuning=tuning_map or tuning())


def fwd_problem(Sq=1000, Sk=1000, Hq=4, Hkv=4, causal=False, launchable=False):
    """B*Hkv = 4: streams class 16. `launchable`: with (pretend) tensor addresses."""
    pointers = {t: 0x1000000 * (i + 1) for i, t in enumerate(("q", "k", "v", "o", "lse"))}
    return rt.make_problem("fwd", "fp16", B=1, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=64, causal=causal,
                           pointers=pointers if launchable else None)


def bwd_problem(S_=1000, deterministic=False):
    return rt.make_problem("bwd", "bf16", B=2, Hq=2, Hkv=2, Sq=S_, Sk=S_, D=64,
                           deterministic=deterministic)


def open_on(path, gpu, monkeypatch):
    """A recording bundle on a pretend device named `gpu` (None: the variable unset)."""
    if gpu is None:
        monkeypatch.delenv(GPU_NAME, raising=False)
    else:
        monkeypatch.setenv(GPU_NAME, gpu)
    return rt.Bundle(path, recording=True)


def lines(text: str, *starts: str) -> list[str]:
    """The lines of an explain text that start with one of `starts`, unindented."""
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith(starts)]


# ---- selection ----------------------------------------------------------------------------


def test_a_gpus_exact_key_serves_its_kernel_on_that_gpu(tmp_path, monkeypatch):
    path = archive(tmp_path)
    with open_on(path, H100, monkeypatch) as bundle:
        prob = fwd_problem()
        assert bundle.select(prob).name == ON_H100
        assert lines(bundle.explain(prob), "tuning key", "tuned", "served by") == [
            f"tuning key: fwd fp16 d64 full gqa1 sq1024 sk1024 streams16: tuned entry for {H100}",
            f"tuned {ON_H100}: chosen",
            f"served by: tuned entry for {H100}"]
        # the launch goes the same way: the H100's kernel is the one called
        bundle.forward(fwd_problem(launchable=True))
        assert bundle.stats()["calls"] == {ON_H100: 1}
        # a key only the GPU's list has (no arch-wide entry for it at all)
        assert bundle.select(fwd_problem(Sq=4000, Sk=4000)).name == ON_H100
        # a functional key with no arch-wide entries
        assert bundle.select(fwd_problem(causal=True)).name == CAUSAL_H100
    with open_on(path, H200, monkeypatch) as bundle:
        assert bundle.select(fwd_problem()).name == ON_H200
        assert f"served by: tuned entry for {H200}\n" in bundle.explain(fwd_problem())


@pytest.mark.parametrize("gpu", [None, "", "NVIDIA A100-SXM4-80GB", "NVIDIA H100", H100 + " "])
def test_on_another_device_the_arch_wide_entries_serve(tmp_path, monkeypatch, gpu):
    # names match exactly: a prefix, or the name with a trailing space, is another GPU
    path = archive(tmp_path)
    with open_on(path, gpu, monkeypatch) as bundle:
        prob = fwd_problem()
        assert bundle.select(prob).name == ARCH
        assert lines(bundle.explain(prob), "tuning key", "served by") == [
            "tuning key: fwd fp16 d64 full gqa1 sq1024 sk1024 streams16: tuned entry",
            "served by: tuned entry"]
        bundle.forward(fwd_problem(launchable=True))
        assert bundle.stats()["calls"] == {ARCH: 1}
        # the H100's other keys are not this device's: the nearest arch-wide entry, the default
        assert bundle.select(fwd_problem(Sq=4000, Sk=4000)).name == ARCH
        assert "served by: nearest tuned entry\n" in bundle.explain(fwd_problem(Sq=4000, Sk=4000))
        assert bundle.select(fwd_problem(causal=True)).name == CAUSAL_DEFAULT


def test_a_key_the_gpu_lacks_takes_the_arch_wide_entry(tmp_path, monkeypatch):
    with open_on(archive(tmp_path), H100, monkeypatch) as bundle:
        # an arch-wide entry of the exact key serves when the H100's list lacks it
        prob = fwd_problem(Sq=100, Sk=100)
        assert bundle.select(prob).name == ARCH
        assert lines(bundle.explain(prob), "tuning key", "served by") == [
            "tuning key: fwd fp16 d64 full gqa1 sq128 sk128 streams16: tuned entry",
            "served by: tuned entry"]


def test_a_gpus_entries_are_never_the_nearest_entry(tmp_path, monkeypatch):
    with open_on(archive(tmp_path), H100, monkeypatch) as bundle:
        # gqa 4, sq 4096, sk 4096: one bucket step from the H100's entry gqa1 sq4096 sk4096,
        # three from the arch-wide gqa1 sq1024 sk1024, which serves
        prob = fwd_problem(Sq=4000, Sk=4000, Hq=16, Hkv=4)
        assert bundle.select(prob).name == ARCH
        assert lines(bundle.explain(prob), "tuning key", "served by") == [
            "tuning key: fwd fp16 d64 full gqa4 sq4096 sk4096 streams16: no tuned entry; "
            "nearest tuned entry gqa1 sq1024 sk1024 streams16",
            "served by: nearest tuned entry"]
        # the causal functional key has only the H100's entry: off its key, the default serves
        near = fwd_problem(Sq=1000, Sk=4000, causal=True)
        assert bundle.select(near).name == CAUSAL_DEFAULT
        assert lines(bundle.explain(near), "tuning key", "served by") == [
            "tuning key: fwd fp16 d64 causal gqa1 sq1024 sk4096 streams16: no tuned entry",
            "served by: default"]


def test_deterministic_mode_takes_the_gpu_entrys_deterministic_kernel(tmp_path, monkeypatch):
    path = archive(tmp_path)
    with open_on(path, H100, monkeypatch) as bundle:
        assert bundle.select(bwd_problem()).name == FAST
        chosen = bundle.select(bwd_problem(deterministic=True))
        assert (chosen.name, chosen.deterministic) == (DET, True)
        assert lines(bundle.explain(bwd_problem(deterministic=True)), "tuned", "served by") == [
            f"tuned {FAST}: skipped, not deterministic (deterministic mode); its entry's "
            "deterministic kernel instead",
            f"tuned {DET}: chosen",
            f"served by: tuned entry for {H100}"]
        # the H100's entry for sq4096 has no deterministic kernel: the default serves, not the
        # arch-wide entry of that key (whose kernel is deterministic)
        assert bundle.select(bwd_problem(4000)).name == FAST
        assert bundle.select(bwd_problem(4000, deterministic=True)).name == BWD_DEFAULT
        assert lines(bundle.explain(bwd_problem(4000, deterministic=True)), "tuned", "served by") == [
            f"tuned {FAST}: skipped, not deterministic (deterministic mode); its entry has no "
            "deterministic kernel",
            "served by: default"]
    with open_on(path, None, monkeypatch) as bundle:
        # the arch-wide entry of sq1024 names no deterministic kernel: the default
        assert bundle.select(bwd_problem(deterministic=True)).name == BWD_DEFAULT
        assert bundle.select(bwd_problem(4000, deterministic=True)).name == DET


def test_a_forced_kernel_is_taken_on_any_gpu(tmp_path, monkeypatch):
    with open_on(archive(tmp_path), H100, monkeypatch) as bundle:
        prob = fwd_problem()
        prob.kernel = DEFAULT.encode()
        assert bundle.select(prob).name == DEFAULT
        assert "served by: forced name (attnpack_problem.kernel)\n" in bundle.explain(prob)


def test_without_a_device_the_arch_wide_entries_serve(tmp_path, monkeypatch):
    # a bundle on the CUDA driver, on this machine without one: no device can be asked, so
    # no list names it (as num_sms stays unknown), and selection still works
    monkeypatch.setenv(GPU_NAME, H100)  # read by the recording driver only
    with rt.Bundle(archive(tmp_path), arch="sm_90") as bundle:
        assert bundle.select(fwd_problem()).name == ARCH
        assert "served by: tuned entry\n" in bundle.explain(fwd_problem())


@pytest.mark.parametrize("gpu, images", [(H100, ["sym0", "sym1"]), (H200, ["sym0", "sym2"]),
                                         ("NVIDIA H100 PCIe", ["sym0"]), (None, ["sym0"])])
def test_preload_of_the_whole_table_loads_the_devices_own_kernels_only(tmp_path, monkeypatch,
                                                                      gpu, images):
    """Image 0 holds every default and arch-wide kernel, image 1 only the H100's entries',
    image 2 only the H200's: a device loads its own model's, never another model's."""
    with open_on(archive(tmp_path), gpu, monkeypatch) as bundle:
        bundle.preload()
        loaded = bundle.recorded_launches()["loaded"]
    assert sorted(s.split()[0] for s in loaded) == images


def test_bundle_info_counts_each_gpu_models_entries(tmp_path, monkeypatch):
    """attnpack_bundle_info's version-3 fields: each by_gpu list's name and entry count, in the
    index's order, on any device (and none); {} for an archive without lists; a caller with the
    version-2 struct gets the rest and the fields are left alone."""
    import ctypes
    empty = {"buckets": {}, "provenance": {}, "entries": []}
    for gpu in (H100, "NVIDIA H100 PCIe", None):
        with open_on(archive(tmp_path), gpu, monkeypatch) as bundle:
            assert bundle.info()["gpu_entries"] == {H100: 5, H200: 1}
    with rt.Bundle(archive(tmp_path), arch="sm_90") as bundle:  # the CUDA driver, no device here
        assert bundle.info()["gpu_entries"] == {H100: 5, H200: 1}
    with open_on(archive(tmp_path, empty, name="b"), H100, monkeypatch) as bundle:
        info = rt.BundleInfo(struct_size=ctypes.sizeof(rt.BundleInfo), num_gpu_models=7)
        rt.check(bundle._lib.attnpack_bundle_info_get(bundle.handle, ctypes.byref(info)))
        assert (info.num_gpu_models, bool(info.gpu_models), bool(info.gpu_entries)) == (0, False, False)
        version2 = rt.BundleInfo(struct_size=rt.BundleInfo.num_gpu_models.offset, num_gpu_models=7)
        rt.check(bundle._lib.attnpack_bundle_info_get(bundle.handle, ctypes.byref(version2)))
        assert version2.num_gpu_models == 7 and version2.tuned_on == b""


# ---- a by_gpu list that breaks the rules is a corrupt archive ------------------------------


def _gpu_entries(index, gpu=0):
    return index["tuning"]["by_gpu"][gpu]["entries"]


def _set(gpu, i, **changed):
    return lambda index: _gpu_entries(index, gpu)[i].update(changed)


def _at(gpu, i, text):
    return f"index.tuning.by_gpu[{gpu}].entries[{i}] ({[H100, H200][gpu]}: {text})"


REFUSALS = {
    "unknown kernel": (
        _set(0, 1, kernel=ON_H100 + "x"),
        f"{_at(0, 1, 'fwd fp16 d64 full gqa1 sq4096 sk4096 streams16')} names kernel {ON_H100}x, "
        "which is not in the index"),
    "kernel of another functional key": (
        _set(1, 0, causal=True),
        f"{_at(1, 0, 'fwd fp16 d64 causal gqa1 sq1024 sk1024 streams16')} names kernel {ON_H200}, "
        "which is for fwd fp16 d64 full"),
    "kernel of another op": (
        _set(0, 0, kernel=FAST),
        f"{_at(0, 0, 'fwd fp16 d64 full gqa1 sq1024 sk1024 streams16')} names kernel {FAST}, "
        "which is for bwd bf16 d64 full"),
    "deterministic kernel that is not": (
        _set(0, 3, deterministic_kernel=FAST),
        f"index.tuning.by_gpu[0].entries[3].deterministic_kernel ({H100}: bwd bf16 d64 full gqa1 "
        f"sq1024 sk1024 streams16) names kernel {FAST} as deterministic, which it is not"),
    "repeated key within one GPU": (
        _set(0, 1, sq=1024, sk=1024),
        f"{_at(0, 1, 'fwd fp16 d64 full gqa1 sq1024 sk1024 streams16')} repeats the key of "
        "entries[0]"),
    "sq off a boundary": (
        _set(0, 1, sq=4000),
        f"{_at(0, 1, 'fwd fp16 d64 full gqa1 sq4000 sk4096 streams16')} has sq 4000, which is not "
        "a boundary of buckets.seqlen"),
    "gqa off a boundary": (
        _set(1, 0, gqa=2),
        f"{_at(1, 0, 'fwd fp16 d64 full gqa2 sq1024 sk1024 streams16')} has gqa 2, which is not "
        "a boundary of buckets.gqa"),
    "streams off a boundary": (
        _set(0, 2, streams=32),
        f"{_at(0, 2, 'fwd fp16 d64 causal gqa1 sq1024 sk1024 streams32')} has streams 32, which is "
        "not a boundary of buckets.streams"),
    "empty gpu": (
        lambda index: index["tuning"]["by_gpu"][1].update(gpu=""),
        "index.tuning.by_gpu[1].gpu is empty; it must be the GPU's name as its driver reports it"),
    "repeated gpu": (
        lambda index: index["tuning"]["by_gpu"][1].update(gpu=H100),
        f"index.tuning.by_gpu[1].gpu ({H100}) repeats the GPU of by_gpu[0]"),
    "unsorted gpus": (
        lambda index: index["tuning"]["by_gpu"].reverse(),
        f"index.tuning.by_gpu[1].gpu ({H100}) sorts before the GPU of by_gpu[0] ({H200}); by_gpu "
        "must be sorted by gpu"),
    "entries without buckets": (
        lambda index: index["tuning"].update(buckets={}, entries=[]),
        f"index.tuning.by_gpu[0] ({H100}) has entries, but the tuning map has no seqlen and gqa "
        "buckets"),
    "entries without the seqlen axis": (
        lambda index: index["tuning"].update(buckets={"gqa": [1, 4]}, entries=[]),
        f"index.tuning.by_gpu[0] ({H100}) has entries, but the tuning map has no seqlen and gqa "
        "buckets"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_by_gpu_list_breaking_the_rules_is_a_corrupt_archive(tmp_path, monkeypatch, case):
    edit, expected = REFUSALS[case]
    path = resealed(archive(tmp_path), tmp_path / "bad-sm_90.apk", edit_index=edit)
    # refused at open, whatever the device is
    for gpu in (H100, None):
        monkeypatch.setenv(GPU_NAME, gpu or "")
        assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, recording=True) == \
            f"archive {path}: {expected} — rebuild the bundle", case


def test_buckets_removed_outright_are_named_too(tmp_path):
    def drop(index):
        del index["tuning"]["buckets"]
        index["tuning"]["entries"] = []
    path = resealed(archive(tmp_path), tmp_path / "bad-sm_90.apk", edit_index=drop)
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90") == (
        f"archive {path}: index.tuning.by_gpu[0] ({H100}) has entries, but the tuning map has no "
        "seqlen and gqa buckets — rebuild the bundle")


def test_gpu_lists_without_entries_need_no_buckets(tmp_path, monkeypatch):
    # as for the arch-wide entries: no entries (no database at build time), no buckets needed
    empty = {"buckets": {}, "provenance": {}, "entries": [],
             "by_gpu": [{"gpu": H100, "provenance": {}, "entries": []}]}
    with open_on(archive(tmp_path, empty), H100, monkeypatch) as bundle:
        assert bundle.select(fwd_problem()).name == DEFAULT
        assert lines(bundle.explain(fwd_problem()), "tuning key", "served by") == [
            "tuning key: none (the archive has no tuning buckets)", "served by: default"]
