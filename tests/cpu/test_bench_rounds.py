"""`attnpack bench`'s rounds without a GPU: the backends of a row take turns in alternating
order (ABBA), each round timing its share of the calls, and a backend's timing is the median
over all its rounds. measure_shape runs with its GPU-facing pieces replaced by recorders."""
from __future__ import annotations

import contextlib
import json
import statistics
from pathlib import Path

import pytest

from attnpack.bench import measure
from attnpack.bench.shapes import Shape

SHAPE = Shape(batch=2, heads_q=8, heads_kv=8, seqlen_q=128, seqlen_k=128, head_dim=64,
              causal=True, dtype="bf16")
BACKENDS = ("attnpack", "default", "flash", "efficient")


def test_round_order_alternates_and_round_reps_split_evenly():
    assert measure.round_order(BACKENDS, 2) == [
        (0, "attnpack"), (0, "default"), (0, "flash"), (0, "efficient"),
        (1, "efficient"), (1, "flash"), (1, "default"), (1, "attnpack")]
    assert measure.round_order(("a", "b"), 3) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"),
                                                  (2, "a"), (2, "b")]
    assert measure.round_order(("a", "b"), 1) == [(0, "a"), (0, "b")]
    assert measure.round_reps(30, 2) == [15, 15]
    assert measure.round_reps(5, 2) == [3, 2]
    assert measure.round_reps(7, 3) == [3, 2, 2]
    with pytest.raises(ValueError, match="reps 1 must be >= rounds 2"):
        measure.round_reps(1, 2)


class FakeTimer:
    """Each timed call of round r of backend b lasts `base[b] + r` ms: the median over both
    rounds of 15 calls each is base + 0.5, which neither round alone gives."""
    reps, warmup = 30, 5

    def __init__(self, log):
        self.log = log

    def samples(self, fn, reps):
        name, op, r = fn()
        self.log.append(("time", name, op, r, reps))
        return [{"attnpack": 1.0, "default": 2.0, "flash": 3.0}[name] + r] * reps


@pytest.fixture()
def recorded(monkeypatch):
    log, state = [], {"backend": None, "rounds": {}}

    @contextlib.contextmanager
    def backend(name):
        state["backend"] = name
        state["rounds"][name] = state["rounds"].get(name, -1) + 1
        log.append(("enter", name))
        yield

    def first_call(op, shape, tensors):
        name = state["backend"]
        if name == "efficient":
            return None, {"error": "efficient refuses"}
        r = state["rounds"][name]
        return (lambda: (name, op, r)), {}

    monkeypatch.setattr(measure, "make_inputs", lambda shape: ("q", "k", "v", "do"))
    monkeypatch.setattr(measure, "backend", backend)
    monkeypatch.setattr(measure, "first_call", first_call)
    monkeypatch.setattr(measure, "default_choice", lambda shape, q, k, v: "cudnn")
    monkeypatch.setattr(measure, "served_summary", lambda stats, op, entry: f"served {op}")
    monkeypatch.setattr(measure.attnpack_torch, "sdpa_entry", lambda *a: "entry")
    monkeypatch.setattr(measure.attnpack_torch, "reset_stats",
                        lambda: log.append(("reset", state["backend"])))
    monkeypatch.setattr(measure.attnpack_torch, "stats", lambda: {})
    monkeypatch.setattr(measure.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(measure.torch.cuda, "empty_cache", lambda: None)
    return log


def test_measure_shape_takes_turns_and_pools_rounds(recorded):
    out = measure.measure_shape(SHAPE, ("fwd", "fwdbwd"), BACKENDS, FakeTimer(recorded), 2)
    entered = [e[1] for e in recorded if e[0] == "enter"]
    assert entered == ["attnpack", "default", "flash", "efficient",
                       "efficient", "flash", "default", "attnpack"]
    timed = [e[1:] for e in recorded if e[0] == "time"]
    assert timed == [("attnpack", "fwd", 0, 15), ("attnpack", "fwdbwd", 0, 15),
                     ("default", "fwd", 0, 15), ("default", "fwdbwd", 0, 15),
                     ("flash", "fwd", 0, 15), ("flash", "fwdbwd", 0, 15),
                     ("flash", "fwd", 1, 15), ("flash", "fwdbwd", 1, 15),
                     ("default", "fwd", 1, 15), ("default", "fwdbwd", 1, 15),
                     ("attnpack", "fwd", 1, 15), ("attnpack", "fwdbwd", 1, 15)]
    # stats are reset before each op of attnpack's first round only
    assert [e for e in recorded if e[0] == "reset"] == [("reset", "attnpack")] * 2
    for op in ("fwd", "fwdbwd"):
        got = out[op]["backends"]
        assert got["attnpack"] == {"ms": 1.5, "min_ms": 1.0, "max_ms": 2.0, "reps": 30,
                                   "round_ms": [1.0, 2.0]}
        assert got["default"] == {"ms": 2.5, "min_ms": 2.0, "max_ms": 3.0, "reps": 30,
                                  "round_ms": [2.0, 3.0], "backend": "cudnn"}
        assert got["flash"]["ms"] == statistics.median([3.0] * 15 + [4.0] * 15)
        assert got["efficient"] == {"error": "efficient refuses"}
        assert out[op]["served"] == f"served {op}"


def test_one_round_when_reps_are_fewer_than_rounds(recorded):
    timer = FakeTimer(recorded)
    timer.reps = 1
    out = measure.measure_shape(SHAPE, ("fwd",), ("attnpack", "default"), timer, 2)
    assert [e[1] for e in recorded if e[0] == "enter"] == ["attnpack", "default"]
    assert out["fwd"]["backends"]["attnpack"]["reps"] == 1
    assert "round_ms" not in out["fwd"]["backends"]["attnpack"]  # one round: nothing to split


def test_report_shows_the_rounds_apart():
    """The report's rounds table: the ratio from each round alone and each backend's drift,
    from the rows that kept `round_ms`; none of it for a run without them."""
    from attnpack.bench import report

    def row(set_name, op, ours, cudnn):
        return {"set": set_name, "op": op,
                "backends": {"attnpack": {"ms": sum(ours) / 2, "round_ms": ours},
                             "default": {"ms": sum(cudnn) / 2, "round_ms": cudnn}}}
    results = {"rows": [row("shapes", "fwd", [1.0, 1.1], [1.0, 1.0]),
                        row("shapes", "fwd", [2.0, 2.2], [2.2, 2.2]),
                        row("model_shapes", "fwd", [1.0, 1.0], [1.0, 0.9]),
                        {"set": "shapes", "op": "fwdbwd",
                         "backends": {"attnpack": {"ms": 1.0}, "default": {"ms": 1.0}}}]}
    lines = report.rounds_table(results).splitlines()
    assert lines[0] == ("| set | op | rows | x default, round 1 alone | x default, round 2 alone "
                        "| attnpack last round / first | default last round / first |")
    # round 1: geomean(1.0/1.0, 2.2/2.0) = 1.05x; round 2: geomean(1.0/1.1, 2.2/2.2) = 0.95x
    assert lines[2] == "| shapes | fwd | 2 | 1.05x | 0.95x | 1.100 | 1.000 |"
    assert lines[3] == "| model_shapes | fwd | 1 | 1.00x | 0.90x | 1.000 | 0.900 |"
    assert len(lines) == 4  # the fwdbwd row kept no rounds
    assert report.rounds_table({"rows": results["rows"][3:]}) == ""
    # the terminal report carries it too, after the rows
    from attnpack.bench.report import render_text
    fixture = json.loads((Path(__file__).parent / "fixtures" / "bench" / "results.json")
                         .read_text())
    assert "the rounds apart" not in render_text(fixture)
    row = next(r for r in fixture["rows"] if "attnpack" in r["backends"]
               and "default" in r["backends"] and "error" not in r["backends"]["default"])
    row["backends"]["attnpack"]["round_ms"] = [1.0, 1.1]
    row["backends"]["default"]["round_ms"] = [1.0, 1.0]
    text = render_text(fixture)
    assert text.index("## the rounds apart") > text.index("(worst first)")
    assert f"| {row['set']} | {row['op']} | 1 | 1.00x | 0.91x | 1.100 | 1.000 |" in text


def test_report_says_how_the_rounds_ran():
    from attnpack.bench import report
    results = json.loads((Path(__file__).parent / "fixtures" / "bench" / "results.json")
                         .read_text())
    plain = report.render_markdown(results)
    assert "rounds" not in plain and "untimed" not in plain  # a run from before them
    results["settings"].update(rounds=2, settle=True)
    md = report.render_markdown(results)
    assert "The backends take turns in 2 rounds, in alternating order" in md
    assert "The first row is run once, untimed, before the rows." in md


def test_rounds_option_reaches_the_bench_and_is_checked(monkeypatch, tmp_path):
    """`attnpack bench --rounds N` times each row in N rounds (the default is run.ROUNDS); a
    count outside 1..--reps is refused before anything runs, naming the option."""
    from click.testing import CliRunner

    from attnpack.bench import command, run
    from attnpack.cli import main
    seen = []
    monkeypatch.setattr(run, "run_bench",
                        lambda *a, **kw: seen.append(kw["rounds"]) or {"rows": []})
    for rounds in (None, 4):
        command.measure(None, "fwd", "bf16", "attnpack,default", 1, None, 30, 5, False, 10, 2,
                        False, 0, progress=None, rounds=rounds)
    assert seen == [run.ROUNDS, 4]
    for bad in ("0", "31"):
        done = CliRunner().invoke(main, ["bench", "--rounds", bad, "--reps", "30",
                                         "--out", str(tmp_path)])
        assert done.exit_code != 0 and f"--rounds {bad}: give 1 to 30 (--reps)" in done.output
    assert seen == [run.ROUNDS, 4]


def test_report_names_more_rounds():
    import json
    from pathlib import Path

    from attnpack.bench import report
    results = json.loads((Path(__file__).parent / "fixtures" / "bench" / "results.json")
                         .read_text())
    results["settings"].update(rounds=4, settle=True)
    assert ("The backends take turns in 4 rounds, in alternating order (attnpack first, then "
            "last, and so on)") in report.render_markdown(results)
