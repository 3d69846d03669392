"""Deterministic selection (ATTNPACK_PROBLEM_DETERMINISTIC, format 2.2's `deterministic_kernel`).

torch.use_deterministic_algorithms(True) asks for a kernel whose family declares it
deterministic. A tuning entry whose winner is not (the Gluon backward's atomic dQ) names the
fastest deterministic candidate of its key, which serves instead; without one, the functional
key's default serves if it is deterministic, else the problem is unsupported. These tests pin
each branch on synthetic archives, the reader's and verifier's checks of the new field, and the
database side (record_determinism, merge, `db show`, the builder).
"""
import json

import pytest
from click.testing import CliRunner

from attnpack import runtime as rt
from attnpack.archive.verify import verify_archive
from attnpack.cli import main
from attnpack.tune.db import TuningDb, load_db, merge_dbs, record_determinism, render_show, save_db
from test_runtime_fixtures import (BWD_PRE_WORDS, BWD_WORDS, PER_KV_TILE, PER_Q_TILE,  # noqa: F401
                                   expect_error, kernel, resealed, step, write_synthetic)

S = rt.Status
FAST = "synth/bwd/bf16-d64-full/fast"        # not deterministic (atomics)
DET = "synth/bwd/bf16-d64-full/det"          # deterministic, slower
ENTRY = {"op": "bwd", "dtype": "bf16", "head_dim": 64, "causal": False, "gqa": 1}


def bwd_kernel(config: str, deterministic: bool) -> dict:
    k = kernel("synth", "bwd", "bf16", 64, False, [
        step("bwd_preprocess", 0, BWD_PRE_WORDS, PER_Q_TILE, workspace=["delta"]),
        step("bwd", 0, BWD_WORDS, PER_KV_TILE, workspace=["delta"])],
        config=config, workspace=["delta"])
    return {**k, "deterministic": deterministic}


def archive(tmp_path, default=DET, alternate=DET, name="a"):
    """Two bwd kernels; entry sq128 names an alternate (unless None), entry sq1024 none."""
    entries = [{**ENTRY, "sq": 128, "sk": 128, "kernel": FAST,
                **({"deterministic_kernel": alternate} if alternate else {})},
               {**ENTRY, "sq": 1024, "sk": 1024, "kernel": FAST}]
    tuning = {"buckets": {"seqlen": [128, 256, 512, 1024], "gqa": [1, 2, 4, 8]},
              "entries": entries, "provenance": {"status": "tuned"}}
    selection = [{"op": "bwd", "dtype": "bf16", "head_dim": 64, "causal": False, "kernel": default}]
    return write_synthetic(tmp_path / f"{name}-sm_90.apk",
                           [bwd_kernel("fast", False), bwd_kernel("det", True)],
                           selection=selection, tuning=tuning)


def problem(S_=128, deterministic=False, kernel=None):
    return rt.make_problem("bwd", "bf16", B=2, Hq=8, Hkv=8, Sq=S_, Sk=S_, D=64,
                           deterministic=deterministic, kernel=kernel)


def test_the_entrys_deterministic_kernel_serves_in_deterministic_mode(tmp_path):
    with rt.Bundle(archive(tmp_path), arch="sm_90") as bundle:
        assert bundle.select(problem()).name == FAST
        chosen = bundle.select(problem(deterministic=True))
        assert (chosen.name, chosen.deterministic) == (DET, True)
        text = bundle.explain(problem(deterministic=True))
        assert (f"  tuned {FAST}: skipped, not deterministic (deterministic mode); its entry's "
                "deterministic kernel instead\n") in text
        assert f"  tuned {DET}: chosen\n" in text and "served by: tuned entry\n" in text


def test_without_an_alternate_the_deterministic_default_serves(tmp_path):
    with rt.Bundle(archive(tmp_path), arch="sm_90") as bundle:
        assert bundle.select(problem(1024)).name == FAST
        assert bundle.select(problem(1024, deterministic=True)).name == DET
        text = bundle.explain(problem(1024, deterministic=True))
        assert (f"  tuned {FAST}: skipped, not deterministic (deterministic mode); its entry has "
                "no deterministic kernel\n") in text
        assert "served by: default\n" in text


def test_with_nothing_deterministic_the_problem_is_unsupported(tmp_path):
    path = archive(tmp_path, default=FAST, alternate=None)
    with rt.Bundle(path, arch="sm_90") as bundle:
        assert bundle.select(problem()).name == FAST   # outside deterministic mode: served
        for size in (128, 1024):
            message = expect_error(S.UNSUPPORTED, bundle.select, problem(size, deterministic=True))
            assert message == "deterministic mode: no kernel declared deterministic serves bwd bf16 d64 full"
        # a forced kernel is checked too; a deterministic one is taken as asked
        message = expect_error(S.UNSUPPORTED, bundle.select, problem(deterministic=True, kernel=FAST))
        assert message == f"deterministic mode: kernel {FAST} is not deterministic"
        assert bundle.select(problem(deterministic=True, kernel=DET)).name == DET


def test_unknown_problem_flags_are_refused(tmp_path):
    with rt.Bundle(archive(tmp_path), arch="sm_90") as bundle:
        prob = problem()
        prob.flags = 0x6
        assert expect_error(S.INVALID_ARGUMENT, bundle.select, prob) == \
            "attnpack_problem.flags has unknown bits 6"


def _swap_alternate(index, name):
    # same packed size: the names differ only in their config tags ("det" <-> "fas"-like)
    for entry in index["tuning"]["entries"]:
        if "deterministic_kernel" in entry:
            entry["deterministic_kernel"] = name


def test_the_reader_and_verify_refuse_a_bad_alternate(tmp_path):
    # An alternate that is not deterministic: written by a buggy builder (the writer checks only
    # that the name exists), refused by the runtime at open and by `attnpack verify`.
    bad = archive(tmp_path, alternate=FAST, name="bad")
    message = expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, bad, arch="sm_90")
    assert (f"(bwd bf16 d64 full gqa1 sq128 sk128) names kernel {FAST} as deterministic, which it "
            "is not — rebuild the bundle") in message
    _, problems, _ = verify_archive(bad)
    assert (f"bad-sm_90.apk: tuning: entry bwd bf16 d64 full gqa1 sq128 sk128 names {FAST} as "
            "deterministic, which it is not") in problems
    # One the index lacks (same length as DET, so the edit keeps every offset)
    missing = resealed(archive(tmp_path, name="ok"), tmp_path / "missing-sm_90.apk",
                       edit_index=lambda index: _swap_alternate(index, DET.replace("det", "dxt")))
    message = expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, missing, arch="sm_90")
    assert "names kernel synth/bwd/bf16-d64-full/dxt, which is not in the index" in message


# ---- the database side ---------------------------------------------------------------------

def entry(kernel, candidates, **key):
    return {**ENTRY, "sq": 128, "sk": 128, **key, "family": "synth", "kernel": kernel,
            "time_us": candidates[kernel], "candidates": candidates}


def test_record_determinism_names_the_fastest_deterministic_candidate():
    declared = {FAST: False, DET: True, "synth/bwd/bf16-d64-full/det2": True}.__getitem__
    times = {FAST: 90.0, DET: 110.0, "synth/bwd/bf16-d64-full/det2": 100.0}
    e = record_determinism(entry(FAST, times), declared)
    assert (e["deterministic"], e["deterministic_kernel"]) == (False, "synth/bwd/bf16-d64-full/det2")
    # a deterministic winner needs no alternate; a stale alternate is dropped
    e = record_determinism({**entry(DET, {DET: 1.0}), "deterministic_kernel": "x"}, declared)
    assert e["deterministic"] is True and "deterministic_kernel" not in e
    # no deterministic candidate survived: no alternate (the default serves, or PyTorch)
    e = record_determinism(entry(FAST, {FAST: 1.0}), declared)
    assert e["deterministic"] is False and "deterministic_kernel" not in e


def test_merge_later_wins_and_show_marks_nondeterministic_winners(tmp_path):
    old = TuningDb("sm_90", {"status": "tuned", "gpu": "G", "date": "old"})
    old.put(entry(DET, {DET: 110.0}))
    old.put(entry(DET, {DET: 50.0}, sq=256, sk=256))
    new = TuningDb("sm_90", {"status": "tuned", "gpu": "G", "date": "new"})
    new.put({**entry(FAST, {FAST: 90.0, DET: 110.0}), "deterministic": False,
             "deterministic_kernel": DET})
    merged, _ = merge_dbs([old, new])
    assert merged.provenance == {"status": "tuned", "gpu": "G", "date": "new"}
    assert [e["kernel"] for _, e in sorted(merged.entries.items())] == [FAST, DET]
    assert merge_dbs([old, TuningDb("sm_90", {"status": "untuned"}, {
        k: {**e} for k, e in new.entries.items()})])[0].provenance["status"] == "partly tuned"
    with pytest.raises(ValueError, match="arch gfx950, the first database's is sm_90"):
        merge_dbs([old, TuningDb("gfx950", {})])
    text = render_show(merged)
    assert f" NO   {FAST}\n" in text and f"deterministic: {DET} (110.0 us)\n" in text
    assert text.endswith("1 of 2 winners are not deterministic (det NO); under "
                         "torch.use_deterministic_algorithms(True) their deterministic kernel serves\n")
    # the archive carries the alternate
    assert merged.compiled()["entries"][0]["deterministic_kernel"] == DET


def test_merge_refuses_entries_of_another_gpu_unless_asked(tmp_path):
    """run142 re-tuned 24 keys on an H100 over the H200's database: the merge took the H100's
    name for the whole header. Now entries of different GPUs are refused by name; with
    --mixed-gpus each kept entry records its GPU, the header counts them, and `db show` marks
    them. An entry's own `gpu` (the tuner writes it) outranks its header's."""
    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    old = TuningDb("sm_90", {"status": "tuned", "gpu": h200}, path=tmp_path / "sm_90.jsonl")
    old.put(entry(DET, {DET: 110.0}))
    old.put(entry(DET, {DET: 50.0}, sq=256, sk=256))
    new = TuningDb("sm_90", {"status": "tuned", "gpu": h100}, path=tmp_path / "h100.jsonl")
    new.put({**entry(FAST, {FAST: 90.0, DET: 110.0}), "gpu": h100})
    with pytest.raises(ValueError, match=f"sm_90.jsonl: {h200}; .*h100.jsonl: {h100}.*--mixed-gpus"):
        merge_dbs([old, new])
    merged, _ = merge_dbs([old, new], mixed_gpus=True)
    assert merged.provenance["gpu"] == f"mixed: {h100} (1), {h200} (1)"
    assert merged.provenance["status"] == "tuned"
    assert sorted(e["gpu"] for e in merged.entries.values()) == [h100, h200]
    # entries named by their header alone are stamped too, and still count as tuned
    bare = TuningDb("sm_90", {"status": "tuned", "gpu": h100})
    bare.put(entry(FAST, {FAST: 90.0, DET: 110.0}))
    merged, _ = merge_dbs([old, bare], mixed_gpus=True)
    assert merged.provenance["status"] == "tuned"
    assert sorted(e["gpu"] for e in merged.entries.values()) == [h100, h200]
    assert f"timed on {h100}\n" in render_show(merged)
    # the same GPU by the entries' own names merges, whatever the header says; seeds of an
    # untuned database name no GPU
    same = TuningDb("sm_90", {"status": "tuned", "gpu": h100})
    same.put({**entry(FAST, {FAST: 90.0}), "gpu": h200})
    assert merge_dbs([old, same])[0].provenance["gpu"] == h200
    seeds = TuningDb("sm_90", {"status": "untuned", "gpu": "none (not measured)"})
    seeds.put(entry(DET, {DET: 1.0}, sq=512, sk=512))
    assert merge_dbs([seeds, new])[0].provenance["gpu"] == h100
    # the CLI names the flag (entries that say whether they are deterministic: the synthetic
    # kernels have no family to ask)
    for db in (old, new):
        db.entries = {k: {**e, "deterministic": True} for k, e in db.entries.items()}
        save_db(db, db.path)
    args = ["db", "merge", str(tmp_path / "sm_90.jsonl"), str(tmp_path / "h100.jsonl"),
            "-o", str(tmp_path / "out.jsonl")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "--mixed-gpus" in result.output
    assert not (tmp_path / "out.jsonl").exists()
    result = CliRunner().invoke(main, args + ["--mixed-gpus"])
    assert result.exit_code == 0, result.output
    assert load_db(tmp_path / "out.jsonl").provenance["gpu"].startswith("mixed: ")


def test_merge_min_gain_keeps_a_kernel_the_new_winner_only_tied():
    """--min-gain: the later winner must beat the earlier entry's kernel, as timed in the later
    run, by the factor; a tie keeps the earlier entry, a win or an untimed kernel does not."""
    old = TuningDb("sm_90", {"status": "tuned"})
    old.put(entry(DET, {DET: 110.0}))
    old.put(entry(DET, {DET: 50.0}, sq=256, sk=256))
    old.put(entry(DET, {DET: 70.0}, sq=512, sk=512))
    new = TuningDb("sm_90", {"status": "tuned"})
    new.put(entry(FAST, {FAST: 100.0, DET: 100.9}))           # 0.9 % faster: a tie at 1.01
    new.put(entry(FAST, {FAST: 50.0, DET: 51.0}, sq=256, sk=256))  # 2 % faster: replaces
    new.put(entry(FAST, {FAST: 60.0}, sq=512, sk=512))        # the old kernel not timed
    merged, held = merge_dbs([old, new], min_gain=1.01)
    kernels = [e["kernel"] for _, e in sorted(merged.entries.items())]
    assert kernels == [DET, FAST, FAST] and len(held) == 1
    assert merged.entries[held[0]]["candidates"] == {DET: 110.0}   # the earlier entry, whole
    assert [e["kernel"] for _, e in sorted(merge_dbs([old, new])[0].entries.items())] == [FAST] * 3


def test_db_merge_cli_fills_determinism_from_the_families(tmp_path):
    """`attnpack db merge` over the shipped sm_90 database: entries without `deterministic` get
    it from the families' declarations (the Gluon backward's det0 configs are not)."""
    from pathlib import Path
    shipped = Path(__file__).resolve().parents[2] / "aot" / "tuning_db" / "sm_90.jsonl"
    db = load_db(shipped)
    stripped = TuningDb(db.arch, db.provenance, {
        k: {f: v for f, v in e.items() if f not in ("deterministic", "deterministic_kernel")}
        for k, e in db.entries.items()})
    save_db(stripped, tmp_path / "in.jsonl")
    result = CliRunner().invoke(main, ["db", "merge", str(tmp_path / "in.jsonl"),
                                       "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 0, result.output
    out = load_db(tmp_path / "out.jsonl")
    assert out.entries == db.entries   # the committed database is exactly what merge derives
    nondet = [e for e in out.entries.values() if not e["deterministic"]]
    assert nondet and all("_det0" in e["kernel"] for e in nondet)
    assert all(e["deterministic_kernel"].split("/")[0] in ("gluon", "triton")
               and "_det0" not in e["deterministic_kernel"] for e in nondet)
    assert f"({len(nondet)} not deterministic)" in result.output
    json.dumps(out.provenance)  # still plain JSON


def test_the_builder_refuses_an_alternate_its_family_does_not_declare_deterministic(tmp_path):
    from attnpack.builder import BuildRequest
    from attnpack.builder.build import BuildError, plan_variants
    from attnpack.family import load_families
    from test_runtime_fixtures import FIXTURE_KERNELS
    families = load_families(FIXTURE_KERNELS)
    [toy_bwd] = [v.name for f in families.values() for v in f.all_variants("sm_90")
                 if v.op == "bwd" and not v.key.causal]   # the toy backward: not deterministic
    db = TuningDb("sm_90", {"status": "tuned"}, path=tmp_path / "sm_90.jsonl")
    db.put({"op": "bwd", "dtype": "fp16", "head_dim": 32, "causal": False, "gqa": 1, "sq": 128,
            "sk": 128, "family": "toy", "kernel": toy_bwd, "deterministic_kernel": toy_bwd})
    req = BuildRequest(archs=("sm_90",), out_dir=tmp_path, kernels_root=FIXTURE_KERNELS)
    with pytest.raises(BuildError, match=f"names {toy_bwd} as its deterministic kernel, but its "
                                         "family does not declare it deterministic"):
        plan_variants(req, "sm_90", families, db)
