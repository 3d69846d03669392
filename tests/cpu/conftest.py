from pathlib import Path

import pytest

from attnpack.builder import BuildRequest, build_archives

FIXTURES = Path(__file__).parent / "fixtures"
# The default sm_90 archive `build_tools/setup.sh` builds (the committed database's selection)
DEFAULT_SM90_ARCHIVE = (Path(__file__).resolve().parents[2] / "build" / "bundle"
                        / "attnpack-0.1.0-sm_90.apk")


def build(out: Path, kernels: Path, cache: Path | None, **kw) -> BuildRequest:
    """Build archives from `kernels`; the request comes back with `.paths` set."""
    req = BuildRequest(archs=kw.pop("archs", ("sm_90", "gfx950")), out_dir=out,
                       kernels_root=kernels, cache_dir=cache, jobs=2, **kw)
    req.paths = build_archives(req)
    return req


@pytest.fixture(scope="session")
def toy_build(tmp_path_factory):
    """The toy family's whole space for sm_90 and gfx950 (a few seconds)."""
    root = tmp_path_factory.mktemp("toy")
    return build(root / "out", FIXTURES / "kernels", root / "cache", all_variants=True)


@pytest.fixture(scope="module")
def sm90_default_bundle():
    """The default sm_90 archive opened with the recording driver (no GPU needed)."""
    from attnpack import runtime as rt
    if not DEFAULT_SM90_ARCHIVE.is_file():
        pytest.skip("no sm_90 archive in build/bundle (bash build_tools/setup.sh)")
    with rt.Bundle(DEFAULT_SM90_ARCHIVE, recording=True) as opened:
        yield opened
