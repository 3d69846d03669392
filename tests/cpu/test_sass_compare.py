"""build_tools/sass_compare.py's report, on made-up instructions in place of two compiled trees
(compiling real kernels is what tests/cpu/test_gluon_family.py does): which kernels differ,
what one trip round a loop issues (--loops), and each loop's wgmma order (--waits)."""
import importlib.util
from pathlib import Path

from attnpack.builder import sass

PATH = Path(__file__).resolve().parents[2] / "build_tools" / "sass_compare.py"
spec = importlib.util.spec_from_file_location("sass_compare", PATH)
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)

QK = ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR44], RZ, !UPT ;",
      "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR36], R24, gsb0 ;"]
PV = ["HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR16].tnspB, R88, gsb0 ;"]
WAIT1, WAIT0 = "WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"
SOFTMAX = ["MUFU.EX2 R211, R24 ;"] * 2 + ["FADD R3, R3, R211 ;"] * 61


def kernel(body: list[str]) -> list[str]:
    """A step's code: two filler instructions, `body` as a loop closed by a branch back to its
    first instruction, then EXIT. Each line carries an encoding comment, as the listing has."""
    loop = body + [f"@P0 BRA {2 * sass.INSTRUCTION_BYTES:#x} ;"]
    return [f"{line}   /* 0x000000000000{n:04x} */"
            for n, line in enumerate(["MOV R1, c[0x0][0x28] ;", "S2R R0, SR_TID.X ;"] + loop
                                     + ["EXIT ;"])]


def test_waits_and_loops_name_what_moved(monkeypatch, capsys):
    committed = kernel(QK + PV + [WAIT1, WAIT0] + SOFTMAX)
    patched = kernel(QK + PV + [WAIT1] + SOFTMAX + ["@P1 BRA 0x4c70 ;", WAIT0])
    plain = kernel(QK + PV + [WAIT0, WAIT0] + SOFTMAX)
    trees = {"old": {"gluon/fwd/a/overlap1": [committed], "gluon/fwd/a/plain": [plain]},
             "new": {"gluon/fwd/a/overlap1": [patched], "gluon/fwd/a/plain": [plain],
                     "gluon/fwd/a/new": [plain]}}
    monkeypatch.setattr(sc, "tree_code", lambda tree, *args: trees[tree.name])
    assert sc.main(["old", "new", "--loops", "--waits"]) == 1  # a kernel differs
    out = capsys.readouterr().out.splitlines()
    assert "differs: gluon/fwd/a/overlap1" in out
    assert "  loop 1: 69 -> 70: BRA +1" in out  # the block's branch; the wait only moved
    assert "waits gluon/fwd/a/overlap1 step 0: ['GGW1W0e'] -> ['GGW1eW0']" in out
    assert "waits gluon/fwd/a/plain step 0: ['GGW0W0e']" in out
    assert out[-2:] == ["only in new: gluon/fwd/a/new", "1 identical, 1 differ, 1 in one tree only"]
