"""bench/kernel_timeline.py's reading of a profiler trace, on made-up kernel records (the
script itself needs a GPU): calls split at the bench's spin kernel, the next call's flush left
out, a fill inside a call kept, and the medians of start, duration and gap per kernel."""
import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "bench" / "kernel_timeline.py"
spec = importlib.util.spec_from_file_location("kernel_timeline", PATH)
kt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kt)

FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<unsigned char>>"
SPIN = "at::cuda::(anonymous namespace)::spin_kernel(long)"


def trace(call_starts, kernels):
    """Each call: flush, spin, then `kernels` as (name, offset from the spin's end, duration)."""
    events = []
    for t0 in call_starts:
        events += [(FILL, t0, t0 + 50.0), (SPIN, t0 + 50.0, t0 + 150.0)]
        events += [(name, t0 + 150.0 + off, t0 + 150.0 + off + dur) for name, off, dur in kernels]
    return events


def test_calls_split_at_the_spin_and_lose_the_next_flush():
    kernels = [("fwd", 0.0, 100.0), (FILL, 101.0, 2.0), ("bwd", 104.0, 300.0)]
    spans = kt.call_kernels(trace([0.0, 1000.0, 2000.0], kernels), 3)
    assert [[k[0] for k in s] for s in spans] == [["fwd", FILL, "bwd"]] * 3
    with pytest.raises(ValueError, match="2 spun calls, 3 were queued"):
        kt.call_kernels(trace([0.0, 1000.0], kernels), 3)


def test_timeline_medians_and_overlap():
    a = trace([0.0], [("pre", 0.0, 10.0), ("main", 12.0, 100.0), ("convert", 111.0, 5.0)])
    b = trace([1000.0], [("pre", 0.0, 12.0), ("main", 11.0, 104.0), ("convert", 114.0, 5.0)])
    c = trace([2000.0], [("pre", 0.0, 11.0), ("main", 12.0, 102.0), ("convert", 116.0, 7.0)])
    rows = kt.timeline(kt.call_kernels(a + b + c, 3))
    by = {r["kernel"]: r for r in rows}
    assert by["pre"] == {"kernel": "pre", "start_us": 0.0, "duration_us": 11.0, "gap_us": 0.0}
    assert by["main"]["start_us"] == 12.0 and by["main"]["duration_us"] == 102.0
    assert by["main"]["gap_us"] == 1.0  # gaps 2, -1 (started before pre ended), 1
    assert by["convert"]["gap_us"] == -1.0  # 111-112, 114-115, 116-114
    assert rows[-1]["kernel"] == "(first start to last end)" and rows[-1]["duration_us"] == 119.0


def test_calls_that_ran_different_kernels_are_refused():
    a = trace([0.0], [("pre", 0.0, 10.0), ("main", 12.0, 100.0)])
    b = trace([1000.0], [("pre", 0.0, 10.0), ("other", 12.0, 100.0)])
    with pytest.raises(ValueError, match="different kernels"):
        kt.timeline(kt.call_kernels(a + b, 2))
