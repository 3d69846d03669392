"""The two small Triton kernels around AITER's assembly backward (kernels.BWD_SEQUENCE).

AITER itself brackets its backward with composable_kernel launches (fmha_bwd_dot_do_o before,
fmha_bwd_convert_dq after) that are compiled from C++ at install time and are not in the wheel.
These are attnpack's own equivalents, compiled with triton.compile like the triton family:

  aiter_bwd_prepare     delta = rowsum(dO * O) in float32 [B, Hq, Sq], and zeros the same rows
                        of dq_acc [B, Hq, Sq, D], so the assembly kernel's float atomics start
                        from 0 without a separate memset
  aiter_bwd_convert_dq  dQ = dq_acc rounded to the problem's dtype (the assembly kernel has
                        already applied the softmax scale)

Both launch one program per BLOCK_M query rows of one (batch, q head): grid
(ceil(Sq / BLOCK_M), B * Hq).
"""
import triton
import triton.language as tl

BLOCK_M = 64


def block_d(head_dim: int) -> int:
    return triton.next_power_of_2(head_dim)


@triton.jit(do_not_specialize=("Hq", "Sq"))
def aiter_bwd_prepare(o, do, delta, dq_acc,
                      o_stride_b, o_stride_h, o_stride_s,
                      do_stride_b, do_stride_h, do_stride_s,
                      Hq, Sq,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < Sq
    tile_ok = row_ok[:, None] & (cols[None, :] < HEAD_DIM)
    # 64-bit head offsets: a [B, H, S, D] tensor passes 2^31 elements at long contexts
    o_base = o + b.to(tl.int64) * o_stride_b + h.to(tl.int64) * o_stride_h
    do_base = do + b.to(tl.int64) * do_stride_b + h.to(tl.int64) * do_stride_h
    o_tile = tl.load(o_base + rows[:, None].to(tl.int64) * o_stride_s + cols[None, :],
                     mask=tile_ok, other=0.0)
    do_tile = tl.load(do_base + rows[:, None].to(tl.int64) * do_stride_s + cols[None, :],
                      mask=tile_ok, other=0.0)
    row_delta = tl.sum(o_tile.to(tl.float32) * do_tile.to(tl.float32), 1)
    head_rows = bh.to(tl.int64) * Sq + rows          # delta and dq_acc are contiguous
    tl.store(delta + head_rows, row_delta, mask=row_ok)
    tl.store(dq_acc + head_rows[:, None] * HEAD_DIM + cols[None, :],
             tl.zeros([BLOCK_M, BLOCK_D], tl.float32), mask=tile_ok)


@triton.jit(do_not_specialize=("Hq", "Sq"))
def aiter_bwd_convert_dq(dq_acc, dq,
                         dq_stride_b, dq_stride_h, dq_stride_s,
                         Hq, Sq,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    bh = tl.program_id(1)
    b = bh // Hq
    h = bh % Hq
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    tile_ok = (rows < Sq)[:, None] & (cols[None, :] < HEAD_DIM)
    head_rows = bh.to(tl.int64) * Sq + rows
    acc = tl.load(dq_acc + head_rows[:, None] * HEAD_DIM + cols[None, :], mask=tile_ok, other=0.0)
    dq_base = dq + b.to(tl.int64) * dq_stride_b + h.to(tl.int64) * dq_stride_h
    tl.store(dq_base + rows[:, None].to(tl.int64) * dq_stride_s + cols[None, :],
             acc.to(dq.dtype.element_ty), mask=tile_ok)


# The launch steps, in attnpack's words (family.py makes them Steps of the triton backend).
GLUE_STEPS = {
    "prepare": {"fn": aiter_bwd_prepare, "grid": ((("Sq", BLOCK_M),), (("B", 1), ("Hq", 1)), ()),
                "args": ("o", "do", "delta", "dq_acc", "o_stride_b", "o_stride_h", "o_stride_s",
                         "do_stride_b", "do_stride_h", "do_stride_s", "Hq", "Sq")},
    "convert_dq": {"fn": aiter_bwd_convert_dq,
                   "grid": ((("Sq", BLOCK_M),), (("B", 1), ("Hq", 1)), ()),
                   "args": ("dq_acc", "dq", "dq_stride_b", "dq_stride_h", "dq_stride_s",
                            "Hq", "Sq")},
}
