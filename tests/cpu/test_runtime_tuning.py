"""The runtime's tuning lookup: the archive's compiled tuning database (index `tuning`).

The acceptance test takes a database from its text file through the builder into an archive's
msgpack index and asks the runtime to select for thousands of random shapes; every answer must
be the one python/attnpack/tune (TuningDb.lookup, problem_key) gives, else the default.
"""
import random
import re

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.tune.buckets import GQA_BOUNDS, SEQLEN_BOUNDS, STREAM_BOUNDS
from attnpack.tune.db import load_db, problem_key
from test_runtime_fixtures import (FWD_WORDS, PER_Q_TILE, attention_kernels,  # noqa: F401
                                   expect_error, kernel, resealed, step, toy_tuned_archive,
                                   write_synthetic)

S = rt.Status
D = 32  # the toy family's only head dim (and fp16 its only dtype)


def tuning_lines(text: str) -> tuple[str, str]:
    """(the tuning-key line, what served it) out of an explain text."""
    key = re.search(r"^  tuning key: (.*)$", text, re.M)
    served = re.search(r"^served by: (.*)$", text, re.M)
    return key and key.group(1), served and served.group(1)


def random_seqlen(rng: random.Random) -> int:
    """Exact boundaries and their neighbours, beyond the last bucket, small and large."""
    pick = rng.random()
    if pick < 0.35:
        edge = rng.choice(SEQLEN_BOUNDS)
        return max(1, edge + rng.choice((-1, 0, 0, 1)))
    if pick < 0.45:
        return rng.choice((1, 2, 16385, 20000, 32768, 40000))
    if pick < 0.75:
        return int(round(2 ** rng.uniform(0, 15.3)))  # log-uniform over 1..40000
    return rng.randint(1, 40000)


def random_shape(rng: random.Random) -> dict:
    hkv = rng.randint(1, 8)
    ratio = rng.choice((1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 20))  # 9 and up: past the last class
    return {"op": rng.choice(("fwd", "fwd", "bwd")), "causal": rng.random() < 0.5,
            "B": rng.choice((1, 2, 3, 4, 8, 9, 16, 64)), "Hq": hkv * ratio, "Hkv": hkv,
            "Sq": random_seqlen(rng), "Sk": random_seqlen(rng)}


def test_the_database_goes_text_to_msgpack_unchanged(toy_tuned_archive):
    path, db_path = toy_tuned_archive
    db = load_db(db_path)
    assert len(db.entries) > 600
    tuning = read_archive(path).index["tuning"]
    assert tuning == db.compiled()
    assert tuning["buckets"] == {"seqlen": list(SEQLEN_BOUNDS), "gqa": list(GQA_BOUNDS),
                                 "streams": list(STREAM_BOUNDS)}


def test_runtime_lookup_equals_the_python_lookup_for_random_shapes(toy_tuned_archive):
    path, db_path = toy_tuned_archive
    db = load_db(db_path)
    defaults = {(s["op"], s["causal"]): s["kernel"] for s in read_archive(path).index["selection"]}
    rng = random.Random(20240611)
    mismatches, served, chosen = [], {"tuned entry": 0, "nearest tuned entry": 0}, set()
    with rt.Bundle(path, recording=True) as bundle:
        for _ in range(5000):
            shape = random_shape(rng)
            op, causal = shape.pop("op"), shape.pop("causal")
            prob = rt.make_problem(op, "fp16", D=D, causal=causal, **shape)
            sizes = (shape["B"], shape["Hq"], shape["Hkv"], shape["Sq"], shape["Sk"])
            key = problem_key(op, "fp16", D, causal, *sizes)
            entry, rule = db.select(op, "fp16", D, causal, *sizes)
            want_kernel = entry["kernel"] if entry else defaults[(op, causal)]
            want_served = {"tuned": "tuned entry", "nearest": "nearest tuned entry"}.get(rule, rule)
            want_key = f"{key.text}: " + {
                "tuned": "tuned entry", "default": "no tuned entry",
                "nearest": "no tuned entry; nearest tuned entry "
                           f"gqa{entry and entry['gqa']} sq{entry and entry['sq']} sk{entry and entry['sk']} "
                           f"streams{entry and entry['streams']}"}[rule]
            got_kernel = bundle.select(prob).name
            got_key, got_served = tuning_lines(bundle.explain(prob))
            if (got_kernel, got_key, got_served) != (want_kernel, want_key, want_served):
                mismatches.append((op, causal, shape, (got_kernel, got_key, got_served),
                                   (want_kernel, want_key, want_served)))
            served[want_served] += 1
            chosen.add(got_kernel)
    assert mismatches[:5] == [] and len(mismatches) == 0
    # the sample exercised both outcomes and every kernel, fwd and bwd; every functional key has
    # entries, so a key without its own takes the nearest one, never the default
    assert min(served.values()) > 1000 and set(served) == {"tuned entry", "nearest tuned entry"}
    assert len(chosen) == 6


def test_the_launch_uses_the_tuned_kernel(toy_tuned_archive):
    path, db_path = toy_tuned_archive
    db = load_db(db_path)
    # one tuned key per forward config, and one key without an entry (its nearest entry serves)
    cases = []
    for config in ("BLOCK16_warps1", "BLOCK32_warps2", None):
        for sq in SEQLEN_BOUNDS:
            entry = db.lookup("fwd", "fp16", D, False, 2, 8, 8, sq, 1000)
            if (entry and entry["kernel"].endswith(config or "?")) or (not entry and not config):
                near, rule = db.select("fwd", "fp16", D, False, 2, 8, 8, sq, 1000)
                cases.append((sq, config or near["kernel"].split("/")[-1]))
                assert rule == ("tuned" if config else "nearest")
                break
    assert len(cases) == 3
    with rt.Bundle(path, recording=True) as bundle:
        for sq, config in cases:
            prob = rt.make_problem("fwd", "fp16", B=2, Hq=8, Hkv=8, Sq=sq, Sk=1000, D=D,
                                   pointers={"q": 0x10000, "o": 0x90000})
            bundle.forward(prob)
            [launch] = bundle.recorded_launches()["launches"]
            block, warps = {"BLOCK16_warps1": (16, 1), "BLOCK32_warps2": (32, 2)}[config]
            assert launch["grid"] == [-(-sq // block), 16, 1]
            assert launch["block"] == [32 * warps, 1, 1]
        assert set(bundle.stats()["calls"]) == {
            f"toy/fwd/fp16-d32-full/{c}" for c in ("BLOCK16_warps1", "BLOCK32_warps2")}


def test_explain_shows_the_bucket_key_and_what_served_it(toy_tuned_archive):
    path, db_path = toy_tuned_archive
    db = load_db(db_path)
    tuned = next(k for k, e in sorted(db.entries.items()) if k[:4] == ("fwd", "fp16", 32, True)
                 and k.streams == 64 and e["kernel"].endswith("BLOCK32_warps2"))
    gqa, sq, sk = tuned.gqa, tuned.sq, tuned.sk
    missing = next((gqa, s, k) for s in SEQLEN_BOUNDS for k in SEQLEN_BOUNDS
                   if ("fwd", "fp16", 32, True, gqa, s, k, 64) not in db.entries)
    with rt.Bundle(path, recording=True) as bundle:
        # Hq/Hkv = gqa, Sq = Sk - 1 below the boundary: still in the entry's buckets
        text = bundle.explain(rt.make_problem("fwd", "fp16", B=1, Hq=2 * gqa, Hkv=2, Sq=sq - 1,
                                              Sk=sk, D=D, causal=True))
        assert text == (
            f"problem: fwd fp16 B=1 Hq={2 * gqa} Hkv=2 Sq={sq - 1} Sk={sk} D=32 causal\n"
            f"archive: {path} (sm_90, bundle 0.1.0, format 3.0, triton=3.6.0)\n"
            f"  tuning key: fwd fp16 d32 causal gqa{gqa} sq{sq} sk{sk} streams64: tuned entry\n"
            "  tuned toy/fwd/fp16-d32-causal/BLOCK32_warps2: chosen\n"
            "kernel: toy/fwd/fp16-d32-causal/BLOCK32_warps2 (family toy, BLOCK=32 warps=2)\n"
            "served by: tuned entry\n"
            f"  step fwd: scale_rows grid [ceil(Sq/32), B*Hq, 1] = [{-(-(sq - 1) // 32)},"
            f"{2 * gqa},1] block [64,1,1] cluster [1,1,1] shared 0 B, 13 params (96 B)\n")
        _, s, k = missing
        text = bundle.explain(rt.make_problem("fwd", "fp16", B=1, Hq=gqa, Hkv=1, Sq=s, Sk=k, D=D,
                                              causal=True))
        near, rule = db.select("fwd", "fp16", D, True, 1, gqa, 1, s, k)
        config = {"BLOCK16_warps1": "BLOCK=16 warps=1", "BLOCK32_warps2": "BLOCK=32 warps=2"}
        assert rule == "nearest" and (
            f"  tuning key: fwd fp16 d32 causal gqa{gqa} sq{s} sk{k} streams64: no tuned entry; "
            f"nearest tuned entry gqa{near['gqa']} sq{near['sq']} sk{near['sk']} "
            f"streams{near['streams']}\n"
            f"  nearest tuned {near['kernel']}: chosen\n"
            f"kernel: {near['kernel']} (family toy, {config[near['kernel'].split('/')[-1]]})\n"
            "served by: nearest tuned entry\n") in text


def test_a_tuned_kernel_the_problem_does_not_fit_falls_back_to_the_default(tmp_path):
    # two forward kernels for one key; the tuned one was compiled assuming Sq % 16 == 0
    fussy = kernel("synth", "fwd", "fp16", 64, False, [
        step("fwd", 0, FWD_WORDS, PER_Q_TILE, divisible=("Sq",))], config="SQ16")
    plain = kernel("synth", "fwd", "fp16", 64, False, [step("fwd", 0, FWD_WORDS, PER_Q_TILE)])
    tuning = {"buckets": {"seqlen": [128, 1024], "gqa": [1, 4]}, "provenance": {},
              "entries": [{"op": "fwd", "dtype": "fp16", "head_dim": 64, "causal": False,
                           "gqa": 1, "sq": 128, "sk": 1024, "kernel": fussy["name"]}]}
    path = write_synthetic(tmp_path / "a.apk", [fussy, plain],
                           selection=[{"op": "fwd", **plain["key"], "kernel": plain["name"]}],
                           tuning=tuning)
    with rt.Bundle(path, arch="sm_90") as bundle:
        fits = rt.make_problem("fwd", "fp16", B=1, Hq=4, Hkv=4, Sq=112, Sk=900, D=64)
        assert bundle.select(fits).name == fussy["name"]
        odd = rt.make_problem("fwd", "fp16", B=1, Hq=4, Hkv=4, Sq=100, Sk=900, D=64)
        assert bundle.select(odd).name == plain["name"]
        assert bundle.explain(odd).split("\n")[2:6] == [
            "  tuning key: fwd fp16 d64 full gqa1 sq128 sk1024: tuned entry",
            f"  tuned {fussy['name']}: rejected, Sq=100 is not a multiple of 16 (kernel promise)",
            f"  default {plain['name']}: chosen",
            f"kernel: {plain['name']} (family synth, tile=M128)"]
        assert "served by: default\n" in bundle.explain(odd)
        # the boundaries come from the archive: Sk 1025 is past the last one, so bucket 1024
        assert bundle.select(rt.make_problem("fwd", "fp16", B=1, Hq=4, Hkv=4, Sq=16, Sk=99999,
                                             D=64)).name == fussy["name"]
        # gqa 2 falls in class 4, which has no entry: the nearest one (class 1) serves, and
        # falls back to the default where its promise fails
        gqa2 = rt.make_problem("fwd", "fp16", B=1, Hq=8, Hkv=4, Sq=16, Sk=900, D=64)
        assert bundle.select(gqa2).name == fussy["name"]
        assert "served by: nearest tuned entry\n" in bundle.explain(gqa2)
        assert bundle.select(rt.make_problem("fwd", "fp16", B=1, Hq=8, Hkv=4, Sq=17, Sk=900,
                                             D=64)).name == plain["name"]


def test_an_index_without_tuning_has_no_tuned_entries(tmp_path, monkeypatch):
    import attnpack.archive.writer as writer
    real_pack = writer.pack
    monkeypatch.setattr(writer, "pack", lambda obj: real_pack(
        {k: v for k, v in obj.items() if k != "tuning"}))
    path = write_synthetic(tmp_path / "a.apk", attention_kernels(head_dims=(64,)))
    monkeypatch.undo()
    assert "tuning" not in read_archive(path).index
    with rt.Bundle(path, arch="sm_90") as bundle:
        prob = rt.make_problem("fwd", "fp16", B=1, Hq=4, Hkv=4, Sq=100, Sk=100, D=64)
        assert bundle.select(prob).name == "synth/fwd/fp16-d64-full/M128"
        assert tuning_lines(bundle.explain(prob)) == (
            "none (the archive has no tuning buckets)", "default")


# ---- a tampered tuning map is a corrupt archive --------------------------------------------


def _entry_where(entries, predicate):
    return next(i for i, e in enumerate(entries) if predicate(e))


def _tampered_cases(index):
    """(name, edit, expected message after 'archive <path>: ') for the tuned toy archive."""
    entries = index["tuning"]["entries"]
    b32 = _entry_where(entries, lambda e: e["kernel"].endswith("BLOCK32_warps2")
                       and not e["causal"])
    fwd16 = _entry_where(entries, lambda e: e["op"] == "fwd" and e["kernel"].endswith("_warps1"))
    at128 = _entry_where(entries, lambda e: e["sq"] == 128)
    # two neighbours differing only in sk, both sk >= 256 (so the packed size stays the same)
    dup = next(i for i in range(1, len(entries))
               if {k: v for k, v in entries[i].items() if k not in ("sk", "kernel")}
               == {k: v for k, v in entries[i - 1].items() if k not in ("sk", "kernel")}
               and entries[i - 1]["sk"] >= 256 and entries[i]["kernel"] == entries[i - 1]["kernel"])

    def where(i, **changed):
        e = {**entries[i], **changed}
        streams = f" streams{e['streams']}" if "streams" in e else ""
        return (f"index.tuning.entries[{i}] ({e['op']} fp16 d32 "
                f"{'causal' if e['causal'] else 'full'} gqa{e['gqa']} sq{e['sq']} sk{e['sk']}"
                f"{streams})")

    def setter(i, **changed):
        return lambda ix: ix["tuning"]["entries"][i].update(changed)

    missing = entries[b32]["kernel"][:-1] + "3"
    off = entries[at128]["streams"] + 1  # packs to as many bytes as the class it replaces

    def rename(record):
        record["streamz"] = record.pop("streams")
    return [
        ("missing kernel", setter(b32, kernel=missing),
         f"{where(b32)} names kernel {missing}, which is not in the index — rebuild the bundle"),
        ("causal flipped", setter(b32, causal=True),
         f"{where(b32, causal=True)} names kernel {entries[b32]['kernel']}, which is for fwd "
         "fp16 d32 full — rebuild the bundle"),
        ("op flipped", setter(fwd16, op="bwd"),
         f"{where(fwd16, op='bwd')} names kernel {entries[fwd16]['kernel']}, which is for fwd "
         f"fp16 d32 {'causal' if entries[fwd16]['causal'] else 'full'} — rebuild the bundle"),
        ("off a boundary", setter(at128, sq=129),
         f"{where(at128, sq=129)} has sq 129, which is not a boundary of buckets.seqlen — "
         "rebuild the bundle"),
        ("repeated key", setter(dup, sk=entries[dup - 1]["sk"]),
         f"{where(dup, sk=entries[dup - 1]['sk'])} repeats the key of entries[{dup - 1}] — "
         "rebuild the bundle"),
        ("unsorted bounds", lambda ix: ix["tuning"]["buckets"]["seqlen"].reverse(),
         "index.tuning.buckets.seqlen[1] is not above the boundary before it (16384) — "
         "rebuild the bundle"),
        ("streams off a boundary", setter(at128, streams=off),
         f"{where(at128, streams=off)} has streams {off}, which is not a boundary of "
         "buckets.streams — rebuild the bundle"),
        # renamed, not removed: the packed size stays
        ("streams left out", lambda ix: rename(ix["tuning"]["entries"][at128]),
         f"{where(at128).replace(' streams' + str(entries[at128]['streams']), '')} has no streams "
         "class, but buckets has a streams axis — rebuild the bundle"),
        ("streams without the axis", lambda ix: rename(ix["tuning"]["buckets"]),
         f"{where(0).replace('[0] (', '[0].streams (')} has a streams class, but buckets has no "
         "streams axis — rebuild the bundle"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_a_tampered_tuning_entry_is_a_corrupt_archive(toy_tuned_archive, tmp_path, case):
    src, _ = toy_tuned_archive
    name, edit, expected = _tampered_cases(read_archive(src).index)[case]
    path = resealed(src, tmp_path / "a.apk", edit_index=edit)
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, recording=True) == \
        f"archive {path}: {expected}", name


def test_tuning_entries_without_buckets_are_malformed(tmp_path):
    kernels = attention_kernels(dtypes=("fp16",), head_dims=(64,))
    entry = {"op": "fwd", "dtype": "fp16", "head_dim": 64, "causal": False, "gqa": 1, "sq": 128,
             "sk": 128, "kernel": "synth/fwd/fp16-d64-full/M128"}
    path = write_synthetic(tmp_path / "a.apk", kernels, tuning={
        "buckets": {"gqa": [1]}, "entries": [entry], "provenance": {}})
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90") == (
        f"archive {path}: index.tuning.buckets has no 'seqlen' — the archive and this runtime "
        "disagree on format 3.x; rebuild the bundle")
    path = write_synthetic(tmp_path / "b.apk", kernels, tuning={
        "buckets": {"gqa": [1], "seqlen": []}, "entries": [entry], "provenance": {}})
    assert expect_error(S.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90") == (
        f"archive {path}: index.tuning.buckets.seqlen is empty, but the tuning map has entries "
        "— rebuild the bundle")


def test_preload_of_the_whole_table_includes_tuned_kernels(toy_tuned_archive):
    path, _ = toy_tuned_archive
    with rt.Bundle(path, recording=True) as bundle:
        bundle.preload()
        loaded = bundle.recorded_launches()["loaded"]
    # every kernel of this archive is a default or a tuned entry's (BLOCK32_warps2 only the
    # latter), so every image loads, once
    images = read_archive(path).index["images"]
    assert sorted(loaded) == sorted(f"{i['symbol']} {i['sha256'].hex()}" for i in images)
