"""Where a program of a causal grid (blocks, B·heads) works: one rule for the forward's
non-persistent grid and the backward's dK/dV and dQ grids.

Under causal a head's blocks differ in work, and the GPU starts programs in the order of their
linear id, x fastest. With the blocks on x the last heads' longest blocks start late and run
alone at the end: a list-scheduling model of 132 SMs puts that order at 1.14-1.38x the ideal
makespan on the backward's GQA 4-8 model shapes and at 1.04-1.16x on the forward's long
non-persistent causal rows. So the grid stays as it is and its linear ids are read in groups of
HEAD_GROUP heads (a power of two): within a group block by block across its heads, longest
first, group after group. At GQA 8 a group is one KV head's query heads. (docs/gluon-bwd.md,
"Longest first within head groups"; docs/gluon-family.md, "Where the time goes", item 13.)

A persistent launch (one program per SM, each striding over work units) has no hardware
handing out the next program: the backward's dK/dV launch orders its causal units with
snake_rank where snake_order says so (the forward's pairs its row blocks, fwd._unit_tiles).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

HEAD_GROUP = gl.constexpr(8)
# A persistent causal backward launch takes its work in the snake (snake_order) where it has at
# most this many (batch, kv head) pairs (run120-run121, docs/gluon-bwd.md, "Persistent causal
# order").
SNAKE_MAX_STREAMS = gl.constexpr(16)


@gluon.jit
def grouped_block_and_head(blocks=None):
    """(rank, head) of this program of a (blocks, heads) grid read in groups of HEAD_GROUP
    heads: rank 0 is each head's longest block, which the caller maps to its block. `blocks` is
    the grid's x extent where the caller has it at hand (None: read from the grid). A last
    group of fewer heads keeps the grid's order, (program_id(0), program_id(1)): a division by
    its width cost the backward's dK/dV kernels registers (16-byte spills)."""
    first = (gl.program_id(1) // HEAD_GROUP) * HEAD_GROUP  # the group's first head
    if blocks is None:
        blocks = gl.num_programs(0)
    rest = (gl.program_id(1) - first) * blocks + gl.program_id(0)
    whole = first + HEAD_GROUP <= gl.num_programs(1)
    return (gl.where(whole, rest // HEAD_GROUP, gl.program_id(0)),
            gl.where(whole, first + rest % HEAD_GROUP, gl.program_id(1)))


@gluon.jit
def snake_rank(unit, units):
    """The rank of the work that unit `unit` of a persistent launch stands for, where the
    launch's `units` pieces of work are ranked longest first and each program takes the units
    program_id(0) + r·programs, r = 0, 1, ... Even rounds give the ranks out in program order,
    odd rounds in reverse (a last round of fewer units over the programs that have one), so the
    program that took the longest of one round takes the shortest of the next: no program gets
    more than one unit's work above the even share. A model of 132 SMs puts it at 0.91 of the
    even share at Qwen2-7B B4 S3000's backward (the pairs 0.73; the non-persistent grid,
    balanced by the hardware, 0.91) and 0.97-1.0 at the other causal bench rows
    (docs/gluon-bwd.md, "Persistent causal order")."""
    programs = gl.num_programs(0)
    first = unit - gl.program_id(0)                      # this round's first unit
    width = gl.minimum(units - first, programs)          # units in this round
    return gl.where((first // programs) % 2 == 1, first + width - 1 - gl.program_id(0), unit)


@gluon.jit
def snake_order(kv_streams, pairs):
    """Whether a persistent causal launch over `kv_streams` (batch, kv head) pairs takes its
    work ranked longest first in the snake (snake_rank) rather than as `pairs` units of equal
    cost, a head's consecutive (bwd._unit_block): where kv_streams <= SNAKE_MAX_STREAMS, or
    where the pairs would fill less than 0.9 of their rounds. The snake balances to within a
    unit of the even share; the pairs keep the programs side by side on one head, whose Q and
    dO they then share in L2. The backward's only: the forward's persistent kernels with this
    rule read 1-2 % slower at every row that kept the pairs, whether the consumers selected
    between both orders' tile coordinates or branched (run122-run123), and gained 0.4-6 % only
    at B·Hkv <= 16 (docs/gluon-bwd.md, "Persistent causal order")."""
    programs = gl.num_programs(0)
    rounds = (pairs + programs - 1) // programs
    return (kv_streams <= SNAKE_MAX_STREAMS) | (10 * pairs < 9 * rounds * programs)
