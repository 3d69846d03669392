"""The clock probe of attnpack.bench.timing without a GPU: a simulated stream where every queued
operation advances one clock (a spin of n cycles takes n / f, the call and the flush fixed
times) and events read it. The probe must give back the clock the stream ran at, and the
call's time alone, in the bench's regime (Timer.clocked_samples) and back to back
(sustained_samples)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from attnpack.bench import timing


class Stream:
    """A GPU timeline in ms; the SM clock is `ghz`, which the test may change between ops."""

    def __init__(self, ghz):
        self.now, self.ghz, self.log = 0.0, ghz, []

    def sleep(self, cycles):
        self.log.append("sleep")
        self.now += cycles / (self.ghz * 1e6)


def fake_torch(stream):
    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            stream.log.append("record")
            self.t = stream.now

        def elapsed_time(self, end):
            return end.t - self.t

    class Flush:
        def zero_(self):
            stream.log.append("flush")
            stream.now += 0.07

    cuda = SimpleNamespace(Event=Event, synchronize=lambda: None, _sleep=stream.sleep)
    return SimpleNamespace(cuda=cuda, empty=lambda *a, **k: Flush(), uint8=None,
                           device=lambda d: d), Flush()


@pytest.fixture
def stream(monkeypatch):
    s = Stream(ghz=1.5)
    torch, flush = fake_torch(s)
    monkeypatch.setattr(timing, "torch", torch)
    monkeypatch.setattr(timing, "wall_ms", lambda fn: fn() or 0.2)
    return s, flush


def make_timer(flush, reps=4, warmup=2):
    timer = timing.Timer.__new__(timing.Timer)   # no device to ask for its L2 size
    timer.reps, timer.warmup, timer.flush = reps, warmup, flush
    return timer


def test_clocked_samples_give_the_call_time_and_the_stream_clock(stream):
    s, flush = stream

    def call():
        s.log.append("call")
        s.now += 0.25                            # ms

    samples = make_timer(flush).clocked_samples(call, reps=3)
    assert samples == [pytest.approx((0.25, 1.5))] * 3
    assert s.log == ["call"] * 2 + ["flush", "record", "sleep", "record", "call", "record",
                                    "sleep", "record"] * 3


def test_the_probe_follows_the_clock_and_cycles_stay(stream):
    """A call of fixed cycles at a clock that drops between reps: the time grows, the probes
    read the new clock, and time x clock (the cycles) stays the same once the probes on both
    sides of a call see its clock."""
    s, flush = stream
    clocks = iter([1.9, 1.9, 1.9, 1.6, 1.6])     # per call: 2 warm-up, then 3 reps

    def call():
        s.ghz = next(clocks)                     # the clock changes as the call starts...
        s.now += 0.5e6 / (s.ghz * 1e6)           # ...and the call takes 0.5 M cycles
    samples = make_timer(flush).clocked_samples(call, reps=3)
    (ms1, ghz1), (ms2, ghz2), (ms3, ghz3) = samples
    assert (ms1, ghz1, ms1 * ghz1) == pytest.approx((0.5 / 1.9, 1.9, 0.5))
    assert (ms3, ghz3, ms3 * ghz3) == pytest.approx((0.5 / 1.6, 1.6, 0.5))
    # the rep where the clock changed: its first probe still ran at the old clock
    assert ghz2 == pytest.approx((1.9 + 1.6) / 2) and ms2 == pytest.approx(0.5 / 1.6)


def test_sustained_samples_time_groups_back_to_back(stream):
    s, flush = stream

    def call():
        s.log.append("call")
        s.now += 0.1
    samples = timing.sustained_samples(call, seconds=0.002, probe_every=4)
    assert len(samples) == 3                      # at least three groups
    assert samples == [pytest.approx((0.1, 1.5))] * 3
    assert "flush" not in s.log
    assert s.log[-(1 + 4 + 3):] == ["record", "call", "call", "call", "call", "record",
                                    "sleep", "record"]
