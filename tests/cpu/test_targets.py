"""One table of targets (python/attnpack/targets.py), proved by two opt-in NVIDIA rows: sm_80
(A100) and sm_100 (B200) build and verify statically with no code change beyond their rows.
Built, not run: no A100 or B200 is here."""
import subprocess
import sys

import pytest

from attnpack import runtime as rt
from attnpack.archive.elf import kernel_facts
from attnpack.archive.verify import verify_archive
from attnpack.family import load_families
from attnpack.targets import DEFAULT_ARCHS, TARGETS, target

from conftest import build

OPT_IN = ("sm_80", "sm_100")


def test_the_default_set_and_the_opt_in_rows():
    assert DEFAULT_ARCHS == ("sm_90", "gfx942", "gfx950")
    assert [a for a in TARGETS if a not in DEFAULT_ARCHS] == list(OPT_IN)
    out = subprocess.run([sys.executable, "-m", "attnpack.targets", "--default"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "sm_90;gfx942;gfx950\n"   # what CMake's default ATTNPACK_TARGET_ARCHS reads
    assert target("gfx950").meta() == {"vendor": "amd", "image_kind": "hsaco", "wave_size": 64,
                                       "shared_bytes": 163840}
    assert target("sm_80").shared_bytes == 163 * 1024 and target("sm_80").param_base == 0x210
    # the portable family serves every row by vendor; Hopper's Gluon family only sm_90
    families = load_families()
    assert families["triton"].archs == tuple(TARGETS)
    assert families["gluon"].archs == ("sm_90",)


@pytest.fixture(scope="module")
def opt_in(tmp_path_factory):
    root = tmp_path_factory.mktemp("targets")
    return build(root / "out", None, root / "cache", archs=OPT_IN, families=("triton",),
                 dtypes=("fp16",), head_dims=(64,))


def test_opt_in_targets_build_and_verify(opt_in):
    for path, arch in zip(opt_in.paths, OPT_IN):
        ar, problems, _warnings = verify_archive(path)
        assert problems == [], problems
        assert ar.arch == arch and ar.target == target(arch).meta()
        assert len(ar.kernels) == 4                    # fwd and bwd, causal and full
        for i, image in enumerate(ar.index["images"]):
            facts = kernel_facts(ar.image(i), image["symbol"])
            assert (facts.machine, facts.arch) == ("cuda", arch)
        # sm_80 has 163 KiB of shared memory: no step asks for more
        assert max(s["shared"] for k in ar.kernels for s in k["steps"]) <= target(arch).shared_bytes


def test_the_runtime_opens_them_by_vendor_and_selects(opt_in):
    for path, arch in zip(opt_in.paths, OPT_IN):
        prob = rt.make_problem("fwd", "fp16", B=1, Hq=4, Hkv=4, Sq=100, Sk=100, D=64, causal=True,
                               pointers={t: 0x10000 * (i + 1) for i, t in enumerate("qkvo")} |
                               {"lse": 0x90000})
        with rt.Bundle(path, arch=arch, recording=True) as bundle:
            assert bundle.info()["arch"] == arch
            kernel = bundle.select(prob)
            assert kernel.name.startswith("triton/fwd/fp16-d64-causal/") and kernel.deterministic
            bundle.forward(prob)
            [launch] = bundle.recorded_launches()["launches"]
            assert launch["block"][0] in (128, 256)
