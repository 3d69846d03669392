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
