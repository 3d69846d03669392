"""Backward flash attention, deterministic (no atomics), in three launches:

  1. attn_bwd_preprocess: delta = rowsum(dO * O), float32 [B, Hq, Sq]        (one program per Q tile)
  2. attn_bwd_dkdv:       dK, dV for one KV tile; loops over the Q tiles of every q head in its
                          GQA group, so each dK/dV element is written once by one program
  3. attn_bwd_dq:         dQ for one Q tile; loops over the KV tiles it sees

Both main kernels recompute P = exp(scale * qk - lse) from the forward's LSE, so no softmax
statistics beyond LSE and delta are needed. The LSE is subtracted in natural units before the
base change (a base-2 LSE would add a rounding of its own, which at |q.k| * scale ~ 1e11 is worth
thousands in the exponent), and the exponent is clamped at 0: P <= 1 holds exactly in real
arithmetic, so rounding can no longer turn it into inf (and dS into NaN):
    dV += Pᵀ dO      dP = dO Vᵀ      dS = P * (dP - delta)      dK += dSᵀ Q * scale      dQ += dS K * scale
Each loop is split like the forward: masked stages only for the causal diagonal and ragged tails.
"""
import triton
import triton.language as tl

from .common import LOG2E, SIZE_ARGS, head_offset, load_tile, store_tile, tile_offsets


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_bwd_preprocess(o, do, delta,
                        o_stride_b, o_stride_h, o_stride_s,
                        do_stride_b, do_stride_h, do_stride_s,
                        Hq, Sq,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    rows = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows
    offs_d = tl.arange(0, BLOCK_D)
    o_base = o + head_offset(b, h, o_stride_b, o_stride_h) + start_m.to(tl.int64) * o_stride_s
    do_base = do + head_offset(b, h, do_stride_b, do_stride_h) + start_m.to(tl.int64) * do_stride_s
    o_tile = load_tile(o_base, tile_offsets(rows, offs_d, o_stride_s, False), offs_m, Sq, offs_d,
                       HEAD_DIM, BLOCK_D, True)
    do_tile = load_tile(do_base, tile_offsets(rows, offs_d, do_stride_s, False), offs_m, Sq, offs_d,
                        HEAD_DIM, BLOCK_D, True)
    row_delta = tl.sum(o_tile.to(tl.float32) * do_tile.to(tl.float32), 1)
    tl.store(delta + bh.to(tl.int64) * Sq + offs_m, row_delta, mask=offs_m < Sq)


@triton.jit
def _probabilities(qk, lse, sm_scale):
    """P = exp(scale * qk - lse), in [0, 1]: the difference in natural units, then base 2.
    The clamp is a plain min: a NaN-propagating min or a select costs the gfx942 head-dim-256
    dQ kernel the two registers it does not have (512 VGPR+AGPR). A NaN score so gives P = 1;
    its row's delta is NaN already (the forward's O is), so dQ and dK stay NaN."""
    return tl.math.exp2(tl.minimum(qk * sm_scale - lse, 0.0) * LOG2E)


@triton.jit
def _dkdv_q_tiles(dk, dv, k_tile, v_tile, q_base, qT_offs, do_base, do_offs, q_stride_s,
                  do_stride_s, lse_row, delta_row, offs_m, offs_n, offs_d, q_start, q_stop, Sq,
                  sm_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Accumulate dK (unscaled) and dV of one KV tile over the Q tiles in [q_start, q_stop).

    Works in the transposed frame (keys on rows, queries on columns), so dK and dV come out
    as [BLOCK_N, D] without transposing the accumulators.
    """
    q_ptr = q_base + tl.cast(q_start, tl.int64) * q_stride_s
    do_ptr = do_base + tl.cast(q_start, tl.int64) * do_stride_s
    for start_m in range(q_start, q_stop, BLOCK_M):
        rows = start_m + offs_m
        qT = load_tile(q_ptr, qT_offs, rows, Sq, offs_d, HEAD_DIM, BLOCK_D, MASKED, True)
        lse = tl.load(lse_row + rows, mask=rows < Sq, other=0.0)
        # -- recompute Pᵀ from the forward's LSE
        qkT = tl.dot(k_tile, qT)
        pT = _probabilities(qkT, lse[None, :], sm_scale)
        if MASKED:
            visible = rows[None, :] < Sq
            if CAUSAL:  # key j is seen by queries i >= j
                visible = visible & (rows[None, :] >= offs_n[:, None])
            pT = tl.where(visible, pT, 0.0)
        # -- dV += Pᵀ dO
        do_tile = load_tile(do_ptr, do_offs, rows, Sq, offs_d, HEAD_DIM, BLOCK_D, MASKED)
        dv = tl.dot(pT.to(do_tile.dtype), do_tile, dv)
        # -- dSᵀ = Pᵀ * (dPᵀ - delta), dPᵀ = V dOᵀ;  dK += dSᵀ Q
        row_delta = tl.load(delta_row + rows, mask=rows < Sq, other=0.0)
        dpT = tl.dot(v_tile, tl.trans(do_tile))
        dsT = pT * (dpT - row_delta[None, :])
        dk = tl.dot(dsT.to(qT.dtype), tl.trans(qT), dk)
        q_ptr += BLOCK_M * q_stride_s
        do_ptr += BLOCK_M * do_stride_s
    return dk, dv


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_bwd_dkdv(q, k, v, do, dk, dv, lse, delta,
                  q_stride_b, q_stride_h, q_stride_s,
                  k_stride_b, k_stride_h, k_stride_s,
                  v_stride_b, v_stride_h, v_stride_s,
                  do_stride_b, do_stride_h, do_stride_s,
                  dk_stride_b, dk_stride_h, dk_stride_s,
                  dv_stride_b, dv_stride_h, dv_stride_s,
                  Hq, Hkv, Sq, Sk, sm_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # ---- which KV tile: grid = (cdiv(Sk, BLOCK_N), B * Hkv)
    start_n = tl.program_id(0) * BLOCK_N
    bh_kv = tl.program_id(1)
    b = bh_kv // Hkv
    h_kv = bh_kv % Hkv
    group = Hq // Hkv

    rows_n = tl.arange(0, BLOCK_N)
    offs_n = start_n + rows_n
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)

    # ---- prologue: the K and V tiles stay resident for the whole program
    k_base = k + head_offset(b, h_kv, k_stride_b, k_stride_h) + start_n.to(tl.int64) * k_stride_s
    v_base = v + head_offset(b, h_kv, v_stride_b, v_stride_h) + start_n.to(tl.int64) * v_stride_s
    k_tile = load_tile(k_base, tile_offsets(rows_n, offs_d, k_stride_s, False), offs_n, Sk,
                       offs_d, HEAD_DIM, BLOCK_D, True)
    v_tile = load_tile(v_base, tile_offsets(rows_n, offs_d, v_stride_s, False), offs_n, Sk,
                       offs_d, HEAD_DIM, BLOCK_D, True)
    qT_offs = tile_offsets(offs_m, offs_d, q_stride_s, True)
    do_offs = tile_offsets(offs_m, offs_d, do_stride_s, False)

    # ---- Q range: [q_lo, diag_stop) diagonal (masked), [diag_stop, full_stop) full, then tail
    if CAUSAL:
        q_lo = (start_n // BLOCK_M) * BLOCK_M  # earlier queries see none of these keys
        diag_stop = tl.minimum(tl.cdiv(start_n + BLOCK_N - 1, BLOCK_M) * BLOCK_M, Sq)
    else:
        q_lo = 0
        diag_stop = 0
    full_stop = (Sq // BLOCK_M) * BLOCK_M
    tail_start = tl.maximum(diag_stop, full_stop)

    dk_acc = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv_acc = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    for g in range(0, group):  # GQA: the q heads sharing this KV head, summed in registers
        h = h_kv * group + g
        q_base = q + head_offset(b, h, q_stride_b, q_stride_h)
        do_base = do + head_offset(b, h, do_stride_b, do_stride_h)
        lse_row = lse + (b * Hq + h).to(tl.int64) * Sq
        delta_row = delta + (b * Hq + h).to(tl.int64) * Sq
        # ---- mainloop stage 1: diagonal Q tiles (causal only)
        if CAUSAL:
            dk_acc, dv_acc = _dkdv_q_tiles(dk_acc, dv_acc, k_tile, v_tile, q_base, qT_offs, do_base,
                                           do_offs, q_stride_s, do_stride_s, lse_row, delta_row,
                                           offs_m, offs_n, offs_d, q_lo, diag_stop, Sq,
                                           sm_scale, HEAD_DIM, BLOCK_D, BLOCK_M, True, CAUSAL)
        # ---- mainloop stage 2: full Q tiles, every query sees every key of the tile
        dk_acc, dv_acc = _dkdv_q_tiles(dk_acc, dv_acc, k_tile, v_tile, q_base, qT_offs, do_base,
                                       do_offs, q_stride_s, do_stride_s, lse_row, delta_row,
                                       offs_m, offs_n, offs_d, diag_stop, full_stop, Sq,
                                       sm_scale, HEAD_DIM, BLOCK_D, BLOCK_M, False, CAUSAL)
        # ---- mainloop stage 3: the ragged Sq tail
        dk_acc, dv_acc = _dkdv_q_tiles(dk_acc, dv_acc, k_tile, v_tile, q_base, qT_offs, do_base,
                                       do_offs, q_stride_s, do_stride_s, lse_row, delta_row,
                                       offs_m, offs_n, offs_d, tail_start, Sq, Sq,
                                       sm_scale, HEAD_DIM, BLOCK_D, BLOCK_M, True, CAUSAL)

    # ---- epilogue: dK carries the softmax scale; keys nobody sees get exact zeros
    dk_base = dk + head_offset(b, h_kv, dk_stride_b, dk_stride_h) + start_n.to(tl.int64) * dk_stride_s
    dv_base = dv + head_offset(b, h_kv, dv_stride_b, dv_stride_h) + start_n.to(tl.int64) * dv_stride_s
    store_tile(dk_base, tile_offsets(rows_n, offs_d, dk_stride_s, False), dk_acc * sm_scale,
               offs_n, Sk, offs_d, HEAD_DIM, BLOCK_D)
    store_tile(dv_base, tile_offsets(rows_n, offs_d, dv_stride_s, False), dv_acc,
               offs_n, Sk, offs_d, HEAD_DIM, BLOCK_D)


@triton.jit
def _dq_kv_tiles(dq, q_tile, do_tile, lse, row_delta, k_base, kT_offs, v_base, vT_offs,
                 k_stride_s, v_stride_s, offs_m, offs_n, offs_d, kv_start, kv_stop, Sk,
                 sm_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                 BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Accumulate dQ (unscaled) of one Q tile over the KV tiles in [kv_start, kv_stop)."""
    k_ptr = k_base + tl.cast(kv_start, tl.int64) * k_stride_s
    v_ptr = v_base + tl.cast(kv_start, tl.int64) * v_stride_s
    for start_n in range(kv_start, kv_stop, BLOCK_N):
        cols = start_n + offs_n
        kT = load_tile(k_ptr, kT_offs, cols, Sk, offs_d, HEAD_DIM, BLOCK_D, MASKED, True)
        vT = load_tile(v_ptr, vT_offs, cols, Sk, offs_d, HEAD_DIM, BLOCK_D, MASKED, True)
        # -- recompute P from the forward's LSE
        qk = tl.dot(q_tile, kT)
        p = _probabilities(qk, lse[:, None], sm_scale)
        if MASKED:
            visible = cols[None, :] < Sk
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None])
            p = tl.where(visible, p, 0.0)
        # -- dS = P * (dO Vᵀ - delta);  dQ += dS K
        dp = tl.dot(do_tile, vT)
        ds = p * (dp - row_delta[:, None])
        dq = tl.dot(ds.to(kT.dtype), tl.trans(kT), dq)
        k_ptr += BLOCK_N * k_stride_s
        v_ptr += BLOCK_N * v_stride_s
    return dq


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_bwd_dq(q, k, v, do, dq, lse, delta,
                q_stride_b, q_stride_h, q_stride_s,
                k_stride_b, k_stride_h, k_stride_s,
                v_stride_b, v_stride_h, v_stride_s,
                do_stride_b, do_stride_h, do_stride_s,
                dq_stride_b, dq_stride_h, dq_stride_s,
                Hq, Hkv, Sq, Sk, sm_scale,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # ---- which Q tile: grid = (cdiv(Sq, BLOCK_M), B * Hq)
    pid_m = tl.program_id(0)
    if CAUSAL:  # bottom tiles loop over the most keys: schedule them first
        pid_m = tl.cdiv(Sq, BLOCK_M) - 1 - pid_m  # = grid dim 0 - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    h_kv = h // (Hq // Hkv)
    start_m = pid_m * BLOCK_M

    rows = tl.arange(0, BLOCK_M)
    offs_m = start_m + rows
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    # ---- prologue: Q, dO, LSE and delta of this tile stay resident
    q_base = q + head_offset(b, h, q_stride_b, q_stride_h) + start_m.to(tl.int64) * q_stride_s
    do_base = do + head_offset(b, h, do_stride_b, do_stride_h) + start_m.to(tl.int64) * do_stride_s
    q_tile = load_tile(q_base, tile_offsets(rows, offs_d, q_stride_s, False), offs_m, Sq, offs_d,
                       HEAD_DIM, BLOCK_D, True)
    do_tile = load_tile(do_base, tile_offsets(rows, offs_d, do_stride_s, False), offs_m, Sq,
                        offs_d, HEAD_DIM, BLOCK_D, True)
    lse_rows = tl.load(lse + bh.to(tl.int64) * Sq + offs_m, mask=offs_m < Sq, other=0.0)
    row_delta = tl.load(delta + bh.to(tl.int64) * Sq + offs_m, mask=offs_m < Sq, other=0.0)
    k_base = k + head_offset(b, h_kv, k_stride_b, k_stride_h)
    v_base = v + head_offset(b, h_kv, v_stride_b, v_stride_h)
    kT_offs = tile_offsets(offs_n, offs_d, k_stride_s, True)
    vT_offs = tile_offsets(offs_n, offs_d, v_stride_s, True)

    # ---- KV range, as in the forward: [0, full_stop) unmasked, [full_stop, visible_stop) masked
    if CAUSAL:
        visible_stop = tl.minimum(start_m + BLOCK_M, Sk)
        full_stop = (tl.minimum(start_m + 1, Sk) // BLOCK_N) * BLOCK_N
    else:
        visible_stop = Sk
        full_stop = (Sk // BLOCK_N) * BLOCK_N

    dq_acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # ---- mainloop stage 1: full KV tiles
    dq_acc = _dq_kv_tiles(dq_acc, q_tile, do_tile, lse_rows, row_delta, k_base, kT_offs, v_base,
                          vT_offs, k_stride_s, v_stride_s, offs_m, offs_n, offs_d, 0, full_stop,
                          Sk, sm_scale, HEAD_DIM, BLOCK_D, BLOCK_N, False, CAUSAL)
    # ---- mainloop stage 2: diagonal and tail KV tiles
    dq_acc = _dq_kv_tiles(dq_acc, q_tile, do_tile, lse_rows, row_delta, k_base, kT_offs, v_base,
                          vT_offs, k_stride_s, v_stride_s, offs_m, offs_n, offs_d, full_stop,
                          visible_stop, Sk, sm_scale, HEAD_DIM, BLOCK_D, BLOCK_N, True, CAUSAL)

    # ---- epilogue
    dq_base = dq + head_offset(b, h, dq_stride_b, dq_stride_h) + start_m.to(tl.int64) * dq_stride_s
    store_tile(dq_base, tile_offsets(rows, offs_d, dq_stride_s, False), dq_acc * sm_scale,
               offs_m, Sq, offs_d, HEAD_DIM, BLOCK_D)
