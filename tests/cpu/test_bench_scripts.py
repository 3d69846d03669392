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
