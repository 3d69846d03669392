"""`attnpack bench`'s turns without a GPU: one op after the other, every backend makes its first
and warm-up calls, then the backends take turns of `turn_calls` timed calls in alternating order
(ABBA) until each made the timer's reps, all queued before one wait; a backend's timing keeps
the medians of its first and second half of calls. measure_shape runs with its GPU-facing
pieces replaced by recorders."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from attnpack.bench import measure
from attnpack.bench.shapes import Shape

SHAPE = Shape(batch=2, heads_q=8, heads_kv=8, seqlen_q=128, seqlen_k=128, head_dim=64,
              causal=True, dtype="bf16")
BACKENDS = ("attnpack", "default", "flash", "efficient")
FIXTURE = Path(__file__).parent / "fixtures" / "bench" / "results.json"


def test_turn_order_alternates_and_every_backend_makes_its_reps():
    assert measure.turn_order(("a", "b"), 3, 1) == [("a", 1), ("b", 1), ("b", 1), ("a", 1),
                                                    ("a", 1), ("b", 1)]
    assert measure.turn_order(("a", "b", "c"), 30, 15) == [
        ("a", 15), ("b", 15), ("c", 15), ("c", 15), ("b", 15), ("a", 15)]
    assert measure.turn_order(("a", "b"), 5, 2) == [("a", 2), ("b", 2), ("b", 2), ("a", 2),
                                                    ("a", 1), ("b", 1)]
    assert measure.turn_order(("a",), 2, 5) == [("a", 2)]
    for bad in ((0, 1), (1, 0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            measure.turn_order(("a",), *bad)


class FakeTimer:
    """The n-th timed call of a backend (from 0) lasts base + n ms, read as events are: a
    queued call returns its pair, and elapsed_ms reads the times once all are queued."""
    reps, warmup = 4, 2

    def __init__(self, log, state):
        self.log, self.state = log, state
        self.made = {}

    def warm(self, fn):
        self.log.append(("warm", self.state["backend"]) + fn())

    def queue(self, fn, lead_cycles=0):
        name, op = fn()
        assert name == self.state["backend"]  # called under its own backend's context
        n = self.made.get((name, op), 0)
        self.made[(name, op)] = n + 1
        self.log.append(("time", name, op, lead_cycles))
        return {"attnpack": 1.0, "default": 2.0, "flash": 3.0}[name] + n


@pytest.fixture()
def recorded(monkeypatch):
    log, state = [], {"backend": None}

    @contextlib.contextmanager
    def backend(name):
        state["backend"] = name
        log.append(("enter", name))
        yield
        state["backend"] = None

    def first_call(op, shape, tensors):
        name = state["backend"]
        if name == "efficient":
            return None, {"error": "efficient refuses"}
        return (lambda: (state["backend"], op)), {}

    monkeypatch.setattr(measure, "make_inputs", lambda shape: ("q", "k", "v", "do"))
    monkeypatch.setattr(measure, "backend", backend)
    monkeypatch.setattr(measure, "first_call", first_call)
    monkeypatch.setattr(measure, "elapsed_ms", lambda events: list(events))
    monkeypatch.setattr(measure, "default_choice", lambda shape, q, k, v: "cudnn")
    monkeypatch.setattr(measure, "served_summary", lambda stats, op, entry: f"served {op}")
    monkeypatch.setattr(measure.attnpack_torch, "sdpa_entry", lambda *a: "entry")
    monkeypatch.setattr(measure.attnpack_torch, "reset_stats",
                        lambda: log.append(("reset", state["backend"])))
    monkeypatch.setattr(measure.attnpack_torch, "stats", lambda: log.append(("stats",)) or {})
    monkeypatch.setattr(measure.torch.cuda, "synchronize", lambda: log.append(("sync",)))
    monkeypatch.setattr(measure.torch.cuda, "empty_cache", lambda: None)
    return log, state


def test_measure_shape_takes_turns_call_by_call(recorded):
    log, state = recorded
    out = measure.measure_shape(SHAPE, ("fwd", "fwdbwd"), BACKENDS, FakeTimer(log, state))
    lead = measure.HOST_LEAD_CYCLES
    for op in ("fwd", "fwdbwd"):
        at = log.index(("reset", "attnpack"), 0 if op == "fwd" else log.index(("stats",)) + 1)
        part = log[at:log.index(("stats",), at) + 1]
        # first and warm-up calls of each backend, the refusing one none, then ABBA turns
        assert [e for e in part if e[0] == "warm"] == [
            ("warm", "attnpack", "attnpack", op), ("warm", "default", "default", op),
            ("warm", "flash", "flash", op)]
        assert [e[1] for e in part if e[0] == "time"] == ["attnpack", "default", "flash",
                                                         "flash", "default", "attnpack"] * 2
        assert all(e[3] == lead for e in part if e[0] == "time")
        # one wait, after every timed call was queued, then attnpack's stats
        assert part[-2:] == [("sync",), ("stats",)]
        assert [e for e in part if e[0] == "sync"] == [("sync",)]
        got = out[op]["backends"]
        assert got["attnpack"] == {"ms": 2.5, "min_ms": 1.0, "max_ms": 4.0, "reps": 4,
                                   "half_ms": [1.5, 3.5]}
        assert got["default"] == {"ms": 3.5, "min_ms": 2.0, "max_ms": 5.0, "reps": 4,
                                  "half_ms": [2.5, 4.5], "backend": "cudnn"}
        assert got["flash"]["half_ms"] == [3.5, 5.5]
        assert got["efficient"] == {"error": "efficient refuses"}
        assert out[op]["served"] == f"served {op}"


def test_turns_of_several_calls_and_one_call_only(recorded):
    log, state = recorded
    timer = FakeTimer(log, state)
    measure.measure_shape(SHAPE, ("fwd",), ("attnpack", "default"), timer, turn_calls=2)
    assert [e[1] for e in log if e[0] == "time"] == ["attnpack"] * 2 + ["default"] * 4 \
        + ["attnpack"] * 2
    log.clear()
    measure.measure_shape(SHAPE, ("fwd",), ("attnpack",), FakeTimer(log, state), lead_cycles=0)
    assert [e[3] for e in log if e[0] == "time"] == [0] * FakeTimer.reps
    log.clear()
    timer = FakeTimer(log, state)
    timer.reps = 1
    out = measure.measure_shape(SHAPE, ("fwd",), ("attnpack", "default"), timer)
    assert out["fwd"]["backends"]["attnpack"] == {"ms": 1.0, "min_ms": 1.0, "max_ms": 1.0,
                                                  "reps": 1}  # one call: no halves


def test_a_backend_that_fails_while_timing_drops_out_alone(recorded):
    log, state = recorded

    class Failing(FakeTimer):
        def warm(self, fn):
            if self.state["backend"] == "default":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            super().warm(fn)

        def queue(self, fn, lead_cycles=0):
            if self.state["backend"] == "flash":
                raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore")
            return super().queue(fn, lead_cycles)
    out = measure.measure_shape(SHAPE, ("fwd",), BACKENDS, Failing(log, state))
    got = out["fwd"]["backends"]
    assert got["flash"] == {"error": "failed while timing: CUDA out of memory. Tried to "
                                     "allocate 2 GiB"}
    assert got["default"] == {"error": "failed while timing: CUDA error: an illegal memory "
                                       "access was encountered"}
    assert got["attnpack"]["reps"] == 4
    assert [e[1] for e in log if e[0] == "time"] == ["attnpack"] * 4


def test_report_shows_the_halves_apart():
    """The report's halves table: the ratio from each half of the calls alone and each
    backend's drift, from `half_ms` or (run105) two rounds' `round_ms`; none for a run
    without them."""
    from attnpack.bench import report

    def row(set_name, op, ours, cudnn, key="half_ms"):
        return {"set": set_name, "op": op,
                "backends": {"attnpack": {"ms": sum(ours) / 2, key: ours},
                             "default": {"ms": sum(cudnn) / 2, key: cudnn}}}
    results = {"rows": [row("shapes", "fwd", [1.0, 1.1], [1.0, 1.0]),
                        row("shapes", "fwd", [2.0, 2.2], [2.2, 2.2], key="round_ms"),
                        row("model_shapes", "fwd", [1.0, 1.0], [1.0, 0.9]),
                        row("model_shapes", "fwdbwd", [1.0, 1.0, 1.0], [1.0, 1.0, 1.0],
                            key="round_ms"),
                        {"set": "shapes", "op": "fwdbwd",
                         "backends": {"attnpack": {"ms": 1.0}, "default": {"ms": 1.0}}}]}
    lines = report.halves_table(results).splitlines()
    assert lines[0] == ("| set | op | rows | x default, first half alone | x default, second "
                        "half alone | attnpack second half / first | default second half / "
                        "first |")
    # first: geomean(1.0/1.0, 2.2/2.0) = 1.05x; second: geomean(1.0/1.1, 2.2/2.2) = 0.95x
    assert lines[2] == "| shapes | fwd | 2 | 1.05x | 0.95x | 1.100 | 1.000 |"
    assert lines[3] == "| model_shapes | fwd | 1 | 1.00x | 0.90x | 1.000 | 0.900 |"
    assert len(lines) == 4  # three rounds and no halves: left out
    assert report.halves_table({"rows": results["rows"][3:]}) == ""
    from attnpack.bench.report import render_text
    fixture = json.loads(FIXTURE.read_text())
    assert "the halves apart" not in render_text(fixture)
    row = next(r for r in fixture["rows"] if "attnpack" in r["backends"]
               and "default" in r["backends"] and "error" not in r["backends"]["default"])
    row["backends"]["attnpack"]["half_ms"] = [1.0, 1.1]
    row["backends"]["default"]["half_ms"] = [1.0, 1.0]
    text = render_text(fixture)
    assert text.index("## the halves apart") > text.index("(worst first)")
    assert f"| {row['set']} | {row['op']} | 1 | 1.00x | 0.91x | 1.100 | 1.000 |" in text


def test_report_says_how_the_backends_took_turns():
    from attnpack.bench import report
    results = json.loads(FIXTURE.read_text())
    plain = report.render_markdown(results)
    assert "take turns" not in plain and "untimed" not in plain  # a run from before them
    results["settings"].update(turn_calls=1, lead_cycles=200000, settle=True)
    md = report.render_markdown(results)
    assert "The backends take turns call by call in alternating order (" in md
    assert "behind a GPU spin of 200,000 cycles" in md
    assert "The first row is run once, untimed, before the rows." in md
    results["settings"].update(turn_calls=15, lead_cycles=0)
    md = report.render_markdown(results)
    assert "The backends take turns of 15 calls in alternating order" in md
    assert "spin" not in md
    del results["settings"]["turn_calls"]
    results["settings"]["rounds"] = 2  # run105 and before
    assert ("The backends take turns in 2 rounds, in alternating order (attnpack first, then "
            "last)") in report.render_markdown(results)


def test_turn_calls_option_reaches_the_bench_and_is_checked(monkeypatch, tmp_path):
    """`attnpack bench --turn-calls N --lead-cycles C` (None: measure.TURN_CALLS and
    timing.HOST_LEAD_CYCLES, decided in run_bench); a count outside 1..--reps or a negative spin
    is refused before anything runs, naming the option."""
    from click.testing import CliRunner

    from attnpack.bench import command, run
    from attnpack.cli import main
    seen = []
    monkeypatch.setattr(run, "run_bench",
                        lambda *a, **kw: seen.append((kw["turn_calls"], kw["lead_cycles"]))
                        or {"rows": []})
    for turn_calls, lead in ((None, None), (4, 0)):
        command.measure(None, "fwd", "bf16", "attnpack,default", 1, None, 30, 5, False, 10, 2,
                        False, 0, progress=None, turn_calls=turn_calls, lead_cycles=lead)
    assert seen == [(None, None), (4, 0)]
    for bad in ("0", "31"):
        done = CliRunner().invoke(main, ["bench", "--turn-calls", bad, "--reps", "30",
                                         "--out", str(tmp_path)])
        assert done.exit_code != 0 and f"--turn-calls {bad}: give 1 to 30 (--reps)" in done.output
    done = CliRunner().invoke(main, ["bench", "--lead-cycles", "-1", "--out", str(tmp_path)])
    assert done.exit_code != 0 and "--lead-cycles -1: give 0 (no spin) or more" in done.output
    assert seen == [(None, None), (4, 0)]


def test_time_op_times_one_backend_alone(monkeypatch):
    """time_op, the bench/ scripts' one-kernel timing (bench/kernel_ab.py, gluon_bwd.py): its
    warm-up and reps back to back through Timer.samples, or the refusal, or the failure."""
    monkeypatch.setattr(measure, "default_choice", lambda shape, q, k, v: "cudnn")
    calls = []
    monkeypatch.setattr(measure, "first_call",
                        lambda op, shape, tensors: ((lambda: calls.append(op)), {}))

    class Timer:
        reps = 3

        def samples(self, fn, reps):
            fn()
            return [2.0, 1.0, 3.0][:reps]
    got = measure.time_op("default", "fwd", SHAPE, ("q", "k", "v", "do"), Timer())
    assert got == {"ms": 2.0, "min_ms": 1.0, "max_ms": 3.0, "reps": 3, "half_ms": [2.0, 2.0],
                   "backend": "cudnn"} and calls == ["fwd"]

    class Failing(Timer):
        def samples(self, fn, reps):
            raise RuntimeError("CUDA out of memory.\nmore")
    assert measure.time_op("flash", "fwd", SHAPE, None, Failing()) == \
        {"error": "failed while timing: CUDA out of memory."}
    monkeypatch.setattr(measure, "first_call", lambda op, shape, tensors: (None, {"error": "no"}))
    assert measure.time_op("flash", "fwd", SHAPE, None, Timer()) == {"error": "no"}


def test_host_time_sides_take_turns_inside_their_own_context():
    """timing.host_us_turns (bench/torch_overhead.py's): 50 warm-up calls a side, then one
    sample a side a turn, the first side first in even turns and last in odd ones; every call
    runs inside its own side's context; the samples are microseconds a call (a side that
    sleeps 2 ms a call reads about 2000 more); the garbage collector is back on after."""
    import gc
    import time as clock

    from attnpack.bench.timing import host_us_turns
    log, inside = [], []

    def side(name):
        @contextlib.contextmanager
        def context():
            inside.append(name)
            yield
            inside.pop()

        def call():
            assert inside == [name]
            log.append(name)
            if name == "slow":
                clock.sleep(0.002)
        return context, call

    samples = host_us_turns({"fast": side("fast"), "slow": side("slow")}, calls=3, repeats=4,
                            sync=lambda: None)
    assert log[:100] == ["fast"] * 50 + ["slow"] * 50
    turns = [log[i] for i in range(100, len(log), 3)]
    assert turns == ["fast", "slow", "slow", "fast"] * 2 and len(log) == 100 + 4 * 2 * 3
    assert [len(v) for v in samples.values()] == [4, 4]
    assert all(s - f > 1500 for f, s in zip(samples["fast"], samples["slow"]))
    assert gc.isenabled()
