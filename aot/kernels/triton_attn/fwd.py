"""Forward flash attention: O = softmax(scale * Q Kᵀ) V, and the row log-sum-exp (LSE).

One program owns BLOCK_M query rows of one (batch, q head) and streams the KV sequence in
BLOCK_N tiles with an online softmax (running row max `m_i`, running row sum `l_i`). The KV
range splits into two stages:
  1. full tiles:  every key visible to every row of the block and inside Sk -> no masks;
  2. edge tiles:  the causal diagonal and/or the ragged Sk tail -> masked.
Tiles entirely above the causal diagonal are never visited.

The exponential is base 2: p = exp2((qk - m) * sm_scale * log2(e)). The running row max m is
kept on raw (unscaled) scores and subtracted before the scale multiplies, so the max element gets
exp2(0) = 1 exactly, however large the scores are. The scale must be positive (the glue falls
back otherwise): only then is the max of the raw scores the max of the scaled ones.

Why not subtract a scaled max from scaled scores (qk * c - m * c): the compiler fuses that
multiply and subtraction into one FMA, which keeps the product unrounded, while the max was
rounded. At |q.k| * scale ~ 1e11 (bf16 inputs near 1.3e5) the max element's exponent is then the
product's rounding error, thousands, and exp2 of it overflows: NaN where PyTorch's flash is finite.
"""
import triton
import triton.language as tl

from .common import LN2, SIZE_ARGS, head_offset, load_tile, store_tile, tile_offsets


@triton.jit
def _attend_kv_tiles(acc, m_i, l_i, q, k_base, kT_offs, v_base, v_offs, k_stride_s, v_stride_s,
                     offs_m, offs_n, offs_d, kv_start, kv_stop, Sk, sm_scale_log2,
                     HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                     MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Online-softmax update of (acc, m_i, l_i) over the KV tiles in [kv_start, kv_stop)."""
    k_tile = k_base + tl.cast(kv_start, tl.int64) * k_stride_s
    v_tile = v_base + tl.cast(kv_start, tl.int64) * v_stride_s
    for start_n in range(kv_start, kv_stop, BLOCK_N):
        cols = start_n + offs_n
        # -- scores: S = Q Kᵀ (fp32), masked to -inf where a key is invisible or past Sk
        kT = load_tile(k_tile, kT_offs, cols, Sk, offs_d, HEAD_DIM, BLOCK_D, MASKED, True)
        qk = tl.dot(q, kT)
        if MASKED:
            visible = cols[None, :] < Sk
            if CAUSAL:  # top-left aligned: query i sees keys j <= i
                visible = visible & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(visible, qk, float("-inf"))
        # -- online softmax on raw scores: rescale what we have by exp2((m_old - m_new) * c)
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_use = m_new
        if MASKED:  # a row with no visible key yet keeps m = -inf; avoid (-inf) - (-inf) = NaN
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2((qk - m_use[:, None]) * sm_scale_log2)
        alpha = tl.math.exp2((m_i - m_use) * sm_scale_log2)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        # -- accumulate P V
        v = load_tile(v_tile, v_offs, cols, Sk, offs_d, HEAD_DIM, BLOCK_D, MASKED)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
        k_tile += BLOCK_N * k_stride_s
        v_tile += BLOCK_N * v_stride_s
    return acc, m_i, l_i


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd(q, k, v, o, lse,
             q_stride_b, q_stride_h, q_stride_s,
             k_stride_b, k_stride_h, k_stride_s,
             v_stride_b, v_stride_h, v_stride_s,
             o_stride_b, o_stride_h, o_stride_s,
             Hq, Hkv, Sq, Sk, sm_scale, sm_scale_log2,
             HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # ---- which query tile: grid = (cdiv(Sq, BLOCK_M), B * Hq)
    pid_m = tl.program_id(0)
    if CAUSAL:  # bottom tiles see the most keys: schedule them first, short ones fill the tail
        pid_m = tl.cdiv(Sq, BLOCK_M) - 1 - pid_m  # = grid dim 0 - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    h_kv = h // (Hq // Hkv)  # GQA: a group of Hq/Hkv query heads shares one KV head
    start_m = pid_m * BLOCK_M

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)

    # ---- prologue: load the Q tile once
    q_base = q + head_offset(b, h, q_stride_b, q_stride_h) + start_m.to(tl.int64) * q_stride_s
    q_offs = tile_offsets(tl.arange(0, BLOCK_M), offs_d, q_stride_s, False)
    q_tile = load_tile(q_base, q_offs, offs_m, Sq, offs_d, HEAD_DIM, BLOCK_D, True)
    k_base = k + head_offset(b, h_kv, k_stride_b, k_stride_h)
    v_base = v + head_offset(b, h_kv, v_stride_b, v_stride_h)
    kT_offs = tile_offsets(offs_n, offs_d, k_stride_s, True)
    v_offs = tile_offsets(offs_n, offs_d, v_stride_s, False)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # ---- KV range: [0, full_stop) needs no mask, [full_stop, edge_stop) does
    if CAUSAL:
        visible_stop = tl.minimum(start_m + BLOCK_M, Sk)  # past the block's last row: invisible
        full_stop = (tl.minimum(start_m + 1, Sk) // BLOCK_N) * BLOCK_N  # visible to its first row
    else:
        visible_stop = Sk
        full_stop = (Sk // BLOCK_N) * BLOCK_N

    # ---- mainloop stage 1: full tiles
    acc, m_i, l_i = _attend_kv_tiles(acc, m_i, l_i, q_tile, k_base, kT_offs, v_base, v_offs,
                                     k_stride_s, v_stride_s, offs_m, offs_n, offs_d,
                                     0, full_stop, Sk, sm_scale_log2,
                                     HEAD_DIM, BLOCK_D, BLOCK_N, False, CAUSAL)
    # ---- mainloop stage 2: diagonal and tail tiles
    acc, m_i, l_i = _attend_kv_tiles(acc, m_i, l_i, q_tile, k_base, kT_offs, v_base, v_offs,
                                     k_stride_s, v_stride_s, offs_m, offs_n, offs_d,
                                     full_stop, visible_stop, Sk, sm_scale_log2,
                                     HEAD_DIM, BLOCK_D, BLOCK_N, True, CAUSAL)

    # ---- epilogue: normalise, store O and the natural-log LSE
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a row that saw no key writes 0, not NaN
    acc = acc * (1.0 / l_safe)[:, None]
    o_base = o + head_offset(b, h, o_stride_b, o_stride_h) + start_m.to(tl.int64) * o_stride_s
    o_offs = tile_offsets(tl.arange(0, BLOCK_M), offs_d, o_stride_s, False)
    store_tile(o_base, o_offs, acc, offs_m, Sq, offs_d, HEAD_DIM, BLOCK_D)
    lse_row = m_i * sm_scale + tl.math.log2(l_safe) * LN2  # m_i is the raw-score max
    lse_base = lse + bh.to(tl.int64) * Sq  # lse is contiguous [B, Hq, Sq]
    tl.store(lse_base + offs_m, lse_row, mask=offs_m < Sq)
