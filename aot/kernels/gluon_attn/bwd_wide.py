"""The backward at head dim 256: a dK/dV kernel, with dQ added by fp32 atomics (bwd.py's fast
variant: the same preprocess and convert launches around it) or without dQ (the deterministic
variant), and that variant's dQ kernel.

At head dim 256 bwd.py's kernel does not fit: each of its consumers owns 64 keys and holds their
dK and dV, two [64, 256] fp32 accumulators, 256 registers a thread on their own. Here a program
owns 64 keys, and the two consumer warpgroups split the head dim instead: consumer c holds
columns [128c, 128c + 128) of dK and dV (128 registers a thread). The score tiles need the
whole head dim, so each is computed once, by one consumer, and handed over in shared memory:

    load       1 warp    TMA: K and V of the 64 keys once, then (Q, dO) tiles of every query
                         head of the GQA group into a STAGES-deep ring (bwd._dkdv_load)
    consumer0  4 warps   Sᵀ = K·Qᵀ − LSE, Pᵀ = exp(Sᵀ) → shared (fp32);
                         dV[:, :128] += Pᵀ·dO[:, :128]; dK[:, :128] += dSᵀ·Q[:, :128], dSᵀ
                         read from shared; (fast) dQ[:, :128] = dS·K[:, :128]
    consumer1  4 warps   dPᵀ = V·dOᵀ − Δ; Pᵀ from shared, dSᵀ = Pᵀ ⊙ (dPᵀ − Δ) → shared
                         (the input dtype); dV[:, 128:] and dK[:, 128:] from registers;
                         (fast) dQ[:, 128:] = dS·K[:, 128:]

Per query tile the GEMMs are Sᵀ and dPᵀ (64·64·256 multiply-adds each, one per consumer, side by
side), then dV, dK and (fast) dQ (64·64·128 each, per consumer): in the fast variant the same
five GEMMs per (query, key) pair as bwd.py's kernel, none recomputed. Pᵀ crosses in fp32, so dSᵀ is computed from the same
values as bwd.py's (where Pᵀ never leaves the warpgroup).

The hand-over is two single-arrival mbarriers, p_ready (consumer 0 → 1) and ds_ready (1 → 0),
with one buffer each; their order makes one buffer enough:
  - consumer 0 rewrites Pᵀ a tile later only after waiting for ds_ready of this tile, which
    consumer 1 arrives at after it has read Pᵀ;
  - consumer 1 rewrites dSᵀ a tile later only after waiting for p_ready of that tile, which
    consumer 0 arrives at after it has waited for this tile's dK and dQ GEMMs (the readers of
    dSᵀ); consumer 1 waits for its own dQ GEMM before its next tile.
Neither waits for something the other does later: consumer 0 arrives at p_ready before it waits
for ds_ready, and consumer 1 waits for p_ready before it arrives at ds_ready.

Masks and tails as in bwd.py: the causal/key-tail mask and the LSE enter Sᵀ's initial
accumulator; rows past Sq load as zeros with LSE = +inf (P = 0); keys no query sees get exact
zeros in dK and dV.

The dQ kernel (deterministic variant) is split the same way: a program owns 64 query rows and
walks the key tiles of 64 through a K/V ring; consumer 0 computes S = Q·Kᵀ and hands P over,
consumer 1 computes dP = dO·Vᵀ and hands dS back, and each sums dQ += dS·K on its half of the
head dim in registers: one writer per element, so the same bits every run. (The atomics of the
fast variant held its dK/dV kernel at 76 % L2 throughput and 28 % tensor pipe on Gemma-2's
B2 S4096 backward, run37.)
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                              warpgroup_mma, warpgroup_mma_wait)

from . import grid_dependency
from .bwd import (DQ_ATOMIC, DQ_NONE, HALF_N, DkdvBarriers, DkdvSmem, DqBarriers, DqSmem,
                  _dkdv_load, _dq_load, _dq_probabilities, _key_block, _minus_lse, _next_slot,
                  _nvmma, _query_block, _row_values, _store_rows)

KEYS = HALF_N  # keys per program: one m64 wgmma row block


@gluon.jit
def _wide_tile(smem, bars, dq_accum, dk_acc, dv_acc, key0, t, stage, phase, b, h, m0,
               Hq, Sq, Sk, qk_scale,
               s_layout: gl.constexpr, kv_layout: gl.constexpr, CONSUMER: gl.constexpr,
               BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
               CAUSAL: gl.constexpr, DQ_ADD: gl.constexpr):
    """One query tile (the t-th, rows m0.. of head h, in ring slot `stage` at `phase`): this
    consumer's columns of dK and dV, and (DQ_ATOMIC) of the tile's dQ, added to the
    accumulator."""
    dtype: gl.constexpr = smem.q.dtype
    HALF_D: gl.constexpr = HEAD_DIM // 2
    COL0: gl.constexpr = CONSUMER * HALF_D
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    mbarrier.wait(bars.qdo_ready.index(stage), phase)
    q = smem.q.index(stage).reshape([BLOCK_M, HEAD_DIM])
    do = smem.do.index(stage).reshape([BLOCK_M, HEAD_DIM])
    if CONSUMER == 0:
        # ---- Sᵀ − LSE/scale = K·Qᵀ − LSE/scale, the mask (−inf) in the initial accumulator
        minus_lse = _minus_lse(smem.lse.index(stage), key0, m0, Sk, s_layout, KEYS, BLOCK_M,
                               CAUSAL)
        k = smem.k.index(0).reshape([KEYS, HEAD_DIM])
        sT = warpgroup_mma(k, q.permute([1, 0]), minus_lse, is_async=True)
        sT = warpgroup_mma_wait(0, deps=[sT])
        # ---- Pᵀ (at most 1, as bwd.py's) to consumer 1, then dV += Pᵀ·dO on this half
        pT = gl.exp2(gl.minimum(sT, 0.0) * qk_scale)
        smem.p.store(pT)
        mbarrier.arrive(bars.p_ready)  # consumer 1 reads it with plain loads: no proxy fence
        pT_op = gl.convert_layout(pT.to(dtype), op_layout)
        dv_acc = warpgroup_mma(pT_op, do.slice(COL0, HALF_D, dim=1), dv_acc, is_async=True)
        # ---- dK += dSᵀ·Q on this half, dSᵀ from consumer 1's tile
        mbarrier.wait(bars.ds_ready, t & 1)
        dk_acc = warpgroup_mma(smem.ds, q.slice(COL0, HALF_D, dim=1), dk_acc, is_async=True)
        dv_acc, dk_acc, pT_op = warpgroup_mma_wait(0, deps=[dv_acc, dk_acc, pT_op])
    else:
        # ---- dPᵀ − Δ = V·dOᵀ − Δ while consumer 0 computes Sᵀ
        minus_delta = _row_values(smem.delta.index(stage), s_layout, KEYS, BLOCK_M)
        v = smem.v.index(0).reshape([KEYS, HEAD_DIM])
        dpT = warpgroup_mma(v, do.permute([1, 0]), minus_delta, is_async=True)
        dpT = warpgroup_mma_wait(0, deps=[dpT])
        # ---- dSᵀ = Pᵀ ⊙ (dPᵀ − Δ) to consumer 0 (a GEMM operand: proxy fence first)
        mbarrier.wait(bars.p_ready, t & 1)
        pT = smem.p.load(s_layout)
        dsT = (pT * dpT).to(dtype)
        smem.ds.store(dsT)
        fence_async_shared()
        mbarrier.arrive(bars.ds_ready)
        # ---- dV += Pᵀ·dO and dK += dSᵀ·Q on this half, both operands from registers
        pT_op = gl.convert_layout(pT.to(dtype), op_layout)
        dv_acc = warpgroup_mma(pT_op, do.slice(COL0, HALF_D, dim=1), dv_acc, is_async=True)
        dsT_op = gl.convert_layout(dsT, op_layout)
        dk_acc = warpgroup_mma(dsT_op, q.slice(COL0, HALF_D, dim=1), dk_acc, is_async=True)
        dv_acc, dk_acc, pT_op, dsT_op = warpgroup_mma_wait(0, deps=[dv_acc, dk_acc, pT_op,
                                                                    dsT_op])
    mbarrier.arrive(bars.qdo_free.index(stage))
    if DQ_ADD == DQ_ATOMIC:
        _wide_dq_share(smem, dq_accum, b, h, m0, Hq, Sq, kv_layout, CONSUMER, BLOCK_M, HEAD_DIM,
                       D)
    return dk_acc, dv_acc


@gluon.jit
def _wide_dq_share(smem, dq_accum, b, h, m0, Hq, Sq, kv_layout: gl.constexpr,
                   CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                   D: gl.constexpr):
    """dQ[:, this half] = dS·K[:, this half] over the program's 64 keys, added to the fp32
    accumulator with relaxed atomics."""
    HALF_D: gl.constexpr = HEAD_DIM // 2
    COL0: gl.constexpr = CONSUMER * HALF_D
    k_half = smem.k.index(0).reshape([KEYS, HEAD_DIM]).slice(COL0, HALF_D, dim=1)
    dq = warpgroup_mma(smem.ds.permute([1, 0]), k_half,
                       gl.zeros([BLOCK_M, HALF_D], gl.float32, kv_layout), use_acc=False,
                       is_async=True)
    dq = warpgroup_mma_wait(0, deps=[dq])
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, kv_layout))   # from m0
    cols = COL0 + gl.arange(0, HALF_D, layout=gl.SliceLayout(0, kv_layout))
    tile = dq_accum + ((b * Hq + h).to(gl.int64) * Sq + m0) * D
    at = tile + gl.expand_dims(rows * D, 1) + gl.expand_dims(cols, 0)
    if m0 + BLOCK_M <= Sq:
        # no mask: a masked atomic is a branch around each instruction
        gl.atomic_add(at, dq, sem="relaxed")
    else:
        inside = gl.expand_dims(rows < Sq - m0, 1) & gl.expand_dims(cols < D, 0)
        gl.atomic_add(at, dq, mask=inside, sem="relaxed")


@gluon.jit
def _wide_consume(smem, bars, lse_ptr, delta_ptr, dq_accum, dk, dv,
                  dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h, dv_stride_s,
                  Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                  CONSUMER: gl.constexpr, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                  D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  DQ_ADD: gl.constexpr):
    """This consumer's half of the head dim of dK and dV over every query tile of the program,
    and (DQ_ATOMIC) its half of each tile's dQ."""
    HALF_D: gl.constexpr = HEAD_DIM // 2
    s_layout: gl.constexpr = _nvmma(BLOCK_M)          # Sᵀ, dPᵀ: [64 keys, BLOCK_M queries]
    kv_layout: gl.constexpr = _nvmma(HALF_D)          # dK, dV, dQ halves: [64, HALF_D]

    blk = _key_block(Hq, Hkv, Sq, Sk, BLOCK_M, CAUSAL, 1)
    dk_acc = gl.zeros([KEYS, HALF_D], gl.float32, kv_layout)
    dv_acc = gl.zeros([KEYS, HALF_D], gl.float32, kv_layout)

    mbarrier.wait(bars.kv_ready, 0)
    h = blk.h_first
    m0 = blk.m_first
    stage = 0
    phase = 0
    for t in range(blk.num_tiles(Sq, BLOCK_M)):
        dk_acc, dv_acc = _wide_tile(smem, bars, dq_accum, dk_acc, dv_acc, blk.n0, t, stage,
                                    phase, blk.b, h, m0, Hq, Sq, Sk, qk_scale, s_layout,
                                    kv_layout, CONSUMER, BLOCK_M, HEAD_DIM, D, CAUSAL, DQ_ADD)
        h, m0 = blk.next_tile(h, m0, Sq, BLOCK_M)
        stage, phase = _next_slot(stage, phase, STAGES)

    # ---- epilogue: this consumer's columns; dK carries the softmax scale
    COL0: gl.constexpr = CONSUMER * HALF_D
    _store_rows(dv + COL0, dv_stride_b, dv_stride_h, dv_stride_s, dv_acc, blk.b, blk.h_kv,
                blk.n0, Sk, kv_layout, KEYS, HALF_D, D - COL0)
    _store_rows(dk + COL0, dk_stride_b, dk_stride_h, dk_stride_s, dk_acc * sm_scale, blk.b,
                blk.h_kv, blk.n0, Sk, kv_layout, KEYS, HALF_D, D - COL0)


@gluon.jit
def _wide_dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_accum,
                       dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                       dv_stride_b, dv_stride_h, dv_stride_s,
                       Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                       BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                       STAGES: gl.constexpr, CAUSAL: gl.constexpr, DQ_ADD: gl.constexpr,
                       CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    gl.static_assert(BLOCK_M == KEYS, "the dQ half shares the dK/dV halves' layout")
    dtype: gl.constexpr = q_desc.dtype
    k = gl.allocate_shared_memory(dtype, [1] + k_desc.block_type.shape, k_desc.layout)
    v = gl.allocate_shared_memory(dtype, [1] + v_desc.block_type.shape, v_desc.layout)
    q = gl.allocate_shared_memory(dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do = gl.allocate_shared_memory(dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
    row_smem: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    lse = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_smem)
    delta = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK_M], row_smem)
    # Pᵀ in the swizzle the accumulator layout stores and loads without bank conflicts; dSᵀ in
    # the one wgmma reads as its A operand, as is and transposed
    p = gl.allocate_shared_memory(
        gl.float32, [KEYS, BLOCK_M],
        gl.NVMMASharedLayout.get_default_for([KEYS, BLOCK_M], gl.float32))
    ds = gl.allocate_shared_memory(dtype, [KEYS, BLOCK_M],
                                   gl.NVMMASharedLayout.get_default_for([KEYS, BLOCK_M], dtype))
    smem = DkdvSmem(k, v, q, do, lse, delta, ds, k, p)  # no dQ staging tile
    kv_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    qdo_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bars = DkdvBarriers(kv_ready, kv_ready, qdo_ready, qdo_free, ds_ready, p_ready)  # no kv_free
    mbarrier.init(bars.kv_ready, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.qdo_ready.index(i), count=2)  # the TMA bytes, and LSE/Δ stored
        mbarrier.init(bars.qdo_free.index(i), count=2)   # both consumers release each slot
    mbarrier.init(bars.p_ready, count=1)
    mbarrier.init(bars.ds_ready, count=1)

    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    gl.warp_specialize([
        (_wide_consume, (smem, bars, lse_ptr, delta_ptr, dq_accum, dk, dv,
                         dk_stride_b, dk_stride_h, dk_stride_s,
                         dv_stride_b, dv_stride_h, dv_stride_s,
                         Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                         0, BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_ADD)),
        (_wide_consume, (smem, bars, lse_ptr, delta_ptr, dq_accum, dk, dv,
                         dk_stride_b, dk_stride_h, dk_stride_s,
                         dv_stride_b, dv_stride_h, dv_stride_s,
                         Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                         1, BLOCK_M, HEAD_DIM, D, STAGES, CAUSAL, DQ_ADD)),
        (_dkdv_load, (q_desc, k_desc, v_desc, do_desc, smem, bars, lse_ptr, delta_ptr,
                      Hq, Hkv, Sq, Sk, sm_scale, BLOCK_M, STAGES, CAUSAL, 1)),
    ], [4, 1], [CONSUMER_REGS, LOAD_REGS])


@gluon.jit
def attn_bwd_dkdv_wide_dq_atomic(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_accum,
                                 dk, dv, dk_stride_b, dk_stride_h, dk_stride_s,
                                 dv_stride_b, dv_stride_h, dv_stride_s,
                                 Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                                 BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                                 STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                                 CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """Fast variant at head dim 256: dK, dV, and dQ added into the fp32 accumulator with
    atomics. grid: (cdiv(Sk, 64), B * Hkv); num_warps = 4 (consumer 0)."""
    _wide_dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_accum, dk, dv,
                       dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h,
                       dv_stride_s, Hq, Hkv, Sq, Sk, qk_scale, sm_scale, BLOCK_M, HEAD_DIM, D,
                       STAGES, CAUSAL, DQ_ATOMIC, CONSUMER_REGS, LOAD_REGS)


@gluon.jit
def attn_bwd_dkdv_wide(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dk, dv,
                       dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h,
                       dv_stride_s, Hq, Hkv, Sq, Sk, qk_scale, sm_scale,
                       BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                       STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                       CONSUMER_REGS: gl.constexpr, LOAD_REGS: gl.constexpr):
    """Deterministic variant at head dim 256: dK and dV only (attn_bwd_dq_wide computes dQ).
    grid: (cdiv(Sk, 64), B * Hkv); num_warps = 4 (consumer 0)."""
    _wide_dkdv_program(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, delta_ptr, dk, dv,
                       dk_stride_b, dk_stride_h, dk_stride_s, dv_stride_b, dv_stride_h,
                       dv_stride_s, Hq, Hkv, Sq, Sk, qk_scale, sm_scale, BLOCK_M, HEAD_DIM, D,
                       STAGES, CAUSAL, DQ_NONE, CONSUMER_REGS, LOAD_REGS)


# --------------------------------------------------------------------------------------------
# dQ kernel (deterministic variant)
# --------------------------------------------------------------------------------------------
@gluon.jit
def _wide_dq_consume(dq, dq_stride_b, dq_stride_h, dq_stride_s, smem, bars, lse_ptr, delta_ptr,
                     Hq, Hkv, Sq, Sk, sm_scale,
                     CONSUMER: gl.constexpr, HEAD_DIM: gl.constexpr, D: gl.constexpr,
                     STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """This consumer's half of the head dim of dQ for the program's 64 query rows. The hand-over
    is the dK/dV kernel's, with P and dS in place of Pᵀ and dSᵀ: consumer 0 rewrites P only
    after ds_ready of the tile before (consumer 1 has read P by then), consumer 1 rewrites dS
    only after p_ready, which consumer 0 arrives at after its dQ GEMM of the tile before."""
    dtype: gl.constexpr = smem.q.dtype
    HALF_D: gl.constexpr = HEAD_DIM // 2
    COL0: gl.constexpr = CONSUMER * HALF_D
    s_layout: gl.constexpr = _nvmma(KEYS)           # S, dP: [64 queries, 64 keys]
    dq_layout: gl.constexpr = _nvmma(HALF_D)        # this consumer's dQ: [64, HALF_D]
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=dq_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    blk = _query_block(Hq, Hkv, Sq, Sk, KEYS, CAUSAL, 1)
    rows = blk.start + gl.arange(0, KEYS, layout=row_layout)
    at = (blk.b * Hq + blk.h).to(gl.int64) * Sq + rows
    s_zero = gl.zeros([KEYS, KEYS], gl.float32, s_layout)
    dq_acc = gl.zeros([KEYS, HALF_D], gl.float32, dq_layout)
    if CONSUMER == 0:
        lse = gl.load(lse_ptr + at, mask=rows < Sq, other=float("inf"))
    else:
        delta = gl.load(delta_ptr + at, mask=rows < Sq, other=0.0)
    mbarrier.wait(bars.q_ready.index(0), 0)
    q = smem.q.index(0).reshape([KEYS, HEAD_DIM])
    do = smem.do.index(0).reshape([KEYS, HEAD_DIM])
    for j in range(blk.n_tiles):
        stage = j % STAGES
        mbarrier.wait(bars.kv_ready.index(stage), (j // STAGES) & 1)
        k = smem.k.index(stage).reshape([KEYS, HEAD_DIM])
        k_half = k.slice(COL0, HALF_D, dim=1)
        if CONSUMER == 0:
            # ---- P = exp(scale·S − LSE), as bwd.py's dQ kernel
            s = warpgroup_mma(q, k.permute([1, 0]), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=[s])
            p = _dq_probabilities(s, lse, j * KEYS, rows, blk.start, Sk, sm_scale, s_layout,
                                  KEYS, CAUSAL)
            smem.p.store(p)
            mbarrier.arrive(bars.p_ready)
            # ---- dQ += dS·K on this half, dS from consumer 1's tile
            mbarrier.wait(bars.ds_ready, j & 1)
            dq_acc = warpgroup_mma(smem.ds, k_half, dq_acc, is_async=True)
            dq_acc = warpgroup_mma_wait(0, deps=[dq_acc])
        else:
            # ---- dP = dO·Vᵀ; dS = P ⊙ (dP − Δ) to consumer 0 (a GEMM operand: fence first)
            v = smem.v.index(stage).reshape([KEYS, HEAD_DIM])
            dp = warpgroup_mma(do, v.permute([1, 0]), s_zero, use_acc=False, is_async=True)
            dp = warpgroup_mma_wait(0, deps=[dp])
            mbarrier.wait(bars.p_ready, j & 1)
            ds = (smem.p.load(s_layout) * (dp - gl.expand_dims(delta, 1))).to(dtype)
            smem.ds.store(ds)
            fence_async_shared()
            mbarrier.arrive(bars.ds_ready)
            ds_op = gl.convert_layout(ds, op_layout)
            dq_acc = warpgroup_mma(ds_op, k_half, dq_acc, is_async=True)
            dq_acc, ds_op = warpgroup_mma_wait(0, deps=[dq_acc, ds_op])
        mbarrier.arrive(bars.kv_free.index(stage))

    # ---- epilogue: this consumer's columns, with the softmax scale
    _store_rows(dq + COL0, dq_stride_b, dq_stride_h, dq_stride_s, dq_acc * sm_scale, blk.b,
                blk.h, blk.start, Sq, dq_layout, KEYS, HALF_D, D - COL0)


@gluon.jit
def attn_bwd_dq_wide(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr,
                     dq, dq_stride_b, dq_stride_h, dq_stride_s, Hq, Hkv, Sq, Sk, sm_scale,
                     HEAD_DIM: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                     LOAD_REGS: gl.constexpr):
    """Deterministic variant's dQ at head dim 256. grid: (cdiv(Sq, 64), B * Hq); num_warps = 4
    (consumer 0)."""
    dtype: gl.constexpr = q_desc.dtype
    hand: gl.constexpr = gl.NVMMASharedLayout.get_default_for([KEYS, KEYS], dtype)
    smem = DqSmem(
        gl.allocate_shared_memory(dtype, [1] + q_desc.block_type.shape, q_desc.layout),
        gl.allocate_shared_memory(dtype, [1] + do_desc.block_type.shape, do_desc.layout),
        gl.allocate_shared_memory(dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout),
        gl.allocate_shared_memory(dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout),
        gl.allocate_shared_memory(gl.float32, [KEYS, KEYS],
                                  gl.NVMMASharedLayout.get_default_for([KEYS, KEYS], gl.float32)),
        gl.allocate_shared_memory(dtype, [KEYS, KEYS], hand))
    bars = DqBarriers(
        gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout()),
        gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
        gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()),
        gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout()),
        gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout()))
    mbarrier.init(bars.q_ready.index(0), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.kv_ready.index(i), count=1)
        mbarrier.init(bars.kv_free.index(i), count=2)   # both consumers release each tile
    mbarrier.init(bars.p_ready, count=1)
    mbarrier.init(bars.ds_ready, count=1)

    grid_dependency.enter()  # before any global memory access: grid_dependency.py
    gl.warp_specialize([
        (_wide_dq_consume, (dq, dq_stride_b, dq_stride_h, dq_stride_s, smem, bars, lse_ptr,
                            delta_ptr, Hq, Hkv, Sq, Sk, sm_scale, 0, HEAD_DIM, D, STAGES,
                            CAUSAL)),
        (_wide_dq_consume, (dq, dq_stride_b, dq_stride_h, dq_stride_s, smem, bars, lse_ptr,
                            delta_ptr, Hq, Hkv, Sq, Sk, sm_scale, 1, HEAD_DIM, D, STAGES,
                            CAUSAL)),
        (_dq_load, (q_desc, k_desc, v_desc, do_desc, smem, bars, Hq, Hkv, Sq, Sk,
                    KEYS, STAGES, CAUSAL, 1)),
    ], [4, 1], [CONSUMER_REGS, LOAD_REGS])
