"""Build libattnpack_torch with CMake against the torch of this Python interpreter.

    python -m attnpack.torch._build [BUILD_DIR]      # default build/torch, where the package looks

The extension alone, with the two commands csrc/CMakeLists.txt shows (build_tools/setup.sh
builds it within the top-level project instead); the tests use build() to get a fresh,
incrementally rebuilt library.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent / "csrc"
REPO = CSRC.parents[3]


def msgpack_include() -> str | None:
    try:
        import msgpack_cxx
    except ImportError:
        return None  # the runtime's CMake then looks for a carried copy or a system one
    return str(Path(msgpack_cxx.__file__).parent / "include")


def configure_command(build_dir: Path, find_package: bool = True) -> list[str]:
    command = ["cmake", "-S", str(CSRC), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
               f"-DPython3_EXECUTABLE={sys.executable}",
               f"-DATTNPACK_TORCH_FIND_PACKAGE={'ON' if find_package else 'OFF'}"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        command += ["-G", "Ninja"]
    include = msgpack_include()
    if include:
        command.append(f"-DATTNPACK_MSGPACK_INCLUDE_DIR={include}")
    return command


def build(build_dir: Path, find_package: bool = True) -> Path:
    """Configure (first time) and build; returns the path of libattnpack_torch.so. Raises
    CalledProcessError with CMake's output on failure."""
    build_dir = Path(build_dir)
    for command in (configure_command(build_dir, find_package),
                    ["cmake", "--build", str(build_dir)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
    return build_dir / "libattnpack_torch.so"


def build_tree_root(library: Path) -> Path:
    """The CMake build tree a built libattnpack_torch.so belongs to (the top-level project's
    build/, or a build of csrc/ alone): the nearest folder above it with a CMakeCache.txt."""
    for folder in Path(library).resolve().parents:
        if (folder / "CMakeCache.txt").is_file():
            return folder
    raise FileNotFoundError(f"{library} is not inside a CMake build tree")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)


def build_consumer(library: Path, work_dir: Path, find_package: bool = True) -> Path:
    """examples/libtorch_consumer, the C++-only consumer, built the way docs/torch.md says:
    the build tree of `library` installed into work_dir/prefix, then find_package(attnpack_torch)
    and libtorch (find_package(Torch), or its libraries linked directly). Returns the program."""
    work_dir = Path(work_dir)
    prefix = work_dir / "prefix"
    _run(["cmake", "--install", str(build_tree_root(library)), "--prefix", str(prefix)])
    build_dir = work_dir / ("consumer" if find_package else "consumer-direct")
    command = ["cmake", "-S", str(REPO / "examples" / "libtorch_consumer"), "-B", str(build_dir),
               "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_PREFIX_PATH={prefix};{torch.utils.cmake_prefix_path}",
               f"-DCONSUMER_FIND_TORCH={'ON' if find_package else 'OFF'}"]
    if not find_package:
        command += [f"-DTORCH_ROOT={Path(torch.__file__).parent}",
                    f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        command += ["-G", "Ninja"]
    _run(command)
    _run(["cmake", "--build", str(build_dir)])
    return build_dir / "attnpack_libtorch_consumer"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "build" / "torch"
    try:
        print(build(target))
    except subprocess.CalledProcessError as e:
        sys.exit(f"{' '.join(e.cmd)} failed:\n{e.stdout}\n{e.stderr}")
