"""The scripts in bench/ import what they use from attnpack.bench: each one with a main guard is
imported here (bench/ is not a package), so a name the library drops or renames fails on the
CPU instead of in a device run (measure.time_op went missing once, twenty-fourth session).
The profile_* scripts run at import (Nsight Compute launches them as they are) and are left
out."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
GUARDED = sorted(p for p in BENCH.glob("*.py") if '__name__ == "__main__"' in p.read_text())


def test_the_guarded_scripts_are_the_tools():
    assert {p.stem for p in GUARDED} >= {"kernel_ab", "clocks", "ncu_rows", "decode_rows",
                                         "gluon_bwd", "gluon_family", "triton_family",
                                         "torch_overhead"}


@pytest.mark.parametrize("path", GUARDED, ids=[p.stem for p in GUARDED])
def test_script_imports(path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, "main", None)), path.name


def test_kernel_ab_twins_pair_each_knob_with_the_config_without_it(capsys):
    """kernel_ab.py --twin SUFFIX: each kernel named ...SUFFIX over its twin (the same name
    without it) at every shape where a side timed both; a kernel without its twin is left out."""
    spec = importlib.util.spec_from_file_location("bench_kernel_ab", BENCH / "kernel_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    plain, tail = "gluon/fwd/bf16-d128-full/M64_N128_stages2_persistent1", "_tail1"
    rows = [{"shape": "B8 H16 S2048 d128 full",
             "tflops": {"all": {plain: 600.0, plain + tail: 612.0, "x/y_tail1": 5.0}}},
            {"shape": "B4 H16 S4096 d128 full",
             "tflops": {"all": {plain: 640.0, plain + tail: 627.2}}}]
    got = ab.twin_ratios(rows, "all", tail)
    assert list(got) == [plain + tail]
    assert [(shape, round(r, 4)) for shape, r in got[plain + tail]] == [
        ("B8 H16 S2048 d128 full", 1.02), ("B4 H16 S4096 d128 full", 0.98)]
    ab.print_twins(rows, ["all"], tail)
    out = capsys.readouterr().out
    assert f"# all: {plain + tail} over its twin: geomean 1.000, min 0.980, max 1.020" in out
