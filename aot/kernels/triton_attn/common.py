"""Small pieces shared by the forward and backward kernels."""
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # softmax runs in base 2; LSE is stored in base e
LN2 = tl.constexpr(0.6931471805599453)

# Problem sizes are never specialised by Triton's JIT (no "divisible by 16" or "== 1" guesses),
# so a JIT launch compiles the same kernel the AOT builder compiles from the launch spec.
SIZE_ARGS = ["Hq", "Hkv", "Sq", "Sk"]


@triton.jit
def head_offset(b, h, stride_b, stride_h):
    """Element offset of one (batch, head) slice; 64-bit, because it can pass 2**31."""
    return b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h


@triton.jit
def tile_offsets(rows, dims, stride_s, TRANSPOSED: tl.constexpr):
    """Offsets of a (rows x head-dim) tile, or (head-dim x rows) when TRANSPOSED.

    `rows` are local to the tile (0..BLOCK), so 32-bit math is enough here; the tile's start
    is added to the base pointer as a 64-bit scalar.
    """
    stride = stride_s.to(tl.int32)
    if TRANSPOSED:
        offs = rows[None, :] * stride + dims[:, None]
    else:
        offs = rows[:, None] * stride + dims[None, :]
    return offs


@triton.jit
def tile_mask(rows, n_rows, dims, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
              CHECK_ROWS: tl.constexpr, TRANSPOSED: tl.constexpr):
    """Mask of the in-bounds elements of a tile, or None when every element is in bounds."""
    mask = None
    if TRANSPOSED:
        if CHECK_ROWS:
            mask = rows[None, :] < n_rows
        if BLOCK_D != HEAD_DIM:  # head dim padded up to a power of two (e.g. 96 -> 128)
            if CHECK_ROWS:
                mask = mask & (dims[:, None] < HEAD_DIM)
            else:
                mask = dims[:, None] < HEAD_DIM
    else:
        if CHECK_ROWS:
            mask = rows[:, None] < n_rows
        if BLOCK_D != HEAD_DIM:
            if CHECK_ROWS:
                mask = mask & (dims[None, :] < HEAD_DIM)
            else:
                mask = dims[None, :] < HEAD_DIM
    return mask


@triton.jit
def load_tile(base, offs, rows, n_rows, dims, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
              CHECK_ROWS: tl.constexpr, TRANSPOSED: tl.constexpr = False):
    mask = tile_mask(rows, n_rows, dims, HEAD_DIM, BLOCK_D, CHECK_ROWS, TRANSPOSED)
    if CHECK_ROWS or BLOCK_D != HEAD_DIM:
        tile = tl.load(base + offs, mask=mask, other=0.0)
    else:
        tile = tl.load(base + offs)
    return tile


@triton.jit
def store_tile(base, offs, value, rows, n_rows, dims, HEAD_DIM: tl.constexpr,
               BLOCK_D: tl.constexpr):
    mask = tile_mask(rows, n_rows, dims, HEAD_DIM, BLOCK_D, True, False)
    tl.store(base + offs, value.to(base.dtype.element_ty), mask=mask)
