"""Attention backward in Gluon for Hopper (sm_90): TMA, wgmma, mbarriers, warp specialization.

Given the forward's O and natural-log LSE, and the upstream gradient dO, it computes

    P  = exp(scale·QKᵀ − LSE)      dV = Pᵀ·dO        dP = dO·Vᵀ
    dS = P ⊙ (dP − Δ), Δ = rowsum(dO ⊙ O)       dK = scale·dSᵀ·Q      dQ = scale·dS·K

in three launches or two, in one of two variants (the `det` knob of family.py):

    fast (det 0)           preprocess: Δ, and dQ's fp32 accumulator zeroed
                           dK/dV kernel: dK, dV, and each tile's dQ share added with fp32 atomics
                           convert: dQ = scale · accumulator, in the input dtype
    deterministic (det 1)  dQ kernel: one program per query block computes Δ of its rows
                           (stored for the next launch), then sums its dQ in registers
                           dK/dV kernel: dK, dV only

With the family's `early` knob (READY here) the fast variant's convert starts before the dK/dV
kernel ends: the preprocess also zeroes a counter per query tile, each dK/dV program (one key
block) publishes its complete dQ adds on those counters as it ends, and the convert, which does
not wait for the dK/dV grid, converts each tile once its counter holds every add, on the SMs
the dK/dV kernel's last round leaves idle.

The atomics make the fast variant's dQ depend on the order programs finish in; the
deterministic one recomputes P and dP in the dQ kernel (7 GEMMs per tile pair instead of 5)
and gives bitwise-equal results from run to run.

dK/dV kernel, one program per 128 keys of one (batch, kv head), three partitions:

    load       1 warp    TMA: the two 64-key halves of K and V once, then (Q, dO) tiles of
                         every query head of the GQA group into a STAGES-deep ring
    consumer0  4 warps   keys [n0, n0 + 64)        (the default partition)
    consumer1  4 warps   keys [n0 + 64, n0 + 128)

Each consumer works in the transposed frame (keys on rows), so Pᵀ and dSᵀ come out of their
wgmma accumulators already shaped as the register A operand of dV += Pᵀ·dO and dK += dSᵀ·Q:
neither touches shared memory. Only dQ = dS·K needs both consumers' dSᵀ, so each stores its
half into a double-buffered shared tile and the pair meets on an mbarrier; then each consumer
computes half of dQ's columns (head dim 128) or the whole of it on alternate tiles (head dim
64, whose 64-column rows cannot be split inside one 128-byte swizzle atom), and adds it to the
fp32 accumulator: with relaxed atomics from registers, or (DQ_TMA) staged in shared memory and
added by one TMA reduce-add, which the consumer does not wait for. By default a consumer issues
its dQ GEMM once its dV and dK GEMMs are done; DQ_QUEUE (the family's `dqq` knob) queues it
right behind them instead (_dkdv_tile), which measured faster on the H200 only at head dim 128
without a mask (run94).

dQ kernel (deterministic variant), one program per 128 query rows, shaped like the forward:
a load warp streams K/V tiles through a ring; each consumer owns 64 query rows, first computes
their Δ from O (read from global memory while its Q and dO tiles land) and its dO tile, and
stores it for the dK/dV kernel, which runs after it; then it recomputes S = Q·Kᵀ and
dP = dO·Vᵀ, and accumulates dQ += dS·K with dS as a register operand. (The wide kernels of
bwd_wide.py keep the preprocess.)

Masks: rows past Sq load as zeros (TMA) with LSE = +inf, so P = 0 there with no mask; only
tiles that cross the causal diagonal, or hold keys past Sk, are masked. Causal is top-left, as
the forward's: key k is visible to query q iff k <= q. A key block's programs skip the query
tiles above its diagonal; a query block's programs stop at its last visible key tile.
"""
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)
from triton.language.core import _aggregate as aggregate

from . import grid_dependency
from .grid import grouped_block_and_head, snake_order, snake_rank

LOG2E = gl.constexpr(1.4426950408889634)  # the forward's LSE is natural-log; P uses exp2
HALF_N = gl.constexpr(64)                  # keys per dK/dV consumer (one m64 wgmma row block)
# How the dK/dV kernel delivers dQ (its DQ_ADD): not at all (the deterministic variant's dQ
# kernel computes it), with fp32 atomics from registers, or by a TMA reduce-add of a shared tile.
DQ_NONE = gl.constexpr(0)
DQ_ATOMIC = gl.constexpr(1)
DQ_TMA = gl.constexpr(2)


@gluon.constexpr_function
def _nvmma(n):
    """wgmma accumulator layout of one warpgroup for an [rows, n] fp32 tile."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """Adds the shared tile `src` into the global box at `coord` (cp.reduce.async.bulk.tensor
    ... .add, one elected thread; completion tracked by tma.store_wait like a TMA store).
    Triton 3.6 builds the op (ttng.async_tma_reduce), but Gluon names no wrapper for it."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


@gluon.constexpr_function
def dq_share_cols(tile_dim):
    """Columns of dQ one consumer computes per tile: half of them on tiles 128 wide (both
    consumers, every tile), all of them on 64-wide ones (one consumer, alternate tiles). Also
    the family's rule for the tma1 staging tile and its tensor map's box (family.py)."""
    return tile_dim // 2 if tile_dim >= 128 else tile_dim


@gluon.jit
def _next_slot(stage, phase, STAGES: gl.constexpr):
    """The ring slot after `stage`, and the barrier phase to wait for there."""
    stage += 1
    wrap = stage == STAGES
    return gl.where(wrap, 0, stage), gl.where(wrap, phase ^ 1, phase)


# --------------------------------------------------------------------------------------------
# READY: per query tile, a counter of the dK/dV programs' dQ adds that are complete
# --------------------------------------------------------------------------------------------
KEYS_PER_DKDV_PROGRAM = gl.constexpr(2 * HALF_N.value)  # a dK/dV program's key block


@gluon.jit
def _ready_counter(dq_ready, bh, tile, Sq, BLOCK_M: gl.constexpr):
    """The int32 counter of query tile `tile` (rows tile·BLOCK_M..) of batch·query head `bh`."""
    counters = dq_ready.to(gl.pointer_type(gl.int32), bitcast=True)
    return counters + bh.to(gl.int64) * gl.cdiv(Sq, BLOCK_M) + tile


@gluon.jit
def _tile_adds(m0, Sk, HEAD_DIM: gl.constexpr, CAUSAL: gl.constexpr):
    """The dQ adds the dK/dV programs make into the query tile at rows m0..: one a key block
    (every block, or under causal those from key 0 to the tile's first row: a block's programs
    start at the tile holding its first key) from each consumer on 128-wide tiles (a column
    half each), from one of them on 64-wide ones (_dq_mine)."""
    blocks = gl.cdiv(Sk, KEYS_PER_DKDV_PROGRAM)
    if CAUSAL:
        blocks = gl.minimum(m0 // KEYS_PER_DKDV_PROGRAM + 1, blocks)
    adds = blocks
    if HEAD_DIM >= 128:
        adds = blocks * 2
    return adds


@gluon.jit
def _block_tile(blk, j, per_head, BLOCK_M: gl.constexpr):
    """(head, first row) of the j-th query tile of key block `blk`'s walk, in KeyBlock.next_tile's
    order: `per_head` tiles a head, from row blk.m_first."""
    return blk.h_first + j // per_head, blk.m_first + (j % per_head) * BLOCK_M


@gluon.jit
def _wait_count(counter, count):
    """Every thread waits (acquire, GPU scope) until `counter` holds at least `count`."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    at = counter + gl.full([128], 0, gl.int32, layout)  # one address a thread, all the same
    gl.inline_asm_elementwise(
        "{\n\t.reg .pred p;\n\t.reg .u32 v;\n\tWAIT:\n\t"
        "ld.acquire.gpu.global.u32 v, [$1];\n\tsetp.lt.u32 p, v, $2;\n\t@!p bra DONE;\n\t"
        "nanosleep.u32 64;\n\tbra WAIT;\n\tDONE:\n\tmov.b32 $0, v;\n\t}",
        "=r,l,r", [at, gl.full([128], count, gl.int32, layout)], dtype=gl.int32,
        is_pure=False, pack=1)


@gluon.jit
def _publish_adds(dq_ready, blk, Hq, Sq, CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr,
                  HEAD_DIM: gl.constexpr):
    """READY, at the end of a key block (non-persistent programs only: the tile count t is the
    block's own): once this consumer's dQ reduce-adds are complete in global memory, one
    release add on the counter of every query tile it added into (attn_bwd_dq_convert_ready
    converts a tile once its counter holds every add)."""
    # The thread that issued the reduces waits for their writes (not only for their reads of
    # the staging tile, as tma.store_wait does) and orders them before its generic accesses;
    # then the consumer's threads meet, and each publishes a share of the tiles.
    gl.inline_asm_elementwise("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;"
                              "\n\tmov.b32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)
    gl.thread_barrier()
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    per_head = gl.cdiv(gl.maximum(Sq - blk.m_first, 0), BLOCK_M)
    tiles = (blk.h_end - blk.h_first) * per_head
    for j0 in range(0, tiles, 128):
        j = j0 + gl.arange(0, 128, layout=layout)   # the block's tiles in walk order
        h, m0 = _block_tile(blk, j, gl.maximum(per_head, 1), BLOCK_M)
        mine = j < tiles
        if HEAD_DIM < 128:
            mine = mine & (j % 2 == CONSUMER)       # _dq_mine: alternate tiles
        at = _ready_counter(dq_ready, blk.b * Hq + h, m0 // BLOCK_M, Sq, BLOCK_M)
        gl.inline_asm_elementwise(
            "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $2, 0;\n\t"
            "@p red.release.gpu.global.add.u32 [$1], 1;\n\tmov.b32 $0, 0;\n\t}",
            "=r,l,r", [at, mine.to(gl.int32)], dtype=gl.int32, is_pure=False, pack=1)


# --------------------------------------------------------------------------------------------
# preprocess: Δ = rowsum(dO ⊙ O), and (fast variant) the zeroed dQ accumulator
# --------------------------------------------------------------------------------------------
@gluon.jit
def attn_bwd_preprocess(o, do, delta, dq_accum,
                        o_stride_b, o_stride_h, o_stride_s,
                        do_stride_b, do_stride_h, do_stride_s,
                        Hq, Sq,
                        HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr,
                        ZERO_DQ: gl.constexpr):
    """grid: (cdiv(Sq, BLOCK_M), B * Hq); num_warps = 4. HEAD_DIM is the tile width, D the
    tensors' head dim (96 runs on 128-wide tiles)."""
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    _preprocess_rows(o, do, delta, dq_accum, o_stride_b, o_stride_h, o_stride_s,
                     do_stride_b, do_stride_h, do_stride_s, Hq, Sq, HEAD_DIM, D, BLOCK_M,
                     ZERO_DQ)


@gluon.jit
def attn_bwd_preprocess_ready(o, do, delta, dq_accum, dq_ready,
                              o_stride_b, o_stride_h, o_stride_s,
                              do_stride_b, do_stride_h, do_stride_s,
                              Hq, Sq,
                              HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr):
    """attn_bwd_preprocess of the fast variant whose convert starts early (READY): also zeroes
    the program's query tile's counter (`dq_ready`, [B, Hq, cdiv(Sq, BLOCK_M)] int32 in a float32
    workspace); BLOCK_M is the dK/dV kernel's query tile."""
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    _preprocess_rows(o, do, delta, dq_accum, o_stride_b, o_stride_h, o_stride_s,
                     do_stride_b, do_stride_h, do_stride_s, Hq, Sq, HEAD_DIM, D, BLOCK_M, True)
    gl.store(_ready_counter(dq_ready, gl.program_id(1), gl.program_id(0), Sq, BLOCK_M), 0)


@gluon.jit
def _preprocess_rows(o, do, delta, dq_accum, o_stride_b, o_stride_h, o_stride_s,
                     do_stride_b, do_stride_h, do_stride_s, Hq, Sq,
                     HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr,
                     ZERO_DQ: gl.constexpr):
    """Δ of this program's BLOCK_M rows of (batch, query head), and their zeroed accumulator."""
    # 16-byte vectors along the head dim, as many rows per warp as the head dim leaves.
    lanes_d: gl.constexpr = HEAD_DIM // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // lanes_d, lanes_d], [4, 1], [1, 0])
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    inside = gl.expand_dims(rows < Sq, 1) & gl.expand_dims(cols < D, 0)
    o_at = (o + b.to(gl.int64) * o_stride_b + h.to(gl.int64) * o_stride_h
            + gl.expand_dims(rows.to(gl.int64) * o_stride_s, 1) + gl.expand_dims(cols, 0))
    do_at = (do + b.to(gl.int64) * do_stride_b + h.to(gl.int64) * do_stride_h
             + gl.expand_dims(rows.to(gl.int64) * do_stride_s, 1) + gl.expand_dims(cols, 0))
    o_tile = gl.load(o_at, mask=inside, other=0.0).to(gl.float32)
    do_tile = gl.load(do_at, mask=inside, other=0.0).to(gl.float32)
    row_base = bh.to(gl.int64) * Sq
    gl.store(delta + row_base + rows, gl.sum(o_tile * do_tile, 1), mask=rows < Sq)
    if ZERO_DQ:
        # the fast variant's dK/dV kernel adds into this with atomics: it must start at zero
        acc_at = (dq_accum + row_base * D + gl.expand_dims(rows * D, 1)
                  + gl.expand_dims(cols, 0))
        gl.store(acc_at, gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout), mask=inside)


# --------------------------------------------------------------------------------------------
# convert (fast variant): dQ = scale · accumulator, in the input dtype, any strides
# --------------------------------------------------------------------------------------------
@gluon.jit
def attn_bwd_dq_convert(dq_accum, dq, dq_stride_b, dq_stride_h, dq_stride_s, Hq, Sq, sm_scale,
                        HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr):
    """grid: (cdiv(Sq, BLOCK_M), B * Hq); num_warps = 4. HEAD_DIM is the tile width, D the
    head dim (the accumulator's rows are D floats)."""
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    _convert_rows(dq_accum, dq, dq_stride_b, dq_stride_h, dq_stride_s, Hq, Sq, sm_scale,
                  HEAD_DIM, D, BLOCK_M)


@gluon.jit
def attn_bwd_dq_convert_ready(dq_accum, dq, dq_ready, dq_stride_b, dq_stride_h, dq_stride_s,
                              Hq, Sq, Sk, sm_scale,
                              HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr,
                              CAUSAL: gl.constexpr):
    """attn_bwd_dq_convert that starts before the dK/dV kernel ends (READY): launched
    programmatically behind it, it waits for its own query tile's counter to hold every add
    the dK/dV programs make into the tile (each publishes its adds once they are complete in
    global memory: _publish_adds), not for the whole grid. A programmatic launch places a grid
    only once every program of the grid ahead has started and let it (grid_dependency.enter),
    so these waits never hold a dK/dV program off an SM: in the dK/dV kernel's last round its
    idle SMs convert the tiles already complete. One program waits for the dK/dV grid at its
    end, so this grid completes after that one and the work behind it in the stream finds dK
    and dV written, however it is launched. BLOCK_M is the dK/dV kernel's query tile."""
    grid_dependency.allow_dependents()  # no wait for the grid ahead: the counter says when
    adds = _tile_adds(gl.program_id(0) * BLOCK_M, Sk, HEAD_DIM, CAUSAL)
    _wait_count(_ready_counter(dq_ready, gl.program_id(1), gl.program_id(0), Sq, BLOCK_M), adds)
    _convert_rows(dq_accum, dq, dq_stride_b, dq_stride_h, dq_stride_s, Hq, Sq, sm_scale,
                  HEAD_DIM, D, BLOCK_M)
    if (gl.program_id(0) == 0) & (gl.program_id(1) == 0):
        grid_dependency.wait_for_previous()


@gluon.jit
def _convert_rows(dq_accum, dq, dq_stride_b, dq_stride_h, dq_stride_s, Hq, Sq, sm_scale,
                  HEAD_DIM: gl.constexpr, D: gl.constexpr, BLOCK_M: gl.constexpr):
    """dQ of this program's BLOCK_M rows of (batch, query head) from their accumulator."""
    lanes_d: gl.constexpr = HEAD_DIM // 4
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [32 // lanes_d, lanes_d], [4, 1], [1, 0]) \
        if HEAD_DIM <= 128 else gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    inside = gl.expand_dims(rows < Sq, 1) & gl.expand_dims(cols < D, 0)
    acc_at = (dq_accum + bh.to(gl.int64) * Sq * D + gl.expand_dims(rows * D, 1)
              + gl.expand_dims(cols, 0))
    dq_at = (dq + b.to(gl.int64) * dq_stride_b + h.to(gl.int64) * dq_stride_h
             + gl.expand_dims(rows.to(gl.int64) * dq_stride_s, 1) + gl.expand_dims(cols, 0))
    value = gl.load(acc_at, mask=inside, other=0.0) * sm_scale
    gl.store(dq_at, value.to(dq.dtype.element_ty), mask=inside)


# --------------------------------------------------------------------------------------------
# dK/dV kernel: state
# --------------------------------------------------------------------------------------------
@aggregate
class KeyBlock:
    """The 128 keys of one (batch, kv head) a dK/dV program owns, and the query tiles it visits:
    for each query head h_first, h_first + 1, ... of the GQA group, the tiles of rows m_first,
    m_first + M, ... below Sq. Loader and consumers walk them in that order, counting tiles
    from 0 to pick ring slots and barrier phases."""
    b: gl.tensor
    h_kv: gl.tensor
    n0: gl.tensor         # first key
    h_first: gl.tensor    # first query head of the group
    h_end: gl.tensor
    m_first: gl.tensor    # first query row that can see any of these keys

    @gluon.constexpr_function
    def __init__(self, b, h_kv, n0, h_first, h_end, m_first):
        self.b = b
        self.h_kv = h_kv
        self.n0 = n0
        self.h_first = h_first
        self.h_end = h_end
        self.m_first = m_first

    @gluon.jit
    def num_tiles(self, Sq, BLOCK_M: gl.constexpr):
        return (self.h_end - self.h_first) * gl.cdiv(gl.maximum(Sq - self.m_first, 0), BLOCK_M)

    @gluon.jit
    def next_tile(self, h, m0, Sq, BLOCK_M: gl.constexpr):
        """(head, first row) of the tile after (h, m0): the next rows, or the next head's first."""
        m0 += BLOCK_M
        wrap = m0 >= Sq
        return gl.where(wrap, h + 1, h), gl.where(wrap, self.m_first, m0)


# Under causal a head's blocks differ in work (a dK/dV program's first key block sees every
# query, its last a few; a dQ program's last query block sees every key), so the causal grids
# are read in head groups, longest block first (grid.py). Heads on x instead (every head's
# longest block first, run66) gained up to 1.11x where B·heads <= 32, but lost up to 15 % at
# 128 and more (our reading: the programs running together then read that many heads' Q and dO,
# where blocks on x have a few heads' in L2 at a time).
@gluon.jit
def _block_and_head(CAUSAL: gl.constexpr):
    """(block, batch·head) of this program on the grid (blocks, B·heads): under causal in
    groups of heads, longest block first across a group (block 0 is the longest a dK/dV program
    has; dQ reverses its blocks); otherwise as the grid has it, a head's blocks side by side."""
    if CAUSAL:
        return grouped_block_and_head()
    else:
        return gl.program_id(0), gl.program_id(1)


@gluon.jit
def _key_block(Hq, Hkv, Sq, Sk, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
               KEY_TILES: gl.constexpr):
    """grid: (cdiv(Sk, KEY_TILES * HALF_N), B * Hkv), read in head groups under causal
    (_block_and_head), where the first key blocks see the most queries and start first."""
    block, bh = _block_and_head(CAUSAL)
    return _key_block_at(block, bh, Hq, Hkv, BLOCK_M, CAUSAL, KEY_TILES)


@gluon.jit
def _key_block_at(block, bh, Hq, Hkv, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
                  KEY_TILES: gl.constexpr):
    """Key block `block` of (batch, kv head) `bh`: its KeyBlock."""
    n0 = block * (KEY_TILES * HALF_N)
    if CAUSAL:
        # queries above the diagonal see none of these keys: start at the tile holding row n0
        m_first = (n0 // BLOCK_M) * BLOCK_M
    else:
        m_first = n0 * 0
    h_kv = bh % Hkv
    group = Hq // Hkv
    return KeyBlock(bh // Hkv, h_kv, n0, h_kv * group, h_kv * group + group, m_first)


# A persistent dK/dV launch (PERSISTENT): one program per SM strides over work units. Without a
# mask a unit is one key block, a head's blocks consecutive (the programs running side by side
# share its Q and dO in L2). Under causal key block i of a head sees the queries from its own
# first row on, so the blocks differ in work, and there are two orders (grid.snake_order picks
# one per launch):
#   pairs  a unit is block i with block blocks - 1 - i (together about blocks + 1 blocks' worth
#          of queries, for every i; the middle block of an odd count alone), the longer first,
#          a head's units consecutive: every unit costs the same and the programs side by side
#          share a head's Q and dO, but where the pairs do not fill the last round most programs
#          sit idle in it (Qwen2-7B B4 S3000: 192 pairs on 132 SMs, 0.73 of the even share);
#   snake  a unit is one block, ranked longest first (block 0 across the heads, then block 1,
#          ...) and handed out in a snake (grid.snake_rank): 0.91 there in a model, as the
#          non-persistent grid, but the programs side by side read the Q and dO of as many heads
#          as a round covers.
# Run120 (docs/gluon-bwd.md, "Persistent causal order") timed the three persistent kernels both
# ways at the causal bench rows: the snake over the pairs 1.13-1.21x at Qwen2-7B B4 S3000 and
# 0.97-1.03x at the other rows of 8-16 (batch, kv head) pairs (S 8192-16384); at 32 pairs
# 0.90-1.03x, at 64 and more 0.72-1.03x.
@gluon.jit
def _snake_order(BH, blocks, CAUSAL: gl.constexpr):
    """Whether a persistent launch over BH (batch, kv head) pairs of `blocks` key blocks takes
    them in the snake (grid.snake_order); never without a mask."""
    if CAUSAL:
        return snake_order(BH, (blocks + 1) // 2 * BH)
    else:
        return False


@gluon.jit
def _block_units(BH, blocks, snake, CAUSAL: gl.constexpr):
    """Work units of a persistent launch over BH (batch, kv head) pairs of `blocks` key blocks."""
    if CAUSAL:
        return gl.where(snake, blocks * BH, (blocks + 1) // 2 * BH)
    else:
        return blocks * BH


@gluon.jit
def _unit_blocks(unit, blocks, snake, CAUSAL: gl.constexpr):
    """Key blocks in a unit: two, or one (the snake's; the middle block of an odd count; without
    a mask)."""
    if CAUSAL:
        i = unit % ((blocks + 1) // 2)
        return gl.where(snake, 1, 1 + (2 * i + 1 != blocks))
    else:
        return 1


@gluon.jit
def _unit_block(unit, half, BH, blocks, snake, CAUSAL: gl.constexpr):
    """(key block, batch·kv head) of block `half` of work unit `unit` of this program."""
    if CAUSAL:
        rank = snake_rank(unit, blocks * BH)  # rank 0 is block 0, which sees every query
        per_head = (blocks + 1) // 2
        i = unit % per_head
        return (gl.where(snake, rank // BH, i + half * (blocks - 1 - 2 * i)),
                gl.where(snake, rank % BH, unit // per_head))
    else:
        return unit % blocks, unit // blocks


@aggregate
class DkdvSmem:
    """Shared memory of a dK/dV program. Here K and V are stored as two 64-key halves, one per
    consumer; the ring holds each query tile's Q, dO, −LSE/scale (the LSE in score units,
    negated) and −Δ; dSᵀ is [2 * slot + half, 64 keys, BLOCK_M queries] (fast variant only); dq
    is each consumer's fp32 dQ share on its way to a TMA reduce-add (DQ_TMA only). bwd_wide.py's
    program holds one K and V tile, one dSᵀ tile, and Pᵀ (`p`, fp32), handed between its
    consumers; unused slots hold another buffer."""
    k: gl.shared_memory_descriptor
    v: gl.shared_memory_descriptor
    q: gl.shared_memory_descriptor
    do: gl.shared_memory_descriptor
    lse: gl.shared_memory_descriptor
    delta: gl.shared_memory_descriptor
    ds: gl.shared_memory_descriptor
    dq: gl.shared_memory_descriptor
    p: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, k, v, q, do, lse, delta, ds, dq, p):
        self.k = k
        self.v = v
        self.q = q
        self.do = do
        self.lse = lse
        self.delta = delta
        self.ds = ds
        self.dq = dq
        self.p = p


@aggregate
class DkdvBarriers:
    kv_ready: gl.shared_memory_descriptor   # K and V landed (one phase a key block)
    kv_free: gl.shared_memory_descriptor    # PERSISTENT: both consumers are done with K and V
    qdo_ready: gl.shared_memory_descriptor  # [STAGES] a slot's Q, dO (TMA), LSE and Δ landed
    qdo_free: gl.shared_memory_descriptor   # [STAGES] both consumers are done with a slot
    ds_ready: gl.shared_memory_descriptor   # [2] both consumers stored their dSᵀ half
    # (bwd_wide.py: one barrier, consumer 1 stored this tile's dSᵀ)
    p_ready: gl.shared_memory_descriptor    # bwd_wide.py: consumer 0 stored this tile's Pᵀ

    @gluon.constexpr_function
    def __init__(self, kv_ready, kv_free, qdo_ready, qdo_free, ds_ready, p_ready):
        self.kv_ready = kv_ready
        self.kv_free = kv_free
        self.qdo_ready = qdo_ready
        self.qdo_free = qdo_free
        self.ds_ready = ds_ready
        self.p_ready = p_ready


# --------------------------------------------------------------------------------------------
# dK/dV kernel: load partition
# --------------------------------------------------------------------------------------------
@gluon.jit
def _dkdv_load(q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr,
               Hq, Hkv, Sq, Sk, sm_scale,
               BLOCK_M: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               KEY_TILES: gl.constexpr):
    """K and V of the program's KEY_TILES tiles of 64 keys (two halves here, one in
    bwd_wide.py), then the ring of query tiles."""
    blk = _key_block(Hq, Hkv, Sq, Sk, BLOCK_M, CAUSAL, KEY_TILES)
    zero = gl.to_tensor(0)  # the ring's slot and phase are loop-carried tensors
    _load_block(q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr, blk,
                Hq, Sq, sm_scale, zero, zero, BLOCK_M, STAGES, KEY_TILES)


@gluon.jit
def _dkdv_load_persistent(q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr,
                          B, Hq, Hkv, Sq, Sk, sm_scale,
                          BLOCK_M: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                          KEY_TILES: gl.constexpr):
    """_dkdv_load over the program's work units (_block_units): each key block's K and V once
    both consumers let go of the last block's (kv_free), the ring running on across blocks."""
    blocks = gl.cdiv(Sk, KEY_TILES * HALF_N)
    stage = 0
    phase = 0
    it = 0  # key blocks so far
    snake = _snake_order(B * Hkv, blocks, CAUSAL)
    for unit in range(gl.program_id(0), _block_units(B * Hkv, blocks, snake, CAUSAL),
                      gl.num_programs(0)):
        for half in range(_unit_blocks(unit, blocks, snake, CAUSAL)):
            block, bh = _unit_block(unit, half, B * Hkv, blocks, snake, CAUSAL)
            blk = _key_block_at(block, bh, Hq, Hkv, BLOCK_M, CAUSAL, KEY_TILES)
            # a fresh barrier counts as having completed the phase before 0: block 0 loads at once
            mbarrier.wait(bars.kv_free, (it & 1) ^ 1)
            stage, phase = _load_block(q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr,
                                       delta_ptr, blk, Hq, Sq, sm_scale, stage, phase,
                                       BLOCK_M, STAGES, KEY_TILES)
            it += 1


@gluon.jit
def _load_block(q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr, blk,
                Hq, Sq, sm_scale, stage, phase,
                BLOCK_M: gl.constexpr, STAGES: gl.constexpr, KEY_TILES: gl.constexpr):
    """K and V of key block `blk`, then its query tiles into the ring from slot `stage` at
    `phase`; returns the slot and phase after them."""
    row_layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    kv_bytes: gl.constexpr = KEY_TILES * (k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    mbarrier.expect(bars.kv_ready, kv_bytes)
    for half in gl.static_range(KEY_TILES):
        row = blk.n0 + half * HALF_N
        tma.async_copy_global_to_shared(k_desc, [blk.b, blk.h_kv, row, 0], bars.kv_ready,
                                        smem.k.index(half))
        tma.async_copy_global_to_shared(v_desc, [blk.b, blk.h_kv, row, 0], bars.kv_ready,
                                        smem.v.index(half))
    qdo_bytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes
    # P = exp(scale·s − LSE) = exp2(qk_scale·(s − LSE/scale)): the LSE in score units, the
    # difference taken before the base change. For a power-of-two scale 1/scale is exact, and
    # so is s − LSE/scale = 0 of a row's winning key when |q·k| ~ 1e37 (issue 18's extremes).
    # Stored negated (−LSE/scale, −Δ): the consumers broadcast them into the initial
    # accumulators as they are, with no `0 − x` per element (32 FADD a tile at head dim 128).
    minus_lse_to_scores = -1.0 / sm_scale
    for h in range(blk.h_first, blk.h_end):
        row_base = (blk.b * Hq + h).to(gl.int64) * Sq
        for m0 in range(blk.m_first, Sq, BLOCK_M):
            # a fresh barrier counts as having completed the phase before 0: the first STAGES
            # waits pass at once
            mbarrier.wait(bars.qdo_free.index(stage), phase ^ 1)
            ready = bars.qdo_ready.index(stage)
            mbarrier.expect(ready, qdo_bytes)
            tma.async_copy_global_to_shared(q_desc, [blk.b, h, m0, 0], ready, smem.q.index(stage))
            tma.async_copy_global_to_shared(do_desc, [blk.b, h, m0, 0], ready,
                                            smem.do.index(stage))
            # LSE and Δ ride along through shared memory, so the consumers hold no copies of
            # them across tiles. Rows past Sq get LSE = +inf: P = 0 there with no mask.
            rows = m0 + gl.arange(0, BLOCK_M, layout=row_layout)
            lse = gl.load(lse_ptr + row_base + rows, mask=rows < Sq, other=float("inf"))
            smem.lse.index(stage).store(lse * minus_lse_to_scores)
            smem.delta.index(stage).store(-gl.load(delta_ptr + row_base + rows, mask=rows < Sq,
                                                   other=0.0))
            mbarrier.arrive(ready)  # the second arrival, beside the TMA's expect
            stage, phase = _next_slot(stage, phase, STAGES)
    return stage, phase


# --------------------------------------------------------------------------------------------
# dK/dV kernel: consumer partitions
# --------------------------------------------------------------------------------------------
@gluon.jit
def _dq_mine(t, CONSUMER: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Whether this consumer adds query tile t's dQ: on 128-wide tiles both do, half the
    columns each (a constexpr True); on 64-wide ones, whose 64-column rows cannot be split
    inside one 128-byte swizzle atom, the consumers take alternate tiles."""
    if HEAD_DIM >= 128:
        return True
    else:
        return t % 2 == CONSUMER


@gluon.jit
def _dq_gemm(smem, slot, CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr,
             HEAD_DIM: gl.constexpr):
    """Issues (async) this consumer's share of the tile's dQ = dS·K from all 128 keys: the
    tile's two dSᵀ halves are in `smem.ds` slot `slot`, K as stored; columns
    [CONSUMER·HEAD_DIM/2, (CONSUMER+1)·HEAD_DIM/2) on 128-wide tiles, else all of them."""
    SPLIT: gl.constexpr = HEAD_DIM >= 128
    DQ_N: gl.constexpr = dq_share_cols(HEAD_DIM)
    COL0: gl.constexpr = CONSUMER * DQ_N if SPLIT else 0
    dq = gl.zeros([BLOCK_M, DQ_N], gl.float32, _nvmma(DQ_N))
    for half in gl.static_range(2):
        ds = smem.ds.index(2 * slot + half).permute([1, 0])        # [BLOCK_M, 64 keys]
        k = smem.k.index(half).reshape([HALF_N, HEAD_DIM])
        if SPLIT:
            k = k.slice(COL0, DQ_N, dim=1)
        dq = warpgroup_mma(ds, k, dq, use_acc=half > 0, is_async=True)
    return dq


@gluon.jit
def _dq_add(smem, dq_out, dq, b, h, m0, Hq, Sq,
            CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
            D: gl.constexpr, DQ_ADD: gl.constexpr):
    """Adds a finished dQ share (_dq_gemm) of the query tile at rows m0.. of head h into the
    fp32 accumulator; columns past the head dim D are dropped. `dq_out` is the accumulator's
    tensor descriptor under DQ_TMA, its address under DQ_ATOMIC."""
    SPLIT: gl.constexpr = HEAD_DIM >= 128
    DQ_N: gl.constexpr = dq_share_cols(HEAD_DIM)
    COL0: gl.constexpr = CONSUMER * DQ_N if SPLIT else 0
    dq_layout: gl.constexpr = _nvmma(DQ_N)
    if DQ_ADD == DQ_TMA:
        # The previous share's reduce must have read the staging tile before it is
        # rewritten (a tile ago: this rarely waits). The reduce drops rows past Sq.
        staged = smem.dq.index(CONSUMER)
        tma.store_wait(0)
        staged.reshape([BLOCK_M, DQ_N]).store(dq)
        fence_async_shared()
        _tma_reduce_add(dq_out, [b, h, m0, COL0], staged)
    else:
        rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))   # from m0
        cols = COL0 + gl.arange(0, DQ_N, layout=gl.SliceLayout(0, dq_layout))
        tile = dq_out + ((b * Hq + h).to(gl.int64) * Sq + m0) * D
        at = tile + gl.expand_dims(rows * D, 1) + gl.expand_dims(cols, 0)
        inside = gl.expand_dims(rows < Sq - m0, 1) & gl.expand_dims(cols < D, 0)
        gl.atomic_add(at, dq, mask=inside, sem="relaxed")


@gluon.jit
def _dq_share(smem, dq_out, t, b, h, m0, slot, Hq, Sq,
              CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
              D: gl.constexpr, DQ_ADD: gl.constexpr):
    """dQ of the query tile (rows m0.., head h) from all 128 keys, the part this consumer adds
    (_dq_mine), computed and added with nothing else in flight: the default schedule, after
    the tile's dV and dK GEMMs are done."""
    if _dq_mine(t, CONSUMER, HEAD_DIM):
        dq = _dq_gemm(smem, slot, CONSUMER, BLOCK_M, HEAD_DIM)
        dq = warpgroup_mma_wait(0, deps=[dq])
        _dq_add(smem, dq_out, dq, b, h, m0, Hq, Sq, CONSUMER, BLOCK_M, HEAD_DIM, D, DQ_ADD)


@gluon.jit
def _tile_at(ptr, stride_b, stride_h, stride_s, b, h, row0, n_rows,
             layout: gl.constexpr, ROWS: gl.constexpr, COL0: gl.constexpr, COLS: gl.constexpr,
             D: gl.constexpr):
    """The addresses of a [ROWS, COLS] tile of a plain-pointer tensor: rows row0.. of (b, h),
    columns COL0..; and where it is inside (a row below n_rows, a column below the head dim D)."""
    rows = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = COL0 + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    at = (ptr + b.to(gl.int64) * stride_b + h.to(gl.int64) * stride_h
          + gl.expand_dims(rows.to(gl.int64) * stride_s, 1) + gl.expand_dims(cols, 0))
    inside = gl.expand_dims(rows < n_rows, 1) & gl.expand_dims(cols < D, 0)
    return at, inside


@gluon.jit
def _store_rows(ptr, stride_b, stride_h, stride_s, value, b, h, row0, n_rows,
                layout: gl.constexpr, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr,
                D: gl.constexpr):
    """A [ROWS, HEAD_DIM] register tile to global rows row0.. of (b, h), rows past n_rows and
    columns past the head dim D dropped. Once per program, so the wgmma layout's 4-byte stores
    are good enough."""
    at, inside = _tile_at(ptr, stride_b, stride_h, stride_s, b, h, row0, n_rows, layout, ROWS,
                          0, HEAD_DIM, D)
    gl.store(at, value.to(ptr.dtype.element_ty), mask=inside)


@gluon.jit
def _row_values(row, s_layout: gl.constexpr, KEYS: gl.constexpr, BLOCK_M: gl.constexpr):
    """A ring row of per-query values (−LSE/scale or −Δ, stored negated by the load warp),
    broadcast over KEYS keys in Sᵀ's layout: an initial accumulator with no arithmetic."""
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    return gl.expand_dims(row.load(col_layout), 0).broadcast_to([KEYS, BLOCK_M])


@gluon.jit
def _minus_lse(lse_row, key0, m0, Sk, s_layout: gl.constexpr, KEYS: gl.constexpr,
               BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """Sᵀ's initial accumulator [KEYS keys from key0, BLOCK_M queries from m0]: −LSE/scale of
    each query (from the ring's row `lse_row`), and −inf where the causal diagonal or the end of
    the keys masks the pair (keys past Sk read as zeros, but P there would not be 0)."""
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    minus_lse = _row_values(lse_row, s_layout, KEYS, BLOCK_M)
    needs_mask = key0 + KEYS > Sk
    if CAUSAL:
        needs_mask = needs_mask | (m0 < key0 + KEYS)
    if needs_mask:
        keys = key0 + gl.arange(0, KEYS, layout=gl.SliceLayout(1, s_layout))
        if CAUSAL:
            # a query's last visible key, min(query, Sk - 1): one compare and one select a pair
            queries = m0 + gl.arange(0, BLOCK_M, layout=col_layout)
            keep = gl.expand_dims(keys, 1) <= gl.expand_dims(gl.minimum(queries, Sk - 1), 0)
        else:
            keep = gl.expand_dims(keys < Sk, 1)
        minus_lse = gl.where(keep, minus_lse, -float("inf"))
    return minus_lse


@gluon.jit
def _dkdv_tile(smem, bars, dq_out, dk_acc, dv_acc, k, v, key0, t, stage, phase, b, h, m0,
               Hq, Sq, Sk, qk_scale,
               s_layout: gl.constexpr, kv_layout: gl.constexpr, CONSUMER: gl.constexpr,
               BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
               STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_ADD: gl.constexpr,
               DQ_QUEUE: gl.constexpr):
    """One query tile (the t-th, rows m0.. of head h, in ring slot `stage` at `phase`) against
    this consumer's 64 keys: dV += Pᵀ·dO and dK += dSᵀ·Q; unless DQ_NONE also this consumer's
    share of the tile's dQ, after dV and dK are done, or under DQ_QUEUE queued behind them."""
    dtype: gl.constexpr = smem.q.dtype
    # Pᵀ and dSᵀ as the A operand of dV/dK: the accumulator's registers, converted in place
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    mbarrier.wait(bars.qdo_ready.index(stage), phase)
    q = smem.q.index(stage).reshape([BLOCK_M, HEAD_DIM])
    do = smem.do.index(stage).reshape([BLOCK_M, HEAD_DIM])
    # ---- Sᵀ − LSE/scale = K·Qᵀ − LSE/scale and dPᵀ − Δ = V·dOᵀ − Δ, both in flight.
    # The row statistics enter as the initial accumulators, so no registers hold them where
    # pressure peaks (Pᵀ and dSᵀ beside the dK and dV accumulators, at head dim 128).
    minus_lse = _minus_lse(smem.lse.index(stage), key0, m0, Sk, s_layout, HALF_N, BLOCK_M,
                           CAUSAL)
    sT = warpgroup_mma(k, q.permute([1, 0]), minus_lse, is_async=True)
    minus_delta = _row_values(smem.delta.index(stage), s_layout, HALF_N, BLOCK_M)
    dpT = warpgroup_mma(v, do.permute([1, 0]), minus_delta, is_async=True)
    sT = warpgroup_mma_wait(1, deps=[sT])
    # ---- Pᵀ = exp(scale·Sᵀ − LSE), at most 1 even where the fp32 LSE rounded below the max;
    # dV += Pᵀ·dO
    pT = gl.exp2(gl.minimum(sT, 0.0) * qk_scale)
    pT_op = gl.convert_layout(pT.to(dtype), op_layout)
    dv_acc = warpgroup_mma(pT_op, do, dv_acc, is_async=True)
    # ---- dSᵀ = Pᵀ ⊙ (dPᵀ − Δ); dK += dSᵀ·Q
    dpT = warpgroup_mma_wait(1, deps=[dpT])
    dsT = (pT * dpT).to(dtype)
    dsT_op = gl.convert_layout(dsT, op_layout)
    dk_acc = warpgroup_mma(dsT_op, q, dk_acc, is_async=True)
    if DQ_ADD != DQ_NONE:
        slot = t % 2
        # a slot is rewritten two tiles later, by when both consumers have waited for this
        # tile's dQ GEMMs (each waits for its own before it stores its next half)
        smem.ds.index(2 * slot + CONSUMER).store(dsT)
        fence_async_shared()
        mbarrier.arrive(bars.ds_ready.index(slot))
    if DQ_QUEUE:
        # The other consumer's dSᵀ half is waited for while dV and dK run, and the dQ GEMM
        # queued right behind them, so the tensor cores get no gap between the two. The (Q, dO)
        # slot goes back once dV and dK are done, while dQ still runs: released after dQ, the
        # loader fell behind on long rows (run91). Faster only at head dim 128 without a mask
        # (run94): family.py declares it there alone.
        mbarrier.wait(bars.ds_ready.index(slot), (t // 2) & 1)
        # (Gluon carries no wgmma in flight into an `if`: each branch waits for its own)
        if _dq_mine(t, CONSUMER, HEAD_DIM):
            dq = _dq_gemm(smem, slot, CONSUMER, BLOCK_M, HEAD_DIM)
            dv_done, dk_done, pT_done, dsT_done = warpgroup_mma_wait(
                1, deps=[dv_acc, dk_acc, pT_op, dsT_op])
            mbarrier.arrive(bars.qdo_free.index(stage))
            dq = warpgroup_mma_wait(0, deps=[dq])
            _dq_add(smem, dq_out, dq, b, h, m0, Hq, Sq, CONSUMER, BLOCK_M, HEAD_DIM, D, DQ_ADD)
        else:
            dv_done, dk_done, pT_done, dsT_done = warpgroup_mma_wait(
                0, deps=[dv_acc, dk_acc, pT_op, dsT_op])
            mbarrier.arrive(bars.qdo_free.index(stage))
        dv_acc = dv_done
        dk_acc = dk_done
    else:
        dv_acc, dk_acc, pT_op, dsT_op = warpgroup_mma_wait(0, deps=[dv_acc, dk_acc, pT_op,
                                                                    dsT_op])
        mbarrier.arrive(bars.qdo_free.index(stage))
        if DQ_ADD != DQ_NONE:
            mbarrier.wait(bars.ds_ready.index(slot), (t // 2) & 1)
            _dq_share(smem, dq_out, t, b, h, m0, slot, Hq, Sq, CONSUMER, BLOCK_M, HEAD_DIM, D,
                      DQ_ADD)
    return dk_acc, dv_acc


@gluon.jit
def _dkdv_consume(smem, bars, lse_ptr, delta_ptr, dq_out, dq_ready, dk, dv,
                  dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s,
                  B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                  D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  DQ_ADD: gl.constexpr, DQ_QUEUE: gl.constexpr, PERSISTENT: gl.constexpr,
                  READY: gl.constexpr):
    """dK and dV of this consumer's 64 keys over every query tile of the program's key block
    (PERSISTENT: of each key block of its work units); unless DQ_NONE also its share of each
    tile's dQ (DQ_QUEUE: queued behind dV and dK)."""
    if PERSISTENT:
        blocks = gl.cdiv(Sk, 2 * HALF_N)
        t = 0      # query tiles so far: ring slots, phases and dSᵀ slots run on across blocks
        it = 0     # key blocks so far
        zero = gl.to_tensor(0)  # (the ring's slot and phase come from t here)
        snake = _snake_order(B * Hkv, blocks, CAUSAL)
        for unit in range(gl.program_id(0), _block_units(B * Hkv, blocks, snake, CAUSAL),
                          gl.num_programs(0)):
            for half in range(_unit_blocks(unit, blocks, snake, CAUSAL)):
                block, bh = _unit_block(unit, half, B * Hkv, blocks, snake, CAUSAL)
                blk = _key_block_at(block, bh, Hq, Hkv, BLOCK_M, CAUSAL, 2)
                t, _, _ = _consume_block(
                    smem, bars, dq_out, dq_ready, dk, dv, dk_stride_b, dk_stride_h,
                    dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s, blk, t, zero, zero, it,
                    Hq, Sq, Sk, qk_scale, sm_scale, CONSUMER, BLOCK_M, HEAD_DIM, D, STAGES,
                    CAUSAL, DQ_ADD, DQ_QUEUE, PERSISTENT, False)
                it += 1
    else:
        blk = _key_block(Hq, Hkv, Sq, Sk, BLOCK_M, CAUSAL, 2)
        zero = gl.to_tensor(0)  # the counters are loop-carried tensors, not constexprs
        _consume_block(smem, bars, dq_out, dq_ready, dk, dv, dk_stride_b, dk_stride_h,
                       dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s, blk, zero, zero,
                       zero, zero, Hq, Sq, Sk, qk_scale, sm_scale, CONSUMER, BLOCK_M, HEAD_DIM,
                       D, STAGES, CAUSAL, DQ_ADD, DQ_QUEUE, PERSISTENT, READY)
    if PERSISTENT and DQ_ADD == DQ_TMA:
        tma.store_wait(0)  # the last reduce has read its staging tile before the program ends


@gluon.jit
def _consume_block(smem, bars, dq_out, dq_ready, dk, dv,
                   dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s,
                   blk, t, stage, phase, it, Hq, Sq, Sk, qk_scale, sm_scale,
                   CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                   D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   DQ_ADD: gl.constexpr, DQ_QUEUE: gl.constexpr, PERSISTENT: gl.constexpr,
                   READY: gl.constexpr):
    """This consumer's 64 keys of key block `blk` (its `it`-th) over the block's query tiles,
    the first of them the program's t-th, in ring slot `stage` at `phase`; stores dK and dV and
    returns (t, stage, phase) after the block. PERSISTENT: K and V are given back (kv_free)
    once every GEMM that read them is done, so the loader fetches the next block's while this
    block's dK and dV are stored."""
    s_layout: gl.constexpr = _nvmma(BLOCK_M)            # Sᵀ, dPᵀ: [64 keys, BLOCK_M queries]
    kv_layout: gl.constexpr = _nvmma(HEAD_DIM)          # dK, dV: [64 keys, HEAD_DIM]
    key0 = blk.n0 + CONSUMER * HALF_N
    k = smem.k.index(CONSUMER).reshape([HALF_N, HEAD_DIM])
    v = smem.v.index(CONSUMER).reshape([HALF_N, HEAD_DIM])
    dk_acc = gl.zeros([HALF_N, HEAD_DIM], gl.float32, kv_layout)
    dv_acc = gl.zeros([HALF_N, HEAD_DIM], gl.float32, kv_layout)

    mbarrier.wait(bars.kv_ready, it & 1)
    h = blk.h_first
    m0 = blk.m_first
    for j in range(blk.num_tiles(Sq, BLOCK_M)):
        if PERSISTENT:
            # the slot and phase from the tile count: one register fewer across the loop
            stage = t % STAGES
            phase = (t // STAGES) & 1
        dk_acc, dv_acc = _dkdv_tile(smem, bars, dq_out, dk_acc, dv_acc, k, v, key0,
                                    t, stage, phase, blk.b, h, m0, Hq, Sq, Sk, qk_scale,
                                    s_layout, kv_layout, CONSUMER, BLOCK_M, HEAD_DIM, D,
                                    STAGES, CAUSAL, DQ_ADD, DQ_QUEUE)
        h, m0 = blk.next_tile(h, m0, Sq, BLOCK_M)
        if not PERSISTENT:
            stage, phase = _next_slot(stage, phase, STAGES)
        t += 1
    if PERSISTENT:
        # Every GEMM of this consumer that read K or V (its dQ share's included, which reads
        # both halves of K) was waited for inside _dkdv_tile; the loader refills both halves
        # once both consumers said so.
        mbarrier.arrive(bars.kv_free)

    # ---- epilogue: dK carries the softmax scale; keys no query sees get exact zeros
    if not PERSISTENT and DQ_ADD == DQ_TMA:
        tma.store_wait(0)  # the last reduce has read its staging tile before the program ends
    if READY:
        # before dK and dV leave: the release then waits for no store of theirs
        gl.static_assert(DQ_ADD == DQ_TMA and not PERSISTENT, "READY: TMA adds, one key block")
        _publish_adds(dq_ready, blk, Hq, Sq, CONSUMER, BLOCK_M, HEAD_DIM)
    _store_rows(dv, dv_stride_b, dv_stride_h, dv_stride_s, dv_acc, blk.b, blk.h_kv, key0, Sk,
                kv_layout, HALF_N, HEAD_DIM, D)
    _store_rows(dk, dk_stride_b, dk_stride_h, dk_stride_s, dk_acc * sm_scale, blk.b, blk.h_kv,
                key0, Sk, kv_layout, HALF_N, HEAD_DIM, D)
    return t, stage, phase


@gluon.jit
def _dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_out, dq_ready,
                  dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s, B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_ADD: gl.constexpr,
                  DQ_QUEUE: gl.constexpr, PERSISTENT: gl.constexpr, READY: gl.constexpr,
                  CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    gl.static_assert(DQ_ADD != DQ_NONE or not DQ_QUEUE, "DQ_QUEUE queues the fused dQ")
    dtype: gl.constexpr = q_desc.dtype
    k = gl.allocate_shared_memory(dtype, [2] + k_desc.block_type.shape, k_desc.layout)
    v = gl.allocate_shared_memory(dtype, [2] + v_desc.block_type.shape, v_desc.layout)
    q = gl.allocate_shared_memory(dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do = gl.allocate_shared_memory(dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
    if DQ_ADD != DQ_NONE:
        ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF_N, BLOCK_M], dtype)
        ds = gl.allocate_shared_memory(dtype, [4, HALF_N, BLOCK_M], ds_layout)
    else:
        ds = k  # unused: only the fused dQ exchanges dSᵀ
    if DQ_ADD == DQ_TMA:
        dq = gl.allocate_shared_memory(gl.float32, [2] + dq_out.block_type.shape, dq_out.layout)
    else:
        dq = k  # unused: only the TMA reduce stages dQ
    row_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    lse = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_smem)
    delta = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_smem)
    smem = DkdvSmem(k, v, q, do, lse, delta, ds, dq, k)  # no Pᵀ hand-over here
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    if PERSISTENT:
        kv_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    else:
        kv_free = kv_ready  # unused: one key block, K and V loaded once
    bars = DkdvBarriers(kv_ready, kv_free, qdo_ready, qdo_free, ds_ready,
                        ds_ready)  # no Pᵀ hand-over
    mbarrier.init(bars.kv_ready, count=1)
    if PERSISTENT:
        mbarrier.init(bars.kv_free, count=2)  # both consumers let go of K and V
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.qdo_ready.index(i), count=2)  # the TMA bytes, and LSE/Δ stored
        mbarrier.init(bars.qdo_free.index(i), count=2)   # both consumers release each slot
    for i in gl.static_range(2):
        mbarrier.init(bars.ds_ready.index(i), count=2)   # both consumers store a half

    # The loader's tuple is written in the list: one stored in a variable would turn its
    # function into a runtime value (fwd.py's attn_fwd_pingpong says more).
    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    gl.warp_specialize([
        (_dkdv_consume, (smem, bars, lse_ptr, delta_ptr, dq_out, dq_ready, dk, dv,
                         dk_stride_b, dk_stride_h, dk_stride_s,
                         dv_stride_b, dv_stride_h, dv_stride_s,
                         B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                         0, BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_ADD, DQ_QUEUE, PERSISTENT,
                         READY)),
        (_dkdv_consume, (smem, bars, lse_ptr, delta_ptr, dq_out, dq_ready, dk, dv,
                         dk_stride_b, dk_stride_h, dk_stride_s,
                         dv_stride_b, dv_stride_h, dv_stride_s,
                         B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                         1, BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_ADD, DQ_QUEUE, PERSISTENT,
                         READY)),
        (_dkdv_load_persistent, (q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr,
                                 delta_ptr, B, Hq, Hkv, Sq, Sk, sm_scale,
                                 BLOCK_M, STAGES, CAUSAL, 2))
        if PERSISTENT else
        (_dkdv_load, (q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr,
                      Hq, Hkv, Sq, Sk, sm_scale, BLOCK_M, STAGES, CAUSAL, 2)),
    ], [4, 1], [CONSUMER_REGS, LOAD_REGS])


@gluon.jit
def attn_bwd_dkdv_dq_atomic(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_accum, dk, dv,
                            dk_stride_b, dk_stride_h, dk_stride_s,
                            dv_stride_b, dv_stride_h, dv_stride_s,
                            B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                            BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                            STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_QUEUE: gl.constexpr,
                            PERSISTENT: gl.constexpr,
                            CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """Fast variant: dK, dV, and dQ added into the fp32 accumulator with atomics; DQ_QUEUE
    queues each tile's dQ GEMM behind its dV and dK (_dkdv_tile).
    grid: (cdiv(Sk, 128), B * Hkv), or (num_sms,) when PERSISTENT; num_warps = 4 (consumer 0)."""
    _dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_accum, delta_ptr,
                  dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s, B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_ATOMIC, DQ_QUEUE, PERSISTENT, False,
                  CONSUMER_REGS, LOAD_REGS)


@gluon.jit
def attn_bwd_dkdv_dq_tma(q_desc, k_desc, v_desc, do_desc, dq_desc, lse_ptr, delta_ptr, dk, dv,
                         dk_stride_b, dk_stride_h, dk_stride_s,
                         dv_stride_b, dv_stride_h, dv_stride_s,
                         B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                         BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                         STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_QUEUE: gl.constexpr,
                         PERSISTENT: gl.constexpr,
                         CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """Fast variant: dK, dV, and dQ added into the fp32 accumulator [B, Hq, Sq, D] by TMA
    reduce-adds through `dq_desc` (boxes of [BLOCK_M, HEAD_DIM/2] on 128-wide tiles, else
    [BLOCK_M, HEAD_DIM]); the reduce drops a tile's rows past Sq and columns past D. DQ_QUEUE
    queues each tile's dQ GEMM behind its dV and dK (_dkdv_tile).
    grid: (cdiv(Sk, 128), B * Hkv), or (num_sms,) when PERSISTENT; num_warps = 4 (consumer 0)."""
    _dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_desc, delta_ptr,
                  dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s, B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_TMA, DQ_QUEUE, PERSISTENT, False,
                  CONSUMER_REGS, LOAD_REGS)


@gluon.jit
def attn_bwd_dkdv_dq_tma_ready(q_desc, k_desc, v_desc, do_desc, dq_desc, lse_ptr, delta_ptr,
                               dq_ready, dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                               dv_stride_b, dv_stride_h, dv_stride_s,
                               B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                               BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                               STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                               DQ_QUEUE: gl.constexpr,
                               CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """attn_bwd_dkdv_dq_tma (one key block a program) whose convert starts early (READY): at
    the end of its block each consumer publishes its complete dQ adds on the query tiles'
    counters `dq_ready` (_publish_adds), which attn_bwd_dq_convert_ready waits on.
    grid: (cdiv(Sk, 128), B * Hkv); num_warps = 4 (consumer 0)."""
    _dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_desc, dq_ready,
                  dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s, B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_TMA, DQ_QUEUE, False, True,
                  CONSUMER_REGS, LOAD_REGS)


@gluon.jit
def attn_bwd_dkdv(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dk, dv,
                  dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s,
                  B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, PERSISTENT: gl.constexpr,
                  CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """Deterministic variant: dK and dV only (attn_bwd_dq computes dQ).
    grid: (cdiv(Sk, 128), B * Hkv), or (num_sms,) when PERSISTENT; num_warps = 4 (consumer 0)."""
    _dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, delta_ptr, delta_ptr,
                  dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s, B, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_NONE, False, PERSISTENT, False,
                  CONSUMER_REGS, LOAD_REGS)


# --------------------------------------------------------------------------------------------
# dQ kernel (deterministic variant)
# --------------------------------------------------------------------------------------------
@aggregate
class QueryBlock:
    """2 * 64 query rows of one (batch, query head) a dQ program owns, and its key tiles."""
    b: gl.tensor
    h: gl.tensor
    h_kv: gl.tensor
    start: gl.tensor      # first query row
    n_tiles: gl.tensor    # key tiles visited: past the last row's diagonal all are masked

    @gluon.constexpr_function
    def __init__(self, b, h, h_kv, start, n_tiles):
        self.b = b
        self.h = h
        self.h_kv = h_kv
        self.start = start
        self.n_tiles = n_tiles


@gluon.jit
def _query_block(Hq, Hkv, Sq, Sk, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                 Q_TILES: gl.constexpr):
    """grid: (cdiv(Sq, Q_TILES * 64), B * Hq), read in head groups under causal
    (_block_and_head); the last (under causal the longest) block comes first."""
    block, bh = _block_and_head(CAUSAL)
    start = (gl.num_programs(0) - 1 - block) * (Q_TILES * HALF_N)
    h = bh % Hq
    hi = Sk
    if CAUSAL:
        hi = gl.minimum(Sk, start + Q_TILES * HALF_N)
    return QueryBlock(bh // Hq, h, h // (Hq // Hkv), start, gl.cdiv(hi, BLOCK_N))


@aggregate
class DqSmem:
    q: gl.shared_memory_descriptor    # [2] one 64-row tile per consumer; dQ leaves through it
    do: gl.shared_memory_descriptor   # [2]
    k: gl.shared_memory_descriptor    # [STAGES] ring
    v: gl.shared_memory_descriptor    # [STAGES] ring
    # bwd_wide.py (one Q and dO tile for both consumers): P (fp32) and dS handed between them
    p: gl.shared_memory_descriptor
    ds: gl.shared_memory_descriptor

    @gluon.constexpr_function
    def __init__(self, q, do, k, v, p, ds):
        self.q = q
        self.do = do
        self.k = k
        self.v = v
        self.p = p
        self.ds = ds


@aggregate
class DqBarriers:
    q_ready: gl.shared_memory_descriptor    # [2] a consumer's Q and dO landed
    kv_ready: gl.shared_memory_descriptor   # [STAGES]
    kv_free: gl.shared_memory_descriptor    # [STAGES] both consumers are done with a slot
    p_ready: gl.shared_memory_descriptor    # bwd_wide.py: consumer 0 stored this tile's P
    ds_ready: gl.shared_memory_descriptor   # bwd_wide.py: consumer 1 stored this tile's dS

    @gluon.constexpr_function
    def __init__(self, q_ready, kv_ready, kv_free, p_ready, ds_ready):
        self.q_ready = q_ready
        self.kv_ready = kv_ready
        self.kv_free = kv_free
        self.p_ready = p_ready
        self.ds_ready = ds_ready


@gluon.jit
def _dq_load(q_desc, k_desc, v_desc, do_desc, smem, bars, Hq, Hkv, Sq, Sk,
             BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
             Q_TILES: gl.constexpr):
    """Q and dO of the program's Q_TILES tiles of 64 rows (one per consumer here, one for both
    in bwd_wide.py), then the ring of K/V tiles."""
    blk = _query_block(Hq, Hkv, Sq, Sk, BLOCK_N, CAUSAL, Q_TILES)
    q_bytes: gl.constexpr = q_desc.block_type.nbytes + do_desc.block_type.nbytes
    for c in gl.static_range(Q_TILES):
        ready = bars.q_ready.index(c)
        mbarrier.expect(ready, q_bytes)
        row = blk.start + c * HALF_N
        tma.async_copy_global_to_shared(q_desc, [blk.b, blk.h, row, 0], ready, smem.q.index(c))
        tma.async_copy_global_to_shared(do_desc, [blk.b, blk.h, row, 0], ready, smem.do.index(c))
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    for j in range(blk.n_tiles):
        stage = j % STAGES
        mbarrier.wait(bars.kv_free.index(stage), ((j // STAGES) & 1) ^ 1)
        ready = bars.kv_ready.index(stage)
        mbarrier.expect(ready, kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [blk.b, blk.h_kv, j * BLOCK_N, 0], ready,
                                        smem.k.index(stage))
        tma.async_copy_global_to_shared(v_desc, [blk.b, blk.h_kv, j * BLOCK_N, 0], ready,
                                        smem.v.index(stage))


@gluon.jit
def _dq_probabilities(s, lse, col0, rows, row0, Sk, sm_scale, s_layout: gl.constexpr,
                      BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """P = exp(scale·S − LSE) of the query rows `rows` (from row0) against BLOCK_N keys from
    col0, the difference in natural units before the base change and at most 0 (as the triton
    family's), 0 where the causal diagonal or the end of the keys masks the pair."""
    p = gl.exp2(gl.minimum(s * sm_scale - gl.expand_dims(lse, 1), 0.0) * LOG2E)
    needs_mask = col0 + BLOCK_N > Sk
    if CAUSAL:
        needs_mask = needs_mask | (col0 + BLOCK_N > row0 + 1)
    if needs_mask:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        if CAUSAL:  # a row's last visible key, min(row, Sk - 1), as the forward's _softmax
            keep = gl.expand_dims(cols, 0) <= gl.expand_dims(gl.minimum(rows, Sk - 1), 1)
        else:
            keep = gl.expand_dims(cols < Sk, 0)
        p = gl.where(keep, p, 0.0)
    return p


@gluon.jit
def _load_o_half(o, o_stride_b, o_stride_h, o_stride_s, b, h, row0, Sq, COL0: gl.constexpr,
                 layout: gl.constexpr, D: gl.constexpr):
    """O's 64 rows from row0 of (b, h), columns [COL0, COL0 + 64), from global memory as they
    are (rows past Sq and columns past the head dim D as zeros)."""
    at, inside = _tile_at(o, o_stride_b, o_stride_h, o_stride_s, b, h, row0, Sq, layout, HALF_N,
                          COL0, HALF_N, D)
    return gl.load(at, mask=inside, other=0.0)


@gluon.jit
def _half_delta(o_half, do, COL0: gl.constexpr, layout: gl.constexpr):
    """rowsum(dO ⊙ O) over 64 of the columns, dO from its landed shared tile."""
    do_half = do.slice(COL0, HALF_N, dim=1).load(layout)
    return gl.sum(o_half.to(gl.float32) * do_half.to(gl.float32), 1)


@gluon.jit
def _dq_consume(dq_desc, smem, bars, o, o_stride_b, o_stride_h, o_stride_s, lse_ptr, delta_ptr,
                Hq, Hkv, Sq, Sk, sm_scale,
                CONSUMER: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """dQ of this consumer's 64 query rows over the block's key tiles; first Δ = rowsum(dO ⊙ O)
    of those rows, which dS needs here and the dK/dV kernel (launched after this one) reads."""
    dtype: gl.constexpr = smem.q.dtype
    s_layout: gl.constexpr = _nvmma(BLOCK_N)          # S, dP: [64 queries, BLOCK_N keys]
    dq_layout: gl.constexpr = _nvmma(HEAD_DIM)        # dQ: [64, HEAD_DIM]
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    blk = _query_block(Hq, Hkv, Sq, Sk, BLOCK_N, CAUSAL, 2)
    row0 = blk.start + CONSUMER * HALF_N
    rows = row0 + gl.arange(0, HALF_N, layout=row_layout)
    at = (blk.b * Hq + blk.h).to(gl.int64) * Sq + rows
    lse = gl.load(lse_ptr + at, mask=rows < Sq, other=float("inf"))
    # O's rows are requested before the wait for Q and dO, so both latencies overlap; 16-byte
    # vectors, 64 columns at a time (16 registers a thread each)
    o_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    o_lo = _load_o_half(o, o_stride_b, o_stride_h, o_stride_s, blk.b, blk.h, row0, Sq, 0,
                        o_layout, D)
    if HEAD_DIM > HALF_N:
        o_hi = _load_o_half(o, o_stride_b, o_stride_h, o_stride_s, blk.b, blk.h, row0, Sq,
                            HALF_N, o_layout, D)
    s_zero = gl.zeros([HALF_N, BLOCK_N], gl.float32, s_layout)
    # dQ is waited for at the end of each key tile. Kept in flight across tiles (its GEMM of tile
    # j finishing behind the QKᵀ and dO·Vᵀ of tile j + 1), ptxas found too few registers for
    # the wgmma pipeline and serialized every wgmma of the kernel (C7512; docs/gluon-bwd.md).
    dq = gl.zeros([HALF_N, HEAD_DIM], gl.float32, dq_layout)
    ds_op = gl.zeros([HALF_N, BLOCK_N], dtype, op_layout)

    mbarrier.wait(bars.q_ready.index(CONSUMER), 0)
    q = smem.q.index(CONSUMER).reshape([HALF_N, HEAD_DIM])
    do = smem.do.index(CONSUMER).reshape([HALF_N, HEAD_DIM])
    # ---- Δ = rowsum(dO ⊙ O): the deterministic variant's preprocess, folded in here
    row_sum = _half_delta(o_lo, do, 0, o_layout)
    if HEAD_DIM > HALF_N:
        row_sum += _half_delta(o_hi, do, HALF_N, o_layout)
    delta = gl.convert_layout(row_sum, row_layout)
    gl.store(delta_ptr + at, delta, mask=rows < Sq)
    for j in range(blk.n_tiles):
        stage = j % STAGES
        mbarrier.wait(bars.kv_ready.index(stage), (j // STAGES) & 1)
        k = smem.k.index(stage).reshape([BLOCK_N, HEAD_DIM])
        v = smem.v.index(stage).reshape([BLOCK_N, HEAD_DIM])
        # ---- S = Q·Kᵀ and dP = dO·Vᵀ
        s = warpgroup_mma(q, k.permute([1, 0]), s_zero, use_acc=False, is_async=True)
        dp = warpgroup_mma(do, v.permute([1, 0]), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(1, deps=[s])
        # ---- P = exp(scale·S − LSE) from the forward's LSE, the difference in natural units
        # before the base change and at most 0 (as the triton family's), masked on the
        # diagonal and past Sk
        p = _dq_probabilities(s, lse, j * BLOCK_N, rows, row0, Sk, sm_scale, s_layout, BLOCK_N,
                              CAUSAL)
        # ---- dS = P ⊙ (dP − Δ); dQ += dS·K; then the tile's K/V slot is free
        dp = warpgroup_mma_wait(0, deps=[dp])
        ds = p * (dp - gl.expand_dims(delta, 1))
        ds_op = gl.convert_layout(ds.to(dtype), op_layout)
        dq = warpgroup_mma(ds_op, k, dq, is_async=True)
        dq, ds_op = warpgroup_mma_wait(0, deps=[dq, ds_op])
        mbarrier.arrive(bars.kv_free.index(stage))

    # ---- epilogue: through this consumer's Q slot (its last QKᵀ is done) and a TMA store
    out = smem.q.index(CONSUMER)
    out.reshape([HALF_N, HEAD_DIM]).store((dq * sm_scale).to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [blk.b, blk.h, row0, 0], out)
    tma.store_wait(0)


@gluon.jit
def attn_bwd_dq(q_desc, k_desc, v_desc, do_desc, dq_desc, o, o_stride_b, o_stride_h,
                o_stride_s, lse_ptr, delta_ptr, Hq, Hkv, Sq, Sk, sm_scale,
                BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                STAGES: gl.constexpr, CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                LOAD_REGS: gl.constexpr):
    """Deterministic variant's dQ, and Δ for the dK/dV kernel: the variant's first launch.
    grid: (cdiv(Sq, 128), B * Hq); num_warps = 4 (consumer 0). HEAD_DIM is the tile width, D
    the head dim (O is read with plain loads, its columns past D dropped)."""
    dtype: gl.constexpr = q_desc.dtype
    q = gl.allocate_shared_memory(dtype, [2] + q_desc.block_type.shape, q_desc.layout)
    smem = DqSmem(
        q, gl.allocate_shared_memory(dtype, [2] + do_desc.block_type.shape, do_desc.layout),
        gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout),
        gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout),
        q, q)  # no P or dS hand-over here
    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    bars = DqBarriers(q_ready,
                      gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                      gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
                      q_ready, q_ready)
    for i in gl.static_range(2):
        mbarrier.init(bars.q_ready.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.kv_ready.index(i), count=1)
        mbarrier.init(bars.kv_free.index(i), count=2)   # both consumers release each tile

    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    gl.warp_specialize([
        (_dq_consume, (dq_desc, smem, bars, o, o_stride_b, o_stride_h, o_stride_s, lse_ptr,
                       delta_ptr, Hq, Hkv, Sq, Sk, sm_scale, 0, BLOCK_N, HEAD_DIM, D, STAGES,
                       CAUSAL)),
        (_dq_consume, (dq_desc, smem, bars, o, o_stride_b, o_stride_h, o_stride_s, lse_ptr,
                       delta_ptr, Hq, Hkv, Sq, Sk, sm_scale, 1, BLOCK_N, HEAD_DIM, D, STAGES,
                       CAUSAL)),
        (_dq_load, (q_desc, k_desc, v_desc, do_desc, smem, bars, Hq, Hkv, Sq, Sk,
                    BLOCK_N, STAGES, CAUSAL, 2)),
    ], [4, 1], [CONSUMER_REGS, LOAD_REGS])
