"""Attention forward in Gluon for Hopper (sm_90): TMA, wgmma, mbarriers, warp specialization.

One program serves 2 * BLOCK_M query rows of one (batch, head). Three partitions share it:

    load      1 warp     TMA: the two Q tiles once, then K/V tiles into a STAGES-deep ring
    consumer0 4 warps    rows [start, start + BLOCK_M)             (the default partition)
    consumer1 4 warps    rows [start + BLOCK_M, start + 2 * BLOCK_M)

The consumers ping-pong: a consumer issues its tensor-core work (QKᵀ of tile j, PV of tile
j - 1) only while it holds the "turn", so its softmax runs while the other warpgroup's GEMMs
occupy the tensor cores. Two schedules (the OVERLAP constexpr):
    plain       wait for both GEMMs, then hand the turn over, then softmax(j)
    overlapped  hand the turn over once both are issued, wait for QKᵀ(j) only, run softmax(j)
                while PV(j - 1) is still in flight, then wait for PV and rescale O

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

LN2 = gl.constexpr(0.6931471805599453)  # ln 2: lse is natural-log


@gluon.jit
def _kv_tiles(start, Sk, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Key tiles this program visits; past the last query row's diagonal every tile is fully
    masked, so a causal program stops there."""
    hi = Sk
    if CAUSAL:
        hi = gl.minimum(Sk, start + 2 * BLOCK_M)
    return gl.cdiv(hi, BLOCK_N)


# --------------------------------------------------------------------------------------------
# load: one warp issues every TMA copy; completion is tracked by byte counts on mbarriers.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free,
          b, h, kv_h, start, n_tiles,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    for c in gl.static_range(2):
        mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [b, h, start + c * BLOCK_M, 0], q_ready.index(c),
                                        q_smem.index(c))
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    for j in range(n_tiles):
        stage = j % STAGES
        # Wait until both consumers released the slot's previous tile. A fresh barrier counts
        # as having completed the phase before 0, so the first STAGES waits pass at once.
        mbarrier.wait(kv_free.index(stage), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(kv_ready.index(stage), kv_bytes)
        tma.async_copy_global_to_shared(k_desc, [b, kv_h, j * BLOCK_N, 0], kv_ready.index(stage),
                                        k_smem.index(stage))
        tma.async_copy_global_to_shared(v_desc, [b, kv_h, j * BLOCK_N, 0], kv_ready.index(stage),
                                        v_smem.index(stage))


# --------------------------------------------------------------------------------------------
# softmax: online, in the log2 domain with the scale folded into the exponent.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _softmax(s, m_i, l_i, j, row0, Sk, qk_scale,
             s_layout: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             CAUSAL: gl.constexpr):
    """Returns (p, alpha, m_new, l_new) for score tile j of this consumer's rows."""
    col0 = j * BLOCK_N
    # Only tiles that cross the diagonal or the end of the keys need a mask.
    needs_mask = col0 + BLOCK_N > Sk
    if CAUSAL:
        needs_mask = needs_mask | (col0 + BLOCK_N > row0 + 1)
    if needs_mask:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
        keep = gl.expand_dims(cols < Sk, 0)
        if CAUSAL:
            keep = keep & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
        s = gl.where(keep, s, -float("inf"))
    # Every row keeps key 0 visible (top-left causal), so m_new is finite from the first tile
    # on and a fully masked later tile gives p = 0, alpha = 1.
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_new


# --------------------------------------------------------------------------------------------
# mma + softmax + epilogue of one consumer warpgroup.
# --------------------------------------------------------------------------------------------
@gluon.jit
def _consume(o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
             b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
             CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
             HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
             OVERLAP: gl.constexpr):
    dtype: gl.constexpr = q_smem.dtype
    # wgmma accumulators: the 4 warps split the rows, one m64 instruction per 64 rows.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    # P stays in registers as wgmma's A operand, never touching shared memory.
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)

    row0 = start + CONSUMER * BLOCK_M
    mbarrier.wait(q_ready.index(CONSUMER), 0)
    q = q_smem.index(CONSUMER).reshape([BLOCK_M, HEAD_DIM])

    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    p = gl.zeros([BLOCK_M, BLOCK_N], dtype, p_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    if OVERLAP:
        # Tile 0 has no PV before it: QKᵀ alone, then its softmax.
        mbarrier.wait(kv_ready.index(0), 0)
        mbarrier.wait(turn.index(CONSUMER), 1 - CONSUMER)
        k_t = k_smem.index(0).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
        s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
        mbarrier.arrive(turn.index(1 - CONSUMER))
        s = warpgroup_mma_wait(0, deps=[s_tok])
        p_f32, alpha, m_i, l_i = _softmax(s, m_i, l_i, 0, row0, Sk, qk_scale,
                                          s_layout, BLOCK_M, BLOCK_N, CAUSAL)
        p = gl.convert_layout(p_f32.to(dtype), p_layout)
        for j in range(1, n_tiles):
            stage = j % STAGES
            prev = (j - 1) % STAGES
            mbarrier.wait(kv_ready.index(stage), (j // STAGES) & 1)
            k_t = k_smem.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
            mbarrier.wait(turn.index(CONSUMER), (j & 1) ^ (1 - CONSUMER))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            v = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
            acc = warpgroup_mma(p, v, acc, is_async=True)
            # Hand the turn over once both GEMMs are issued: the tensor cores run them in issue
            # order, so the other warpgroup's GEMMs queue right behind these.
            mbarrier.arrive(turn.index(1 - CONSUMER))
            # wgmma groups retire in order: one left in flight means QKᵀ(j) is done and PV(j-1)
            # may still run, behind this softmax.
            s = warpgroup_mma_wait(1, deps=[s_tok])
            p_f32, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, row0, Sk, qk_scale,
                                              s_layout, BLOCK_M, BLOCK_N, CAUSAL)
            # p (tile j-1) is PV's register operand: it stays alive until PV is done.
            acc, p = warpgroup_mma_wait(0, deps=[acc, p])
            mbarrier.arrive(kv_free.index(prev))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_f32.to(dtype), p_layout)
    else:
        for j in range(n_tiles):
            stage = j % STAGES
            mbarrier.wait(kv_ready.index(stage), (j // STAGES) & 1)
            k_t = k_smem.index(stage).reshape([BLOCK_N, HEAD_DIM]).permute([1, 0])
            # Take the turn: consumer 0 starts (a fresh barrier passes the parity-1 wait).
            mbarrier.wait(turn.index(CONSUMER), (j & 1) ^ (1 - CONSUMER))
            s_tok = warpgroup_mma(q, k_t, s_zero, use_acc=False, is_async=True)
            if j > 0:
                # PV of the previous tile, queued behind QKᵀ so both run back to back.
                prev = (j - 1) % STAGES
                v = v_smem.index(prev).reshape([BLOCK_N, HEAD_DIM])
                acc = warpgroup_mma(p, v, acc, is_async=True)
                acc = warpgroup_mma_wait(0, deps=[acc])
                mbarrier.arrive(kv_free.index(prev))
            s = warpgroup_mma_wait(0, deps=[s_tok])
            # Hand the turn over: the other warpgroup's GEMMs now overlap this softmax.
            mbarrier.arrive(turn.index(1 - CONSUMER))

            p_f32, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, row0, Sk, qk_scale,
                                              s_layout, BLOCK_M, BLOCK_N, CAUSAL)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            p = gl.convert_layout(p_f32.to(dtype), p_layout)

    # The last tile's PV (no turn: the tensor cores are ours once the other side is done too).
    last = (n_tiles - 1) % STAGES
    acc = warpgroup_mma(p, v_smem.index(last).reshape([BLOCK_N, HEAD_DIM]), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(kv_free.index(last))

    # epilogue: normalise, O through shared memory (Q's slot is free now) and TMA; LSE direct.
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    o = (acc / gl.expand_dims(l_o, 1)).to(dtype)
    o_smem = q_smem.index(CONSUMER)
    o_smem.reshape([BLOCK_M, HEAD_DIM]).store(o)
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [b, h, row0, 0], o_smem)

    # m_i is log2(e)·scale·max; lse = ln(sum exp(scale·s)) = (m + log2 l)·ln 2.
    lse = (m_i + gl.log2(l_i)) * LN2
    rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    lse_base = (b.to(gl.int64) * Hq + h) * Sq
    gl.store(lse_ptr + lse_base + rows, lse, mask=rows < Sq)
    tma.store_wait(0)


@gluon.jit
def _consumer1(o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
               b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
               STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):
    _consume(o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
             b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
             1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP)


@gluon.jit
def _consumer0(o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
               b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
               STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr):
    _consume(o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
             b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
             0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP)


@gluon.jit
def attn_fwd_pingpong(q_desc, k_desc, v_desc, o_desc, lse_ptr, Hq, Hkv, Sq, Sk, qk_scale,
                      BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                      STAGES: gl.constexpr, CAUSAL: gl.constexpr, OVERLAP: gl.constexpr,
                      CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """grid: (cdiv(Sq, 2 * BLOCK_M), B * Hq); num_warps = 4 (consumer 0)."""
    start = gl.program_id(0) * (2 * BLOCK_M)
    bh = gl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    kv_h = h // (Hq // Hkv)
    n_tiles = _kv_tiles(start, Sk, BLOCK_M, BLOCK_N, CAUSAL)

    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2] + q_desc.block_type.shape, q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(turn.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(kv_ready.index(i), count=1)
        mbarrier.init(kv_free.index(i), count=2)  # both consumers release each tile

    # The argument tuples are written in the call: a tuple stored in a variable would turn its
    # constexprs into runtime values.
    gl.warp_specialize([
        (_consumer0, (o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
                      b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
                      BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP)),
        (_consumer1, (o_desc, lse_ptr, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free, turn,
                      b, h, Hq, Sq, Sk, qk_scale, start, n_tiles,
                      BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, OVERLAP)),
        (_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, kv_ready, kv_free,
                 b, h, kv_h, start, n_tiles, BLOCK_M, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOAD_REGS])
