"""Attention forward in Gluon for Hopper (sm_90): TMA, wgmma, mbarriers, warp specialization.

A work tile is CONSUMERS * BLOCK_M query rows of one (batch, head), CONSUMERS = 2, 3 or 4
consumer warpgroups. The partitions of a program:

    load      1 warp     TMA: K/V tiles into a STAGES-deep ring, and each work tile's Q tiles
    consumer0 4 warps    rows [start, start + BLOCK_M)             (the default partition)
    consumer1 4 warps    rows [start + BLOCK_M, start + 2 * BLOCK_M)
    consumer2 4 warps    rows [start + 2 * BLOCK_M, start + 3 * BLOCK_M)   (CONSUMERS >= 3)
    consumer3 4 warps    rows [start + 3 * BLOCK_M, start + 4 * BLOCK_M)   (CONSUMERS = 4)

Without PERSISTENT the grid is (row blocks, B * Hq) and a program serves one work tile. With
it the grid is one program per SM, striding over work units of two tiles that cost the same
under causal (_unit_tiles): the loader fetches the next tile's K/V and Q while the consumers
finish the last one, and O leaves through its own shared buffer, so a tile's epilogue overlaps
the next tile's loads. attn_fwd_pingpong_tail (TAIL, persistent, no mask) cuts the tiles of the
last, partial round along their keys into pieces that different programs compute and merge
through the workspace ("the split tail", below).

The consumers ping-pong: a consumer issues its tensor-core work (QKᵀ of tile j, PV of tile
j - 1) only while it holds the "turn" (a named hardware barrier per consumer, _take_turn and
_pass_turn, handed round 0, 1, (2, (3,)) 0, ...), so its softmax runs while another warpgroup's
GEMMs occupy the tensor cores. At head dim 64 a consumer's GEMMs take about as long as its
softmax's exponentials (2 x 64 multiply-adds against one exp2 per score, on units 128x apart in
throughput), so a third consumer gives each softmax two others' GEMMs to hide behind (a fourth
gives it three, and 256-row work tiles that divide sequence lengths of 1024 and up). Two
schedules (the OVERLAP constexpr):
    plain       wait for both GEMMs, then hand the turn over, then softmax(j)
    overlapped  hand the turn over once both are issued, wait for QKᵀ(j) only, run softmax(j)
                while PV(j - 1) is still in flight, then wait for PV and rescale O (as
                written; in the machine code only on 128-wide tiles, see _end_block)

Every tensor is read and written through a rank-4 host descriptor over its [b, h, s, d] view,
so any strides work and rows past Sq or Sk are zero-filled on load and dropped on store: tails
need no pointer masks, only the score mask on the last key tile.

Semantics follow the triton family: top-left causal (key k is visible to query q iff k <= q),
GQA by head index (kv head = h // (Hq // Hkv)), LSE natural-log float32 [B, Hq, Sq].
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.language.core import _aggregate as aggregate

from . import grid_dependency, named_barrier
from .grid import grouped_block_and_head

LN2 = gl.constexpr(0.6931471805599453)  # ln 2: lse is natural-log
LOG2E = gl.constexpr(1.4426950408889634)
# A ring this deep handles K and V apart (FwdBarriers): V lands on barriers of its own, and a
# slot's K is released after the QKᵀ that read it, before its V. Measured faster with 2 stages,
# slower or no faster with 3 (docs/gluon-family.md, "Loads and turn" and "K released before
# V").
SPLIT_KV_STAGES = gl.constexpr(2)


@gluon.jit
def _kv_tiles(start, Sk, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles a work tile of TILE_M rows visits; past the last query row's diagonal every
    tile is fully masked, so a causal work tile stops there."""
    hi = Sk
    if CAUSAL:
        hi = gl.minimum(Sk, start + TILE_M)
    return gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _work(B, Hq, Sq, TILE_M: gl.constexpr, PERSISTENT: gl.constexpr, CAUSAL: gl.constexpr):
    """(first, end, step, row_blocks): this program serves work units range(first, end, step),
    each of _unit_tiles work tiles of TILE_M rows."""
    row_blocks = gl.cdiv(Sq, TILE_M)
    end = _units(B, Hq, row_blocks, PERSISTENT, CAUSAL)
    if PERSISTENT:
        first = gl.program_id(0)
        step = gl.num_programs(0)
    else:
        first = _one_tile_unit(row_blocks, CAUSAL)
        step = end
    return first, end, step, row_blocks


@gluon.jit
def _one_tile_unit(row_blocks, CAUSAL: gl.constexpr):
    """The work unit (_tile: bh * row_blocks + (row_blocks - 1 - row block)) of this program of
    a non-persistent grid (row blocks, B·Hq): under causal the grid read in head groups, longest
    first across a group (grid.py; the grid's own order ran each head's row blocks shortest
    first, head after head); otherwise a head's row blocks side by side."""
    if CAUSAL:
        rank, bh = grouped_block_and_head(row_blocks)  # rank 0: the longest row block
        return bh * row_blocks + rank
    else:
        return gl.program_id(1) * row_blocks + (row_blocks - 1 - gl.program_id(0))


# _units, _unit_tiles and _tile are integer arithmetic only, so tests/cpu/test_gluon_family.py
# runs them as plain Python (their `.fn`) and checks that the units cover each tile once.
@gluon.jit
def _units(B, Hq, row_blocks, PERSISTENT: gl.constexpr, CAUSAL: gl.constexpr):
    """Work units of a launch: a head's row blocks, paired (_unit_tiles) in persistent causal
    programs."""
    if PERSISTENT and CAUSAL:
        return (row_blocks + 1) // 2 * B * Hq
    else:
        return row_blocks * B * Hq


@gluon.jit
def _unit_tiles(unit, row_blocks, PERSISTENT: gl.constexpr, CAUSAL: gl.constexpr):
    """Work tiles in a unit. Persistent programs take units round-robin, so every unit must
    cost the same. Under causal one pairs row block i of a head with row block
    row_blocks - 1 - i: they visit i + 1 and row_blocks - i spans of a work tile's rows in keys,
    row_blocks + 1 together (the middle row block of an odd count is a unit alone). Single
    row blocks round-robin did not balance: where the program count (132 on an H200) is a
    multiple of the row-block count (2 or 4 at sequence length 256 or 512) a program met the
    same row block in every head it visited, so one program had up to 4x another's work.
    Otherwise a unit is one tile: without a mask all cost the same, and without PERSISTENT the
    hardware balances programs by handing out the next as one ends."""
    if PERSISTENT and CAUSAL:
        i = unit % ((row_blocks + 1) // 2)
        return 1 + (2 * i + 1 != row_blocks)
    else:
        return 1


@gluon.jit
def _tile(unit, half, row_blocks, Hq, TILE_M: gl.constexpr, PERSISTENT: gl.constexpr,
          CAUSAL: gl.constexpr):
    """(b, h, first query row) of a unit's tile `half`. A head's units are consecutive, so
    programs running side by side share its K/V in L2 (pairing row blocks under causal puts
    twice as many heads side by side; measured slower without a mask, where nothing needs
    balancing), and the longer row block comes first. A one-tile unit is
    bh * row_blocks + (row_blocks - 1 - row block)."""
    if PERSISTENT and CAUSAL:
        per_head = (row_blocks + 1) // 2
        bh = unit // per_head
        i = unit % per_head
        row_block = i + (1 - half) * (row_blocks - 1 - 2 * i)  # half 0: row_blocks - 1 - i
    else:
        bh = unit // row_blocks
        row_block = row_blocks - 1 - unit % row_blocks
    return bh // Hq, bh % Hq, row_block * TILE_M


# --------------------------------------------------------------------------------------------
# the split tail (TAIL: persistent programs, no mask). P programs striding over T equal work
# tiles end in a last round where only T mod P of them work: the bench's rows all have
# T = 2048 or 4096 tiles on an H200's 132 SMs, 15.52 or 31.03 rounds run as 16 or 32, the GPU
# 3 % idle. With TAIL the whole rounds run as before and each of the R = T mod P tiles left is
# cut along its keys into `pieces` near-equal ranges, one unit each, so the last round takes
# about ceil(R·pieces / P) / pieces of a tile (R = 68 of 132: thirds, 0.69 instead of 1). A piece
# leaves its unnormalised O, row max and row sum in the workspace (_tail_epilogue); the warp
# that finds all of a tile's pieces done merges them and stores O and the LSE.
# --------------------------------------------------------------------------------------------
TAIL_MAX_PIECES = gl.constexpr(4)
TAIL_SLOTS = gl.constexpr(2)  # partial results per program in the workspace: R·pieces <= 2·P
TAIL_COUNTERS = gl.constexpr(16)  # counters per program: a tile's consumers x 4 warps, at most


@gluon.jit
def _tail_split(tiles, programs, n_kv):
    """(whole, pieces): the tiles served whole (full rounds of `programs`) and how many key
    ranges each tile left is cut into, the count in 1..TAIL_MAX_PIECES with the shortest last
    round (the fewest pieces of those), each piece at least one key tile and all of them in
    the workspace's TAIL_SLOTS per program; 1 where no tile is left."""
    rest = tiles % programs
    pieces = 1
    rounds = 1  # the last round, in tiles: rounds / pieces
    for k in gl.static_range(2, TAIL_MAX_PIECES + 1):
        r = gl.cdiv(rest * k, programs)
        if (r * pieces < rounds * k) & (rest * k <= TAIL_SLOTS * programs) & (k <= n_kv) \
                & (rest > 0):
            pieces = k
            rounds = r
    return tiles - rest, pieces


@gluon.jit
def _tail_units(tiles, whole, pieces):
    """Work units of a split tail's launch: the whole tiles, then every piece of the rest."""
    return whole + (tiles - whole) * pieces


@gluon.jit
def _tail_work(tiles, programs, Sk, BLOCK_N: gl.constexpr):
    """(key tiles a tile has, whole, pieces, units) of a split-tail launch over `tiles` work
    tiles: what the loader and every consumer walk alike."""
    n_kv = gl.cdiv(Sk, BLOCK_N)
    whole, pieces = _tail_split(tiles, programs, n_kv)
    return n_kv, whole, pieces, _tail_units(tiles, whole, pieces)


@gluon.jit
def _tail_unit(unit, whole, pieces, rest, n_kv):
    """(tile, lo, hi): a unit's tile (as _tile numbers them) and its key tiles lo .. hi - 1.
    The `rest` tiles past `whole` are cut into `pieces`, taken piece by piece: unit
    whole + i·rest + t is piece i of tile whole + t, and its slot, i·rest + t, indexes the
    workspace. Where the key tiles do not divide evenly the first pieces are a tile longer, so
    a program that gets a second piece gets a shorter one (thirds of 16 key tiles on 132
    programs: 6 + 5 at most, where a tile's pieces side by side put 6 + 6 on some)."""
    tile = unit
    lo = 0
    hi = n_kv
    if unit >= whole:
        piece = (unit - whole) // rest
        tile = whole + (unit - whole) % rest
        size = n_kv // pieces
        longer = n_kv % pieces
        lo = piece * size + gl.minimum(piece, longer)
        hi = (piece + 1) * size + gl.minimum(piece + 1, longer)
    return tile, lo, hi


@aggregate
class FwdSmem:
    """Shared memory of a program: Q [CONSUMERS], O [CONSUMERS] (Q's own slots unless
    persistent), and the K and V rings [STAGES]."""
    q: gl.shared_memory_descriptor
    o: gl.shared_memory_descriptor
    k: gl.shared_memory_descriptor
    v: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q, o, k, v):
        self.q = q
        self.o = o
        self.k = k
        self.v = v


@aggregate
class FwdBarriers:
    q_ready: gl.shared_memory_descriptor  # [CONSUMERS] a consumer's Q tile landed
    q_free: gl.shared_memory_descriptor   # [CONSUMERS] a consumer did its last QKᵀ with its Q
    # K(j) lands on k_ready. With a 2-stage ring V(j) lands on v_ready, so QKᵀ(j) waits for
    # K(j) only; with 3 stages the loads run far enough ahead that the second wait only costs,
    # and V(j) lands on k_ready beside K(j) (v_ready is unused). Separate allocations: Triton
    # puts a warpgroup bar.sync between two waits on one. A ring slot's release goes the
    # other way, on named hardware barriers (_free_slot, below).
    k_ready: gl.shared_memory_descriptor  # [STAGES]
    v_ready: gl.shared_memory_descriptor  # [STAGES]

    @gluon.constexpr_function
    def __init__(self, q_ready, q_free, k_ready, v_ready):
        self.q_ready = q_ready
        self.q_free = q_free
        self.k_ready = k_ready
        self.v_ready = v_ready


# --------------------------------------------------------------------------------------------
# load: one warp issues every TMA copy; completion is tracked by byte counts on mbarriers.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _load(q_desc, k_desc, v_desc, smem, bars, B, Hq, Hkv, Sq, Sk,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
          CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr, CONSUMERS: gl.constexpr,
          TAIL: gl.constexpr):
    TILE_M: gl.constexpr = CONSUMERS * BLOCK_M
    first, end, step, row_blocks = _work(B, Hq, Sq, TILE_M, PERSISTENT, CAUSAL)
    if TAIL:
        n_kv, whole, pieces, units = _tail_work(end, step, Sk, BLOCK_N)
        count = 0
        it = 0
        for unit in range(first, units, step):
            tile, lo, hi = _tail_unit(unit, whole, pieces, end - whole, n_kv)
            b, h, start = _tile(tile, 0, row_blocks, Hq, TILE_M, PERSISTENT, CAUSAL)
            count = _load_tile(q_desc, k_desc, v_desc, smem, bars, b, h, start, count, it,
                               lo, hi - lo, Hq, Hkv, BLOCK_M, BLOCK_N, STAGES, CONSUMERS)
            it += 1
    elif PERSISTENT:
        count = 0  # K/V tiles loaded so far: ring slots and phases run on across work tiles
        it = 0     # work tiles so far
        for unit in range(first, end, step):
            for half in range(_unit_tiles(unit, row_blocks, PERSISTENT, CAUSAL)):
                b, h, start = _tile(unit, half, row_blocks, Hq, TILE_M, PERSISTENT, CAUSAL)
                n_tiles = _kv_tiles(start, Sk, TILE_M, BLOCK_N, CAUSAL)
                count = _load_tile(q_desc, k_desc, v_desc, smem, bars, b, h, start, count, it,
                                   0, n_tiles, Hq, Hkv, BLOCK_M, BLOCK_N, STAGES, CONSUMERS)
                it += 1
    else:
        b, h, start = _tile(first, 0, row_blocks, Hq, TILE_M, PERSISTENT, CAUSAL)
        n_tiles = _kv_tiles(start, Sk, TILE_M, BLOCK_N, CAUSAL)
        count = _load_tile(q_desc, k_desc, v_desc, smem, bars, b, h, start, 0, 0, 0, n_tiles,
                           Hq, Hkv, BLOCK_M, BLOCK_N, STAGES, CONSUMERS)
    # The releases of the last STAGES tiles, which no load waits for: taken here, so every
    # release barrier ends the kernel with no arrival pending.
    for t in range(count - STAGES, count):
        if t >= 0:
            _await_slot(t % STAGES, False, STAGES, CONSUMERS)
            _await_slot(t % STAGES, True, STAGES, CONSUMERS)


@gluon.jit
def _load_tile(q_desc, k_desc, v_desc, smem, bars, b, h, start, count, it, lo, n_tiles, Hq, Hkv,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
               CONSUMERS: gl.constexpr):
    """Loads of the `it`-th work tile, (b, h, rows from start), after `count` K/V tiles: its
    key tiles lo .. lo + n_tiles - 1 (all of them but in a split tail's pieces); returns the
    new count."""
    q_bytes: gl.constexpr = q_desc.block_type.nbytes
    k_bytes: gl.constexpr = k_desc.block_type.nbytes
    v_bytes: gl.constexpr = v_desc.block_type.nbytes
    kv_h = h // (Hq // Hkv)
    for j in range(n_tiles):
        stage = (count + j) % STAGES
        # Wait until every consumer released the slot's previous tile, if it had one: its K
        # (2 stages), or its K and V together.
        refill = count + j >= STAGES
        if refill:
            _await_slot(stage, False, STAGES, CONSUMERS)
        if STAGES == SPLIT_KV_STAGES:
            mbarrier.expect(bars.k_ready.index(stage), k_bytes)
        else:
            mbarrier.expect(bars.k_ready.index(stage), k_bytes + v_bytes)
        tma.async_copy_global_to_shared(k_desc, [b, kv_h, (lo + j) * BLOCK_N, 0],
                                        bars.k_ready.index(stage), smem.k.index(stage))
        if STAGES != SPLIT_KV_STAGES:
            tma.async_copy_global_to_shared(v_desc, [b, kv_h, (lo + j) * BLOCK_N, 0],
                                            bars.k_ready.index(stage), smem.v.index(stage))
        if j == 0:
            # Q after K(0), and before V(0) where V has its own barrier: a work tile's first
            # QKᵀ needs Q and K(0) only. Each consumer frees its Q slot after its last QKᵀ of
            # the previous work tile, and K(0) streams in meanwhile.
            for c in gl.static_range(CONSUMERS):
                mbarrier.wait(bars.q_free.index(c), (it & 1) ^ 1)
                mbarrier.expect(bars.q_ready.index(c), q_bytes)
                tma.async_copy_global_to_shared(q_desc, [b, h, start + c * BLOCK_M, 0],
                                                bars.q_ready.index(c), smem.q.index(c))
        if STAGES == SPLIT_KV_STAGES:
            if refill:
                _await_slot(stage, True, STAGES, CONSUMERS)
            mbarrier.expect(bars.v_ready.index(stage), v_bytes)
            tma.async_copy_global_to_shared(v_desc, [b, kv_h, (lo + j) * BLOCK_N, 0],
                                            bars.v_ready.index(stage), smem.v.index(stage))
    return count + n_tiles


@gluon.jit
def _wait_v(bars, stage, count, STAGES: gl.constexpr):
    """Wait for V of the `count`-th K/V tile, in ring slot `stage`. With 3 stages V landed with
    K, on the barrier the caller waited for already."""
    if STAGES == SPLIT_KV_STAGES:
        mbarrier.wait(bars.v_ready.index(stage), (count // STAGES) & 1)


# --------------------------------------------------------------------------------------------
# slot releases: named hardware barriers (named_barrier.py), one per ring slot (two with a
# 2-stage ring: its K and its V), ids FIRST_SLOT_BARRIER and up. Every consumer thread arrives
# (bar.arrive, no wait) once its wgmma that read the slot is done, and the loader's warp takes
# the barrier (bar.sync over the consumers' 128 threads each and its 32) before it refills the
# slot. An mbarrier.arrive cost each release two warpgroup bar.syncs (named_barrier.py says
# why), one of them before the plain schedule passes its turn (run99: 1.006x by cycles). A
# consumer releases a tile only after reading it (or, for a skipped tile, after it landed), so
# after the loader took the slot's previous release: arrivals for two tiles of one slot cannot
# meet on its barrier. The loader waits from a slot's second tile on, and takes the releases of
# the last tiles before it ends (_load), so the kernel leaves every barrier with no arrival
# pending.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _slot_barrier(stage, v: gl.constexpr, STAGES: gl.constexpr):
    """The id of ring slot `stage`'s release barrier: of its V (with 3 stages its K and V), or
    with `v` False of its K (with 3 stages the same one)."""
    if v or STAGES != SPLIT_KV_STAGES:
        return named_barrier.FIRST_SLOT_BARRIER + stage
    else:
        return named_barrier.FIRST_SLOT_BARRIER + STAGES + stage


@gluon.jit
def _free_slot(stage, v: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """This consumer warpgroup is done with slot `stage`'s V (or K, as in _slot_barrier)."""
    named_barrier.arrive(_slot_barrier(stage, v, STAGES), 32 + 128 * CONSUMERS, 4)


@gluon.jit
def _await_slot(stage, v: gl.constexpr, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """The loader's warp waits until every consumer freed slot `stage`'s V (or K). With 3 stages
    K and V share a barrier, taken once: for `v` this does nothing."""
    if not v or STAGES == SPLIT_KV_STAGES:
        named_barrier.sync(_slot_barrier(stage, v, STAGES), 32 + 128 * CONSUMERS, 1)


@gluon.jit
def _release_k(stage, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """This consumer's QKᵀ with ring slot `stage`'s K is done. With a 2-stage ring the loader
    refills that K once every consumer said so, while the slot's V is still read by PV: K(j + 2)
    then loads during iteration j + 1. Released with V after PV(j), which the second consumer
    runs at the end of its iteration j + 1, the load had no time left before the first
    consumer's QKᵀ(j + 2) (docs/gluon-family.md, "K released before V"). With 3 stages K goes
    with V."""
    if STAGES == SPLIT_KV_STAGES:
        _free_slot(stage, False, STAGES, CONSUMERS)


@gluon.jit
def _release_landed(bars, count, STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """Release the `count`-th K/V tile's slot without having read it (a skipped or idle tile),
    once its K and V have landed: the loader fills each only after every release of the slot's
    previous tile, so these arrivals cannot count for that one."""
    stage = count % STAGES
    mbarrier.wait(bars.k_ready.index(stage), (count // STAGES) & 1)
    _wait_v(bars, stage, count, STAGES)
    _release_k(stage, STAGES, CONSUMERS)
    _free_slot(stage, True, STAGES, CONSUMERS)


# --------------------------------------------------------------------------------------------
# softmax: online, in the log2 domain, one FFMA a score: p = exp2(a·s − r), with a row's scale a
# and reference r from _reference(m) of its running max m. The reference only has to be one
# number per row that O, l and the rescale all share: with r in place of m·scale every p of
# the row carries the same factor 2^(m·scale − r), which cancels in O = Σ p v / Σ p, and the
# LSE adds it back (_row_lse). Two cases:
# - the scores' magnitude |m|·scale < 2^29 (every real input): a = scale and r is m·scale
#   rounded up by one to two ulps, so the max element's exponent m·scale − r (exact inside the
#   FFMA) lies in [−2.5, 0) ulps of r, more than −80: p never exceeds 1 and never flushes to 0.
# - beyond (PyTorch's extreme-value contract: |q.k|·scale ~1e11 and more): r = m·scale rounded
#   could be thousands off, so exp2 of the max element would overflow. There a = K, the power of
#   two that puts |m|·K in [2^30, 2^31): m·K is exact, ties with the max get p = 1 exactly, and
#   every other score lies at least ulp(m)·K / 2 = 64 below (p <= 2^-64). In the true softmax
#   those scores weigh at most 2^-16 of the max's (ulp(m)·scale / 2 >= 16 there): the error is
#   that small, and the exact cases (one key, a one-hot winner) stay exact.
# --------------------------------------------------------------------------------------------
HUGE_SCALED_MAX = gl.constexpr(536870912.0)  # 2^29
ULP_BUMP = gl.constexpr(1.1920928955078125e-07)  # 2^-23: |x|·2^-23 is one to two ulps of x


@gluon.jit
def _reference(m, qk_scale):
    """(a, r, huge) of rows whose running max is m: p = exp2(a·s − r) (see above)."""
    mc = m * qk_scale
    huge = gl.abs(mc) >= HUGE_SCALED_MAX
    # K = 2^(30 − e) for m = ±1.f·2^e: its biased exponent is 284 − m's, built from the bits
    exponent = gl.cast(m, gl.int32, bitcast=True) & 0x7F800000
    k = gl.cast((142 << 23) - exponent + (142 << 23), gl.float32, bitcast=True)  # 284 << 23 > int32
    a = gl.where(huge, k, qk_scale)
    r = gl.where(huge, m * k, gl.fma(gl.abs(mc), ULP_BUMP, mc))
    return a, r, huge


@gluon.jit
def _softmax(s, m_i, l_i, r_i, j, row0, Sk, qk_scale,
             s_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             CAUSAL: gl.constexpr):
    """Returns (p, alpha, m_new, l_new, r_new) for score tile j of this consumer's rows."""
    col0 = j * BLOCK_N
    # Only tiles that cross the diagonal or the end of the keys need a mask.
    needs_mask = col0 + BLOCK_N > Sk
    if CAUSAL:
        needs_mask = needs_mask | (col0 + BLOCK_N > row0 + 1)
    if needs_mask:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        if CAUSAL:
            # a row's last visible key, min(row, Sk - 1): one compare and one select a score
            # (the two conditions apart were two selects)
            rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            keep = gl.expand_dims(cols, 0) <= gl.expand_dims(gl.minimum(rows, Sk - 1), 1)
        else:
            keep = gl.expand_dims(cols < Sk, 0)
        s = gl.where(keep, s, -float("inf"))
    # Every row keeps key 0 visible (top-left causal), so m_new is finite from the first tile
    # on and a fully masked later tile gives p = 0, alpha = 1.
    m_new = gl.maximum(m_i, gl.max(s, 1))
    a, r_new, huge = _reference(m_new, qk_scale)
    p = gl.exp2(gl.fma(s, gl.expand_dims(a, 1), -gl.expand_dims(r_new, 1)))
    # O and l so far are in units of 2^r_i; a row past HUGE_SCALED_MAX whose max moved drops
    # them (they were all at least 2^-16 below it, and r_i − r_new may change sign when K
    # does). r_i starts at −inf, so the first tile's alpha is 0.
    alpha = gl.exp2(gl.where(huge & (m_i != m_new), -float("inf"), r_i - r_new))
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_new, r_new


# --------------------------------------------------------------------------------------------
# the turn: one named hardware barrier per consumer, over two warpgroups (256 threads). A
# consumer takes its turn with bar.sync on its own barrier, which completes once the previous
# consumer's 128 threads have arrived there, and passes it with bar.arrive on the next one's,
# which does not wait: the passing warps go straight on to their softmax. (An mbarrier.arrive
# would first bar.sync the passing warpgroup: Gluon lowers it to a warpgroup barrier and one
# predicated arrive.) The ids are the top ones, 14-15, 13-15 or 12-15; Triton's own partition
# barriers use ids 0-2 here (0-4 with four consumers), which tests/cpu/test_gluon_family.py
# checks in every kernel's SASS.
# --------------------------------------------------------------------------------------------
LAST_BARRIER = gl.constexpr(15)  # consumer c's turn is barrier 16 - CONSUMERS + c


@gluon.jit
def _take_turn(CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr):
    named_barrier.sync(LAST_BARRIER + 1 - CONSUMERS + CONSUMER, 256, 4)


@gluon.jit
def _pass_turn(CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr):
    named_barrier.arrive(LAST_BARRIER + 1 - CONSUMERS + (CONSUMER + 1) % CONSUMERS, 256, 4)


@gluon.constexpr_function
def _max_skipped(CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, CAUSAL):
    """The most key tiles of a work tile that lie wholly past this consumer's rows under causal.
    A work tile from `start`, a multiple of its CONSUMERS * BLOCK_M rows, visits the key tiles
    below start + CONSUMERS * BLOCK_M and this consumer's rows see those below
    start + (CONSUMER + 1) * BLOCK_M: the most tiles between the two over every start (the
    count repeats after BLOCK_N work tiles). Where a tile boundary never falls between this
    consumer's last row and the work tile's it is 0 and nothing is compiled for skipping: two
    consumers with 128-key tiles, and consumer 2 of four."""
    if not CAUSAL:
        return 0
    tile_m = CONSUMERS * BLOCK_M
    mine = (CONSUMER + 1) * BLOCK_M
    return max(-(-(start + tile_m) // BLOCK_N) - -(-(start + mine) // BLOCK_N)
               for start in range(0, BLOCK_N * tile_m, tile_m))


@gluon.jit
def _own_tiles(n_tiles, row0, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles of the work tile's n_tiles this consumer computes. Under causal this
    consumer's rows (from row0) see only keys below row0 + BLOCK_M, up to _max_skipped tiles
    short of the work tile's last. (tests/cpu/test_gluon_family.py runs this, _max_skipped and
    _kv_tiles as plain Python, with gl.minimum and gl.cdiv standing in as integer
    functions.)"""
    if _max_skipped(CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, CAUSAL) > 0:
        return gl.minimum(n_tiles, gl.cdiv(row0 + BLOCK_M, BLOCK_N))
    else:
        return n_tiles


# --------------------------------------------------------------------------------------------
# mma + softmax of one consumer warpgroup over one work tile, and its epilogue.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _end_block(Sk, HEAD_DIM: gl.constexpr):
    """End the basic block here, on 128-wide tiles (head dims 96 and 128). ptxas schedules a
    wgmma wait as early in its basic block as the wgmmas it waits for allow, as if waiting cost
    nothing: written after the overlapped schedule's softmax, in the softmax's block, the wait
    for PV(j - 1) came out before the softmax's first exp2 in every overlapped kernel's SASS, so
    the softmax never ran beside PV(j - 1) (docs/gluon-family.md, item 21). A branch round code
    that never runs (a length is never negative) ends the block for a compare and a branch a
    key tile, and a wait written after it stays after the softmax. The fence inside only has to
    be something neither LLVM nor ptxas may drop; it would be harmless if it ran. (Once per
    thread, over the value a named barrier takes, as the barriers' own inline asm runs.) On the
    H200 (run136) the same kernels with the block ended ran 0.3-1.8 % faster at head dim 128
    without a mask from S1024 on and within 2 % either way under causal, but 2.4-4.9 % slower
    at head dim 64 and 0.4-3.7 % slower at 256: those keep the wait where ptxas puts it."""
    if HEAD_DIM == 128:
        if Sk < 0:
            gl.inline_asm_elementwise("membar.cta;\n\tmov.b32 $0, $1;", "=r,r",
                                      [named_barrier._ids(0, 4)], dtype=gl.int32, is_pure=False,
                                      pack=1)


@gluon.jit
def _attend(q, smem, bars, base, lo, n_tiles, row0, Sk, sm_scale,
            s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
            CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, BLOCK_M: gl.constexpr,
            BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
            CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):
    """O (unnormalised), m and l of this consumer's rows over the work tile's key tiles
    lo..lo+n_tiles-1 (lo is 0 but in a split tail's pieces). `base` counts the K/V tiles, and
    so the turns, this consumer took in earlier work tiles: ring slots and barrier phases
    continue from there.

    Under causal the last key tiles may lie wholly past this consumer's rows (_own_tiles): it
    computes n_own tiles, spends the first skipped tile's turn on its final PV and takes the
    other skipped turns empty, so every consumer takes n_tiles turns and the round holds."""
    MAX_SKIP: gl.constexpr = _max_skipped(CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, CAUSAL)
    n_own = _own_tiles(n_tiles, row0, CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, CAUSAL)
    dtype: gl.constexpr = q.dtype
    qk_scale = sm_scale * LOG2E  # the exponent's scale: softmax runs in base 2
    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    r_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    p = gl.zeros([BLOCK_M, BLOCK_N], dtype, p_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    if OVERLAP:
        # Tile 0 has no PV before it: QKᵀ alone, then its softmax.
        mbarrier.wait(bars.k_ready.index(base % STAGES), (base // STAGES) & 1)
        _take_turn(CONSUMER, CONSUMERS)
        k_t = smem.k.index(base % STAGES).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
        s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
        _pass_turn(CONSUMER, CONSUMERS)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        _release_k(base % STAGES, STAGES, CONSUMERS)
        p_f32, alpha, m_i, l_i, r_i = _softmax(s, m_i, l_i, r_i, lo, row0, Sk, qk_scale,
                                               s_layout, BLOCK_M, BLOCK_N, CAUSAL)
        p = gl.convert_layout(p_f32.to(dtype), p_layout)
        for j in range(1, n_own):
            count = base + j
            stage = count % STAGES
            prev = (count - 1) % STAGES
            mbarrier.wait(bars.k_ready.index(stage), (count // STAGES) & 1)
            _wait_v(bars, prev, count - 1, STAGES)
            k_t = smem.k.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
            _take_turn(CONSUMER, CONSUMERS)
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            v = smem.v.index(prev).reshape([BLOCK_N, HEAD_DIM])
            acc = warpgroup_mma(p, v, acc, is_async=True)
            # Hand the turn over once both GEMMs are issued: the tensor cores run them in issue
            # order, so the next warpgroup's GEMMs queue right behind these.
            _pass_turn(CONSUMER, CONSUMERS)
            # wgmma groups retire in order: one left in flight means QKᵀ(j) is done and PV(j-1)
            # may still run, behind this softmax.
            s = warpgroup_mma_wait(1, deps=[s_tok])
            _release_k(stage, STAGES, CONSUMERS)
            p_f32, alpha, m_i, l_i, r_i = _softmax(s, m_i, l_i, r_i, lo + j, row0, Sk,
                                                   qk_scale, s_layout, BLOCK_M, BLOCK_N, CAUSAL)
            # Wait for PV(j-1) only now; on 128-wide tiles in a block of its own, so that the
            # softmax runs beside it (_end_block).
            _end_block(Sk, HEAD_DIM)
            # p (tile j-1) is PV's register operand: it stays alive until PV is done.
            acc, p = warpgroup_mma_wait(0, deps=[acc, p])
            _free_slot(prev, True, STAGES, CONSUMERS)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_f32.to(dtype), p_layout)
    else:
        for j in range(n_own):
            count = base + j
            stage = count % STAGES
            prev = (count - 1) % STAGES
            mbarrier.wait(bars.k_ready.index(stage), (count // STAGES) & 1)
            if j > 0:
                _wait_v(bars, prev, count - 1, STAGES)
            k_t = smem.k.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
            _take_turn(CONSUMER, CONSUMERS)
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            if j > 0:
                # PV of the previous tile, queued behind QKᵀ so both run back to back.
                v = smem.v.index(prev).reshape([BLOCK_N, HEAD_DIM])
                acc = warpgroup_mma(p, v, acc, is_async=True)
                acc = warpgroup_mma_wait(0, deps=[acc])
                _free_slot(prev, True, STAGES, CONSUMERS)
            s = warpgroup_mma_wait(0, deps=[s_tok])
            _release_k(stage, STAGES, CONSUMERS)
            # Hand the turn over: the next warpgroup's GEMMs now overlap this softmax.
            _pass_turn(CONSUMER, CONSUMERS)

            p_f32, alpha, m_i, l_i, r_i = _softmax(s, m_i, l_i, r_i, lo + j, row0, Sk,
                                                   qk_scale, s_layout, BLOCK_M, BLOCK_N, CAUSAL)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_f32.to(dtype), p_layout)

    # The last QKᵀ is done: the loader may put the next work tile's Q into this slot.
    mbarrier.arrive(bars.q_free.index(CONSUMER))
    # The last tile's PV: with no turn (the tensor cores are ours once the others are done
    # too), or in the turn of the first key tile this consumer skips.
    last = (base + n_own - 1) % STAGES
    _wait_v(bars, last, base + n_own - 1, STAGES)
    skip = n_own < n_tiles
    if skip:
        _take_turn(CONSUMER, CONSUMERS)
    acc = warpgroup_mma(p, smem.v.index(last).reshape([BLOCK_N, HEAD_DIM]), acc, is_async=True)
    if skip:
        _pass_turn(CONSUMER, CONSUMERS)
    acc = warpgroup_mma_wait(0, deps=[acc])
    _free_slot(last, True, STAGES, CONSUMERS)
    for t in gl.static_range(1, MAX_SKIP):
        if t < n_tiles - n_own:  # the other skipped tiles' turns, empty
            _take_turn(CONSUMER, CONSUMERS)
            _pass_turn(CONSUMER, CONSUMERS)
    # The skipped slots, each once its tile landed. A tile lands only once every consumer
    # released the tile STAGES before it in the ring. Where more tiles may be skipped than the
    # ring has slots (consumer 0 of four on a 2-stage ring skips up to three 64-key tiles) that
    # tile may be a skipped one too, released here: oldest first then, as newest first would
    # wait for a release that comes after it. Otherwise newest first, as the kernels run on the
    # H200 do.
    for t in gl.static_range(MAX_SKIP):
        if t < n_tiles - n_own:
            if MAX_SKIP > STAGES:
                _release_landed(bars, base + n_own + t, STAGES, CONSUMERS)
            else:
                _release_landed(bars, base + n_tiles - 1 - t, STAGES, CONSUMERS)
    return acc, m_i, l_i


@gluon.jit
def _idle(bars, base, n_tiles, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
          STAGES: gl.constexpr):
    """A work tile whose rows for this consumer all lie past Sq (three consumers' 192 rows
    against, say, Sq = 1024, or four consumers' 256 against Sq = 1000): no GEMMs, only the
    tile's turns and slot releases, so the others' round and the loader's ring go on."""
    mbarrier.arrive(bars.q_free.index(CONSUMER))
    for j in range(n_tiles):
        _take_turn(CONSUMER, CONSUMERS)
        _pass_turn(CONSUMER, CONSUMERS)
        _release_landed(bars, base + j, STAGES, CONSUMERS)


@gluon.jit
def _row_lse(m_i, l_i, sm_scale):
    """ln(sum exp(scale·s)) of rows with max m_i whose p = 2^(a·s − r) sum to l_i: scale·m +
    ln l − (a·m − r)·ln 2, where a·m − r is 0 for the huge rows and within three ulps of r
    below 0 otherwise (_reference)."""
    a, r, huge = _reference(m_i, sm_scale * LOG2E)
    return m_i * sm_scale + (gl.log2(l_i) - gl.fma(m_i, a, -r)) * LN2


@gluon.jit
def _epilogue(acc, m_i, l_i, o_desc, o_smem, lse_ptr, b, h, row0, Hq, Sq, sm_scale,
              s_layout: gl.constexpr, o_layout: gl.constexpr,
              BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    """O normalised by l, through shared memory and TMA; LSE stored directly."""
    # One reciprocal a row, then a multiply an element: `acc / l` made ptxas emit the full
    # division's range checks (two compares, two scalings, a select) for every element.
    inv_l = gl.convert_layout(1.0 / l_i, gl.SliceLayout(1, o_layout))
    o = (acc * gl.expand_dims(inv_l, 1)).to(o_smem.dtype)
    tma.store_wait(0)  # the previous work tile's O has left o_smem
    o_smem.reshape([BLOCK_M, HEAD_DIM]).store(o)
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [b, h, row0, 0], o_smem)

    lse = _row_lse(m_i, l_i, sm_scale)
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse_base = (b.to(gl.int64) * Hq + h) * Sq
    gl.store(lse_ptr + lse_base + rows, lse, mask=rows < Sq)


@aggregate
class TailBuffers:
    """The split tail's workspace and what its merging warps store through (fwd.py, TAIL):
    per program TAIL_SLOTS slots of CONSUMERS x BLOCK_M x HEAD_DIM fp32 O and 2 x BLOCK_M row
    values (max, sum) a consumer, and a counter per (tile split, consumer, warp); O by pointer,
    D its head dim (the tiles' HEAD_DIM may be wider)."""
    part: gl.tensor
    stat: gl.tensor
    ctr: gl.tensor
    o: gl.tensor
    o_stride_b: gl.tensor
    o_stride_h: gl.tensor
    o_stride_s: gl.tensor
    D: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, part, stat, ctr, o, o_stride_b, o_stride_h, o_stride_s, D):
        self.part = part
        self.stat = stat
        self.ctr = ctr
        self.o = o
        self.o_stride_b = o_stride_b
        self.o_stride_h = o_stride_h
        self.o_stride_s = o_stride_s
        self.D = gl.constexpr(D)


# Counters count warps: each warp of a consumer adds 32 (one a thread) to its own.
TAIL_WARP_ROWS = gl.constexpr(16)  # the rows of a wgmma accumulator one warp holds


@gluon.jit
def _count_in(counter):
    """Each of this consumer warpgroup's warps adds 32 to its counter, `counter + warp`: one
    release add a thread, which orders that thread's workspace stores before it; then the
    warp syncs, so none of its threads reads the counter before all of them added."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    at = counter + gl.arange(0, 128, layout=layout) // 32
    gl.inline_asm_elementwise("red.release.gpu.global.add.u32 [$1], 1;\n\t"
                              "bar.warp.sync -1;\n\tmov.b32 $0, 0;", "=r,l", [at],
                              dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _acquire(at):
    """The counters at `at`, read with acquire semantics: a thread that reads a count sees
    every workspace store the adds before it ordered."""
    return gl.inline_asm_elementwise("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l", [at],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _merge_step(m, r, l, acc, m_q, l_q, acc_q, qk_scale):
    """(m, r, l, acc) of rows after adding one piece's (max m_q, sum l_q, unnormalised O acc_q)
    to what was merged so far, as _softmax adds a key tile: both rescaled to the reference of
    the larger max (_reference), and past HUGE_SCALED_MAX the one whose max is lower dropped.
    Starts from m = r = -inf, l = 0, acc = 0."""
    m_new = gl.maximum(m, m_q)
    _, r_new, huge = _reference(m_new, qk_scale)
    _, r_q, _ = _reference(m_q, qk_scale)
    alpha = gl.exp2(gl.where(huge & (m != m_new), -float("inf"), r - r_new))
    beta = gl.exp2(gl.where(huge & (m_q != m_new), -float("inf"), r_q - r_new))
    acc = acc * gl.expand_dims(alpha, 1) + acc_q * gl.expand_dims(beta, 1)
    return m_new, r_new, l * alpha + l_q * beta, acc


@gluon.jit
def _tail_epilogue(acc, m_i, l_i, tail, slot, pieces, rest, lse_ptr, b, h, row0, Hq, Sq,
                   sm_scale, o_layout: gl.constexpr, CONSUMER: gl.constexpr,
                   CONSUMERS: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    """A piece of a split tile, the tile's slot % rest: its unnormalised O, row max and row sum
    go to workspace slot `slot` (its piece i's is i·rest + slot % rest), then each warp counts
    itself in. A warp whose count is the tile's last (all
    `pieces` of its 16 rows are in) merges them, in piece order from the workspace, so any
    warp that merges stores the same bits, and stores O and the LSE of its rows. Every thread
    only reads back the slots' elements of its own warp's rows, which that warp's threads in
    the other pieces wrote before their release adds."""
    row_l: gl.constexpr = gl.SliceLayout(1, o_layout)
    rows = gl.arange(0, BLOCK_M, layout=row_l)
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    at = gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    region = slot * CONSUMERS + CONSUMER
    gl.store(tail.part + region.to(gl.int64) * (BLOCK_M * HEAD_DIM) + at, acc)
    gl.store(tail.stat + region * (2 * BLOCK_M) + rows, gl.convert_layout(m_i, row_l))
    gl.store(tail.stat + region * (2 * BLOCK_M) + BLOCK_M + rows, gl.convert_layout(l_i, row_l))
    split = slot % rest  # the tile among those split
    counter = tail.ctr + (split * CONSUMERS + CONSUMER) * (BLOCK_M // TAIL_WARP_ROWS)
    _count_in(counter)
    mine = _acquire(counter + rows // TAIL_WARP_ROWS) == 32 * pieces
    qk_scale = sm_scale * LOG2E
    m = gl.full([BLOCK_M], -float("inf"), gl.float32, row_l)
    r = gl.full([BLOCK_M], -float("inf"), gl.float32, row_l)
    l = gl.zeros([BLOCK_M], gl.float32, row_l)
    merged = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    for piece in range(pieces):
        region = (piece * rest + split) * CONSUMERS + CONSUMER
        m_q = gl.load(tail.stat + region * (2 * BLOCK_M) + rows, mask=mine, other=0.0)
        l_q = gl.load(tail.stat + region * (2 * BLOCK_M) + BLOCK_M + rows, mask=mine, other=0.0)
        acc_q = gl.load(tail.part + region.to(gl.int64) * (BLOCK_M * HEAD_DIM) + at,
                        mask=gl.expand_dims(mine, 1), other=0.0)
        m, r, l, merged = _merge_step(m, r, l, merged, m_q, l_q, acc_q, qk_scale)
    o_rows = row0 + rows
    keep = mine & (o_rows < Sq)
    o_at = (tail.o + b.to(gl.int64) * tail.o_stride_b + h.to(gl.int64) * tail.o_stride_h
            + gl.expand_dims(o_rows.to(gl.int64) * tail.o_stride_s, 1) + gl.expand_dims(cols, 0))
    o = merged * gl.expand_dims(1.0 / l, 1)
    gl.store(o_at, o.to(tail.o.dtype.element_ty),
             mask=gl.expand_dims(keep, 1) & gl.expand_dims(cols < tail.D, 0))
    gl.store(lse_ptr + (b.to(gl.int64) * Hq + h) * Sq + o_rows, _row_lse(m, l, sm_scale),
             mask=keep)


@gluon.jit
def _consume(o_desc, lse_ptr, smem, bars, B, Hq, Sq, Sk, sm_scale, tail,
             CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, PERSISTENT: gl.constexpr,
             TAIL: gl.constexpr):
    # wgmma accumulators: the 4 warps split the rows, one m64 instruction per 64 rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    # P stays in registers as wgmma's A operand, never touching shared memory.
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)

    first, end, step, row_blocks = _work(B, Hq, Sq, CONSUMERS * BLOCK_M, PERSISTENT, CAUSAL)
    if CONSUMER == CONSUMERS - 1:
        _pass_turn(CONSUMER, CONSUMERS)  # consumer 0 takes the first turn
    if TAIL:
        n_kv, whole, pieces, units = _tail_work(end, step, Sk, BLOCK_N)
        count = 0
        it = 0
        for unit in range(first, units, step):
            tile, lo, hi = _tail_unit(unit, whole, pieces, end - whole, n_kv)
            b, h, start = _tile(tile, 0, row_blocks, Hq, CONSUMERS * BLOCK_M, PERSISTENT, CAUSAL)
            slot = -1  # a piece's workspace slot
            if (unit >= whole) & (pieces > 1):
                slot = unit - whole
            _consume_tile(o_desc, lse_ptr, smem, bars, b, h, start, count, it, lo, hi - lo,
                          Hq, Sq, Sk, sm_scale, s_layout, o_layout, p_layout,
                          CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                          OVERLAP, TAIL, tail, slot, pieces, end - whole)
            count += hi - lo
            it += 1
    elif PERSISTENT:
        count = 0  # K/V tiles (and turns) taken so far
        it = 0     # work tiles so far
        for unit in range(first, end, step):
            for half in range(_unit_tiles(unit, row_blocks, PERSISTENT, CAUSAL)):
                b, h, start = _tile(unit, half, row_blocks, Hq, CONSUMERS * BLOCK_M,
                                    PERSISTENT, CAUSAL)
                n_tiles = _kv_tiles(start, Sk, CONSUMERS * BLOCK_M, BLOCK_N, CAUSAL)
                _consume_tile(o_desc, lse_ptr, smem, bars, b, h, start, count, it, 0, n_tiles,
                              Hq, Sq, Sk, sm_scale, s_layout, o_layout, p_layout,
                              CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                              OVERLAP, TAIL, tail, -1, 1, 1)
                count += n_tiles
                it += 1
    else:
        # One work tile, and no loop around it: loop-carried counters would cost registers
        # that the overlapped schedule at head dim 128 does not have to spare.
        b, h, start = _tile(first, 0, row_blocks, Hq, CONSUMERS * BLOCK_M, PERSISTENT, CAUSAL)
        n_tiles = _kv_tiles(start, Sk, CONSUMERS * BLOCK_M, BLOCK_N, CAUSAL)
        _consume_tile(o_desc, lse_ptr, smem, bars, b, h, start, 0, 0, 0, n_tiles,
                      Hq, Sq, Sk, sm_scale, s_layout, o_layout, p_layout,
                      CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP,
                      TAIL, tail, -1, 1, 1)
    if CONSUMER == 0:
        # Every consumer took the same number of turns, so the last consumer's last pass (or,
        # with no work tile, its first) is still pending on consumer 0's barrier: take it, and
        # leave the barrier as the kernel found it.
        _take_turn(0, CONSUMERS)
    tma.store_wait(0)


@gluon.jit
def _consume_tile(o_desc, lse_ptr, smem, bars, b, h, start, count, it, lo, n_tiles,
                  Hq, Sq, Sk, sm_scale,
                  s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr,
                  CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, OVERLAP: gl.constexpr, TAIL: gl.constexpr, tail, slot,
                  pieces, rest):
    """One work tile of one consumer, (b, h, rows from start), the `it`-th it serves, after
    `count` K/V tiles: its key tiles lo .. lo + n_tiles - 1. With TAIL, a `slot` of 0 or more
    makes it one of a tile's `pieces`, of `rest` tiles split (_tail_epilogue)."""
    row0 = start + CONSUMER * BLOCK_M
    mbarrier.wait(bars.q_ready.index(CONSUMER), it & 1)
    # Three or four consumers' 192 or 256 rows often reach past Sq (Sq = 1024 and three: the
    # last work tile has 64 rows), and a later consumer's rows may all lie there: it then only
    # keeps the round. (Two consumers' 128 rows leave one idle less often; that code is left
    # out.)
    if CONSUMERS > 2 and CONSUMER > 0:
        if row0 < Sq:
            _consume_rows(o_desc, lse_ptr, smem, bars, b, h, count, lo, n_tiles, row0, Hq, Sq,
                          Sk, sm_scale, s_layout, o_layout, p_layout, CONSUMER, CONSUMERS,
                          BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP, TAIL, tail, slot,
                          pieces, rest)
        else:
            _idle(bars, count, n_tiles, CONSUMER, CONSUMERS, STAGES)
    else:
        _consume_rows(o_desc, lse_ptr, smem, bars, b, h, count, lo, n_tiles, row0, Hq, Sq, Sk,
                      sm_scale, s_layout, o_layout, p_layout, CONSUMER, CONSUMERS, BLOCK_M,
                      BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP, TAIL, tail, slot, pieces, rest)


@gluon.jit
def _consume_rows(o_desc, lse_ptr, smem, bars, b, h, count, lo, n_tiles, row0, Hq, Sq, Sk,
                  sm_scale, s_layout: gl.constexpr, o_layout: gl.constexpr,
                  p_layout: gl.constexpr, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                  TAIL: gl.constexpr, tail, slot, pieces, rest):
    """This consumer's BLOCK_M rows from row0 over the work tile's key tiles lo .. lo + n_tiles
    - 1, and their epilogue: a piece's (slot >= 0) through the workspace."""
    q = smem.q.index(CONSUMER).reshape([BLOCK_M, HEAD_DIM])
    acc, m_i, l_i = _attend(q, smem, bars, count, lo, n_tiles, row0, Sk, sm_scale,
                            s_layout, o_layout, p_layout, CONSUMER, CONSUMERS,
                            BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP)
    if TAIL:
        if slot >= 0:
            _tail_epilogue(acc, m_i, l_i, tail, slot, pieces, rest, lse_ptr, b, h, row0, Hq,
                           Sq, sm_scale, o_layout, CONSUMER, CONSUMERS, BLOCK_M, HEAD_DIM)
        else:
            _epilogue(acc, m_i, l_i, o_desc, smem.o.index(CONSUMER), lse_ptr, b, h, row0, Hq,
                      Sq, sm_scale, s_layout, o_layout, BLOCK_M, HEAD_DIM)
    else:
        _epilogue(acc, m_i, l_i, o_desc, smem.o.index(CONSUMER), lse_ptr, b, h, row0, Hq, Sq,
                  sm_scale, s_layout, o_layout, BLOCK_M, HEAD_DIM)


@gluon.jit
def attn_fwd_pingpong(q_desc, k_desc, v_desc, o_desc, lse_ptr, B, Hq, Hkv, Sq, Sk, sm_scale,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                      STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                      PERSISTENT: gl.constexpr, CONSUMERS: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """grid: (cdiv(Sq, CONSUMERS * BLOCK_M), B * Hq), or (num_sms,) when PERSISTENT;
    num_warps = 4 (consumer 0)."""
    _program(q_desc, k_desc, v_desc, o_desc, lse_ptr, B, Hq, Hkv, Sq, Sk, sm_scale, None,
             BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP, PERSISTENT, CONSUMERS,
             CONSUMER_REGS, LOAD_REGS, False)


@gluon.jit
def attn_fwd_pingpong_tail(q_desc, k_desc, v_desc, o_desc, lse_ptr, B, Hq, Hkv, Sq, Sk,
                           sm_scale, tail_part, tail_stat, tail_ctr, o, o_stride_b, o_stride_h,
                           o_stride_s,
                           BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                           D: gl.constexpr, STAGES: gl.constexpr, OVERLAP: gl.constexpr,
                           CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                           LOAD_REGS: gl.constexpr):
    """The persistent forward without a mask, its last round split (TAIL): grid (num_sms,),
    num_warps = 4; after attn_fwd_tail_zero has zeroed tail_ctr."""
    gl.static_assert(CONSUMERS * (BLOCK_M // TAIL_WARP_ROWS) <= TAIL_COUNTERS,
                     "a counter per consumer warp of a split tile")
    tail = TailBuffers(tail_part, tail_stat, tail_ctr.to(gl.pointer_type(gl.uint32), bitcast=True),
                       o, o_stride_b, o_stride_h, o_stride_s, D)
    _program(q_desc, k_desc, v_desc, o_desc, lse_ptr, B, Hq, Hkv, Sq, Sk, sm_scale, tail,
             BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, False, OVERLAP, True, CONSUMERS,
             CONSUMER_REGS, LOAD_REGS, True)


@gluon.jit
def attn_fwd_tail_zero(tail_ctr, COUNTERS: gl.constexpr):
    """grid: (num_sms,), num_warps = 4: the split tail's counters, COUNTERS a program, to 0."""
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    at = gl.program_id(0) * COUNTERS + gl.arange(0, COUNTERS, layout=layout)
    gl.store(tail_ctr + at, gl.zeros([COUNTERS], gl.float32, layout))


@gluon.jit
def _program(q_desc, k_desc, v_desc, o_desc, lse_ptr, B, Hq, Hkv, Sq, Sk, sm_scale, tail,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
             STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
             PERSISTENT: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
             LOAD_REGS: gl.constexpr, TAIL: gl.constexpr):
    """The body of both forward kernels: shared memory, barriers and the partitions."""
    gl.static_assert(CONSUMERS >= 2 and CONSUMERS <= 4, "two, three or four consumer warpgroups")
    dtype: gl.constexpr = q_desc.dtype
    q = gl.allocate_shared_memory(dtype, [CONSUMERS] + q_desc.block_type.shape, q_desc.layout)
    if PERSISTENT:
        # O has a buffer of its own, so the next work tile's Q can load during this epilogue.
        o = gl.allocate_shared_memory(dtype, [CONSUMERS] + o_desc.block_type.shape,
                                      o_desc.layout)
    else:
        o = q  # one work tile: O goes out through Q's slot once the last QKᵀ is done
    smem = FwdSmem(q, o,
                   gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape,
                                             k_desc.layout),
                   gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape,
                                             v_desc.layout))
    q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_free = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    bars = FwdBarriers(q_ready, q_free, k_ready, v_ready)
    for i in gl.static_range(CONSUMERS):
        mbarrier.init(bars.q_ready.index(i), count=1)
        mbarrier.init(bars.q_free.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.k_ready.index(i), count=1)
        mbarrier.init(bars.v_ready.index(i), count=1)

    # Each consumer partition is _consume with its index as a constexpr. The argument tuples
    # are written in the call: a tuple stored in a variable would turn its constexprs into
    # runtime values, and so would concatenating two lists of partitions (tuple.__add__
    # unwraps its right operand's constexprs). So one comprehension over constexpr indices
    # builds every partition's tuple in place: 0..CONSUMERS-1 the consumers, then the loader.
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    gl.warp_specialize(
        [(_consume, (o_desc, lse_ptr, smem, bars, B, Hq, Sq, Sk, sm_scale, tail, c,
                     CONSUMERS, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP, PERSISTENT,
                     TAIL))
         if c < CONSUMERS else
         (_load, (q_desc, k_desc, v_desc, smem, bars, B, Hq, Hkv, Sq, Sk,
                  BLOCK_M, BLOCK_N, STAGES, CAUSAL, PERSISTENT, CONSUMERS, TAIL))
         for c in (0, 1, 2, 3, 4)[:CONSUMERS + 1]],
        [4] * (CONSUMERS - 1) + [1], [CONSUMER_REGS] * (CONSUMERS - 1) + [LOAD_REGS])
