"""The Python binding against the C header: struct layouts, statuses, versions."""
import ctypes
import json
import subprocess

from attnpack import __version__
from attnpack import runtime as rt

STRUCTS = {"attnpack_open_params": rt.OpenParams, "attnpack_bundle_info": rt.BundleInfo,
           "attnpack_tensor": rt.Tensor, "attnpack_problem": rt.Problem,
           "attnpack_kernel_info": rt.KernelInfo, "attnpack_launch_params": rt.LaunchParams}


def c_program(name: str):
    path = rt.library_path().parent / "tests" / name
    assert path.is_file(), f"{path} missing: build the runtime with its tests (the default)"
    return path


def test_ctypes_structs_match_the_c_compilers_layout():
    out = subprocess.run([str(c_program("attnpack_c_api_check")), "layout"], capture_output=True,
                         check=True, text=True).stdout
    layout = json.loads(out)
    assert set(layout) == set(STRUCTS)
    for name, mirror in STRUCTS.items():
        ours = {f: [getattr(mirror, f).offset, getattr(mirror, f).size] for f, _ in mirror._fields_}
        assert ours == layout[name]["fields"], name
        assert ctypes.sizeof(mirror) == layout[name]["size"], name


def test_the_c_program_links_and_sees_statuses():
    out = subprocess.run([str(c_program("attnpack_c_api_check"))], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "c_api_check: ok"


def test_status_names_and_versions():
    lib = rt.library()
    for status in rt.Status:
        assert lib.attnpack_status_name(status).decode() == status.name.lower()
    assert lib.attnpack_status_name(99).decode() == "unknown_status"
    assert rt.version() == __version__  # the runtime and the Python package ship together
    major, minor, patch = map(int, __version__.split("."))
    assert lib.attnpack_version() == major * 10000 + minor * 100 + patch


def test_last_error_is_per_thread():
    import threading
    lib = rt.library()
    assert lib.attnpack_open(None, ctypes.byref(ctypes.c_void_p())) == rt.Status.INVALID_ARGUMENT
    seen = []
    t = threading.Thread(target=lambda: seen.append(lib.attnpack_last_error().decode()))
    t.start()
    t.join()
    assert seen == [""]
    assert lib.attnpack_last_error().decode() == "attnpack_open_params is NULL"
