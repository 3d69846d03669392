"""Decode forward: a few query rows (Sq <= 16) per head against a long KV sequence.

The prefill kernel (fwd.py) gives every (batch, q head) a program with a 64- or 128-row Q tile.
At Sq = 1 that tile holds one real row, and the Hq/Hkv query heads of a GQA group each stream
the same K/V from memory. Here one program owns one (batch, KV head) and packs the query rows of
its whole group into the Q tile: row r is query head h_kv·G + r // Sq, position r % Sq, with
G = Hq/Hkv. K and V are then read once per group, and a tile of BLOCK_M rows serves G·Sq rows
(a 16-row tile holds 16 decode heads). Groups with more rows than BLOCK_M take several passes
over K/V, each packing the next BLOCK_M rows.

The softmax is fwd.py's: running max on raw scores, subtracted before the base-2 scale, so the
largest score gives exp2(0) = 1 exactly at any magnitude; the LSE is stored in natural log.
The causal mask is top-left aligned, as F.sdpa's: position s sees keys 0..s.

grid = (B * Hkv,): one program per (batch, KV head). The runtime only chooses these kernels for
Sq <= 16 (their `requires`, family.py). Below it, a split-KV pair for batches too small to fill
the GPU that way: the same loop over one chunk of keys per program, then a merge of the chunks.

Each kernel comes in two forms: per-thread pointer loads (cp.async on sm_90, any target), and
TMA (`*_tma`, sm_90): K and V arrive through host tensor descriptors of the whole [B, Hkv, Sk, D]
tensors, one bulk copy per tile issued by one thread, with rows past Sk and columns past the
head dim zero-filled by the copy. Streaming the KV cache is all a decode kernel does; the copy
engine keeps more bytes in flight per SM than 128 threads' 16-byte copies do.
"""
import triton
import triton.language as tl

from .common import LN2, SIZE_ARGS, head_offset, load_tile, tile_offsets


@triton.jit
def _group_pass(q, k_src, v_src, b, h_kv, row0, q_stride_b, q_stride_h, q_stride_s,
                k_stride_s, v_stride_s, Hq, Hkv, Sq, kv_start, kv_stop, sm_scale_log2,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr):
    """One pass of BLOCK_M packed rows of a GQA group over keys [kv_start, kv_stop).

    Without TMA, k_src and v_src point at key kv_start of the (b, h_kv) head; with TMA they are
    descriptors of all of K and V, [1, 1, BLOCK_N, BLOCK_D] boxes. Returns the unnormalised O
    (fp32), each row's raw-score max and exponential sum, and per row its query head, its
    position and whether it is one of the group's rows.
    """
    group = Hq // Hkv
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < group * Sq
    h = h_kv * group + rows // Sq
    s = rows % Sq
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q_rows = (b.to(tl.int64) * q_stride_b + h.to(tl.int64) * q_stride_h
              + s.to(tl.int64) * q_stride_s)
    q_tile = tl.load(q + q_rows[:, None] + offs_d[None, :],
                     mask=row_ok[:, None] & d_ok[None, :], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if not TMA:
        # 32-bit offsets within a tile; each tile's start moves the 64-bit base pointer
        kT_offs = tile_offsets(offs_n, offs_d, k_stride_s, True)
        v_offs = tile_offsets(offs_n, offs_d, v_stride_s, False)
        k_tile = k_src
        v_tile = v_src
    for start_n in range(kv_start, kv_stop, BLOCK_N):
        cols = start_n + offs_n
        if TMA:
            kT = tl.trans(k_src.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, BLOCK_D))
        else:
            kT = load_tile(k_tile, kT_offs, cols, kv_stop, offs_d, HEAD_DIM, BLOCK_D, True, True)
        qk = tl.dot(q_tile, kT)
        visible = (cols < kv_stop)[None, :]
        if CAUSAL:
            visible = visible & (cols[None, :] <= s[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        # online softmax on raw scores; a row with no visible key yet keeps m = -inf
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2((qk - m_use[:, None]) * sm_scale_log2)
        alpha = tl.math.exp2((m_i - m_use) * sm_scale_log2)
        l_i = l_i * alpha + tl.sum(p, 1)
        if TMA:
            vt = v_src.load([b, h_kv, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
            if CAUSAL:
                # the copy reads real keys up to the tile's end (rows past Sk come as zeros);
                # those the mask hides must not bring an inf or NaN into 0 * V
                vt = tl.where((cols < kv_stop)[:, None], vt, 0.0)
        else:
            vt = load_tile(v_tile, v_offs, cols, kv_stop, offs_d, HEAD_DIM, BLOCK_D, True)
        acc = tl.dot(p.to(vt.dtype), vt, acc * alpha[:, None])
        m_i = m_new
        if not TMA:
            k_tile += BLOCK_N * k_stride_s
            v_tile += BLOCK_N * v_stride_s
    return acc, m_i, l_i, h, s, row_ok


@triton.jit
def _store_rows(o, lse, acc, m_i, l_i, b, h, s, row_ok, o_stride_b, o_stride_h, o_stride_s,
                Hq, Sq, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """Normalise one pass's rows and store O and the natural-log LSE of each packed row."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)  # a row that saw no key writes 0, not NaN
    acc = acc * (1.0 / l_safe)[:, None]
    o_rows = (b.to(tl.int64) * o_stride_b + h.to(tl.int64) * o_stride_h
              + s.to(tl.int64) * o_stride_s)
    tl.store(o + o_rows[:, None] + offs_d[None, :], acc.to(o.dtype.element_ty),
             mask=row_ok[:, None] & d_ok[None, :])
    lse_row = m_i * sm_scale + tl.math.log2(l_safe) * LN2  # m_i is the raw-score max
    lse_at = (b * Hq + h).to(tl.int64) * Sq + s  # lse is contiguous [B, Hq, Sq]
    tl.store(lse + lse_at, lse_row, mask=row_ok)


@triton.jit
def _store_chunk(o_part, lse_part, acc, m_i, l_i, b, h, s, row_ok, chunk, chunks, Hq, Sq,
                 sm_scale, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """One pass's rows of one chunk: normalised partial O and LSE into the workspace. A chunk
    with no visible key for a row (causal, past the row) leaves LSE = -inf, O = 0."""
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    acc = acc * (1.0 / l_safe)[:, None]
    lse_row = tl.where(l_i == 0.0, float("-inf"), m_i * sm_scale + tl.math.log2(l_safe) * LN2)
    part = ((b * Hq + h).to(tl.int64) * Sq + s) * chunks + chunk
    tl.store(o_part + part[:, None] * HEAD_DIM + offs_d[None, :], acc,
             mask=row_ok[:, None] & d_ok[None, :])
    tl.store(lse_part + part, lse_row, mask=row_ok)


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd_decode(q, k, v, o, lse,
                    q_stride_b, q_stride_h, q_stride_s,
                    k_stride_b, k_stride_h, k_stride_s,
                    v_stride_b, v_stride_h, v_stride_s,
                    o_stride_b, o_stride_h, o_stride_s,
                    Hq, Hkv, Sq, Sk, sm_scale, sm_scale_log2,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // Hkv
    h_kv = pid % Hkv
    k_base = k + head_offset(b, h_kv, k_stride_b, k_stride_h)
    v_base = v + head_offset(b, h_kv, v_stride_b, v_stride_h)
    # keys past the last visible one are never loaded: Sk, or under the causal mask Sq
    kv_stop = tl.minimum(Sk, Sq) if CAUSAL else Sk
    for row0 in range(0, (Hq // Hkv) * Sq, BLOCK_M):
        acc, m_i, l_i, h, s, row_ok = _group_pass(
            q, k_base, v_base, b, h_kv, row0, q_stride_b, q_stride_h, q_stride_s, k_stride_s,
            v_stride_s, Hq, Hkv, Sq, 0, kv_stop, sm_scale_log2, HEAD_DIM, BLOCK_D, BLOCK_M,
            BLOCK_N, CAUSAL, False)
        _store_rows(o, lse, acc, m_i, l_i, b, h, s, row_ok, o_stride_b, o_stride_h, o_stride_s,
                    Hq, Sq, sm_scale, HEAD_DIM, BLOCK_D)


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd_decode_tma(q, k_desc, v_desc, o, lse,
                        q_stride_b, q_stride_h, q_stride_s,
                        o_stride_b, o_stride_h, o_stride_s,
                        Hq, Hkv, Sq, Sk, sm_scale, sm_scale_log2,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """attn_fwd_decode with K and V through TMA descriptors."""
    pid = tl.program_id(0)
    b = pid // Hkv
    h_kv = pid % Hkv
    kv_stop = tl.minimum(Sk, Sq) if CAUSAL else Sk
    for row0 in range(0, (Hq // Hkv) * Sq, BLOCK_M):
        acc, m_i, l_i, h, s, row_ok = _group_pass(
            q, k_desc, v_desc, b, h_kv, row0, q_stride_b, q_stride_h, q_stride_s, 0, 0,
            Hq, Hkv, Sq, 0, kv_stop, sm_scale_log2, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N,
            CAUSAL, True)
        _store_rows(o, lse, acc, m_i, l_i, b, h, s, row_ok, o_stride_b, o_stride_h, o_stride_s,
                    Hq, Sq, sm_scale, HEAD_DIM, BLOCK_D)


# ---- split-KV: when B·Hkv programs cannot fill the GPU ----------------------------------------
# The keys split into chunks of CHUNK; program (chunk, batch·KV head) runs the pass above over
# its chunk only and leaves each packed row's normalised partial O and its LSE in the workspace
# (o_part [B, Hq, Sq, ceil(Sk/CHUNK), D], lse_part [B, Hq, Sq, ceil(Sk/CHUNK)], fp32). A second
# kernel merges a row's chunks: LSE = log Σ exp(lse_i), O = Σ exp(lse_i − LSE) · o_i.


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd_decode_split(q, k, v, o_part, lse_part,
                          q_stride_b, q_stride_h, q_stride_s,
                          k_stride_b, k_stride_h, k_stride_s,
                          v_stride_b, v_stride_h, v_stride_s,
                          Hq, Hkv, Sq, Sk, sm_scale, sm_scale_log2,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, CAUSAL: tl.constexpr):
    chunk = tl.program_id(0)
    pid = tl.program_id(1)
    b = pid // Hkv
    h_kv = pid % Hkv
    kv_start = chunk * CHUNK
    kv_stop = tl.minimum(tl.minimum(Sk, Sq) if CAUSAL else Sk, kv_start + CHUNK)
    k_base = k + head_offset(b, h_kv, k_stride_b, k_stride_h) + kv_start.to(tl.int64) * k_stride_s
    v_base = v + head_offset(b, h_kv, v_stride_b, v_stride_h) + kv_start.to(tl.int64) * v_stride_s
    for row0 in range(0, (Hq // Hkv) * Sq, BLOCK_M):
        acc, m_i, l_i, h, s, row_ok = _group_pass(
            q, k_base, v_base, b, h_kv, row0, q_stride_b, q_stride_h, q_stride_s, k_stride_s,
            v_stride_s, Hq, Hkv, Sq, kv_start, kv_stop, sm_scale_log2, HEAD_DIM, BLOCK_D,
            BLOCK_M, BLOCK_N, CAUSAL, False)
        _store_chunk(o_part, lse_part, acc, m_i, l_i, b, h, s, row_ok, chunk, tl.cdiv(Sk, CHUNK),
                     Hq, Sq, sm_scale, HEAD_DIM, BLOCK_D)


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd_decode_split_tma(q, k_desc, v_desc, o_part, lse_part,
                              q_stride_b, q_stride_h, q_stride_s,
                              Hq, Hkv, Sq, Sk, sm_scale, sm_scale_log2,
                              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr,
                              CAUSAL: tl.constexpr):
    """attn_fwd_decode_split with K and V through TMA descriptors."""
    chunk = tl.program_id(0)
    pid = tl.program_id(1)
    b = pid // Hkv
    h_kv = pid % Hkv
    kv_start = chunk * CHUNK
    kv_stop = tl.minimum(tl.minimum(Sk, Sq) if CAUSAL else Sk, kv_start + CHUNK)
    for row0 in range(0, (Hq // Hkv) * Sq, BLOCK_M):
        acc, m_i, l_i, h, s, row_ok = _group_pass(
            q, k_desc, v_desc, b, h_kv, row0, q_stride_b, q_stride_h, q_stride_s, 0, 0,
            Hq, Hkv, Sq, kv_start, kv_stop, sm_scale_log2, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N,
            CAUSAL, True)
        _store_chunk(o_part, lse_part, acc, m_i, l_i, b, h, s, row_ok, chunk, tl.cdiv(Sk, CHUNK),
                     Hq, Sq, sm_scale, HEAD_DIM, BLOCK_D)


@triton.jit(do_not_specialize=SIZE_ARGS)
def attn_fwd_decode_combine(o, lse, o_part, lse_part, o_stride_b, o_stride_h, o_stride_s,
                            Hq, Sq, Sk, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                            CHUNK: tl.constexpr, BLOCK_C: tl.constexpr):
    """grid = (Sq, B * Hq): one program per query row merges its ceil(Sk/CHUNK) chunks."""
    s = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    chunks = tl.cdiv(Sk, CHUNK)
    row = bh.to(tl.int64) * Sq + s
    offs_c = tl.arange(0, BLOCK_C)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    # the row's largest chunk LSE first, so every weight exp(lse_i - top) is at most 1
    top = tl.full([BLOCK_C], float("-inf"), tl.float32)
    for c0 in range(0, chunks, BLOCK_C):
        c = c0 + offs_c
        top = tl.maximum(top, tl.load(lse_part + row * chunks + c, mask=c < chunks,
                                      other=float("-inf")))
    top_max = tl.max(top, 0)
    top_use = tl.where(top_max == float("-inf"), 0.0, top_max)
    total = tl.zeros([BLOCK_C], tl.float32)
    acc = tl.zeros([BLOCK_C, BLOCK_D], tl.float32)
    for c0 in range(0, chunks, BLOCK_C):
        c = c0 + offs_c
        c_ok = c < chunks
        w = tl.exp(tl.load(lse_part + row * chunks + c, mask=c_ok, other=float("-inf")) - top_use)
        part = tl.load(o_part + (row * chunks + c)[:, None] * HEAD_DIM + offs_d[None, :],
                       mask=c_ok[:, None] & d_ok[None, :], other=0.0)
        total += w
        acc += w[:, None] * part
    weight = tl.sum(total, 0)
    weight_safe = tl.where(weight == 0.0, 1.0, weight)
    out = tl.sum(acc, 0) / weight_safe
    o_at = o + head_offset(b, h, o_stride_b, o_stride_h) + s.to(tl.int64) * o_stride_s
    tl.store(o_at + offs_d, out.to(o.dtype.element_ty), mask=d_ok)
    tl.store(lse + row, tl.where(weight == 0.0, float("-inf"), top_use + tl.log(weight_safe)))
