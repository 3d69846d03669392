"""A GPU model's own tuning entries (aot/tuning_db/<arch>/<gpu>.jsonl): the files' rules, the
selection rule, the build into the archive's `tuning.by_gpu`, the CLI, and the runtime serving
them on a device of that name (the recording driver pretends the name)."""
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.builder import BuildError
from attnpack.cli import main
from attnpack.tune.db import (DbError, TuningDb, gpu_file_name, load_gpu_dbs, save_db,
                              select_on_gpu)
from conftest import FIXTURES, build

REPO = Path(__file__).resolve().parents[2]
H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
TOY = "toy/fwd/fp16-d32-full/"
# the toy family's two forward configs: B its default, A built only where an entry selects it
A, B = "BLOCK32_warps2", "BLOCK16_warps1"


def toy_entry(kernel: str, sq: int = 1024, **extra) -> dict:
    return {"op": "fwd", "dtype": "fp16", "head_dim": 32, "causal": False, "gqa": 1, "sq": sq,
            "sk": sq, "streams": 512, "family": "toy", "kernel": TOY + kernel, **extra}


def tuned_db(gpu: str, *entries: dict) -> TuningDb:
    db = TuningDb("sm_90", {"status": "tuned", "gpu": gpu})
    for entry in entries:
        db.put(entry)
    return db


def write_dbs(folder, base: TuningDb, gpu_db: TuningDb, name: str | None = None):
    """`base` as folder/sm_90.jsonl, `gpu_db` as its GPU's file (or `name`) under sm_90/."""
    (folder / "sm_90").mkdir(parents=True, exist_ok=True)
    save_db(base, folder / "sm_90.jsonl")
    save_db(gpu_db, folder / "sm_90" / (name or gpu_file_name(gpu_db.provenance["gpu"])))


@pytest.mark.parametrize("gpu, name", [
    (H100, "nvidia-h100-80gb-hbm3.jsonl"), ("NVIDIA H100 PCIe", "nvidia-h100-pcie.jsonl"),
    ("AMD Instinct MI300X", "amd-instinct-mi300x.jsonl"), (H200, "nvidia-h200.jsonl")])
def test_gpu_file_names(gpu, name):
    assert gpu_file_name(gpu) == name


def test_a_gpu_file_serves_the_gpu_its_header_names(tmp_path):
    write_dbs(tmp_path, tuned_db(H200), tuned_db(H100, toy_entry(B)))
    dbs = load_gpu_dbs(tmp_path, "sm_90")
    assert list(dbs) == [H100] and len(dbs[H100].entries) == 1
    assert load_gpu_dbs(tmp_path, "gfx942") == {}  # no folder: no GPU model's entries


@pytest.mark.parametrize("gpu_db, name, message", [
    (TuningDb("gfx942", {"status": "tuned", "gpu": H100}), None, "header says arch 'gfx942', "
     "its folder says 'sm_90'"),
    (TuningDb("sm_90", {"status": "untuned", "gpu": H100}), None, "need a header naming the one "
     "GPU they were timed on"),
    (tuned_db(f"mixed: {H100} (2), {H200} (1)"), "mixed.jsonl", "need a header naming the one "
     "GPU"),
    (tuned_db(H100, toy_entry(B, gpu=H200)), None, f"serves {H100}, but holds "
     f"entries timed on {H200}; move them to their own GPU's file"),
    (tuned_db(H100), "h100.jsonl", f"serves {H100}, whose file is nvidia-h100-80gb-hbm3.jsonl; "
     "rename it"),
])
def test_a_gpu_file_that_breaks_a_rule_is_refused_by_name(tmp_path, gpu_db, name, message):
    write_dbs(tmp_path, tuned_db(H200), gpu_db, name)
    with pytest.raises(DbError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_gpu_dbs(tmp_path, "sm_90")


def test_the_gpu_entry_serves_its_exact_key_only():
    base = tuned_db(H200, toy_entry(B, sq=1024), toy_entry(A, sq=128))
    gpu = tuned_db(H100, toy_entry(A, sq=1024), toy_entry(A, sq=4096))
    args = ("fwd", "fp16", 32, False, 64, 8, 8)  # B·Hkv 512: the entries' streams class
    entry, rule = select_on_gpu(base, gpu, *args, 1000, 1000)
    assert (entry["kernel"], rule) == (TOY + A, f"tuned for {H100}")
    # no GPU model's entries: the arch-wide entry
    assert select_on_gpu(base, None, *args, 1000, 1000)[0]["kernel"] == TOY + B
    # sq 2048 is one step from the GPU's sq4096 entry and from the base's sq1024 one; a GPU's
    # entry is never a nearest entry, so the base's serves (8192: the base's, three steps off)
    for s in (2048, 8192):
        entry, rule = select_on_gpu(base, gpu, *args, s, s)
        assert (entry["kernel"], rule) == (TOY + B, "nearest")


def test_the_build_compiles_each_gpu_models_entries_into_by_gpu(tmp_path, toy_build):
    base = tuned_db(H200, toy_entry(B))
    write_dbs(tmp_path, base, tuned_db(H100, toy_entry(A, gpu=H100), toy_entry(A, sq=4096)))
    req = build(tmp_path / "out", FIXTURES / "kernels", toy_build.cache_dir, archs=("sm_90",),
                tuning_db_dir=tmp_path)
    ar = read_archive(req.paths[0])
    names = {k["name"] for k in ar.kernels}
    assert TOY + A in names  # selected by the GPU model's entries alone
    tuning = ar.index["tuning"]
    assert [e["kernel"] for e in tuning["entries"]] == [TOY + B]
    key = {"op": "fwd", "dtype": "fp16", "head_dim": 32, "causal": False, "gqa": 1,
           "streams": 512}
    assert tuning["by_gpu"] == [{"gpu": H100, "provenance": {"status": "tuned", "gpu": H100},
                                 "entries": [
                                     {**key, "sq": 1024, "sk": 1024, "kernel": TOY + A},
                                     {**key, "sq": 4096, "sk": 4096, "kernel": TOY + A}]}]
    # what `attnpack inspect` says of them
    shown = CliRunner().invoke(main, ["inspect", str(req.paths[0])]).output.splitlines()[3]
    assert shown == (f"tuning: 1 arch-wide entries (tuned on {H200}); 2 of {H100}'s own, served "
                     "first on that GPU")
    with_lists = req.paths[0]
    # and a build without GPU files has no by_gpu at all (what a 2.6 archive had)
    shutil.rmtree(tmp_path / "sm_90")
    req = build(tmp_path / "out2", FIXTURES / "kernels", toy_build.cache_dir, archs=("sm_90",),
                tuning_db_dir=tmp_path)
    ar = read_archive(req.paths[0])
    assert "by_gpu" not in ar.index["tuning"] and TOY + A not in {k["name"] for k in ar.kernels}
    # what attnpack.torch says of both: the extension's bundle JSON, which bundle_info() returns
    # on a GPU (and `attnpack bench` records from it), shown here by explain's with no GPU
    attnpack_torch = pytest.importorskip("attnpack.torch")
    shape = (1, 2, 2, 1024, 1024, 32)
    for path, own in ((with_lists, {H100: 2}), (req.paths[0], {})):
        bundle = attnpack_torch.explain(shape, "fp16", archive=str(path), arch="sm_90")["bundle"]
        assert (bundle["tuned_on"], bundle["gpu_entries"]) == (H200, own)


def test_a_gpu_entry_naming_an_undeclared_kernel_fails_the_build_naming_its_file(tmp_path):
    write_dbs(tmp_path, tuned_db(H200), tuned_db(H100, toy_entry("BLOCK64_warps9")))
    with pytest.raises(BuildError, match=r"sm_90/nvidia-h100-80gb-hbm3.jsonl: entry fwd fp16 d32 "
                                         r"full gqa1 sq1024 sk1024 streams512 selects "
                                         r"toy/fwd/fp16-d32-full/BLOCK64_warps9, which no family"):
        build(tmp_path / "out", FIXTURES / "kernels", None, archs=("sm_90",),
              tuning_db_dir=tmp_path)
    write_dbs(tmp_path, tuned_db(H200), tuned_db(H100), "h100.jsonl")
    with pytest.raises(BuildError, match="h100.jsonl: serves NVIDIA H100 80GB HBM3, whose file"):
        build(tmp_path / "out", FIXTURES / "kernels", None, archs=("sm_90",),
              tuning_db_dir=tmp_path)


def test_tune_refuses_another_gpus_file_in_the_gpu_folder(tmp_path):
    from attnpack.tune.runner import resumed_db
    (tmp_path / "sm_90").mkdir()
    assert resumed_db(tmp_path / "sm_90" / gpu_file_name(H100), "sm_90", H100).entries == {}
    with pytest.raises(ValueError, match=r"sm_90/nvidia-h200.jsonl is where another GPU model's "
                                         r"own entries live .*this GPU's are .*sm_90/"
                                         r"nvidia-h100-80gb-hbm3.jsonl"):
        resumed_db(tmp_path / "sm_90" / gpu_file_name(H200), "sm_90", H100)


def test_db_explain_for_a_gpu_model(tmp_path):
    write_dbs(tmp_path, tuned_db(H200, toy_entry(B, time_us=10.0)),
              tuned_db(H100, toy_entry(A, time_us=9.0)))
    args = ["db", "explain", str(tmp_path / "sm_90.jsonl"), "--shape", "64,8,8,1000,1000,32",
            "--dtype", "fp16"]
    own = CliRunner().invoke(main, args + ["--gpu", H100])
    assert own.exit_code == 0, own.output
    assert f"{H100}'s own entry: toy {TOY}{A}, 9.0 us" in own.output
    other = CliRunner().invoke(main, args + ["--gpu", "NVIDIA H100 PCIe"])
    assert "NVIDIA H100 PCIe's own entries: none (" in other.output
    assert f"entry: toy {TOY}{B}, 10.0 us" in other.output


def test_the_committed_gpu_files_hold_only_entries_that_change_what_their_gpu_gets():
    """Each committed GPU model's file follows the rules, and `db prune --min-gain 1.01` would
    drop none of its entries: each one's kernel beat the arch-wide pick for its key by 1 % or
    more on that GPU (the rule `db merge --min-gain 1.01` applies to re-tunes)."""
    from attnpack.tune.db import load_db, prune_against
    base = load_db(REPO / "aot" / "tuning_db" / "sm_90.jsonl")
    for gpu, db in load_gpu_dbs(REPO / "aot" / "tuning_db", "sm_90").items():
        assert gpu != base.provenance["gpu"]
        assert prune_against(db, base, 1.01)[1] == [], gpu


def test_the_runtime_serves_the_gpu_models_entry_on_a_device_of_that_name(tmp_path, toy_build,
                                                                         monkeypatch):
    write_dbs(tmp_path, tuned_db(H200, toy_entry(B)), tuned_db(H100, toy_entry(A)))
    path = build(tmp_path / "out", FIXTURES / "kernels", toy_build.cache_dir, archs=("sm_90",),
                 tuning_db_dir=tmp_path).paths[0]
    problem = rt.make_problem("fwd", "fp16", B=64, Hq=8, Hkv=8, Sq=1000, Sk=1000, D=32)
    for name, kernel in [(H100, A), (H200, B), ("NVIDIA H100 PCIe", B), ("", B)]:
        monkeypatch.setenv("ATTNPACK_RECORDING_GPU_NAME", name)
        with rt.Bundle(path, recording=True) as bundle:
            assert bundle.select(problem).name == TOY + kernel, name
            explained = bundle.explain(problem)
        assert (f"tuned entry for {H100}" in explained) == (name == H100), explained
    result = CliRunner().invoke(main, ["explain", "--shape", "64,8,8,1000,1000,32", "--dtype",
                                       "fp16", "--archive", str(path), "--gpu-name", H100])
    assert f"{TOY}{A}" in result.output, result.output
    refused = CliRunner().invoke(main, ["explain", "--shape", "64,8,8,1000,1000,32",
                                        "--gpu-name", H100])
    assert refused.exit_code != 0 and "name --archive or --arch too" in refused.output


def test_prune_keeps_the_gpu_entries_that_change_what_the_gpu_gets(tmp_path):
    """`db prune --against`: an entry whose kernel the arch-wide database serves its key by
    (exact or nearest), or that beat that kernel by less than --min-gain in its own run, goes;
    one that beat it by more, or whose arch-wide kernel it did not time, stays."""
    base = tuned_db(H200, toy_entry(B, sq=1024), toy_entry(B, sq=128))
    times = {TOY + A: 9.0, TOY + B: 10.0}
    gpu = tuned_db(H100,
                   toy_entry(B, sq=1024),                                       # same kernel
                   toy_entry(A, sq=4096, candidates={TOY + A: 9.95, TOY + B: 10.0}),  # 0.5 %
                   toy_entry(A, sq=8192, candidates=times),                     # 11 % (nearest)
                   toy_entry(A, sq=16384))                                      # B not timed
    write_dbs(tmp_path, base, gpu)
    path = str(tmp_path / "sm_90" / gpu_file_name(H100))
    result = CliRunner().invoke(main, ["db", "prune", path, "--against",
                                       str(tmp_path / "sm_90.jsonl"), "--min-gain", "1.01",
                                       "-o", path])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "dropped fwd fp16 d32 full gqa1 sq1024 sk1024 streams512: the arch-wide entry's kernel",
        f"dropped fwd fp16 d32 full gqa1 sq4096 sk4096 streams512: within 1.01x of the arch-wide "
        f"{TOY}{B}",
        f"{path}: 2 entries kept, 2 dropped"]
    kept = load_gpu_dbs(tmp_path, "sm_90")[H100]
    assert sorted(k.sq for k in kept.entries) == [8192, 16384]
