"""Programmatic dependent launch (archive format 2.5, a step's `pdl`) on the CPU.

A step marked `pdl` is launched with CUDA's programmatic stream serialization: its blocks may
start while the grid ahead in the stream drains, so its kernel must wait for that grid
(`griddepcontrol.wait`, SASS `ACQBULK`) before it touches memory. Here: in the default bundles
a step is marked exactly where its image waits (every Gluon kernel; no triton or AMD kernel),
the runtime reads the mark (explain names it) and refuses a malformed one, and `verify`
reports one that is not a boolean or sits in an AMD archive. That the kernels
compute the same with it is checked on the GPU (tests/gpu/test_gluon_attn.py,
test_gluon_bwd.py, test_torch_sdpa.py).
"""
import re
from pathlib import Path

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.verify import verify_archive
from attnpack.builder import sass
from attnpack.builder.backends.triton import cuobjdump
from test_runtime_fixtures import (attention_kernels, expect_error, synthetic_archive,  # noqa: F401
                                   write_synthetic)

BUNDLE = Path(__file__).resolve().parents[2] / "build" / "bundle"


def bundle(arch: str):
    path = BUNDLE / f"attnpack-0.1.0-{arch}.apk"
    if not path.is_file():
        pytest.skip(f"no {path.name} in build/bundle (bash build_tools/setup.sh)")
    return read_archive(path)


def test_a_step_is_programmatic_exactly_where_its_kernel_waits_for_the_grid_ahead():
    """Every step's mark against its family; then the machine code of one image per entry
    point (a kernel's source waits or not whatever its config: the Gluon kernels call
    grid_dependency.enter() unconditionally)."""
    if not cuobjdump().is_file():
        pytest.skip("this triton ships no cuobjdump")
    archive = bundle("sm_90")
    sample = {}  # (family, entry point, pdl) -> an image
    for k in archive.index["kernels"]:
        for s in k["steps"]:
            base = re.sub(r"_\d.*$", "", s["symbol"])  # Triton appends the specialisation
            pdl = s.get("pdl", False)
            assert pdl == (k["family"] == "gluon"), (k["name"], base)
            sample.setdefault((k["family"], base, pdl), s["image"])
    assert len({(f, b) for f, b, _ in sample}) == len(sample)  # one way per entry point
    for (family, base, pdl), image in sorted(sample.items()):
        opcodes = [sass.opcode(i) for i in sass.instructions(archive.image(image))]
        found = opcodes.count("ACQBULK"), opcodes.count("PREEXIT")
        # programmatic: one wait (before the first memory access; the early convert's, gluon
        # `early`, at its end), one release of the next grid
        assert found == ((1, 1) if pdl else (0, 0)), (family, base, found)
    # at least the forward, the fast backward's three launches and the deterministic one's two
    assert {"attn_fwd_pingpong", "attn_bwd_preprocess", "attn_bwd_dkdv_dq_tma",
            "attn_bwd_dq_convert", "attn_bwd_dq", "attn_bwd_dkdv"} <= \
        {base for _, base, pdl in sample if pdl}, sorted(sample)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_archives_launch_nothing_programmatically(arch):
    archive = bundle(arch)
    assert not [s["symbol"] for k in archive.index["kernels"] for s in k["steps"]
                if "pdl" in s]


def test_explain_names_the_programmatic_steps(tmp_path):
    kernels = attention_kernels(dtypes=("bf16",), head_dims=(64,))
    for k in kernels:
        if k["op"] == "bwd":
            k["steps"][1]["pdl"] = True  # the main step, not the preprocess
    path = write_synthetic(tmp_path / "attnpack-0.1.0-sm_90.apk", kernels)
    with rt.Bundle(path, arch="sm_90") as opened:
        text = opened.explain(rt.make_problem("bwd", "bf16", causal=False, B=2, Hq=8, Hkv=8,
                                              Sq=128, Sk=128, D=64))
    lines = [line for line in text.splitlines() if line.startswith("  step ")]
    assert [line.endswith(", programmatic launch") for line in lines] == [False, True], text


def test_a_pdl_that_is_not_a_boolean_is_a_corrupt_archive(tmp_path):
    kernels = attention_kernels(dtypes=("bf16",), head_dims=(64,))
    kernels[0]["steps"][0]["pdl"] = 1
    path = write_synthetic(tmp_path / "attnpack-0.1.0-sm_90.apk", kernels)
    message = expect_error(rt.Status.ARCHIVE_CORRUPT, rt.Bundle, path, arch="sm_90")
    assert str(path) in message and "pdl" in message and "not a boolean" in message, message


@pytest.mark.parametrize("arch,pdl,fault", [("sm_90", True, False), ("sm_90", 1, True),
                                            ("gfx950", True, True), ("gfx950", False, False)])
def test_verify_takes_a_boolean_pdl_on_nvidia_only(tmp_path, arch, pdl, fault):
    kernels = attention_kernels(dtypes=("bf16",), head_dims=(64,))
    kernels[0]["steps"][0]["pdl"] = pdl
    path = write_synthetic(tmp_path / f"attnpack-0.1.0-{arch}.apk", kernels, arch=arch)
    _, problems, _ = verify_archive(path)
    flagged = [p for p in problems if "`pdl`" in p]
    assert len(flagged) == fault, problems
    if fault:
        assert f"kernel {kernels[0]['name']} step fwd: `pdl` {pdl!r}: a boolean" in flagged[0]
