"""Compare the machine code of a family's kernels built from two source trees, on the CPU.

    PYTHONPATH=python python3 build_tools/sass_compare.py OLD_TREE NEW_TREE \\
        [--family gluon] [--op fwd] [--filter causal/M64_N64]

A tree is a folder holding `aot/kernels/` (a checkout, or `git archive REV aot | tar x -C
DIR`). Every variant both trees declare for sm_90 is compiled from each (Triton, no GPU), and
the instructions of each step (`cuobjdump -sass`, addresses dropped) are compared. It prints the
names whose code differs and the counts. Use it to show that a change left kernels as they were
when they were last run on the GPU: identical instructions need no new device run.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from attnpack.builder.backends.triton import disassemble
from attnpack.builder.compile import CompileJob
from attnpack.family import load_families

ARCH = "sm_90"
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/")
ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")


def instructions(cubin: bytes) -> list[str]:
    """The instructions of a cubin, without their addresses."""
    return [ADDRESS.sub("", line) for line in disassemble(cubin).splitlines()
            if INSTRUCTION.match(line)]


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
        code[variant.name] = [instructions(job.backend.compile(job).image) for job in jobs]
    return code


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--family", default="gluon")
    ap.add_argument("--op", default="fwd", choices=("fwd", "bwd"))
    ap.add_argument("--filter", default="", help="only variant names containing this")
    args = ap.parse_args(argv)
    old, new = (tree_code(t, args.family, args.op, args.filter) for t in (args.old, args.new))
    both = sorted(old.keys() & new.keys())
    differ = [name for name in both if old[name] != new[name]]
    for name in differ:
        print(f"differs: {name}")
    for name in sorted(old.keys() ^ new.keys()):
        print(f"only in {'old' if name in old else 'new'}: {name}")
    print(f"{len(both) - len(differ)} identical, {len(differ)} differ, "
          f"{len(old.keys() ^ new.keys())} in one tree only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
