"""The flydsl family folder (aot/kernels/flydsl_attn), loaded the way the builder loads it
(attnpack.family.load_family), so tests and builds share one package and one registered
backend: `flydsl_attn()` returns the package, with `.tiles`, `.model`, `.backend`, `.family`."""
import importlib
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[2] / "aot" / "kernels" / "flydsl_attn"


def flydsl_attn():
    from attnpack.family import load_family
    spec = load_family(FOLDER)
    package = spec.steps.__module__.rsplit(".", 1)[0]
    pkg = sys.modules[package]
    for name in ("tiles", "model", "backend", "family"):
        setattr(pkg, name, importlib.import_module(f"{package}.{name}"))
    pkg.SPEC = spec
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
