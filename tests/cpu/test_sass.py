"""attnpack.builder.sass: instructions, loops and opcodes of an NVIDIA kernel, read on the CPU
(synthetic code here; tests/cpu/test_gluon_family.py reads a real Gluon kernel with it)."""
from attnpack.builder import sass


def _code(body: list[str], at: int = 0) -> list[str]:
    """`at` filler instructions, then `body`."""
    return ["NOP ;"] * at + body


def test_opcode_drops_the_predicate_and_keeps_the_modifiers():
    assert sass.opcode("@!P0 FADD R1, R2, R3 ;") == "FADD"
    assert sass.opcode("@UP2 HGMMA.64x8x16.F32.BF16 R152, R156, gdesc[UR24].tnspB, R152 ;") == \
        "HGMMA.64x8x16.F32.BF16"
    assert sass.opcode("@PT BAR.SYNC.DEFER_BLOCKING 0x2, 0x80 ;") == "BAR.SYNC.DEFER_BLOCKING"
    assert sass.opcode("EXIT ;") == "EXIT"


def test_without_encoding_keeps_the_instruction_text():
    listed = "        FMNMX R157, R156, R29, !PT ;   /* 0x0000001d9c9d7209 */"
    assert sass.without_encoding(listed) == "FMNMX R157, R156, R29, !PT ;"
    assert sass.opcode(sass.without_encoding(listed)) == "FMNMX"


def test_loops_are_backward_branches_of_the_given_lengths():
    # instruction 2 starts a loop whose back edge is instruction 101 (a 100-instruction body);
    # instruction 110 branches forward (no loop); 120 branches back 10 (shorter than asked)
    code = _code(["FADD R1, R1, R2 ;"] * 200)
    code[101] = f"@P3 BRA {2 * sass.INSTRUCTION_BYTES:#x} ;"
    code[110] = f"@!P1 BRA {150 * sass.INSTRUCTION_BYTES:#x} ;"
    code[120] = f"BRA {111 * sass.INSTRUCTION_BYTES:#x} ;"
    code[190] = f"@P0 BRA P1, {5 * sass.INSTRUCTION_BYTES:#x} ;"   # the outer loop
    assert sass.loops(code) == [(2, 101), (5, 190)]
    assert sass.loops(code, shortest=8) == [(2, 101), (5, 190), (111, 120)]
    assert sass.loops(code, longest=150) == [(2, 101)]
    # (5, 190) holds (111, 120) but not (2, 101), which starts before it
    assert sass.innermost(sass.loops(code, shortest=8)) == [(2, 101), (111, 120)]


def test_opcodes_of_a_span_count_what_one_trip_issues():
    code = ["FADD R1 ;", "MUFU.EX2 R2, R2 ;", "@P0 FADD R3 ;", "BRA 0x10 ;", "EXIT ;"]
    assert sass.loops(code, shortest=1) == [(1, 3)]
    assert sass.opcodes(code, (1, 3)) == {"MUFU.EX2": 1, "FADD": 1, "BRA": 1}
    assert sass.opcodes(code)["FADD"] == 2


def test_wgmma_order_names_commits_waits_and_runs_of_exponentials():
    qk = ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR44], RZ, !UPT ;",
          "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR36], R24, gsb0 ;"]
    pv = ["HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR16].tnspB, R88, gsb0 ;"]
    wait = ["WARPGROUP.DEPBAR.LE gsb0, 0x1 ;", "WARPGROUP.DEPBAR.LE gsb0, 0x0 ;"]
    softmax = ["FFMA R24, R24, R0, R3 ;", "MUFU.EX2 R211, R24 ;", "@!P0 MUFU.EX2 R2, R25 ;",
               "FMNMX R5, R2, R35, !PT ;", "MUFU.EX2 R3, R28 ;"]
    # as written: the softmax between the two waits; as ptxas had put it: the wait first. The
    # exponentials between two wgmma events are one `e`, whatever else lies among them; a
    # scoreboard wait (DEPBAR on SB1) is not a wgmma wait.
    overlapped = qk + pv + wait[:1] + softmax + wait[1:] + ["DEPBAR.LE SB1, 0x0 ;"]
    assert sass.wgmma_order(overlapped) == "GGW1eW0"
    assert sass.wgmma_order(qk + pv + wait + softmax) == "GGW1W0e"
    assert sass.wgmma_order(overlapped, (2, 5)) == "GW1e"
    assert sass.wgmma_order(["WARPGROUP.DEPBAR.LE gsb0, 0xa ;"]) == "W10"
