"""Where the package finds its built parts: libattnpack, libattnpack_torch and the archives.

One rule for every caller (runtime.py, torch/_extension.py, the CLI):
  1. an environment variable, when set (ATTNPACK_RUNTIME_LIB, ATTNPACK_TORCH_LIB,
     ATTNPACK_BUNDLE_DIR): always wins;
  2. the installed layout, `attnpack/lib/` beside this file, as a wheel lays it out:
         attnpack/lib/libattnpack.so           the runtime
         attnpack/lib/libattnpack_torch.so     the PyTorch extension (RUNPATH $ORIGIN)
         attnpack/lib/attnpack/*.apk           the archives, where the runtime itself looks
  3. the build folder of the source checkout this package lives in (`<repo>/build`, what
     build_tools/setup.sh builds; an editable install imports the package from `<repo>/python`):
         build/runtime/libattnpack.so, build/torch/libattnpack_torch.so, build/bundle/*.apk
A build in another folder is reached through the environment variables.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INSTALLED_LIB_DIR = PACKAGE_DIR / "lib"
RUNTIME_LIBRARY = "libattnpack.so"
TORCH_LIBRARY = "libattnpack_torch.so"


def source_checkout() -> Path | None:
    """The repository root when this package is <repo>/python/attnpack of a checkout."""
    repo = PACKAGE_DIR.parents[1]
    if PACKAGE_DIR.parent.name == "python" and (repo / "CMakeLists.txt").is_file() \
            and (repo / "runtime").is_dir():
        return repo
    return None


def checkout_build_dir() -> Path | None:
    repo = source_checkout()
    return repo / "build" if repo else None


def _library_candidates(variable: str, library: str, build_subdirs: tuple[str, ...]) -> list[Path]:
    """$variable alone when set; else the wheel's lib/, then the checkout's build folders."""
    explicit = os.environ.get(variable)
    if explicit:
        return [Path(explicit)]
    build = checkout_build_dir()
    return [INSTALLED_LIB_DIR / library] + [build / sub / library for sub in build_subdirs
                                            if build is not None]


def runtime_library_candidates() -> list[Path]:
    # build/rt: the runtime alone (cmake -S runtime -B build/rt)
    return _library_candidates("ATTNPACK_RUNTIME_LIB", RUNTIME_LIBRARY, ("runtime", "rt"))


def torch_library_candidates() -> list[Path]:
    return _library_candidates("ATTNPACK_TORCH_LIB", TORCH_LIBRARY, ("torch",))


def _holds_archives(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("attnpack-*.apk"))


def bundle_directory() -> str:
    """The folder of the archives: $ATTNPACK_BUNDLE_DIR, else attnpack/lib/attnpack, else the
    checkout's build/bundle, whichever holds an archive; "" if none does (the runtime then
    looks in <dir of libattnpack.so>/attnpack and names that folder in its error)."""
    explicit = os.environ.get("ATTNPACK_BUNDLE_DIR")
    if explicit:
        return explicit
    candidates = [INSTALLED_LIB_DIR / "attnpack"]
    build = checkout_build_dir()
    if build:
        candidates.append(build / "bundle")
    return next((str(c) for c in candidates if _holds_archives(c)), "")


def packaged_archives() -> list[Path]:
    """The archives bundle_directory() names, sorted; [] if none."""
    folder = bundle_directory()
    return sorted(Path(folder).glob("attnpack-*.apk")) if folder else []
