"""An NVIDIA kernel's machine code read on the CPU: its instructions (`cuobjdump -sass`, the tool
Triton ships), the loops among them, and the opcodes a loop issues.

A change to a kernel's source can be weighed here before any GPU runs it: how many instructions
one trip round its key-tile loop issues, and of which kind (docs/gluon-family.md, "Where the
time goes", items 9-11), and in which order its wgmmas, their waits and its exponentials come
(item 21). `build_tools/sass_compare.py --loops` prints these for two trees.
"""
from __future__ import annotations

import re
from collections import Counter

from .backends.triton import disassemble

INSTRUCTION_BYTES = 16   # every sm_90 instruction is 128 bits: a branch target / 16 is its index
_LISTED = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/")
_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENCODING = re.compile(r"\s*/\*\s*0x[0-9a-f]{16}\s*\*/")
_PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
_BRANCH = re.compile(r"\bBRA(?:\.\S+)?\s+(?:!?U?P[T0-9]+,\s*)?0x([0-9a-f]+)")


def instructions(cubin: bytes, encodings: bool = False) -> list[str]:
    """The instructions of a cubin (one kernel function), in address order, without their
    addresses; with `encodings` each keeps its first 64-bit word, whose control bits (stalls,
    scoreboards) the text does not show."""
    code = [_ADDRESS.sub("", line) for line in disassemble(cubin).splitlines()
            if _LISTED.match(line)]
    return code if encodings else [without_encoding(line) for line in code]


def without_encoding(instruction: str) -> str:
    """An instruction listed with its encoding, as the text alone."""
    return _ENCODING.sub("", instruction).strip()


def opcode(instruction: str) -> str:
    """`FADD` of `@!P0 FADD R1, R2, R3 ;`: the opcode with its modifiers, no predicate."""
    return _PREDICATE.sub("", instruction.strip()).split(maxsplit=1)[0].rstrip(";")


def loops(code: list[str], shortest: int = 64, longest: int = 4096) -> list[tuple[int, int]]:
    """(first, last) instruction indices of each backward branch's span, `shortest` to
    `longest` instructions long, in address order: a loop body and its back edge. Nested loops
    give nested spans; Triton's partitions give one loop set each."""
    spans = []
    for at, instruction in enumerate(code):
        hit = _BRANCH.search(instruction)
        if hit:
            target = int(hit.group(1), 16) // INSTRUCTION_BYTES
            if target <= at and shortest <= at - target + 1 <= longest:
                spans.append((target, at))
    return sorted(spans)


def innermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans that hold no other span: the loops whose every trip issues the whole body
    (but for branches inside it)."""
    return [s for s in spans
            if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]


def opcodes(code: list[str], span: tuple[int, int] | None = None) -> Counter:
    """How often each opcode appears in `code`, or in code[first..last] of a span."""
    first, last = span if span else (0, len(code) - 1)
    return Counter(opcode(i) for i in code[first:last + 1])


_WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)")


def wgmma_order(code: list[str], span: tuple[int, int] | None = None) -> str:
    """The order of a span's wgmma events and exponentials, one letter group each: `G` a group
    committed (the `HGMMA` that carries `gsb0`), `W<n>` a wait until at most n groups are in
    flight, `e` the `MUFU.EX2`s between two of those. An overlapped forward key-tile loop, as
    written, issues QKᵀ and PV, waits for QKᵀ, runs the softmax and then waits for PV:
    `GGW1eW0`; `GGW1W0e`, as ptxas had placed the waits, says the softmax runs after PV, not
    beside it (docs/gluon-family.md, item 21)."""
    first, last = span if span else (0, len(code) - 1)
    order = []
    for line in code[first:last + 1]:
        op = opcode(line)
        wait = _WAIT.search(line)
        if op.startswith("HGMMA") and "gsb0" in line:
            order.append("G")
        elif wait:
            order.append(f"W{int(wait.group(1), 16)}")
        elif op == "MUFU.EX2" and (not order or order[-1] != "e"):
            order.append("e")
    return "".join(order)


def wgmma_serialized(code: list[str]) -> bool:
    """Whether ptxas serialized the kernel's wgmmas (its C7512 "Potential Performance Loss"):
    then every HGMMA closes its own group (`gsb0`) and waits for itself, where a GEMM's k-steps
    otherwise issue back to back and only the group's last carries `gsb0`. ptxas does this to
    the whole kernel when one wgmma's operand registers may be reused while it runs."""
    hgmma = [line for line in code if opcode(line).startswith("HGMMA")]
    return bool(hgmma) and all("gsb0" in line for line in hgmma)
