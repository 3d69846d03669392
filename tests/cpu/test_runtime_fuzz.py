"""The archive reader under a deterministic mutation fuzzer (runtime/tests/fuzz_archive.cpp).

A bundle file is untrusted input to a library linked into PyTorch. Thousands of mutants of real
archives (bit flips, byte runs, truncations, edited preamble fields, and meta/index fields edited
and resealed with fresh lengths, offsets and hashes) must each be refused with a status and a
message, or open and pass `attnpack_verify`; none may crash, hang or read out of bounds. Under
run_cpu_tests_asan.sh the fuzzer is an ASan+UBSan build and runs ATTNPACK_FUZZ_MUTANTS mutants.

A mutant the runtime accepts must pass `attnpack verify` too, except for the checks the runtime
cannot make without reading the images' ELF or knowing Triton's calling convention, and the
ones that do not affect a launch (ALLOWED below).
"""
import os
import re
import subprocess

import pytest

from attnpack import runtime as rt
from attnpack.archive.verify import verify_archive
from test_runtime_fixtures import (aiter_fuzz_target_archive, fuzz_target_archive,  # noqa: F401
                                   toy_archives)

MUTANTS = int(os.environ.get("ATTNPACK_FUZZ_MUTANTS", "400"))
ALLOWED = {  # python verify's finding -> why the runtime does not make that check
    r"ELF parameters \(offset, size\) .* disagree with the launch spec": "needs the image's ELF",
    r"ELF kernarg size \d+ != launch spec": "needs the image's ELF",
    r"ELF argument \(\d+, \d+\) \(offset, size\) is not filled": "needs the image's ELF",
    # a negative field can only be `padding`'s (the runtime reads parameter offsets as u32)
    r"launch spec field \(-?\d+, -?\d+\) \(offset, size\) lies in no ELF argument":
        "needs the image's ELF",
    r"bytes of static LDS \+ \d+ dynamic >": "the static LDS size is in the image's ELF",
    r"tensor map \S+ is followed by .*, Triton passes": "Triton's convention, not the runtime's",
    r"the \S* ?compiler version is not recorded": "informational meta",
    r"`compilers` is not a list of compiler names": "informational meta",
    r"image \d+ \([^)]*\) is used by no kernel": "an unused image is never loaded",
    r"meta target .* differs from the targets table": "the device, not the meta, sets the limits",
    # the runtime zero-fills every byte no parameter covers; it never reads `padding`
    r"padding .* is not \[offset, size\]": "padding is informational to the runtime",
    r"params (padding and \S+|\S+ and padding) overlap": "padding is informational to the runtime",
    r"param padding ends at byte": "padding is informational to the runtime",
    r"`notice` is not a text": "the notice is for people, not the runtime",
}


def _fuzzer():
    path = rt.library_path().resolve().parent / "tests" / "attnpack_fuzz_archive"
    if not path.is_file():
        pytest.fail(f"{path} missing: build the runtime with its tests (the default)")
    return path


@pytest.mark.parametrize("which,share", [("sm_90 bf16 d128 slice of the bundle", 0.7),
                                         ("gfx950 toy", 0.15),
                                         ("gfx950 aiter_asm forwards", 0.15)])
def test_mutants_are_refused_or_pass_verify(which, share, fuzz_target_archive, toy_archives,
                                            aiter_fuzz_target_archive, tmp_path):
    archive = (fuzz_target_archive if which.startswith("sm_90") else
               aiter_fuzz_target_archive if "aiter" in which else toy_archives["gfx950"])
    count = max(50, int(MUTANTS * share))
    accepted = tmp_path / "accepted"
    accepted.mkdir()
    run = subprocess.run([str(_fuzzer()), str(archive), str(count), "2026", str(accepted)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert f"{count} mutants of {archive}" in run.stdout and "none crashed" in run.stdout
    print(run.stdout)
    outcomes = dict((line.split(None, 1)[1], int(line.split(None, 1)[0]))
                    for line in run.stdout.splitlines()[1:])
    assert sum(outcomes.values()) == count + 1 and outcomes["original: accepted"] == 1
    assert sum(n for o, n in outcomes.items() if "refused" in o) > count // 2
    # the runtime's accepted mutants against python's verify
    unexplained = []
    for path in sorted(accepted.glob("*.apk")):
        _, problems, _ = verify_archive(path)
        unexplained += [p for p in problems if not any(re.search(r, p) for r in ALLOWED)]
    assert unexplained == []
