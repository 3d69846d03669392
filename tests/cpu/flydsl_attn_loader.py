"""Import aot/kernels/flydsl_attn as a package (it has no family.py yet, so the builder does
not load it): `flydsl_attn()` returns the package, with `.tiles`, `.model`, `.backend`."""
import importlib
import importlib.util
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "aot" / "kernels" / "flydsl_attn"
PKG = "attnpack_kernels_flydsl_attn_tests"


def flydsl_attn():
    if PKG not in sys.modules:
        spec = importlib.util.spec_from_file_location(PKG, FOLDER / "__init__.py",
                                                      submodule_search_locations=[str(FOLDER)])
        package = importlib.util.module_from_spec(spec)
        sys.modules[PKG] = package
        spec.loader.exec_module(package)
    pkg = sys.modules[PKG]
    for name in ("tiles", "model", "backend"):
        setattr(pkg, name, importlib.import_module(f"{PKG}.{name}"))
    return pkg


def toolchain_missing() -> str | None:
    """Why FlyDSL cannot compile here, or None."""
    import shutil
    try:
        import flydsl  # noqa: F401
    except Exception as exc:  # flydsl needs torch at import; any failure means "cannot compile"
        return f"flydsl not importable ({exc}); run build_tools/install_flydsl.sh"
    if not shutil.which("ld.lld-19") and not (flydsl_attn().backend.rocm_path() / "llvm/bin/ld.lld").exists():
        return "no ld.lld-19; run build_tools/install_flydsl.sh"
    if not shutil.which("llvm-objdump-22"):
        return "no llvm-objdump-22 (Debian llvm-22); run build_tools/install_flydsl.sh"
    return None
