"""The Gluon family for sm_90: the dual-wave (ping-pong) forward and the warp-specialized
backward, their launch steps and declared variant spaces.

Run and measured on the H200 (docs/gluon-family.md, docs/gluon-bwd.md); the four-consumer
forward configs passed part of their GPU tests only (run97: docs/gluon-family.md, item 19); the
split-tail forward configs (`tail`, item 22) are built, not run, and the database selects
none. The family has priority 1000, so it is never a family default: it serves where the
tuning database picks it (315 of the 452 sm_90 forward keys, decode keys included, and 288 of
the 297 backward keys in aot/tuning_db/sm_90.jsonl), with the triton default behind it for
inputs a TMA descriptor cannot take.

Head dims: the forward and the backward serve 64, 96, 128 and 256. 96 runs on 128-wide tiles
(`tile_dim`); the backward at 256 has a kernel of its own (`wide`, bwd_wide.py).

Config knobs:
  M           query rows per consumer warpgroup (a work tile is 2 * M rows, 3 * M or 4 * M)
  N           key rows per K/V tile
  stages      depth of the K/V shared-memory ring
  overlap     1: softmax(j) runs while the warpgroup's own PV(j - 1) is in flight (fwd.py);
              absent: the plain ping-pong, which waits for both GEMMs first
  persistent  1: one program per SM strides over the work tiles, O has its own shared buffer;
              absent: one program per work tile
  consumers   3: three consumer warpgroups take turns (a work tile is 3 * M rows): at head dim
              64 a softmax's exponentials take as long as its warpgroup's GEMMs, and two
              others' GEMMs hide them better than one; 4: four (4 * M = 256 rows, which
              divide sequence lengths of 1024 and up), head dim 64 and N = 64 only, 112
              registers a thread; absent: two
  tail        (persistent, no mask) 1: the tiles of the last, partial round are cut along their
              keys into pieces that the programs share, and merged through the workspace
              (fwd.py, "the split tail"); a zeroing step runs before; built, not run

The backward (bwd.py): three launches in the fast variant (preprocess, dK/dV, convert), two in
the deterministic one (dQ, whose programs compute Δ for their rows first, then dK/dV), three on
the wide head-dim-256 kernels (preprocess, dK/dV, dQ). Config knobs:
  M           query rows per dK/dV step (the dK/dV program owns 128 keys, 64 per consumer)
  stages      depth of the dK/dV kernel's (Q, dO) ring, and of the dQ kernel's K/V ring
  det         0: fast. dQ is added into a workspace fp32 accumulator that the preprocess
                 zeroes, then converted: its bits depend on the order programs finish.
              1: deterministic. A separate dQ kernel sums each query block's dQ in registers,
                 so every run gives the same bits; it runs first and leaves Δ for dK/dV.
  tma         (det 0) 1: each consumer's dQ share is staged in shared memory and added by one
              TMA reduce-add; absent: added from registers with fp32 atomics
  dqq         (det 0, tma 1) 1: each tile's dQ GEMM is queued right behind its dV and dK GEMMs
              (the (Q, dO) slot given back once those are done) instead of issued after them;
              head dims 96 and 128 without a mask only (`excluded` says why)
  early       (det 0, tma 1, one key block a program) 1: dQ's convert starts before the dK/dV
              kernel ends: each dK/dV program publishes its complete dQ adds on per-tile
              counters, and the convert, launched programmatically, converts each query tile
              once its counter is full (so the dK/dV kernel's last round, with SMs to spare,
              runs most of the convert); head dims 96 and 128 (`excluded` says why)
  qN          (det 1) key rows per K/V tile of the dQ kernel
  qS          (det 1) the dQ kernel's K/V ring depth, where it differs from `stages`
  persistent  1: one dK/dV program per SM strides over the key blocks (under causal in pairs,
              or ranked longest first in a snake where B·Hkv <= 16 or the pairs would leave
              their last round ragged: bwd._snake_order), K and V of the next block loading
              while the last one's dK and dV are stored; absent: one program per key block
  wide        (head dim 256 only) 1: the dK/dV program owns 64 keys and its two consumers
              split the head dim (bwd_wide.py); det 0 adds dQ with fp32 atomics, det 1 has a
              dQ kernel split the same way (64 query rows a program, key tiles of 64)
"""
import inspect

from triton.experimental.gluon import language as gl

from attnpack.builder.backends.triton import TritonKernel
from attnpack.family import FamilySpec, FunctionalKey, Step, TensorMap, Workspace
from attnpack.targets import TARGETS

from .bwd import (attn_bwd_dkdv, attn_bwd_dkdv_dq_atomic, attn_bwd_dkdv_dq_tma,
                  attn_bwd_dkdv_dq_tma_ready, attn_bwd_dq, attn_bwd_dq_convert,
                  attn_bwd_dq_convert_ready, attn_bwd_preprocess, attn_bwd_preprocess_ready,
                  dq_share_cols)
from .bwd_wide import attn_bwd_dkdv_wide, attn_bwd_dkdv_wide_dq_atomic, attn_bwd_dq_wide
from . import fwd
from .fwd import attn_fwd_pingpong, attn_fwd_pingpong_tail, attn_fwd_tail_zero

SHARED_MEMORY_BYTES = TARGETS["sm_90"].shared_bytes

FWD_CONFIGS = (
    {"M": 64, "N": 128, "stages": 2},
    {"M": 64, "N": 64, "stages": 3},
    {"M": 64, "N": 128, "stages": 3},
    {"M": 64, "N": 64, "stages": 2},
    {"M": 64, "N": 128, "stages": 2, "overlap": 1},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1},
    {"M": 64, "N": 128, "stages": 3, "overlap": 1},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1},
    # persistent N128/2 stages keeps the plain schedule: the overlapped one spills at head dim 128
    {"M": 64, "N": 128, "stages": 2, "persistent": 1},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "persistent": 1},
    {"M": 64, "N": 128, "stages": 3, "overlap": 1, "persistent": 1},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1, "persistent": 1},
    # the overlapped persistent N128 config with a 2-stage ring, where the 3-stage one does not
    # fit shared memory (tile width 128; `excluded`)
    {"M": 64, "N": 128, "stages": 2, "overlap": 1, "persistent": 1},
    # three consumer warpgroups, head dim 64 only (`excluded` says why)
    {"M": 64, "N": 128, "stages": 2, "overlap": 1, "consumers": 3},
    {"M": 64, "N": 128, "stages": 3, "overlap": 1, "consumers": 3},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "consumers": 3},
    {"M": 64, "N": 128, "stages": 3, "consumers": 3},
    # persistent N128 keeps the plain schedule: the overlapped one spills with 160 registers
    {"M": 64, "N": 128, "stages": 3, "persistent": 1, "consumers": 3},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "persistent": 1, "consumers": 3},
    # four consumer warpgroups, head dim 64 only (`excluded`), 64-key tiles only: with 128-key
    # tiles every config spills 3 KB at 112 registers a thread and its wgmmas are serialized
    {"M": 64, "N": 64, "stages": 2, "consumers": 4},
    {"M": 64, "N": 64, "stages": 3, "consumers": 4},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1, "consumers": 4},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "consumers": 4},
    {"M": 64, "N": 64, "stages": 2, "persistent": 1, "consumers": 4},
    {"M": 64, "N": 64, "stages": 3, "persistent": 1, "consumers": 4},
    {"M": 64, "N": 64, "stages": 2, "overlap": 1, "persistent": 1, "consumers": 4},
    {"M": 64, "N": 64, "stages": 3, "overlap": 1, "persistent": 1, "consumers": 4},
    # the split tail (fwd.py, TAIL): the persistent configs that serve the bench's rows without
    # a mask, their last round cut along the keys (no mask only: `excluded`)
    {"M": 64, "N": 128, "stages": 2, "persistent": 1, "tail": 1},
    {"M": 64, "N": 128, "stages": 2, "overlap": 1, "persistent": 1, "tail": 1},
    {"M": 64, "N": 128, "stages": 3, "persistent": 1, "consumers": 3, "tail": 1},
    {"M": 64, "N": 64, "stages": 3, "persistent": 1, "consumers": 4, "tail": 1},
)
FWD_CONSUMERS = 2  # consumer warpgroups of a forward config without the knob
# The split tail's workspace a program: TAIL_SLOTS pieces' results, TAIL_COUNTERS counters.
TAIL_SLOTS = fwd.TAIL_SLOTS.value
TAIL_COUNTERS = fwd.TAIL_COUNTERS.value

# Backward. The dK/dV program owns 128 keys (64 per consumer warpgroup) and steps M query
# rows at a time; det 1 adds the dQ kernel, whose program owns 128 query rows and steps qN keys.
BWD_CONFIGS = (
    {"M": 64, "stages": 2, "det": 0},
    {"M": 64, "stages": 3, "det": 0},
    {"M": 64, "stages": 2, "det": 0, "tma": 1},
    {"M": 64, "stages": 3, "det": 0, "tma": 1},
    # dQ queued behind dV and dK: 128-wide tiles without a mask only (`excluded` says why);
    # with the TMA reduce only: there the atomic kernels measured slower with it (0.96-0.99x)
    {"M": 64, "stages": 2, "det": 0, "tma": 1, "dqq": 1},
    {"M": 64, "stages": 3, "det": 0, "tma": 1, "dqq": 1},
    # the convert started early (bwd.py, READY): the tma1 and dqq kernels of one key block a
    # program, with the counters and the convert that waits on them
    {"M": 64, "stages": 2, "det": 0, "tma": 1, "early": 1},
    {"M": 64, "stages": 3, "det": 0, "tma": 1, "early": 1},
    {"M": 64, "stages": 2, "det": 0, "tma": 1, "dqq": 1, "early": 1},
    {"M": 64, "stages": 3, "det": 0, "tma": 1, "dqq": 1, "early": 1},
    # persistent dK/dV programs, one per SM over the key blocks (bwd._block_units): the fast
    # TMA variants and the deterministic one that wins short causal keys
    {"M": 64, "stages": 2, "det": 0, "tma": 1, "persistent": 1},
    {"M": 64, "stages": 3, "det": 0, "tma": 1, "persistent": 1},
    {"M": 64, "stages": 2, "det": 1, "qN": 64, "persistent": 1},
    {"M": 64, "stages": 2, "det": 1, "qN": 64},
    {"M": 64, "stages": 3, "det": 1, "qN": 64},
    {"M": 64, "stages": 2, "det": 1, "qN": 128},
    {"M": 64, "stages": 3, "det": 1, "qN": 128, "qS": 2},
    # 128 query rows a dK/dV step: Sᵀ and dPᵀ [64 keys, 128 queries] beside dK and dV fit the
    # consumers' registers at head dim 64 only (bwd_fp32_registers excludes wider tiles). Of
    # the five such configs run128 measured (bf16, by cycles), these two won every head-dim-64
    # row, 1.007-1.106x the best M64 kernel; M128 atomic-dQ and det1 ones gained 0-2 %.
    {"M": 128, "stages": 2, "det": 0, "tma": 1},
    {"M": 128, "stages": 2, "det": 0, "tma": 1, "persistent": 1},
    # head dim 256 (`excluded` keeps it there): 64 keys a program, the head dim split across
    # the two consumers; the 2-stage ring is the deepest that fits shared memory
    {"M": 64, "stages": 2, "det": 0, "wide": 1},
    {"M": 64, "stages": 2, "det": 1, "wide": 1},
)
# fp32 registers per consumer thread: accumulators (dK + dV, or dQ) plus the two score tiles
# (Sᵀ and dPᵀ, or S and dP). Above this ptxas spills at 240 registers a thread; at it (M 128,
# head dim 64) it keeps 16 bytes in the stack frame (docs/gluon-bwd.md).
BWD_MAX_FP32_REGS = 192
# Backward head dims: 96 runs on 128-wide tiles, as the forward's (its plain-pointer steps, the
# dQ accumulator and the dK/dV stores take the head dim itself, D, beside the tile's HEAD_DIM);
# 256 on the `wide` kernel only.
BWD_HEAD_DIMS = (64, 96, 128, 256)
WIDE_TILE_DIM = 256
# Rows per program of the preprocess (Δ, zeroing) and convert kernels: memory-bound, small.
BWD_ROWS_PER_PROGRAM = 64
BWD_KEYS_PER_PROGRAM = 128   # dK/dV: 64 per consumer (bwd.HALF_N)
WIDE_KEYS_PER_PROGRAM = 64   # dK/dV of the wide kernel: the consumers split the head dim
BWD_QUERIES_PER_PROGRAM = 128  # dQ: 64 per consumer
WIDE_QUERIES_PER_PROGRAM = 64  # dQ of the wide kernel: the consumers split the head dim

# setmaxnreg per partition: the loader needs few registers, which frees them for the two
# consumer warpgroups (accumulator M x D plus scores M x N fp32 over 128 threads each).
CONSUMER_REGS = 232
LOAD_REGS = 40
# Three consumers: 3 x 128 x 160 + 128 x 24 = 64 512 of the SM's 65 536 registers.
CONSUMER_REGS_3 = 160
LOAD_REGS_3 = 24
# Four consumers: 20 warps (the loader's padded to a warpgroup), so Triton launches with
# 65 536 / 640 rounded down to 8 = 96 registers a thread, 61 440 in all, and gives the default
# partition (consumer 0) what the others leave: 480 - 3 x 112 - 24 = 120. At 104 the 64-key
# configs spill (48-160 bytes); at 112 none does.
CONSUMER_REGS_4 = 112
LOAD_REGS_4 = 24
# (consumer, loader) registers a thread by consumer warpgroups
FWD_REGS = {2: (CONSUMER_REGS, LOAD_REGS), 3: (CONSUMER_REGS_3, LOAD_REGS_3),
            4: (CONSUMER_REGS_4, LOAD_REGS_4)}
# The backward's consumers hold two [64, D] fp32 accumulators (dK, dV) besides the scores.
BWD_CONSUMER_REGS = 240
BWD_LOAD_REGS = 24


def _runtime_args(kernel) -> tuple[str, ...]:
    params = inspect.signature(kernel.fn).parameters.values()
    return tuple(p.name for p in params if p.annotation is not gl.constexpr)


def tile_dim(head_dim: int) -> int:
    """The head dim a kernel's tiles have: the next power of two (Gluon tensor shapes are powers
    of two). Head dim 96 runs on 128-wide tiles: the TMA loads zero-fill the columns past the
    tensor's 96 (zero contributions to Q·Kᵀ, zero columns of O) and the O store drops them."""
    return 1 << (head_dim - 1).bit_length()


# Every kernel of the family starts with grid_dependency.enter() (griddepcontrol.wait before any
# global memory access), so each may be launched with programmatic stream serialization:
# Triton records the option in the kernel's metadata and the launch spec carries it as `pdl`.
LAUNCH_OPTIONS = {"launch_pdl": True}


def _tensor_map(name: str, tensor: str, rows: int, key: FunctionalKey) -> TensorMap:
    return TensorMap.tile(name, tensor, (1, 1, rows, tile_dim(key.head_dim)), key.dtype)


def _fwd_steps(key: FunctionalKey, config) -> tuple[Step, ...]:
    m, n = config["M"], config["N"]
    consumers = config.get("consumers", FWD_CONSUMERS)
    maps = (_tensor_map("q_desc", "q", m, key), _tensor_map("k_desc", "k", n, key),
            _tensor_map("v_desc", "v", n, key), _tensor_map("o_desc", "o", m, key))
    words = {"q_desc": "q_desc", "k_desc": "k_desc", "v_desc": "v_desc", "o_desc": "o_desc",
             "lse_ptr": "lse", "B": "B", "Hq": "Hq", "Hkv": "Hkv", "Sq": "Sq", "Sk": "Sk",
             "sm_scale": "sm_scale"}
    args = tuple(words[a] for a in _runtime_args(attn_fwd_pingpong))
    constexprs = {"BLOCK_M": m, "BLOCK_N": n, "HEAD_DIM": tile_dim(key.head_dim),
                  "STAGES": config["stages"], "CAUSAL": key.causal,
                  "OVERLAP": bool(config.get("overlap", 0)),
                  "PERSISTENT": bool(config.get("persistent", 0)), "CONSUMERS": consumers,
                  "CONSUMER_REGS": FWD_REGS[consumers][0], "LOAD_REGS": FWD_REGS[consumers][1]}
    if config.get("persistent"):
        grid = ((("num_sms", 1),), (), ())
    else:
        grid = ((("Sq", consumers * m),), (("B", 1), ("Hq", 1)), ())
    if config.get("tail"):
        del constexprs["CAUSAL"], constexprs["PERSISTENT"]
        constexprs["D"] = key.head_dim
        zero = _step("fwd_tail_zero", attn_fwd_tail_zero, {}, grid, {"COUNTERS": TAIL_COUNTERS})
        attention = _step("fwd", attn_fwd_pingpong_tail, words, grid, constexprs, maps)
        return zero, attention
    return (Step(name="fwd", args=args, grid=grid, tensormaps=maps,
                 kernel=TritonKernel(attn_fwd_pingpong, constexprs, num_warps=4, num_stages=1,
                                     options=LAUNCH_OPTIONS)),)


def _step(name, kernel, words, grid, constexprs, maps=()) -> Step:
    args = tuple(words.get(a, a) for a in _runtime_args(kernel))
    return Step(name=name, args=args, grid=grid, tensormaps=maps, kernel=TritonKernel(
        kernel, constexprs, num_warps=4, num_stages=1,
        # strides of plain-pointer tensors are multiples of 16 elements for every head dim
        # served; the runtime checks the promise and falls back otherwise
        divisible_by_16=tuple(a for a in args if "_stride_" in a), options=LAUNCH_OPTIONS))


def _bwd_steps(key: FunctionalKey, config) -> tuple[Step, ...]:
    """Fast: preprocess (Δ, dQ's accumulator zeroed), dK/dV with dQ added, convert.
    Deterministic: dQ (with Δ), then dK/dV; on the wide kernels preprocess, dK/dV, dQ."""
    d, m, det = tile_dim(key.head_dim), config["M"], bool(config["det"])
    dims = {"HEAD_DIM": d, "D": key.head_dim}
    rows = BWD_ROWS_PER_PROGRAM
    per_q_rows = ((("Sq", rows),), (("B", 1), ("Hq", 1)), ())
    regs = {"CONSUMER_REGS": BWD_CONSUMER_REGS, "LOAD_REGS": BWD_LOAD_REGS}
    # The deterministic variant declares no accumulator; its preprocess (the wide kernels'
    # only) gets delta in that slot and never writes it (ZERO_DQ is off).
    pre_words = {"dq_accum": "delta" if det else "dq_accum"}
    early = bool(config.get("early"))
    if early:
        # the counters are kept per dK/dV query tile, the preprocess's and convert's rows
        assert m == rows, (m, rows)
        preprocess = _step("bwd_preprocess", attn_bwd_preprocess_ready, pre_words, per_q_rows,
                           {**dims, "BLOCK_M": rows})
    else:
        preprocess = _step("bwd_preprocess", attn_bwd_preprocess, pre_words, per_q_rows,
                           {**dims, "BLOCK_M": rows, "ZERO_DQ": not det})
    dkdv_maps = (_tensor_map("q_desc", "q", m, key), _tensor_map("k_desc", "k", 64, key),
                 _tensor_map("v_desc", "v", 64, key), _tensor_map("do_desc", "do", m, key))
    dkdv_words = {"lse_ptr": "lse", "delta_ptr": "delta", "qk_scale": "sm_scale_log2"}
    keys = WIDE_KEYS_PER_PROGRAM if config.get("wide") else BWD_KEYS_PER_PROGRAM
    if config.get("persistent"):
        dkdv_grid = ((("num_sms", 1),), (), ())
    else:
        dkdv_grid = ((("Sk", keys),), (("B", 1), ("Hkv", 1)), ())
    dkdv_consts = {"BLOCK_M": m, **dims, "STAGES": config["stages"], "CAUSAL": key.causal,
                   **regs}
    if not config.get("wide") and not early:  # the early kernel is one key block a program
        dkdv_consts["PERSISTENT"] = bool(config.get("persistent", 0))
    if early:
        dkdv_kernel = attn_bwd_dkdv_dq_tma_ready
    elif config.get("wide"):
        dkdv_kernel = attn_bwd_dkdv_wide if det else attn_bwd_dkdv_wide_dq_atomic
    elif det:
        dkdv_kernel = attn_bwd_dkdv
    else:
        dkdv_kernel = attn_bwd_dkdv_dq_tma if config.get("tma") else attn_bwd_dkdv_dq_atomic
    if not det and not config.get("wide"):
        dkdv_consts["DQ_QUEUE"] = bool(config.get("dqq", 0))
    if config.get("tma"):
        # each consumer's dQ share: half the tile's columns on 128-wide tiles (both consumers,
        # every tile), else all of them (one consumer, alternate tiles)
        block = (1, 1, m, dq_share_cols(d))
        dkdv_maps += (TensorMap.tile("dq_desc", "dq_accum", block, "fp32"),)
    dkdv = _step("bwd_dkdv", dkdv_kernel, dkdv_words, dkdv_grid, dkdv_consts, dkdv_maps)
    if early:
        convert = _step("bwd_dq_convert", attn_bwd_dq_convert_ready, {}, per_q_rows,
                        {**dims, "BLOCK_M": rows, "CAUSAL": key.causal})
        return preprocess, dkdv, convert
    if not det:
        convert = _step("bwd_dq_convert", attn_bwd_dq_convert, {}, per_q_rows,
                        {**dims, "BLOCK_M": rows})
        return preprocess, dkdv, convert
    if config.get("wide"):
        # 64 query rows a program, key tiles of 64; dQ leaves by plain stores, half the head
        # dim per consumer
        wide_maps = (_tensor_map("q_desc", "q", 64, key), _tensor_map("k_desc", "k", 64, key),
                     _tensor_map("v_desc", "v", 64, key), _tensor_map("do_desc", "do", 64, key))
        dq = _step("bwd_dq", attn_bwd_dq_wide, dkdv_words,
                   ((("Sq", WIDE_QUERIES_PER_PROGRAM),), (("B", 1), ("Hq", 1)), ()),
                   {**dims, "STAGES": config["stages"], "CAUSAL": key.causal, **regs}, wide_maps)
        return preprocess, dkdv, dq
    n = config["qN"]
    dq_maps = (_tensor_map("q_desc", "q", 64, key), _tensor_map("k_desc", "k", n, key),
               _tensor_map("v_desc", "v", n, key), _tensor_map("do_desc", "do", 64, key),
               _tensor_map("dq_desc", "dq", 64, key))
    dq_grid = ((("Sq", BWD_QUERIES_PER_PROGRAM),), (("B", 1), ("Hq", 1)), ())
    dq = _step("bwd_dq", attn_bwd_dq, dkdv_words, dq_grid,
               {"BLOCK_N": n, **dims, "STAGES": config.get("qS", config["stages"]),
                "CAUSAL": key.causal, **regs}, dq_maps)
    # The dQ kernel computes Δ itself (from O and the dO tiles it holds) and leaves it for the
    # dK/dV kernel: no preprocess, so it runs first.
    return dq, dkdv


def steps(arch: str, op: str, key: FunctionalKey, config) -> tuple[Step, ...]:
    return _fwd_steps(key, config) if op == "fwd" else _bwd_steps(key, config)


def workspace(arch: str, op: str, key: FunctionalKey, config) -> tuple[Workspace, ...]:
    """Backward: Δ for both variants; the fast one adds dQ's fp32 accumulator, [B, Hq, Sq, D].
    Forward with the split tail: per program TAIL_SLOTS pieces' O (a [M, tile width] fp32
    block per consumer), their row max and sum (2 x M), and the counters."""
    if op == "fwd":
        if not config.get("tail"):
            return ()
        rows = config.get("consumers", FWD_CONSUMERS) * config["M"]
        part = TAIL_SLOTS * rows * tile_dim(key.head_dim)
        return (Workspace("tail_part", ("num_sms", f"const:{part}")),
                Workspace("tail_stat", ("num_sms", f"const:{TAIL_SLOTS * rows * 2}")),
                Workspace("tail_ctr", ("num_sms", f"const:{TAIL_COUNTERS}")))
    delta = Workspace("delta", ("B", "Hq", "Sq"))
    if config["det"]:
        return (delta,)
    accum = Workspace("dq_accum", ("B", "Hq", "Sq", "D"))
    if config.get("early"):
        # int32 counters in float32 words, one a dK/dV query tile (bwd._ready_counter)
        return delta, accum, Workspace("dq_ready", ("B", "Hq", f"Sq/{config['M']}"))
    return delta, accum


def shared_memory_bytes(head_dim: int, config, op: str = "fwd") -> int:
    """16-bit tiles plus barriers. Forward: a Q tile per consumer (reused for O unless
    persistent, which has O tiles of its own) and `stages` K and V tiles. Backward: the larger
    of the dK/dV kernel (128 keys of K and V, `stages` Q and dO tiles, and two double-buffered
    dSᵀ tiles when fast, plus two fp32 dQ staging tiles with `tma`) and the dQ kernel (two Q
    and dO tiles, `stages` K and V tiles of qN keys). The wide kernels: 64 keys of K and V,
    `stages` Q and dO tiles, and the hand-over tiles Pᵀ (fp32) and dSᵀ; the dQ kernel holds
    the same with queries and keys swapped."""
    if op == "fwd":
        q_tiles = config.get("consumers", FWD_CONSUMERS) * (2 if config.get("persistent") else 1)
        rows = q_tiles * config["M"] + 2 * config["stages"] * config["N"]
        return 2 * head_dim * rows + 1024
    m, stages = config["M"], config["stages"]
    if config.get("wide"):
        return (2 * head_dim * (2 * WIDE_KEYS_PER_PROGRAM + 2 * stages * m)
                + (4 + 2) * WIDE_KEYS_PER_PROGRAM * m + 1024)
    dkdv = 2 * head_dim * (2 * BWD_KEYS_PER_PROGRAM + 2 * stages * m)
    if not config["det"]:
        dkdv += 2 * (2 * BWD_KEYS_PER_PROGRAM * m)
    if config.get("tma"):
        dkdv += 4 * 2 * m * dq_share_cols(head_dim)
    q_stages = config.get("qS", stages)
    dq = 2 * head_dim * (4 * 64 + 2 * q_stages * config["qN"]) if config["det"] else 0
    return max(dkdv, dq) + 1024


def bwd_fp32_registers(head_dim: int, config) -> int:
    """fp32 values per consumer thread (128 threads) held at the widest point of each kernel.
    The wide kernel's consumer holds half the head dim of dK and dV, beside one score tile and
    later its half of the tile's dQ."""
    if config.get("wide"):  # the dQ kernel's consumer holds less: its dQ half and two score tiles
        half = 64 * head_dim // 2
        return max(2 * half + 64 * config["M"], 3 * half) // 128
    dkdv = (2 * 64 * head_dim + 2 * 64 * config["M"]) // 128
    dq = (64 * head_dim + 2 * 64 * config["qN"]) // 128 if config["det"] else 0
    return max(dkdv, dq)


def three_consumers_excluded(head_dim: int) -> str | None:
    """Three consumers get 160 registers a thread (consumer 0 168), and serve tile width 64.
    At 128, with O's accumulator 64 fp32 registers a thread, 128-key score tiles or the
    persistent loop's counters spill (6-200 local-memory stores in the SASS); the one config
    that fits (N64, 3 stages, overlapped, not persistent) ran correct on the H200 but measured
    a geomean 0.83x of the best two-consumer config over the 154 head-dim-96/128 prefill keys
    (run32, docs/gluon-family.md), winning 12 by at most 2 %. At 64 the softmax is as long as
    the GEMMs and a third warpgroup pays (1.11x at S >= 2048 without a mask)."""
    if tile_dim(head_dim) > 64:
        return ("three consumer warpgroups serve head dim 64 only: at wider tiles they spill "
                "or measured slower than two (docs/gluon-family.md)")
    return None


def dq_queue_excluded(key: FunctionalKey) -> str | None:
    """The queued dQ (`dqq`) was measured as a patch over the default schedule in run94 (bf16,
    by cycles, docs/gluon-bwd.md): the fastest fast kernel a row 1.004-1.023x at head dim 128
    without a mask (the tma1 2-stage kernel against itself 1.008-1.026x), but 0.957-0.993x
    under causal and 0.974-0.994x at head dim 64. Declared where it gained; head dim 96 runs
    the same 128-wide kernels (measured there under causal only, 0.94-1.00x a kernel)."""
    if key.causal or tile_dim(key.head_dim) != 128:
        return ("the dQ GEMM queued behind dV and dK serves 128-wide tiles without a mask only: "
                "measured slower under causal and at head dim 64 (run94, docs/gluon-bwd.md)")
    return None


def early_convert_excluded(key: FunctionalKey, config) -> str | None:
    """The early convert (`early`, bwd.py READY) publishes a key block's adds when its program
    ends, so it needs one block a program, the TMA adds (whose completion one thread can wait
    for) and the convert's 64-row programs on the dK/dV kernel's query tiles; and it is weighed
    first where the convert costs the most against the rows that miss 1.05x, 128-wide tiles."""
    if (not config.get("tma") or config.get("persistent") or config["M"] != BWD_ROWS_PER_PROGRAM
            or tile_dim(key.head_dim) != 128):
        return ("the early convert serves the non-persistent tma1 kernels of 64-row query tiles "
                "at head dims 96 and 128 (bwd.py, READY)")
    return None


def four_consumers_excluded(head_dim: int) -> str | None:
    """Four consumers get 112 registers a thread (consumer 0 120). O's accumulator is 32 fp32
    registers a thread at tile width 64 and 64 at 128: there even the 64-key configs spill
    (N64 3 stages overlapped 1040 bytes, N64 2 stages plain 1548 and serialized wgmmas)."""
    if tile_dim(head_dim) > 64:
        return ("four consumer warpgroups serve head dim 64 only: their 112 registers a thread "
                "do not hold a wider tile's accumulator and scores (docs/gluon-family.md)")
    return None


def excluded(arch: str, op: str, key: FunctionalKey, config) -> str | None:
    if op == "bwd" and bool(config.get("wide")) != (tile_dim(key.head_dim) == WIDE_TILE_DIM):
        return ("head dim 256 runs on the wide dK/dV kernel only, and that kernel on head dim "
                "256 only (narrower tiles fit bwd.py's, whose consumers own 64 keys each)")
    if op == "bwd" and config.get("dqq"):
        reason = dq_queue_excluded(key)
        if reason:
            return reason
    if op == "bwd" and config.get("early"):
        reason = early_convert_excluded(key, config)
        if reason:
            return reason
    if (op == "fwd" and config.get("persistent") and config.get("overlap") and config["N"] == 128
            and config["stages"] == 2 and config.get("consumers", FWD_CONSUMERS) == 2):
        if tile_dim(key.head_dim) <= 64:
            return "the 3-stage ring of this config fits at head dim 64; this one stands in for it"
    if op == "fwd" and config.get("tail") and key.causal:
        return ("the split tail serves the persistent forward without a mask: under causal a "
                "program's units are pairs of unequal tiles (fwd._unit_tiles)")
    if op == "fwd" and config.get("consumers", FWD_CONSUMERS) == 3:
        reason = three_consumers_excluded(key.head_dim)
        if reason:
            return reason
    if op == "fwd" and config.get("consumers", FWD_CONSUMERS) == 4:
        reason = four_consumers_excluded(key.head_dim)
        if reason:
            return reason
    need = shared_memory_bytes(tile_dim(key.head_dim), config, op)
    if need > SHARED_MEMORY_BYTES:
        return f"needs {need // 1024} KiB shared memory; sm_90 has {SHARED_MEMORY_BYTES // 1024} KiB"
    regs = bwd_fp32_registers(tile_dim(key.head_dim), config) if op == "bwd" else 0
    if regs > BWD_MAX_FP32_REGS:
        return (f"{regs} fp32 accumulator/score registers "
                f"per consumer thread would spill (limit {BWD_MAX_FP32_REGS})")
    return None


def key_excluded(arch: str, op: str, key: FunctionalKey) -> str | None:
    if op == "bwd" and key.head_dim not in BWD_HEAD_DIMS:
        return f"the backward serves head dims {', '.join(map(str, BWD_HEAD_DIMS))}"
    return None


def deterministic_backward(config) -> bool:
    """Whether a backward variant gives bitwise-equal results run to run: det 1 sums each query
    block's dQ in registers in a fixed order; the fast det 0 adds dQ with fp32 atomics in
    whatever order programs finish."""
    return bool(config["det"])


def default_config(arch: str, op: str, key: FunctionalKey):
    # Never selected as a default (priority 1000); this only names the first config that fits.
    configs = FWD_CONFIGS if op == "fwd" else BWD_CONFIGS
    return next((c for c in configs if excluded(arch, op, key, c) is None), configs[0])


SPEC = FamilySpec(
    name="gluon",
    backend="triton",
    archs=("sm_90",),
    ops=("fwd", "bwd"),
    functional={"dtype": ("fp16", "bf16"), "head_dim": (64, 96, 128, 256), "causal": (False, True)},
    configs={"fwd": FWD_CONFIGS, "bwd": BWD_CONFIGS},
    workspace=workspace,
    steps=steps,
    default_config=default_config,
    excluded=excluded,
    key_excluded=key_excluded,
    priority=1000,
    deterministic_backward=deterministic_backward,
    provenance={"license": "MIT", "origin": "attnpack (aot/kernels/gluon_attn), original code; "
                "correct and timed on the H200 (docs/gluon-family.md)"},
)
