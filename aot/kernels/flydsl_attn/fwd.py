"""Dual-wave forward attention in FlyDSL for CDNA4 (gfx950): O = softmax(scale·Q Kᵀ) V and LSE.

The schedule (two wave groups taking turns at the matrix cores) is described in tiles.py, and
model.py runs the same schedule in PyTorch. This file is the kernel.

Work split. The grid is (cdiv(Sq, BLOCK_M), B·Hq); a workgroup owns BLOCK_M query rows of one
(batch, q head), each wave 32 of them. The kernel computes the transposed products
    Sᵀ = K Qᵀ   (M = 32 keys, N = 32 query rows, K = head dim)
    Oᵀ += Vᵀ Pᵀ (M = 32 head-dim columns, N = 32 query rows, K = keys)
with v_mfma_f32_32x32x16_{bf16,f16}: in the 32x32 accumulator a lane holds one column, so every
query row lives in one lane (and its twin lane ± 32). The softmax row max and sum are then
in-lane reductions plus one exchange between the two lane halves, and alpha/1/l scale a lane's
whole Oᵀ accumulator.

Register layouts (lane l, h = l // 32, element e; all standard for 32x32 MFMA):
    A operand   row l % 32, k elements 0..7
    B operand   column l % 32, the same k elements
    accumulator column l % 32, row 8·(e // 4) + 4·h + e % 4
Qᵀ (B of the first product) comes from global memory straight into registers, head dims
16c + 8h .. +7 for k-step c; K (A) is read from LDS with the same head dims (ds_read_b128).
For the second product, Pᵀ (B) is the exponentiated Sᵀ accumulator, elements 8t..8t+7 of key
block nb for k-step 2nb + t, i.e. keys 16kc + {4h..4h+3, 8+4h..8+4h+3}; Vᵀ (A) must hold the same
keys for head-dim column l % 32, which is a column of the row-major V tile: two
ds_read_b64_tr_b16 per k-step read it transposed (4 keys x 16 columns per 16-lane group).

Tails and masks. Q/K/V/O are read and written through buffer resources whose size ends at the
head's last row, so rows past Sq or Sk read as 0 and their stores are dropped; scores of keys
past Sk, and under causal (top-left: key k visible to query q iff k <= q) keys past the row, are
set to -inf before the softmax.

64-bit heads, 32-bit offsets. Buffer offsets are 32-bit, so a resource never spans a whole head
(a 128k-token BSHD head with 64 heads of 128 is 2 GiB): each one starts at the first row it
serves, computed in 64 bits: a wave's 32 query rows for Q, O and LSE, one KV tile for K and V.
Offsets inside then stay below 64 rows x stride_s. That holds for stride_s < 2^24 elements
(32 MiB between sequence positions); beyond it the softmax scale is made NaN, so such a problem
gives NaN, never quietly wrong numbers.

Semantics follow the triton family: GQA by head index (kv head = h // (Hq // Hkv)); LSE is the
natural-log log-sum-exp, float32, contiguous [B, Hq, Sq].
"""
from __future__ import annotations

import flydsl.compiler as flyc
import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import arith, llvm, vector
from flydsl.expr import arith as fxarith
from flydsl.expr import gpu, range_constexpr, rocdl

from . import tiles

# Buffer resource word 3 for CDNA (gfx9): DST_SEL/NUM_FORMAT/DATA_FORMAT as FlyDSL's own
# make_buffer_ptr sets it; raw (stride 0) buffers range-check each access against num_records.
_BUFFER_FLAGS = (7 << 12) | (4 << 15)
_DYNAMIC = -2147483648  # llvm.getelementptr: the index is an SSA operand
_MAX_ROW_STRIDE = 1 << 24  # elements; see "64-bit heads, 32-bit offsets"


def _raw(v):
    """The MLIR value under a FlyDSL wrapper (loop-carried values come back wrapped)."""
    if isinstance(v, ir.Value):
        return v
    if isinstance(v, ir.OpView):  # some ROCDL builders hand back the op, not its result
        return v.result
    return fxarith.unwrap(v)


def _i32(x):
    return arith.constant(ir.IntegerType.get_signless(32), int(x))


def _f32_vec(n):
    return ir.VectorType.get([n], ir.F32Type.get())


def _splat_f32(n, x):
    t = _f32_vec(n)
    return arith.constant(t, ir.DenseElementsAttr.get_splat(t, ir.FloatAttr.get(ir.F32Type.get(), x)))


def _slice(vec, start, size):
    vec = _raw(vec)
    t = ir.VectorType(vec.type)
    return vector.extract_strided_slice(ir.VectorType.get([size], t.element_type), vec,
                                        [start], [size], [1])


def _join(vecs):
    """1-D vectors of one element type, concatenated in order."""
    out = _raw(vecs[0])
    for v in vecs[1:]:
        v = _raw(v)
        n = ir.VectorType(out.type).shape[0] + ir.VectorType(v.type).shape[0]
        out = vector.shuffle(out, v, list(range(n)))
    return out


def _tree(values, combine):
    """Pairwise reduction: log-depth, so independent VALU ops can overlap."""
    values = list(values)
    while len(values) > 1:
        values = [combine(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def build_forward(dtype: str, head_dim: int, causal: bool, config: dict):
    """The @flyc.jit launcher of one specialization. Its arguments are
    (q, k, v, o: tensors [B, H, S, D] with a unit last stride; lse: fp32 pointer;
    sm_scale_log2: float = softmax scale * log2(e))."""
    cfg = tiles.check_config(head_dim, dtype, config)
    D = head_dim
    CAUSAL = bool(causal)
    WPG = cfg["waves_per_group"]
    BLOCK_N = cfg["block_n"]
    BLOCK_M = tiles.block_m(cfg)
    NTHREADS = tiles.threads(cfg)
    GROUP_THREADS = WPG * tiles.WAVE_SIZE
    PITCH_B = tiles.lds_pitch(D) * tiles.ELEM_BYTES        # bytes per K/V row in LDS
    SLOT_B = tiles.lds_slot_elems(D, cfg) * tiles.ELEM_BYTES
    V_OFF_B = BLOCK_N * PITCH_B                             # V tile after K tile in a slot
    N_QK_STEPS = D // tiles.MFMA_K                          # k-steps of Sᵀ = K Qᵀ
    N_KEY_BLOCKS = BLOCK_N // tiles.MFMA_M                  # Sᵀ accumulators per wave
    N_PV_STEPS = BLOCK_N // tiles.MFMA_K                    # k-steps of Oᵀ += Vᵀ Pᵀ
    N_D_BLOCKS = D // tiles.MFMA_M                          # Oᵀ accumulators per wave
    LOADS = tiles.loads_per_lane(D, cfg)                    # 16-byte loads per tensor per tile
    fx_elem = fx.BFloat16 if dtype == "bf16" else fx.Float16
    mfma = rocdl.mfma_f32_32x32x16_bf16 if dtype == "bf16" else rocdl.mfma_f32_32x32x16_f16

    @flyc.kernel(known_block_size=[NTHREADS, 1, 1])
    def flydsl_attn_fwd(Q: fx.Tensor, K: fx.Tensor, V: fx.Tensor, O: fx.Tensor,
                        LSE: fx.Pointer, sm_scale_log2: fx.Float32):
        i32 = ir.IntegerType.get_signless(32)
        f32 = ir.F32Type.get()
        elem = ir.BF16Type.get() if dtype == "bf16" else ir.F16Type.get()
        v4i32 = ir.VectorType.get([4], i32)
        v8e = ir.VectorType.get([8], elem)
        v4e = ir.VectorType.get([4], elem)
        v16f32 = _f32_vec(16)
        ptr3 = llvm.PointerType.get(3)
        ptr8 = llvm.PointerType.get(8)
        i8 = ir.IntegerType.get_signless(8)

        # ---- problem and work tile
        _, Hq, Sq, _ = Q.shape.unpack()
        _, Hkv, Sk, _ = K.shape.unpack()
        q_sb, q_sh, q_ss, _ = Q.stride.unpack()
        k_sb, k_sh, k_ss, _ = K.stride.unpack()
        v_sb, v_sh, v_ss, _ = V.stride.unpack()
        o_sb, o_sh, o_ss, _ = O.stride.unpack()
        tid = gpu.thread_idx.x
        pid_m = gpu.block_idx.x
        bh = gpu.block_idx.y
        if CAUSAL:  # bottom blocks see the most keys: schedule them first
            pid_m = (Sq + (BLOCK_M - 1)) // BLOCK_M - 1 - pid_m
        b = bh // Hq
        h = bh % Hq
        h_kv = h // (Hq // Hkv)
        start_m = pid_m * BLOCK_M
        wave = fx.Int32(rocdl.readfirstlane(i32, _raw(tid // tiles.WAVE_SIZE)))
        group = wave // WPG
        lane = tid % tiles.WAVE_SIZE
        col = lane % 32             # this lane's accumulator column: a query row
        half = lane // 32           # which 4-row half of each 8-row accumulator band
        row0 = start_m + wave * tiles.ROWS_PER_WAVE
        my_row = row0 + col
        lane_in_group = tid % GROUP_THREADS

        def rows_rsrc(tensor, bi, hi, sb, sh, ss, rows, first):
            """Buffer resource over rows [first, rows) of one head, based at row `first` (64-bit
            address arithmetic): loads past the end read 0 and stores past it are dropped,
            which is how tails are masked."""
            base = fx.get_iter(tensor).llvm_ptr
            at = fx.Int64(bi) * sb + fx.Int64(hi) * sh + fx.Int64(first) * ss
            p = llvm.GEPOp(llvm.PointerType.get(1), base, [_raw(at)], [_DYNAMIC], elem, None).result
            extent = (fx.Int64(rows) - fx.Int64(first) - 1) * ss + D
            extent = (fx.Int64(rows) > fx.Int64(first)).select(extent, fx.Int64(0)) * tiles.ELEM_BYTES
            extent = (extent < 0x7FFFFFFF).select(extent, fx.Int64(0x7FFFFFFF))
            return rocdl.make_buffer_rsrc(ptr8, p, _raw(fx.Int16(0)), _raw(extent), _i32(_BUFFER_FLAGS))

        # Q, O and LSE resources start at this wave's first query row, row0
        q_rsrc = rows_rsrc(Q, b, h, q_sb, q_sh, q_ss, Sq, row0)
        o_rsrc = rows_rsrc(O, b, h, o_sb, o_sh, o_ss, Sq, row0)
        q_ss32, k_ss32, v_ss32, o_ss32 = (fx.Int32(s) for s in (q_ss, k_ss, v_ss, o_ss))
        # stride_s < 2^24 keeps every in-resource offset (< 64 rows) within 31 bits
        widest = _tree([fx.Int64(s) for s in (q_ss, k_ss, v_ss, o_ss)],
                       lambda a, c: (a > c).select(a, c))
        scale_ok = widest < _MAX_ROW_STRIDE

        def load16(rsrc, byte_offset):
            return rocdl.raw_ptr_buffer_load(v4i32, rsrc, _raw(byte_offset), _i32(0))

        # ---- LDS: KV_STAGES slots of [K tile | V tile], rows padded to PITCH
        lds = fx.SharedAllocator().allocate(
            fx.Array[fx_elem, tiles.KV_STAGES * SLOT_B // tiles.ELEM_BYTES, 16]).peek()
        lds_base = lds.ptr.llvm_ptr

        def lds_ptr(byte_offset):
            return llvm.GEPOp(ptr3, lds_base, [_raw(byte_offset)], [_DYNAMIC], i8, None).result

        def sync():
            """End of a phase: our LDS writes are done, then a workgroup barrier that the
            scheduler may not move anything across."""
            rocdl.s_waitcnt(lgkmcnt=0)
            rocdl.sched_barrier(0)
            rocdl.s_barrier()
            rocdl.sched_barrier(0)

        # ---- K/V traffic: each group moves rows kv_rows_of_group(g) of every tile
        def kv_chunk(r):
            return tiles.kv_chunk(lane_in_group, group, r, D, cfg)

        def fetch_kv(tile):
            """This lane's share of K/V tile `tile`, global -> registers, as one i32 vector.
            The resources start at the tile's first key."""
            first = tile * BLOCK_N
            k_rsrc = rows_rsrc(K, b, h_kv, k_sb, k_sh, k_ss, Sk, first)
            v_rsrc = rows_rsrc(V, b, h_kv, v_sb, v_sh, v_ss, Sk, first)
            parts = []
            for r in range_constexpr(LOADS):
                row, byte_col = kv_chunk(r)
                parts.append(load16(k_rsrc, row * k_ss32 * tiles.ELEM_BYTES + byte_col))
                parts.append(load16(v_rsrc, row * v_ss32 * tiles.ELEM_BYTES + byte_col))
            return _join(parts)

        def store_kv(tile, regs):
            regs = _raw(regs)
            slot_base = (tile % tiles.KV_STAGES) * SLOT_B
            for r in range_constexpr(LOADS):
                row, byte_col = kv_chunk(r)
                at = slot_base + row * PITCH_B + byte_col
                llvm.StoreOp(_slice(regs, 8 * r, 4), lds_ptr(at), alignment=16)
                llvm.StoreOp(_slice(regs, 8 * r + 4, 4), lds_ptr(at + V_OFF_B), alignment=16)

        # ---- matrix phase pieces
        def scores(tile, q_regs):
            """Sᵀ of `tile` for this wave: N_KEY_BLOCKS accumulators of 32 keys x 32 rows."""
            k_base = (tile % tiles.KV_STAGES) * SLOT_B + tiles.k_operand_offset(lane, 0, 0, D)
            out = []
            for nb in range_constexpr(N_KEY_BLOCKS):
                s = _splat_f32(16, 0.0)
                for c in range_constexpr(N_QK_STEPS):
                    # k_operand_offset(lane, nb, c) = k_operand_offset(lane, 0, 0) + a constant
                    at = k_base + nb * tiles.MFMA_M * PITCH_B + c * tiles.MFMA_K * tiles.ELEM_BYTES
                    k_op = llvm.LoadOp(v8e, lds_ptr(at), alignment=16).result
                    s = mfma(v16f32, [k_op, q_regs[c], s])
                out.append(s)
                # keep each key block's LDS reads next to its MFMAs: hoisting all of them
                # would need more than the 256 registers a wave has at 2 waves per SIMD
                rocdl.sched_barrier(0)
            return out

        # Vᵀ through ds_read_b64_tr_b16: in 16-lane group (h, d-half), lane j reads key row
        # 4h + j // 4 (+ 8 for the second read), head-dim columns 16·d-half + 4·(j % 4)..+3;
        # lane i of the group receives column i of those 4 rows.
        tr_lane_off = tiles.v_tr_offset(lane, 0, 0, 0, D)

        def accumulate_pv(tile, acc, p_ops):
            v_base = (tile % tiles.KV_STAGES) * SLOT_B + V_OFF_B + tr_lane_off
            acc = _raw(acc)
            out = []
            for db in range_constexpr(N_D_BLOCKS):
                a = _slice(acc, 16 * db, 16)
                for kc in range_constexpr(N_PV_STEPS):
                    # v_tr_offset(lane, kc, db, 0) = v_tr_offset(lane, 0, 0, 0) + a constant
                    at = v_base + kc * tiles.MFMA_K * PITCH_B + db * tiles.MFMA_M * tiles.ELEM_BYTES
                    lo = _raw(rocdl.ds_read_tr16_b64(v4e, lds_ptr(at)))
                    hi = _raw(rocdl.ds_read_tr16_b64(v4e, lds_ptr(at + 8 * PITCH_B)))
                    v_op = _join([lo, hi])
                    a = mfma(v16f32, [v_op, _slice(_raw(p_ops), 8 * kc, 8), a])
                out.append(a)
                rocdl.sched_barrier(0)  # as in scores(): bound the reads in flight
            return _join(out)

        # ---- vector phase: mask, online softmax (base 2), rescale
        # key offset of accumulator element e within a 32-key block, minus the lane's 4h
        # key of accumulator element e of key block nb, relative to the lane's first key 4h;
        # small immediates, so the masks need no registers
        key_offsets = [nb * tiles.MFMA_M + tiles.acc_row(0, e)
                       for nb in range(N_KEY_BLOCKS) for e in range(16)]
        neg_inf = arith.constant(f32, float("-inf"))
        scale = arith.select(_raw(scale_ok), _raw(sm_scale_log2), arith.constant(f32, float("nan")))

        def swap_halves(x):
            """The value lane l ^ 32 holds (ds_bpermute)."""
            idx = _raw((lane ^ 32) * 4)
            bits = arith.bitcast(i32, _raw(x))
            return arith.bitcast(f32, rocdl.ds_bpermute(i32, idx, bits))

        def softmax(tile, s_acc, m_i, l_i, acc):
            limit = Sk
            if CAUSAL:
                limit = (my_row + 1 < Sk).select(my_row + 1, Sk)
            room = _raw(limit - (tile * BLOCK_N + half * 4))
            scores_flat = [vector.extract(_raw(s_acc[nb]), [], [e])
                           for nb in range(N_KEY_BLOCKS) for e in range(16)]
            masked = [arith.select(arith.cmpi(arith.CmpIPredicate.slt, _i32(off), room), x, neg_inf)
                      for off, x in zip(key_offsets, scores_flat)]
            tile_max = _tree(masked, arith.maximumf)
            tile_max = arith.maximumf(tile_max, swap_halves(tile_max))
            m_old = _raw(m_i)
            m_new = arith.maximumf(m_old, arith.mulf(tile_max, scale))
            probs = [rocdl.exp2(f32, arith.subf(arith.mulf(x, scale), m_new)) for x in masked]
            alpha = rocdl.exp2(f32, arith.subf(m_old, m_new))
            row_sum = _tree(probs, arith.addf)
            # l stays a per-lane partial sum (this lane's keys); the halves add up at the end
            l_new = arith.addf(arith.mulf(_raw(l_i), alpha), row_sum)
            n_acc = 16 * N_D_BLOCKS
            acc = arith.mulf(_raw(acc), vector.broadcast(_f32_vec(n_acc), alpha))
            p_ops = arith.truncf(ir.VectorType.get([16 * N_KEY_BLOCKS], elem),
                                 vector.from_elements(_f32_vec(16 * N_KEY_BLOCKS), probs))
            return p_ops, m_new, l_new, acc

        # ---- prologue: Qᵀ into registers, K/V tiles 0 and 1 into LDS
        q_regs = []
        for c in range_constexpr(N_QK_STEPS):
            at = (col * q_ss32 + tiles.q_operand_col(lane, c)) * tiles.ELEM_BYTES
            q_regs.append(vector.bitcast(v8e, load16(q_rsrc, at)))
        first = fetch_kv(0)
        second = fetch_kv(1)
        # registers for the tile this group writes in B_0 (tiles.tile_written_in(group, 0))
        pending = fetch_kv(1 + group)
        rocdl.s_waitcnt(vmcnt=0)
        store_kv(0, first)
        store_kv(1, second)
        n_tiles = (Sk + (BLOCK_N - 1)) // BLOCK_N
        if CAUSAL:
            visible = (start_m + BLOCK_M < Sk).select(start_m + BLOCK_M, Sk)
            n_tiles = (visible + (BLOCK_N - 1)) // BLOCK_N
        sync()
        if group == 1:  # stagger: group 1 runs one phase behind group 0
            sync()

        m_i = arith.constant(f32, float("-inf"))
        l_i = arith.constant(f32, 0.0)
        acc = _splat_f32(16 * N_D_BLOCKS, 0.0)

        # ---- A_0, B_0 (no Pᵀ yet)
        rocdl.s_setprio(1)
        s_acc = scores(0, q_regs)
        rocdl.s_setprio(0)
        sync()
        p_ops, m_i, l_i, acc = softmax(0, s_acc, m_i, l_i, acc)
        rocdl.s_waitcnt(vmcnt=0)
        store_kv(1 + group, pending)
        pending = fetch_kv(2 + group)
        sync()

        # ---- steady state: A_j = Sᵀ_j and Oᵀ += Vᵀ_{j-1} Pᵀ_{j-1}; B_j = softmax_j + K/V traffic
        for j in range(1, n_tiles):
            rocdl.s_setprio(1)
            s_tile = scores(j, q_regs)
            acc = accumulate_pv(j - 1, acc, p_ops)
            rocdl.s_setprio(0)
            sync()
            p_ops, m_i, l_i, acc = softmax(j, s_tile, m_i, l_i, acc)
            rocdl.s_waitcnt(vmcnt=0)
            store_kv(j + 1 + group, pending)
            pending = fetch_kv(j + 2 + group)
            sync()

        # ---- A_n: the last Oᵀ += Vᵀ Pᵀ
        rocdl.s_setprio(1)
        acc = accumulate_pv(n_tiles - 1, acc, p_ops)
        rocdl.s_setprio(0)
        sync()
        if group == 0:  # balance group 1's stagger barrier
            sync()

        # ---- epilogue: O = Oᵀ / l, LSE = (m + log2 l) ln 2
        l_total = arith.addf(_raw(l_i), swap_halves(l_i))
        inv_l = arith.divf(arith.constant(f32, 1.0), l_total)
        acc = arith.mulf(_raw(acc), vector.broadcast(_f32_vec(16 * N_D_BLOCKS), inv_l))
        out = arith.truncf(ir.VectorType.get([16 * N_D_BLOCKS], elem), acc)
        o_row = col * o_ss32 * tiles.ELEM_BYTES
        for db in range_constexpr(N_D_BLOCKS):
            for band in range_constexpr(4):  # accumulator rows 8·band + 4h .. +3: 4 adjacent head dims
                d0 = db * tiles.MFMA_M + tiles.acc_row(lane, 4 * band)
                piece = vector.bitcast(ir.VectorType.get([2], i32), _slice(out, 16 * db + 4 * band, 4))
                rocdl.raw_ptr_buffer_store(piece, o_rsrc, _raw(o_row + d0 * tiles.ELEM_BYTES),
                                           _i32(0))
        lse = arith.mulf(arith.addf(_raw(m_i), rocdl.log(f32, l_total)), arith.constant(f32, tiles.LN2))
        lse_row0 = fx.Int64(bh) * fx.Int64(Sq) + fx.Int64(row0)
        lse_base = llvm.GEPOp(llvm.PointerType.get(1), LSE.llvm_ptr,
                              [_raw(lse_row0)], [_DYNAMIC], f32, None).result
        lse_rows = (Sq > row0).select(Sq - row0, 0)
        lse_rsrc = rocdl.make_buffer_rsrc(ptr8, lse_base, _raw(fx.Int16(0)),
                                          _raw(fx.Int64(lse_rows) * 4), _i32(_BUFFER_FLAGS))
        rocdl.raw_ptr_buffer_store(lse, lse_rsrc, _raw(col * 4), _i32(0))

    @flyc.jit
    def launch(q: fx.Tensor, k: fx.Tensor, v: fx.Tensor, o: fx.Tensor, lse: fx.Pointer,
               sm_scale_log2: fx.Float32, grid_m: fx.Int32, grid_bh: fx.Int32,
               stream: fx.Stream = fx.Stream(None)):
        flydsl_attn_fwd(q, k, v, o, lse, sm_scale_log2).launch(
            grid=(grid_m, grid_bh, 1), block=(NTHREADS, 1, 1), stream=stream)

    return launch, flydsl_attn_fwd
