"""The tuning database: bucketing, the text format, diff, explain, and the build's use of it."""
import json
import random
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnpack.archive import read_archive
from attnpack.builder import BuildError
from attnpack.cli import main
from attnpack.tune.buckets import gqa_class, seqlen_bucket
from attnpack.tune.db import TuningDb, diff_dbs, dump_db, load_db, problem_key, save_db
from conftest import FIXTURES, build

DBS = FIXTURES / "dbs"


@pytest.mark.parametrize("s, expected", [
    (1, 16), (16, 16), (17, 128), (127, 128), (128, 128), (129, 256), (1000, 1024), (1024, 1024), (1025, 2048),
    (4096, 4096), (4097, 8192), (16384, 16384), (16385, 16384), (10 ** 6, 16384)])
def test_seqlen_buckets(s, expected):
    assert seqlen_bucket(s) == expected


@pytest.mark.parametrize("hq, hkv, expected", [
    (8, 8, 1), (16, 8, 2), (24, 8, 4), (32, 8, 4), (40, 8, 8), (64, 8, 8), (128, 1, 8)])
def test_gqa_classes(hq, hkv, expected):
    assert gqa_class(hq, hkv) == expected


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="Hq 6 is not a multiple of Hkv 4"):
        gqa_class(6, 4)
    with pytest.raises(ValueError, match="cannot bucket 0"):
        seqlen_bucket(0)


def test_sq_and_sk_bucket_separately():
    assert problem_key("fwd", "bf16", 128, True, 2, 32, 8, 100, 5000) == \
        ("fwd", "bf16", 128, True, 4, 128, 8192, 64)


def test_text_round_trip_is_exact(tmp_path):
    db = load_db(DBS / "new.jsonl")
    save_db(db, tmp_path / "sm_90.jsonl")
    assert (tmp_path / "sm_90.jsonl").read_text() == (DBS / "new.jsonl").read_text()
    assert dump_db(load_db(tmp_path / "sm_90.jsonl")) == dump_db(db)


def test_lookup_by_bucket():
    db = load_db(DBS / "new.jsonl")
    assert db.lookup("fwd", "bf16", 128, False, 1, 16, 16, 3000, 4000)["kernel"] == \
        "gluon/fwd/bf16-d128-full/P"
    assert db.lookup("fwd", "bf16", 64, True, 16, 32, 8, 1000, 513)["kernel"] == \
        "triton/fwd/bf16-d64-causal/A"
    assert db.lookup("fwd", "bf16", 64, True, 8, 32, 8, 1000, 513) is None  # streams class 64
    assert db.lookup("fwd", "bf16", 128, False, 1, 16, 16, 5000, 4000) is None


def test_diff_matches_expected_text():
    result = CliRunner().invoke(main, ["db", "diff", str(DBS / "old.jsonl"), str(DBS / "new.jsonl")])
    assert result.exit_code == 0
    assert result.output == (DBS / "diff.txt").read_text()


def test_diff_gives_no_ratio_between_gpus(tmp_path):
    """Entries timed on two GPU models (an H100-tuned file against the H200's database) are not
    compared by time: the row names both GPUs and has no speedup; one entry of the same GPU in
    the same file keeps its ratio."""
    lines = (DBS / "new.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["provenance"]["gpu"] = "NVIDIA H100 80GB HBM3"
    entries = [json.loads(line) for line in lines[1:]]
    same = next(e for e in entries if e["kernel"] == "triton/fwd/bf16-d128-causal/B")
    same["gpu"] = "NVIDIA H200"
    (tmp_path / "h100.jsonl").write_text("\n".join(
        [json.dumps(header)] + [json.dumps(e) for e in entries]) + "\n")
    rows = {r["key"]: r for r in diff_dbs(load_db(DBS / "old.jsonl"),
                                          load_db(tmp_path / "h100.jsonl"))}
    other = rows["fwd bf16 d128 full gqa1 sq4096 sk4096 streams64"]
    assert other["speedup"] is None and other["gpus"] == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert rows["fwd bf16 d128 causal gqa1 sq4096 sk4096 streams64"]["speedup"] == 1.2
    assert "gpus" not in rows["bwd fp16 d64 causal gqa1 sq512 sk512 streams128"]  # added
    out = CliRunner().invoke(main, ["db", "diff", str(DBS / "old.jsonl"),
                                    str(tmp_path / "h100.jsonl")]).output
    assert "1000.0 us -> 800.0 us (timed on NVIDIA H200 -> NVIDIA H100 80GB HBM3: no ratio)" in out
    assert "600.0 us -> 500.0 us (1.20x)" in out


def test_diff_of_identical_dbs():
    result = CliRunner().invoke(main, ["db", "diff", str(DBS / "new.jsonl"), str(DBS / "new.jsonl")])
    assert result.output == "no kernel or family changes\n"


def test_show_and_explain():
    show = CliRunner().invoke(main, ["db", "show", str(DBS / "new.jsonl")])
    assert show.exit_code == 0 and "4 entries" in show.output and "1.12x" in show.output
    out = CliRunner().invoke(main, ["db", "explain", str(DBS / "new.jsonl"), "--shape",
                                    "16,32,8,1000,600,64", "--causal"]).output
    assert "bucket: fwd bf16 d64 causal gqa4 sq1024 sk1024 streams128\nentry: triton " \
        "triton/fwd/bf16-d64-causal/A, 49.0 us" in out
    few = CliRunner().invoke(main, ["db", "explain", str(DBS / "new.jsonl"), "--shape",
                                    "2,32,8,1000,600,64", "--causal"]).output
    assert "bucket: fwd bf16 d64 causal gqa4 sq1024 sk1024 streams64\nno entry; nearest entry " \
        "(gqa4 sq1024 sk1024 streams128): triton triton/fwd/bf16-d64-causal/A" in few
    near = CliRunner().invoke(main, ["db", "explain", str(DBS / "new.jsonl"), "--shape",
                                     "1,8,8,9000,9000,128"]).output
    assert ("bucket: fwd bf16 d128 full gqa1 sq16384 sk16384 streams64\nno entry; nearest entry "
            "(gqa1 sq4096 sk4096 streams64): gluon gluon/fwd/bf16-d128-full/P") in near
    miss = CliRunner().invoke(main, ["db", "explain", str(DBS / "new.jsonl"), "--shape",
                                     "1,8,8,9000,9000,32"]).output
    assert ("no entry for this functional key: the archive's per-functional default serves it"
            in miss)
    bad = CliRunner().invoke(main, ["db", "explain", str(DBS / "new.jsonl"), "--shape", "1,2,3"])
    assert bad.exit_code == 2 and "expected B,Hq,Hkv,Sq,Sk,D" in bad.output


def test_malformed_and_duplicate_entries(tmp_path):
    bad = tmp_path / "sm_90.jsonl"
    bad.write_text((DBS / "new.jsonl").read_text() + "{not json\n")
    result = CliRunner().invoke(main, ["db", "show", str(bad)])
    assert result.exit_code == 1 and "sm_90.jsonl: malformed" in result.output
    lines = (DBS / "new.jsonl").read_text().splitlines()
    bad.write_text("\n".join(lines + [lines[-1]]) + "\n")
    result = CliRunner().invoke(main, ["db", "show", str(bad)])
    assert "sm_90.jsonl:6: duplicate key fwd bf16 d128 causal gqa1 sq4096 sk4096" in result.output


def _toy_db(kernel: str) -> TuningDb:
    db = TuningDb("sm_90", {"status": "untuned"})
    db.put({"op": "fwd", "dtype": "fp16", "head_dim": 32, "causal": False, "gqa": 1, "sq": 1024,
            "sk": 1024, "family": "toy", "kernel": kernel})
    return db


def test_db_selects_what_the_build_compiles(tmp_path, toy_build):
    save_db(_toy_db("toy/fwd/fp16-d32-full/BLOCK32_warps2"), tmp_path / "sm_90.jsonl")
    req = build(tmp_path / "out", FIXTURES / "kernels", toy_build.cache_dir, archs=("sm_90",),
                tuning_db_dir=tmp_path)
    ar = read_archive(req.paths[0])
    names = [k["name"] for k in ar.kernels]
    # the 4 per-functional defaults plus the one non-default kernel the db selects, no more
    assert len(names) == 5 and "toy/fwd/fp16-d32-full/BLOCK32_warps2" in names
    tuning = ar.index["tuning"]
    assert tuning["buckets"]["seqlen"][:2] == [16, 128] and tuning["buckets"]["gqa"] == [1, 2, 4, 8]
    assert tuning["buckets"]["streams"] == [64, 128, 256, 512]
    # the entry had no streams class: it gets the class its key is tuned in (runner.natural_key)
    assert tuning["entries"] == [{"op": "fwd", "dtype": "fp16", "head_dim": 32, "causal": False,
                                  "gqa": 1, "sq": 1024, "sk": 1024, "streams": 512,
                                  "kernel": "toy/fwd/fp16-d32-full/BLOCK32_warps2"}]
    assert tuning["provenance"] == {"status": "untuned"}


def test_db_naming_a_missing_kernel_fails_the_build(tmp_path):
    save_db(_toy_db("toy/fwd/fp16-d32-full/BLOCK64_warps9"), tmp_path / "sm_90.jsonl")
    with pytest.raises(BuildError, match=r"sm_90.jsonl: entry fwd fp16 d32 full gqa1 sq1024 "
                                         r"sk1024 streams512 selects toy/fwd/fp16-d32-full/BLOCK64_warps9, "
                                         r"which no family declares for sm_90"):
        build(tmp_path / "out", FIXTURES / "kernels", None, archs=("sm_90",),
              tuning_db_dir=tmp_path)
    assert not (tmp_path / "out").exists()


def test_seed_untuned_uses_the_family_defaults():
    from attnpack.family import load_families
    from attnpack.tune.db import seed_untuned
    from attnpack.tune.runner import TuneKey
    keys = [TuneKey("fwd", "fp16", 32, True, 4, 1024, 1024, 128),
            TuneKey("bwd", "fp16", 32, False, 1, 128, 128, 128),
            TuneKey("fwd", "bf16", 32, False, 1, 128, 128, 128)]  # the toy family has no bf16
    db = seed_untuned("gfx950", keys, load_families(FIXTURES / "kernels"))
    assert db.provenance["status"] == "untuned"
    assert [e["kernel"] for _, e in sorted(db.entries.items())] == [
        "toy/bwd/fp16-d32-full/BLOCK16_warps1", "toy/fwd/fp16-d32-causal/BLOCK16_warps1"]


def test_timing_shape_stays_within_grid_and_memory_and_flops_count_visible_pairs():
    from attnpack.tune.runner import (MAX_GRID_Y, TIMED_BYTES, TIMED_FLOP, causal_pairs, flops,
                                      standard_keys, timing_shape)
    for key in standard_keys():
        B, Hq, Hkv, Sq, Sk, D = timing_shape(key)
        assert B * Hq <= MAX_GRID_Y, key
        assert 2 * D * B * (2 * Hq * Sq + 2 * Hkv * Sk) <= TIMED_BYTES, key
        # else B grows until the call does TIMED_FLOP
        per_batch = flops("fwd", 1, Hq, Sq, Sk, D, key.causal)
        assert B * per_batch >= TIMED_FLOP or B == 1 or B * Hq > MAX_GRID_Y - Hq \
            or 2 * D * (B + 1) * (2 * Hq * Sq + 2 * Hkv * Sk) * (2 if key.op == "bwd" else 1) \
            > TIMED_BYTES, key
    # top-left causal: query i sees min(i + 1, Sk) keys
    brute = lambda sq, sk: sum(min(i + 1, sk) for i in range(sq))
    for sq, sk in ((1, 1), (5, 5), (3, 9), (9, 3), (128, 4096), (4096, 1024)):
        assert causal_pairs(sq, sk) == brute(sq, sk)
    assert flops("fwd", 2, 3, 8, 8, 16, False) == 4 * 2 * 3 * 8 * 8 * 16
    assert flops("bwd", 1, 1, 128, 4096, 64, True) == 2.5 * 4 * 128 * 129 // 2 * 64


def test_docs_table_is_the_committed_sm_90_db():
    """docs/tuning.md quotes `attnpack db show` of the committed db; retuning must update it."""
    from attnpack.tune.db import load_db, render_show
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "tuning.md").read_text()
    block = doc.split("<!-- db show sm_90 -->\n```\n", 1)[1].split("```", 1)[0]
    assert block == render_show(load_db(root / "aot" / "tuning_db" / "sm_90.jsonl"))


def test_docs_summary_is_the_committed_sm_90_db():
    """docs/tuning.md's summary table is `attnpack db show --summary` of the committed db."""
    from attnpack.tune.db import load_db
    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "tuning.md").read_text()
    table = doc.split("<!-- db summary sm_90 -->\n", 1)[1].split("\n\n", 1)[0] + "\n"
    result = CliRunner().invoke(main, ["db", "show", "--summary",
                                       str(root / "aot" / "tuning_db" / "sm_90.jsonl")])
    assert result.exit_code == 0 and result.output == table
    # one row per (op, dtype, head dim, causal) of the db, each with its key count
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert sum(int(r[4]) for r in rows) == len(load_db(root / "aot" / "tuning_db" /
                                                       "sm_90.jsonl").entries)


def test_backward_keys_are_timed_with_enough_dkdv_programs_within_their_class():
    """A backward key's timing batch gives its dK/dV kernel at least BWD_MIN_PROGRAMS programs
    (one per 128 keys of a (batch, KV head) pair) unless its streams class or the caps stop it,
    and never moves the key to another streams class."""
    import math
    from attnpack.tune.buckets import STREAM_BOUNDS, streams_class
    from attnpack.tune.runner import (BWD_KEYS_PER_PROGRAM, BWD_MIN_PROGRAMS, MAX_GRID_Y,
                                      TIMED_BYTES, TIMED_FLOP, flops, standard_keys, timing_shape)
    for key in standard_keys(ops=("bwd",)):
        B, Hq, Hkv, Sq, Sk, D = timing_shape(key)
        programs = B * Hkv * math.ceil(Sk / BWD_KEYS_PER_PROGRAM)
        at_cap = (key.streams == STREAM_BOUNDS[0] and (B + 1) * Hkv > STREAM_BOUNDS[0]) \
            or (B + 1) * Hq > MAX_GRID_Y \
            or 4 * D * (B + 1) * (2 * Hq * Sq + 2 * Hkv * Sk) > TIMED_BYTES
        assert programs >= BWD_MIN_PROGRAMS or at_cap, (key, B)
        assert streams_class(B, Hkv) == key.streams, key
        # the floor adds no more batches than it needs
        fwd_batch = math.ceil(TIMED_FLOP / flops("fwd", 1, Hq, Sq, Sk, D, key.causal))
        needed = math.ceil(BWD_MIN_PROGRAMS / (Hkv * math.ceil(Sk / BWD_KEYS_PER_PROGRAM)))
        assert B <= max(fwd_batch, needed), (key, B)
    # run62's key: B = 1 x 8 KV heads at Sk 4096 gave 256 programs; now 512
    key = [k for k in standard_keys(ops=("bwd",), dtypes=("bf16",), head_dims=(128,), gqas=(8,))
           if k.causal and k.sq == k.sk == 4096][0]
    assert timing_shape(key)[0] == 2


def test_decode_keys_are_timed_as_serving_runs_them():
    """Sq bucket 16: one new token for the sequences of the key's streams class, not a batch
    grown to fill the GPU."""
    from attnpack.keys import TuneKey
    from attnpack.tune.runner import DECODE_SEQUENCES, natural_key, timing_shape
    assert timing_shape(TuneKey("fwd", "bf16", 128, False, 8, 16, 8192, 128)) == \
        (DECODE_SEQUENCES[128], 64, 8, 1, 8192, 128) == (16, 64, 8, 1, 8192, 128)
    assert timing_shape(TuneKey("fwd", "bf16", 128, False, 8, 16, 8192, 64)) == \
        (4, 64, 8, 1, 8192, 128)   # 32 (batch, KV head) pairs: class 64
    assert natural_key("fwd", "bf16", 128, False, 8, 16, 8192).streams == 128
    prefill = natural_key("fwd", "bf16", 128, False, 8, 128, 8192)
    assert timing_shape(prefill)[3] == 128  # prefill as before, in its batch's class


def test_a_prefill_key_named_in_another_class_is_timed_at_that_class_bound():
    """bench/shapes.json's B16 x 16 heads at S1024 (256 pairs, class 256) is served by a key
    whose timing batch, B47 x 8, is in class 512. Named in class 256 (a keys file with
    `streams`), that key is timed at B32 x 8, 256 pairs, and at that shape alone; where the
    caps keep the batch out of the class the key is refused, naming the fix."""
    from attnpack.tune.runner import (class_bound_batch, keys_from_fields, natural_key,
                                      timing_shape, timing_shapes)
    key = natural_key("bwd", "bf16", 128, False, 1, 1024, 1024)
    assert key.streams == 512 and timing_shapes(key)[0][0] == 47
    for streams, batch in ((64, 8), (128, 16), (256, 32)):
        named = key._replace(streams=streams)
        assert keys_from_fields(named._asdict()) == [named]
        assert class_bound_batch(named) == batch
        assert timing_shape(named) == (batch, 8, 8, 1024, 1024, 128)
        assert timing_shapes(named) == [timing_shape(named)]
    # a natural class-64 key named in class 512 is timed at B64 x 8, where the caps allow it
    long = natural_key("fwd", "bf16", 128, True, 1, 8192, 8192)
    assert long.streams == 64
    assert timing_shapes(long._replace(streams=512)) == [(64, 8, 8, 8192, 8192, 128)]
    # 8 GiB of q, k, v, o and gradients hold 3 batches of 64 query heads at S16384, head dim 256
    huge = natural_key("bwd", "bf16", 256, True, 8, 16384, 16384)._replace(streams=512)
    with pytest.raises(ValueError, match="would be timed at B=3 x 8 KV heads, class 64; tune "
                                         "it in the class of its timing batch"):
        timing_shape(huge)


def test_lowest_and_highest_class_prefill_keys_are_timed_at_their_class_bound_too():
    """A prefill key in streams class 64 is timed at its own batch and at B·Hkv = 64 (within
    the grid and memory caps); one in class 512, open above, at its own batch and at B·Hkv =
    512; every other key at one shape, as before."""
    from attnpack.tune.buckets import STREAM_BOUNDS, streams_class
    from attnpack.tune.runner import (MAX_GRID_Y, TIMED_BYTES, natural_key, standard_keys,
                                      timing_shape, timing_shapes)
    two = {STREAM_BOUNDS[0]: 0, STREAM_BOUNDS[-1]: 0}
    for key in standard_keys() + [natural_key("fwd", "bf16", 128, True, 8, 16, 8192)]:
        shapes = timing_shapes(key)
        assert shapes[0] == timing_shape(key), key
        if len(shapes) == 1:
            assert key.sq <= 16 or key.streams not in two or \
                shapes[0][0] * shapes[0][2] in two, key
            continue
        two[key.streams] += 1
        (b0, hq, hkv, sq, sk, d), (b1, *rest) = shapes
        assert key.sq > 16 and rest == [hq, hkv, sq, sk, d], key
        if key.streams == STREAM_BOUNDS[0]:
            assert b0 < b1 and b1 * hkv <= STREAM_BOUNDS[0]
        else:
            assert b1 * hkv == STREAM_BOUNDS[-1] and b0 != b1, key
        assert streams_class(b1, hkv) == key.streams and b1 * hq <= MAX_GRID_Y
        assert 2 * d * b1 * (2 * hq * sq + 2 * hkv * sk) * (2 if key.op == "bwd" else 1) \
            <= TIMED_BYTES, key
    assert all(two.values()), two
    # run98's key: B2 at its timing batch, B8 at the class's top (8 KV heads)
    key = natural_key("fwd", "bf16", 64, False, 1, 8192, 8192)
    assert [s[0] for s in timing_shapes(key)] == [2, 8]
    # run116's key: B187 at its timing batch, B64 (512 pairs) at the class's bound
    key = natural_key("bwd", "bf16", 128, False, 1, 512, 512)
    assert [s[0] for s in timing_shapes(key)] == [187, 64]


def test_a_two_shape_key_picks_by_the_geometric_mean_of_its_times_over_the_fastest():
    """run98's numbers (TFLOP/s, so times are their inverses): the four-consumer N64 kernel
    fastest at B2, the three-consumer N128 one 2 % behind there and fastest at B8, where the
    four-consumer one is 8.5 % behind: the three-consumer kernel wins the class."""
    from attnpack.tune.db import merge_dbs, TuningDb
    from attnpack.tune.runner import class_scores, pick
    c4, c3 = "c4_N64", "c3_N128"
    at_b2 = {c4: 1 / 490, c3: 1 / 480}
    at_b8 = {c4: 1 / 474, c3: 1 / 518}
    best, scores = pick([at_b2, at_b8])
    assert best == c3 and scores[c3] == pytest.approx((490 / 480) ** 0.5)
    assert scores[c4] == pytest.approx((518 / 474) ** 0.5)
    assert pick([at_b2]) == (c4, None)
    assert class_scores([{"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0}]) == \
        {"a": pytest.approx(2 ** 0.5), "b": pytest.approx(2 ** 0.5)}
    best, _ = pick([{"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0}])
    assert best == "a"  # a tie in score goes to the faster at the key's own timing shape
    # a merge at 1 % ranks such an entry's candidates by their scores, not by their times at
    # the first shape (where the held kernel, c4, is the faster)
    key = {"op": "fwd", "dtype": "bf16", "head_dim": 64, "causal": False, "gqa": 1,
           "sq": 8192, "sk": 8192, "streams": 64, "family": "gluon"}
    old = TuningDb("sm_90", {"status": "tuned"})
    old.put({**key, "kernel": c4})
    new = TuningDb("sm_90", {"status": "tuned"})
    new.put({**key, "kernel": c3, "time_us": 2083.3, "candidates": {c4: 2040.8, c3: 2083.3},
             "scores": {c4: 1.0454, c3: 1.0104}})
    merged, held = merge_dbs([old, new], min_gain=1.01)
    assert held == [] and next(iter(merged.entries.values()))["kernel"] == c3
    merged, held = merge_dbs([old, new], min_gain=1.05)
    assert len(held) == 1 and next(iter(merged.entries.values()))["kernel"] == c4
    # `db show` says such an entry was timed at two shapes, and what chose it
    from attnpack.tune.db import render_show
    new.put({**key, "kernel": c3, "time_us": 2083.3, "candidates": {c4: 2040.8, c3: 2083.3},
             "scores": {c4: 1.0454, c3: 1.0104},
             "class_top": {"shape": {"B": 8}, "candidates": {c4: 8438.8, c3: 7722.0},
                           "native": {"backend": "cudnn", "time_us": 9132.4}}})
    # (written as `class_top` before the twenty-sixth session: read as `second_shape`)
    assert "also timed at B=8: 7722.0 us, native cudnn 9132; chosen by score 1.010 over both " \
        "shapes" in render_show(new)
    assert "class_top" not in next(iter(new.entries.values()))


def test_a_keys_file_entry_without_a_class_tunes_decode_in_every_class():
    from attnpack.tune.runner import keys_from_fields, natural_key
    decode = {"op": "fwd", "dtype": "bf16", "head_dim": 128, "causal": False, "gqa": 8, "sq": 16,
              "sk": 8192}
    assert [k.streams for k in keys_from_fields(decode)] == [64, 128, 256, 512]
    assert [k.streams for k in keys_from_fields({**decode, "streams": 64})] == [64]
    prefill = {**decode, "sq": 1024, "sk": 1024}
    assert keys_from_fields(prefill) == [natural_key(**prefill)]


def test_committed_entries_carry_their_timing_shapes_class():
    """Each entry of the committed database is in the streams class of the batch it was timed
    at, and a prefill entry in the class its key is tuned in (runner.natural_key) or, named in
    another, timed at that class's bound (runner.class_bound_batch): a bound added to
    STREAM_BOUNDS must move the entries with it, as the sixteenth session's 256 and 512 did."""
    from attnpack.tune.buckets import SEQLEN_BOUNDS, streams_class
    from attnpack.tune.db import load_db
    from attnpack.tune.runner import timing_shape
    db = load_db(Path(__file__).resolve().parents[2] / "aot" / "tuning_db" / "sm_90.jsonl")
    wrong = []
    for key, entry in db.entries.items():
        shape = entry["shape"]
        if key.streams != streams_class(shape["B"], shape["Hkv"]):
            wrong.append(f"{key.text}: timed at B={shape['B']} x {shape['Hkv']}")
        elif key.sq > SEQLEN_BOUNDS[0] and shape["B"] != timing_shape(key)[0]:
            wrong.append(f"{key.text}: timed at B={shape['B']}, its class's rule says "
                         f"{timing_shape(key)[0]}")
    assert wrong == []


@pytest.mark.parametrize("b, hkv, expected", [(1, 1, 64), (8, 8, 64), (9, 8, 128), (1, 65, 128),
                                              (16, 8, 128), (32, 8, 256), (17, 15, 256),
                                              (33, 8, 512), (64, 8, 512), (4096, 8, 512)])
def test_streams_classes(b, hkv, expected):
    from attnpack.tune.buckets import streams_class
    assert streams_class(b, hkv) == expected


def test_streams_class_only_breaks_ties():
    """A problem without an entry of its own takes the nearest in gqa, sq and sk; among equally
    near entries, the one of its streams class."""
    db = TuningDb("sm_90", {"status": "tuned"})
    base = {"op": "fwd", "dtype": "bf16", "head_dim": 128, "causal": False, "gqa": 8, "sq": 16,
            "family": "triton"}
    db.put({**base, "sk": 16384, "streams": 128, "kernel": "triton/fwd/bf16-d128-full/unsplit"})
    db.put({**base, "sk": 16384, "streams": 64, "kernel": "triton/fwd/bf16-d128-full/split"})
    db.put({**base, "sk": 4096, "streams": 64, "kernel": "triton/fwd/bf16-d128-full/short"})
    pick = lambda b, sk: db.select("fwd", "bf16", 128, False, b, 64, 8, 1, sk)  # noqa: E731
    assert pick(8, 32768) == (db.entries[("fwd", "bf16", 128, False, 8, 16, 16384, 64)], "tuned")
    assert pick(64, 32768)[0]["kernel"].endswith("/unsplit")
    assert pick(64, 8192)[0]["kernel"].endswith("/unsplit")  # sk 16384 and 4096 tie: class 128
    assert pick(4, 8192)[0]["kernel"].endswith("/short")     # a tie within class 64: smaller sk
    assert pick(64, 2048)[0]["kernel"].endswith("/short")    # nearer in sk beats the class


def test_entries_before_the_streams_class_get_their_timing_shape_s(tmp_path):
    line = {"op": "fwd", "dtype": "bf16", "head_dim": 128, "causal": False, "gqa": 8, "sq": 16,
            "sk": 8192, "family": "triton", "kernel": "k", "shape": {"B": 4, "Hkv": 8}}
    (tmp_path / "sm_90.jsonl").write_text(json.dumps({"arch": "sm_90", "provenance": {}}) + "\n"
                                          + json.dumps(line) + "\n")
    (key,) = load_db(tmp_path / "sm_90.jsonl").entries
    assert key.streams == 64


def test_runoff_times_the_close_contenders_again_in_alternating_order():
    """`attnpack tune`'s run-off: candidates within the margin of the fastest (at most `most`)
    are timed `rounds` more times by turns among themselves, slowest first then fastest first,
    and each keeps the median of all its runs, so a contender that was unlucky in the first
    pass can still win."""
    from attnpack.tune.runner import runoff
    samples = {"a": [100.0] * 3, "b": [104.0] * 3, "c": [107.0] * 3, "d": [109.0] * 3,
               "slow": [120.0] * 3}
    later = {"a": [110.0] * 4, "b": [101.0] * 4, "c": [106.0] * 4}
    calls = []

    def sample(names):
        calls.append(names)
        return {n: later[n] for n in names}

    assert runoff(samples, sample, rounds=2, margin=0.08, most=3) == ["a", "b", "c"]
    assert calls == [["c", "b", "a"], ["a", "b", "c"]]   # d (9 % off) and slow not again
    assert samples["a"] == [100.0] * 3 + [110.0] * 8 and samples["d"] == [109.0] * 3
    medians = {n: statistics.median(t) for n, t in samples.items()}
    assert min(medians, key=medians.get) == "b"      # 101 over 11 runs against a's 110


def test_runoff_leaves_a_clear_winner_alone():
    from attnpack.tune.runner import runoff
    samples = {"a": [100.0], "b": [109.0]}
    assert runoff(samples, lambda names: pytest.fail("timed again"), margin=0.08) == []
    assert samples == {"a": [100.0], "b": [109.0]}


def test_native_reference_pools_its_runs_before_and_after_the_candidates():
    """`attnpack tune` times PyTorch's backends before the candidates and again after them; a
    backend's reference is the median over both runs, and a backend that refused the shape
    (absent from both) stays absent."""
    from attnpack.tune.runner import pooled_medians
    before = {"cudnn": [100.0, 101.0, 102.0], "flash": [200.0, 201.0, 202.0]}
    after = {"cudnn": [110.0, 111.0, 112.0], "flash": [190.0, 191.0, 192.0]}
    assert pooled_medians(before, after) == {"cudnn": 106.0, "flash": 196.0}
    assert pooled_medians(before) == {"cudnn": 101.0, "flash": 201.0}
    assert pooled_medians({}, {}) == {}


@pytest.fixture()
def recording_torch(monkeypatch):
    """A stand-in for torch under attnpack.bench.timing that logs what the timer queues: each
    event's record (its time is its place in the log, 1 us a step), the flush, the spin and the
    synchronize. Yields (fake torch, log)."""
    from types import SimpleNamespace

    from attnpack.bench import timing
    log = []

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing
            self.t = None

        def record(self):
            log.append("record")
            self.t = len(log)

        def elapsed_time(self, end):
            return (end.t - self.t) / 1000.0     # ms

    class Flush:
        def zero_(self):
            log.append("flush")

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: log.append("sync"),
                           _sleep=lambda cycles: log.append(("sleep", cycles)),
                           get_device_properties=lambda d: SimpleNamespace(L2_cache_size=0))
    fake = SimpleNamespace(empty=lambda *a, **k: Flush(), uint8=None, cuda=cuda,
                           device=lambda d: d)
    monkeypatch.setattr(timing, "torch", fake)
    yield fake, log


def test_tuner_queues_its_timed_reps_and_waits_once(recording_torch):
    """The tuner's Bench, on a recording stand-in for torch: WARMUP calls, then for each of REPS
    reps a flush, a spin that lets the host get ahead, the start event, the call and the end
    event, all queued, and one synchronize at the end (no wait per rep, which let the host's
    launch time into the interval); the times come from the event pairs, in microseconds."""
    from attnpack.bench import timing
    from attnpack.tune import runner
    fake, log = recording_torch
    times = runner.Bench(fake).samples_us(lambda: log.append("call"))
    lead = ("sleep", timing.HOST_LEAD_CYCLES)
    assert log == (["call"] * runner.WARMUP
                   + ["flush", lead, "record", "call", "record"] * runner.REPS + ["sync"])
    assert times == [2.0] * runner.REPS          # two log entries between start and end: 2 us


def test_tuner_times_its_candidates_by_turns_call_by_call(recording_torch):
    """The tuner's Bench.turns_us on the recording stand-in for torch: each candidate's WARMUP
    calls, then the candidates take turns call by call, in alternating order (a b, b a, ...),
    each call behind its flush and spin, until each made REPS; one synchronize at the end, and
    each candidate's times from its own event pairs, in microseconds."""
    from attnpack.bench import timing
    from attnpack.tune import runner
    fake, log = recording_torch
    times = runner.Bench(fake).turns_us({"a": lambda: log.append("a"),
                                         "b": lambda: (log.append("b"), log.append("b2"))})
    lead = ("sleep", timing.HOST_LEAD_CYCLES)
    turn = lambda name: ["flush", lead, "record"] + ([name] if name == "a" else ["b", "b2"]) \
        + ["record"]
    pairs = turn("a") + turn("b") + turn("b") + turn("a")
    assert log == (["a"] * runner.WARMUP + ["b", "b2"] * runner.WARMUP
                   + pairs * (runner.REPS // 2) + ["sync"])
    assert times == {"a": [2.0] * runner.REPS, "b": [3.0] * runner.REPS}


def test_candidates_refused_for_one_reason_are_logged_once():
    from attnpack.tune.runner import not_candidate_lines
    why = "requires Sq <= 16 (the decode kernel serves at most 16 query rows per head): Sq=8192"
    lines = not_candidate_lines({"triton/fwd/bf16-d64-full/decode1_split512_M16_N32": why,
                                 "triton/fwd/bf16-d64-full/decode1_M16_N32": why,
                                 "x/fwd/bf16-d64-full/other": "needs Sk % 64 == 0"})
    assert lines == [f"  not candidates here ({why}): decode1_M16_N32, decode1_split512_M16_N32",
                     "  not candidates here (needs Sk % 64 == 0): other"]
    assert not_candidate_lines({}) == []


def test_tune_key_times_a_lowest_class_key_at_both_shapes_and_keeps_both(monkeypatch):
    """tune_key on a prefill key of streams class 64, with the GPU parts stubbed (inputs, the
    correctness check, the backends, the timer) and run98's rates as the kernels' times: each
    candidate is timed at B2 and B8, the entry keeps B2's shape and times as before, the B8 ones
    under `second_shape`, the `scores`, and the kernel that wins by them (not B2's fastest)."""
    from types import SimpleNamespace
    from attnpack.keys import TuneKey
    from attnpack.tune import runner
    rates = {("c4", 2): 490, ("c3", 2): 480, ("c4", 8): 474, ("c3", 8): 518}
    key = TuneKey("fwd", "bf16", 64, False, 1, 8192, 8192, 64)
    monkeypatch.setattr(runner, "_inputs", lambda torch, dtype, B, *rest: (B, None, None, None))
    monkeypatch.setattr(runner, "_reference", lambda *a: None)
    monkeypatch.setattr(runner, "native_samples",
                        lambda torch, bench, key, q, *rest: {"cudnn": [1e6 / 500 * q / 2]})
    monkeypatch.setattr(runner.Candidate, "error", lambda self, *a: 1e-3)
    monkeypatch.setattr(runner.Candidate, "timed",
                        lambda self, torch, q, *rest: lambda: (self.name, q))

    class Bench:
        def turns_us(self, fns):
            timed = {n: fn() for n, fn in fns.items()}
            return {n: [1e6 / rates[name, B] * B / 2] * 5   # time grows with the batch
                    for n, (name, B) in timed.items()}

    index = {"kernels": [{"name": n, "op": "fwd", "key": key.functional.as_dict(),
                          "family": "gluon", "deterministic": True} for n in ("c3", "c4")]}
    runtime = SimpleNamespace(AttnpackError=RuntimeError, Status=None)
    torch = SimpleNamespace(bfloat16="bf16", float16="fp16")
    lines = []
    entry = runner.tune_key(torch, runtime, None, Bench(), index, key, lines.append)
    assert entry["kernel"] == "c3" and entry["shape"]["B"] == 2
    assert entry["candidates"] == {"c3": round(1e6 / 480, 2), "c4": round(1e6 / 490, 2)}
    assert entry["second_shape"]["shape"]["B"] == 8
    assert entry["second_shape"]["candidates"]["c3"] == round(4e6 / 518, 2)
    assert entry["second_shape"]["native"]["backend"] == "cudnn"
    assert entry["scores"]["c3"] < entry["scores"]["c4"]
    assert entry["time_us"] == entry["candidates"]["c3"]   # its time at the key's own shape
    assert "chosen by score" in lines[-1]


def test_an_entry_held_by_hand_keeps_its_kernel_through_a_merge(tmp_path):
    """The committed database holds the fp16 head-dim-64 Sq128 backward key at the triton
    kernel (run127: dV of extreme fp16 values is exact there, not with the Gluon one): a later
    database that timed a Gluon kernel faster does not replace it, a later entry with the same
    kernel refreshes its times and keeps the reason, `db show` prints it, and a later entry
    held by hand itself replaces it."""
    from attnpack.tune.db import merge_dbs, render_show
    committed = load_db(Path(__file__).resolve().parents[2] / "aot" / "tuning_db" / "sm_90.jsonl")
    by_hand = sorted((e for e in committed.entries.values() if e.get("held")),
                     key=lambda e: e["dtype"] != "fp16")
    assert len(by_hand) == 2
    held, rows_lost = by_hand
    assert (held["op"], held["dtype"], held["head_dim"], held["causal"], held["sq"]) == \
        ("bwd", "fp16", 64, False, 128) and held["kernel"].startswith("triton/")
    assert "extreme" in held["held"]
    # run178: the tune's persistent pick lost 3 % at the rows this key serves
    assert (rows_lost["op"], rows_lost["dtype"], rows_lost["head_dim"], rows_lost["causal"],
            rows_lost["gqa"], rows_lost["sq"], rows_lost["streams"]) == \
        ("bwd", "bf16", 128, True, 4, 4096, 64)
    assert rows_lost["kernel"] == "gluon/bwd/bf16-d128-causal/M64_stages2_det0_tma1"
    assert "run178" in rows_lost["held"]
    gluon = "gluon/bwd/fp16-d64-full/M64_stages2_det1_qN64_persistent1"
    faster = {**held, "kernel": gluon, "family": "gluon", "time_us": 1.0,
              "candidates": {gluon: 1.0, held["kernel"]: 2.0}}
    faster.pop("held")
    old = TuningDb("sm_90", {"status": "tuned"})
    old.put(held)
    new = TuningDb("sm_90", {"status": "tuned"})
    new.put(faster)
    for min_gain in (1.0, 1.01):
        merged, kept = merge_dbs([old, new], min_gain=min_gain)
        [entry] = merged.entries.values()
        assert entry["kernel"] == held["kernel"] and entry["held"] == held["held"]
        assert len(kept) == 1
    same = {**faster, "kernel": held["kernel"], "family": "triton", "time_us": 3.0}
    new.put(same)
    [entry] = merge_dbs([old, new])[0].entries.values()
    assert entry["time_us"] == 3.0 and entry["held"] == held["held"]
    assert f"held by hand: {held['held']}" in render_show(merge_dbs([old, new])[0])
    # a later entry held by hand replaces it, whatever the gain rule would say of its timing
    new.put({**faster, "held": "a later reason", "candidates": {gluon: 1.0, held["kernel"]: 1.0}})
    for min_gain in (1.0, 1.05):
        [entry] = merge_dbs([old, new], min_gain=min_gain)[0].entries.values()
        assert entry["kernel"] == gluon and entry["held"] == "a later reason"
    # the CLI says so
    save_db(old, tmp_path / "old.jsonl")
    new.put(faster)
    save_db(new, tmp_path / "new.jsonl")
    result = CliRunner().invoke(main, ["db", "merge", "--min-gain", "1.01", str(tmp_path / "old.jsonl"),
                                       str(tmp_path / "new.jsonl"), "-o", str(tmp_path / "m.jsonl")])
    assert result.exit_code == 0, result.output
    assert "1 held by hand kept theirs" in result.output
    assert load_db(tmp_path / "m.jsonl").entries[next(iter(old.entries))]["kernel"] == held["kernel"]


def test_row_keys_name_each_bench_row_key_in_the_rows_class_and_all_are_tunable():
    """bench/shapes.json and model_shapes.json: every row's keys (forward, and backward where
    the row trains), each in its row's streams class; the keys whose rows sit in another class
    than their default one can all be timed at their class's bound (build_tools/row_keys.py
    writes them for `attnpack tune --keys`)."""
    from attnpack.bench.shapes import DEFAULT_SHAPE_FILES, load_shape_file, row_keys
    from attnpack.tune.buckets import streams_class
    from attnpack.tune.runner import natural_key, timing_shapes
    shapes = [s for path in DEFAULT_SHAPE_FILES for s in load_shape_file(path)]
    every = row_keys(shapes)
    assert len(every) == len(set(every))
    for s in shapes:
        for op in s.wanted_ops(("fwd", "bwd")):
            assert any(k.op == op and k.head_dim == s.head_dim and k.causal == s.causal and
                       k.streams == streams_class(s.batch, s.heads_kv) for k in every), s
    other = row_keys(shapes, other_class_only=True)
    assert set(other) < set(every) and len(other) >= 20
    for key in other:
        assert key.sq > 16 and key.streams != natural_key(*key[:-1]).streams
        [(b, hq, hkv, *_)] = timing_shapes(key)
        assert b * hkv == key.streams, key
    # the public row below 1.0x forward + backward: B16 x 16 heads at S1024, 256 pairs
    assert ("bwd", "bf16", 128, False, 1, 1024, 1024, 256) in other


def test_tune_rows_lists_each_rows_key_in_its_class_without_a_gpu(tmp_path):
    """`attnpack tune --rows FILE --list` prints the keys a shape file's rows are served by,
    each in its row's class and with the shapes it would be timed at, and stops; without
    --list the archive and the output are required, by name."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "shapes.json"
    result = CliRunner().invoke(main, ["tune", "--arch", "sm_90", "--rows", str(bench), "--list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[-1] == "44 keys"   # 22 rows, each a forward and a backward key
    assert "bwd bf16 d128 full gqa1 sq1024 sk1024 streams256  timed at B=32 Hq=8 Hkv=8 " \
        "Sq=1024 Sk=1024" in lines
    assert "fwd bf16 d128 full gqa1 sq512 sk512 streams512  timed at B=187 Hq=8 Hkv=8 Sq=512 " \
        "Sk=512, B=64 Hq=8 Hkv=8 Sq=512 Sk=512" in lines
    bad = tmp_path / "bad.json"
    bad.write_text('{"shapes": [{"batch": 1}]}')
    result = CliRunner().invoke(main, ["tune", "--arch", "sm_90", "--rows", str(bad), "--list"])
    assert result.exit_code == 1 and "bad.json" in result.output
    result = CliRunner().invoke(main, ["tune", "--arch", "sm_90", "--rows", str(bench)])
    assert result.exit_code == 2 and "--archive and -o/--out are required" in result.output
    # a row whose class cannot be timed at its bound (B64 x 8 KV heads of 64 query heads at
    # S16384, head dim 256, is more than 8 GiB) gets its key in its default class
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"shapes": [{
        "batch": 64, "heads_q": 64, "heads_kv": 8, "seqlen_q": 16384, "seqlen_k": 16384,
        "head_dim": 256, "causal": True, "dtype": "bf16", "ops": ["fwd"]}]}))
    result = CliRunner().invoke(main, ["tune", "--arch", "sm_90", "--rows", str(huge), "--list"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("fwd bf16 d256 causal gqa8 sq16384 sk16384 streams64  "
                                    "timed at B=1 ")


def test_tune_goes_on_with_a_database_of_its_own_gpu_only(tmp_path):
    """runner.resumed_db, what `attnpack tune -o FILE` writes into: a new database where FILE is
    missing, FILE's own to resume where its entries were timed on this GPU (or it holds only
    untuned seeds), and a clear refusal where they were timed on another GPU model: the new
    header would have named this GPU for them (tuning on an H100 into the H200's database)."""
    from attnpack.tune.db import TuningDb
    from attnpack.tune.runner import resumed_db
    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    key = {"op": "fwd", "dtype": "bf16", "head_dim": 64, "causal": False, "gqa": 1,
           "sq": 1024, "sk": 1024, "streams": 64, "family": "gluon", "kernel": "k"}
    assert resumed_db(tmp_path / "new.jsonl", "sm_90", h100).entries == {}
    tuned = TuningDb("sm_90", {"status": "tuned", "gpu": h200})
    tuned.put(dict(key))
    save_db(tuned, tmp_path / "h200.jsonl")
    assert len(resumed_db(tmp_path / "h200.jsonl", "sm_90", h200).entries) == 1
    with pytest.raises(ValueError, match=f"h200.jsonl holds entries timed on {h200}; this GPU "
                                         f"is {h100}: tune into another file"):
        resumed_db(tmp_path / "h200.jsonl", "sm_90", h100)
    with pytest.raises(ValueError, match="is for sm_90, the archive for gfx942"):
        resumed_db(tmp_path / "h200.jsonl", "gfx942", h200)
    seeds = TuningDb("sm_90", {"status": "untuned", "gpu": "none (not measured)"})
    seeds.put(dict(key))
    save_db(seeds, tmp_path / "seeds.jsonl")
    assert len(resumed_db(tmp_path / "seeds.jsonl", "sm_90", h100).entries) == 1
