"""Compare the machine code of a family's kernels built from two source trees, on the CPU.

    PYTHONPATH=python python3 build_tools/sass_compare.py OLD_TREE NEW_TREE \\
        [--family gluon] [--op fwd] [--filter causal/M64_N64]

A tree is a folder holding `aot/kernels/` (a checkout, or `git archive REV aot | tar x -C
DIR`). Every variant both trees declare for sm_90 is compiled from each (Triton, no GPU), and
the instructions of each step (`cuobjdump -sass`, addresses dropped) are compared. It prints the
names whose code differs and the counts. Use it to show that a change left kernels as they were
when they were last run on the GPU: identical instructions need no new device run. The check is
strict: lines moving in a source file can renumber registers with the same instructions (seen
in the head-dim-256 dK/dV kernel, bwd_wide.py, for one blank line added to bwd.py), which reads
as "differs" with the same opcodes in --loops.

With --loops it also prints, for each kernel whose code differs, what one trip round each of its
innermost loops issues in either tree (attnpack.builder.sass): the loop's length and the opcodes
whose counts moved, e.g. a key-tile loop 794 -> 754 with FADD -66. Static counts: a branch
inside a loop body (a masked tile's path) is counted whether taken or not.
With --waits it prints, for every kernel, the order of each loop's wgmma commits, waits and
exponentials in either tree (attnpack.builder.sass.wgmma_order): `GGW1eW0` where a softmax runs
between the wait for its QKᵀ and the wait for the PV before it, `GGW1W0e` where ptxas put both
waits first (docs/gluon-family.md, item 21). Give one tree twice to read a single tree.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnpack.builder import sass
from attnpack.builder.compile import CompileJob
from attnpack.family import load_families

ARCH = "sm_90"


def loop_report(old: list[str], new: list[str]) -> list[str]:
    """Lines saying what each innermost loop of one step issues in either tree."""
    old, new = ([sass.without_encoding(line) for line in code] for code in (old, new))
    spans = [sass.innermost(sass.loops(code)) for code in (old, new)]
    lines = [f"  {len(old)} -> {len(new)} instructions; innermost loops "
             f"{[b - a + 1 for a, b in spans[0]]} -> {[b - a + 1 for a, b in spans[1]]}"]
    if len(spans[0]) != len(spans[1]):
        return lines + ["  (the loops do not pair up: compare them by hand)"]
    for n, (a, b) in enumerate(zip(*spans), 1):
        was, now = sass.opcodes(old, a), sass.opcodes(new, b)
        moved = sorted(((op, now[op] - was[op]) for op in was.keys() | now.keys()
                        if now[op] != was[op]), key=lambda x: (-abs(x[1]), x[0]))
        text = ", ".join(f"{op} {d:+d}" for op, d in moved) or "the same opcodes"
        lines.append(f"  loop {n}: {a[1] - a[0] + 1} -> {b[1] - b[0] + 1}: {text}")
    return lines


def wgmma_orders(code: list[str]) -> list[str]:
    """attnpack.builder.sass.wgmma_order of each innermost loop that holds a wgmma."""
    code = [sass.without_encoding(line) for line in code]
    orders = [sass.wgmma_order(code, span) for span in sass.innermost(sass.loops(code))]
    return [order for order in orders if "G" in order]


def tree_code(tree: Path, family: str, op: str, name_filter: str) -> dict:
    """{variant name: [instructions of each step]} for the tree's declared variants."""
    root = tree / "aot" / "kernels"
    spec = load_families(root).get(family) if root.is_dir() else None
    if spec is None:
        raise SystemExit(f"{root}: no family {family!r}; give a tree that holds aot/kernels/")
    code = {}
    for variant in spec.all_variants(ARCH):
        if variant.op != op or name_filter not in variant.name:
            continue
        jobs = [CompileJob(variant, step) for step in variant.steps]
        # with their control bits: code the same but for its scheduling still differs
        code[variant.name] = [sass.instructions(job.backend.compile(job).image, encodings=True)
                              for job in jobs]
    return code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--family", default="gluon")
    ap.add_argument("--op", default="fwd", choices=("fwd", "bwd"))
    ap.add_argument("--filter", default="", help="only variant names containing this")
    ap.add_argument("--loops", action="store_true",
                    help="what each innermost loop of a differing kernel issues in either tree")
    ap.add_argument("--waits", action="store_true",
                    help="every kernel's loops as wgmma commits, waits and exponentials "
                         "(sass.wgmma_order) in either tree")
    args = ap.parse_args(argv)
    old, new = (tree_code(t, args.family, args.op, args.filter) for t in (args.old, args.new))
    both = sorted(old.keys() & new.keys())
    differ = [name for name in both if old[name] != new[name]]
    for name in differ:
        print(f"differs: {name}")
        if args.loops:
            for step_old, step_new in zip(old[name], new[name]):
                print("\n".join(loop_report(step_old, step_new)))
    if args.waits:
        for name in both:
            for n, (step_old, step_new) in enumerate(zip(old[name], new[name])):
                was, now = wgmma_orders(step_old), wgmma_orders(step_new)
                print(f"waits {name} step {n}: " + (f"{was} -> {now}" if was != now else f"{now}"))
    for name in sorted(old.keys() ^ new.keys()):
        print(f"only in {'old' if name in old else 'new'}: {name}")
    print(f"{len(both) - len(differ)} identical, {len(differ)} differ, "
          f"{len(old.keys() ^ new.keys())} in one tree only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
