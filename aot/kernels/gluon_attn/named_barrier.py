"""Named hardware barriers (PTX `bar.sync` / `bar.arrive`) for Gluon's warp-specialized
partitions, which have no such op.

A CTA has 16 of them. Each completes once THREADS threads, in whole warps, have arrived; a
warp that arrives with `sync` waits there, one that arrives with `arrive` goes on. Unlike
mbarrier.arrive, which Gluon lowers to one thread's arrive and which Triton's barrier pass
brackets with warpgroup bar.syncs (it counts the arrive as reading and writing all of shared
memory), every thread arrives here and nothing is added around it: a caller must know its
shared-memory accesses are done, as after a wgmma wait for what the wgmma read.

Ids used by the forward (fwd.py): Triton's own 0 to the partition count (0-4 with five
partitions), 5 and up for its ring-slot releases, 12-15 for its turns;
tests/cpu/test_gluon_family.py reads them back from every kernel's SASS. (The backward's slot
releases measured no faster this way, run100, and keep their mbarriers: docs/gluon-bwd.md.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

FIRST_SLOT_BARRIER = gl.constexpr(5)  # above Triton's own, below the forward's turns


@gluon.constexpr_function
def _asm(op, threads):
    return f"bar.{op} $1, {threads};\n\tmov.b32 $0, 0;"


@gluon.jit
def _ids(bar, WARPS: gl.constexpr):
    """`bar` once per thread of a WARPS-warp partition: the inline asm then runs once per
    thread, so once per warp, as bar.sync/bar.arrive count it."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])
    return gl.full([32 * WARPS], bar, gl.int32, layout)


@gluon.jit
def sync(bar, THREADS: gl.constexpr, WARPS: gl.constexpr):
    """The calling partition's WARPS warps arrive on barrier `bar` and wait for it."""
    gl.inline_asm_elementwise(_asm("sync", THREADS), "=r,r", [_ids(bar, WARPS)],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def arrive(bar, THREADS: gl.constexpr, WARPS: gl.constexpr):
    """The calling partition's WARPS warps arrive on barrier `bar` and go on."""
    gl.inline_asm_elementwise(_asm("arrive", THREADS), "=r,r", [_ids(bar, WARPS)],
                              dtype=gl.int32, is_pure=False, pack=1)
