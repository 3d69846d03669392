"""GPU timing shared by `attnpack bench` and the scripts in bench/.

Steady state: `warmup` calls first, then `reps` timed calls, each after writing a buffer larger
than the L2 cache (so no call finds its inputs in L2 from the one before), each between two
CUDA events; the median counts. The host does not wait between reps: it queues the flush and
the call and runs ahead while the GPU flushes, so a call's time is its GPU time and not the
host's launch cost, except where the host cannot keep up (then that cost is real and shows).
Several callables compared with each other take turns call by call (`Timer.turns`), so every one
of them meets the same clocks: the clock a call gets follows what the GPU ran before it, by up to
12 % on long calls (docs/performance.md, "The order of the turns").
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

MIN_FLUSH_BYTES = 256 << 20     # also Triton's do_bench flush; 4x the H200's 60 MB L2
MATMUL_N = 8192                 # the dense bf16 matmul the attention rates are expressed against
# The clock probe: torch.cuda._sleep(n) spins n SM cycles on the stream, so n over its event
# time is the SM clock while it ran (about 50-65 us on an H200; events resolve ~0.5 us).
PROBE_CYCLES = 100_000
# The spin before a timed call's start event (Timer.queue's lead_cycles), about 100-120 us of GPU
# time at the H200's clocks: the host queues the call meanwhile, so its launch time stays out of
# the timing wherever the host is not ahead of the GPU (attnpack tune's ctypes calls; the bench
# switching backends between calls).
HOST_LEAD_CYCLES = 200_000


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    max_ms: float
    reps: int

    def as_dict(self) -> dict:
        return {"ms": self.median_ms, "min_ms": self.min_ms, "max_ms": self.max_ms,
                "reps": self.reps}


def summarize(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), min(samples), max(samples), len(samples))


class Timer:
    """Median GPU time of a callable at steady state, after an L2 flush before every rep."""

    def __init__(self, reps: int = 30, warmup: int = 5, device=None):
        if reps < 1 or warmup < 0:
            raise ValueError(f"reps {reps} must be >= 1 and warmup {warmup} >= 0")
        self.reps, self.warmup = reps, warmup
        device = torch.device(device or "cuda")
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
        self.flush_bytes = max(MIN_FLUSH_BYTES, 4 * l2)
        self.flush = torch.empty(self.flush_bytes, dtype=torch.uint8, device=device)

    def time(self, fn: Callable[[], object]) -> Timing:
        return summarize(self.samples(fn, self.reps))

    def samples(self, fn: Callable[[], object], reps: int,
                lead_cycles: int = 0) -> list[float]:
        """`warmup` calls, then `reps` timed ones: each call's GPU time in ms. With
        `lead_cycles`, the GPU spins that many cycles after each flush, before the start event,
        so a host slower to launch `fn` than the flush takes to run has queued the call by the
        time the event fires (attnpack tune's candidates go through the ctypes binding). One
        callable's turns: its calls back to back."""
        return self.turns({"": fn}, reps, lead_cycles)[""]

    def turns(self, fns: dict[str, Callable[[], object]], reps: int,
              lead_cycles: int = 0) -> dict[str, list[float]]:
        """Each of `fns` makes its `warmup` calls (in order), then they take turns call by call
        in alternating order (turn_order) until each made `reps` timed calls, all queued before
        one wait: {name: each timed call's GPU time in ms}. A call that raises while warming or
        queued propagates; `fns` a caller built can be warmed one by one first to sort out the
        ones that refuse."""
        for fn in fns.values():
            self.warm(fn)
        events: dict[str, list] = {name: [] for name in fns}
        for name, n in turn_order(tuple(fns), reps, 1):
            events[name] += [self.queue(fns[name], lead_cycles) for _ in range(n)]
        torch.cuda.synchronize()
        return {name: elapsed_ms(pairs) for name, pairs in events.items()}

    def warm(self, fn: Callable[[], object]) -> None:
        """The `warmup` untimed calls."""
        for _ in range(self.warmup):
            fn()

    def queue(self, fn: Callable[[], object], lead_cycles: int = 0) -> tuple:
        """Queues one timed call: the L2 flush, the spin of `lead_cycles` (see samples), then
        `fn` between two events; (start, end), to be read with elapsed_ms once the GPU is past
        them. Nothing waits: the host runs ahead while the GPU works."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.flush.zero_()
        if lead_cycles:
            torch.cuda._sleep(lead_cycles)
        start.record()
        fn()
        end.record()
        return start, end

    def median_ms(self, fn: Callable[[], object]) -> float:
        return self.time(fn).median_ms

    def clocked_samples(self, fn: Callable[[], object], reps: int) -> list[tuple[float, float]]:
        """As `samples`, with a clock probe right before and right after each timed call:
        (ms, GHz) per call, the clock the mean of the two probes. time x clock is the call's
        cycles, which do not move with the clock the GPU happens to run at."""
        self.warm(fn)
        marks = []
        for _ in range(reps):
            self.flush.zero_()
            marks.append(_probed(fn))
        torch.cuda.synchronize()
        return [_probed_sample(m, 1) for m in marks]


def turn_order(names, reps: int, turn_calls: int) -> list[tuple[str, int]]:
    """(name, timed calls) of each turn, in the order they run: every name takes a turn of
    `turn_calls` calls (fewer in the last turns, so that each makes `reps`), the names in their
    order, then in reverse, and so on (ABBA), so none is always first or last."""
    if reps < 1 or turn_calls < 1:
        raise ValueError(f"reps {reps} and turn_calls {turn_calls} must be >= 1")
    order, done, forward = [], 0, True
    while done < reps:
        n = min(turn_calls, reps - done)
        order += [(name, n) for name in (names if forward else tuple(reversed(names)))]
        done, forward = done + n, not forward
    return order


def elapsed_ms(events) -> list[float]:
    """The ms between each (start, end) pair of recorded events (after a synchronize)."""
    return [start.elapsed_time(end) for start, end in events]


def probe_ghz(start, end) -> float:
    """The SM clock over a PROBE_CYCLES spin between two recorded events."""
    return PROBE_CYCLES / (start.elapsed_time(end) * 1e6)


def _probed(inner: Callable[[], object]) -> list:
    """Queues a clock probe, `inner`, and another probe, between four events."""
    a, b, c, d = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    a.record()
    torch.cuda._sleep(PROBE_CYCLES)
    b.record()
    inner()
    c.record()
    torch.cuda._sleep(PROBE_CYCLES)
    d.record()
    return [a, b, c, d]


def _probed_sample(marks, calls: int) -> tuple[float, float]:
    """(ms per call of the `calls` between the probes, the probes' mean GHz)."""
    a, b, c, d = marks
    return b.elapsed_time(c) / calls, (probe_ghz(a, b) + probe_ghz(c, d)) / 2


def sustained_samples(fn: Callable[[], object], seconds: float,
                      probe_every: int) -> list[tuple[float, float]]:
    """Calls back to back, no flush, for about `seconds`, a clock probe before and after every
    `probe_every` of them: (ms per call, GHz) per group."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    one = wall_ms(fn)
    groups = max(3, int(seconds * 1e3 / max(one * probe_every, 1e-3)))

    def group():
        for _ in range(probe_every):
            fn()
    marks = [_probed(group) for _ in range(groups)]
    torch.cuda.synchronize()
    return [_probed_sample(m, probe_every) for m in marks]


def matmul_tflops(timer: Timer, n: int = MATMUL_N) -> float:
    """The dense bf16 matmul rate (n^3, TFLOP/s) measured with `timer`: the ceiling attention
    rates are expressed against, measured in the same run."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = timer.median_ms(lambda: a @ b)
    return 2 * n ** 3 / ms / 1e9


def wall_ms(fn: Callable[[], object]) -> float:
    """Host wall time of one call until the GPU is done (for first calls, where the host-side
    work, such as building a cuDNN plan or loading a module, is the cost)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def host_us_turns(sides: dict[str, tuple[Callable[[], object], Callable[[], object]]],
                  calls: int, repeats: int,
                  sync: Callable[[], object] = torch.cuda.synchronize) -> dict[str, list[float]]:
    """Host time per call of calls bound by the host, for each side (name -> (a context manager
    factory the side's calls run in, the call)): `calls` back-to-back calls, one `sync`, wall
    time over `calls`, as one sample; `repeats` samples a side, the sides taking turns sample
    by sample (the first side first in even turns, last in odd ones) with the garbage collector
    off, so a drift of the host's speed over the run (run147: one side's median moved 60-130 us
    a call between processes, at 200-330 us) falls on both sides alike. Returns each side's
    samples in turn order: sample i of two sides is a pair."""
    for context, fn in sides.values():
        with context():
            for _ in range(50):
                fn()
            sync()
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for turn in range(repeats):
            for name in names if turn % 2 == 0 else names[::-1]:
                context, fn = sides[name]
                with context():
                    sync()
                    start = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    sync()
                    samples[name].append((time.perf_counter() - start) / calls * 1e6)
    finally:
        if collecting:
            gc.enable()
    return samples
