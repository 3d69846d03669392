"""Build libattnpack_torch with CMake against the torch of this Python interpreter.

    python -m attnpack.torch._build [BUILD_DIR]      # default build/torch; copies into _lib/

The same two commands CI runs (csrc/CMakeLists.txt has them); the tests use build() to get a
fresh, incrementally rebuilt library.
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


def configure_command(build_dir: Path, copy_to_package: bool = True,
                      find_package: bool = True) -> list[str]:
    command = ["cmake", "-S", str(CSRC), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
               f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
               f"-DPython3_EXECUTABLE={sys.executable}",
               f"-DATTNPACK_TORCH_COPY_TO_PACKAGE={'ON' if copy_to_package else 'OFF'}",
               f"-DATTNPACK_TORCH_FIND_PACKAGE={'ON' if find_package else 'OFF'}"]
    if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
        command += ["-G", "Ninja"]
    include = msgpack_include()
    if include:
        command.append(f"-DATTNPACK_MSGPACK_INCLUDE_DIR={include}")
    return command


def build(build_dir: Path, copy_to_package: bool = True, find_package: bool = True) -> Path:
    """Configure (first time) and build; returns the path of libattnpack_torch.so. Raises
    CalledProcessError with CMake's output on failure."""
    build_dir = Path(build_dir)
    for command in (configure_command(build_dir, copy_to_package, find_package),
                    ["cmake", "--build", str(build_dir)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
    return build_dir / "libattnpack_torch.so"


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "build" / "torch"
    try:
        print(build(target))
    except subprocess.CalledProcessError as e:
        sys.exit(f"{' '.join(e.cmd)} failed:\n{e.stdout}\n{e.stderr}")
