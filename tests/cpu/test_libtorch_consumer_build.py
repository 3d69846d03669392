"""The C++-only consumer (examples/libtorch_consumer): attnpack installed with `cmake --install`,
found with find_package(attnpack_torch), linked into a libtorch program that has no Python
interpreter. Here, on the CPU torch, it is compiled and linked, and it runs as far as a machine
without a GPU allows: attnpack enabled and disabled through the C entry points, then exit 77
("no CUDA device"). tests/gpu/test_libtorch_consumer.py runs it on a GPU."""
from __future__ import annotations

import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import attnpack  # noqa: E402
from attnpack.torch import _build, _extension  # noqa: E402


@pytest.fixture(scope="module")
def consumer(tmp_path_factory):
    library = _extension.library_path()
    if not library.is_file():
        pytest.skip(f"{library} is not built (build_tools/setup.sh builds it)")
    try:
        return _build.build_consumer(library, tmp_path_factory.mktemp("libtorch_consumer"))
    except subprocess.CalledProcessError as e:
        pytest.fail(f"{' '.join(e.cmd)} failed:\n{e.stdout[-4000:]}\n{e.stderr[-4000:]}")


def test_links_libtorch_and_attnpack_without_python(consumer):
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    dynamic = subprocess.run(["readelf", "-d", str(consumer)], capture_output=True, text=True,
                             check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert "libattnpack_torch.so" in needed, needed
    assert any(n.startswith("libattnpack.so") for n in needed), needed
    assert any(n.startswith("libtorch") for n in needed) and "libc10.so" in needed, needed
    assert not [n for n in needed if "python" in n], needed


def test_enables_through_the_c_entry_points(consumer):
    done = subprocess.run([str(consumer)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 77, done.stdout + done.stderr  # no CUDA device: nothing to run
    lines = done.stdout.splitlines()
    assert lines[0] == (f"attnpack runtime {attnpack.__version__}; libattnpack_torch built with "
                        f"torch {torch.__version__.split('+')[0]}")
    assert lines[1].startswith("enabled: attnpack serves the SDPA flash/efficient ops")
    assert lines[2] == "no CUDA device: nothing to run"
    assert lines[3].startswith('stats: {"calls": {}, "fallbacks": {}')
