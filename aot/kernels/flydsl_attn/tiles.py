"""Tile shapes and the dual-wave schedule of the FlyDSL forward, as plain Python.

Both the kernel (fwd.py) and the reference model (model.py) import these, so the model runs the
same tiles in the same order; tests/cpu/test_flydsl_attn_model.py checks that they agree.

The schedule, per workgroup of 2 wave groups (GROUPS) of WAVES_PER_GROUP waves:
  - every wave owns ROWS_PER_WAVE = 32 query rows (one 32x32 MFMA tile); group 0 owns the
    first half of the block's rows, group 1 the second half;
  - a KV tile j of BLOCK_N keys is processed in two phases:
        A_j  matrix phase (s_setprio 1): Sᵀ_j = K_j Qᵀ, and Oᵀ += Vᵀ_{j-1} Pᵀ_{j-1}
        B_j  vector phase (s_setprio 0): mask, online softmax of Sᵀ_j, Oᵀ *= alpha_j, Pᵀ_j,
             and this wave's share of the K/V traffic (LDS writes of one tile, global loads
             of the next);
  - every phase ends at a workgroup barrier; group 1 passes one extra barrier before its first
    phase and group 0 one after its last, so group 1 runs phase p while group 0 runs phase
    p + 1: one group's softmax overlaps the other group's matrix products;
  - after the last tile, one more matrix phase A_n does the last Oᵀ += Vᵀ_{n-1} Pᵀ_{n-1}.
"""
from __future__ import annotations

LN2 = 0.6931471805599453
LOG2E = 1.4426950408889634

ROWS_PER_WAVE = 32          # MFMA 32x32: one wave's query rows (N of Sᵀ = K Qᵀ)
MFMA_M = MFMA_N = 32
MFMA_K = 16                 # v_mfma_f32_32x32x16_{bf16,f16}
GROUPS = 2                  # the two alternating wave groups
WAVE_SIZE = 64
KV_STAGES = 3               # LDS ring slots: tile t lives in slot t % 3 (see slot_busy)
LDS_ROW_PAD = 8             # elements of padding per K/V row in LDS (bank spread; keeps 16 B rows)
ELEM_BYTES = 2              # bf16 / fp16
LDS_LIMIT = 160 * 1024      # gfx950 LDS per workgroup

HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "fp16")
# Defaults per head dim. 8 waves (2 per SIMD, one of each group: the ping-pong pair) leave a wave
# 256 registers; at head dim 128 a 64-key tile needs more (the compiler spilled 3-8 VGPRs to
# scratch), a 32-key tile fits in 220.
DEFAULT_CONFIGS = {64: {"waves_per_group": 4, "block_n": 64},
                   128: {"waves_per_group": 4, "block_n": 32}}
DEFAULT_CONFIG = DEFAULT_CONFIGS[128]
CONFIG_CHOICES = {"waves_per_group": (2, 4), "block_n": (32, 64)}


def check_config(head_dim: int, dtype: str, config: dict) -> dict:
    """The full config (defaults filled in), or ValueError naming the bad key."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"flydsl_attn: head_dim {head_dim} not in {HEAD_DIMS}")
    if dtype not in DTYPES:
        raise ValueError(f"flydsl_attn: dtype '{dtype}' not in {DTYPES}")
    unknown = set(config) - set(DEFAULT_CONFIG)
    if unknown:
        raise ValueError(f"flydsl_attn: unknown config keys {sorted(unknown)}; "
                         f"known: {sorted(DEFAULT_CONFIG)}")
    full = {**DEFAULT_CONFIGS[head_dim], **config}
    for key, choices in CONFIG_CHOICES.items():
        if full[key] not in choices:
            raise ValueError(f"flydsl_attn: config {key}={full[key]} not in {choices}")
    group_threads = full["waves_per_group"] * WAVE_SIZE
    if (full["block_n"] // GROUPS) * (head_dim // 8) % group_threads:
        raise ValueError(f"flydsl_attn: block_n={full['block_n']} with head_dim={head_dim} gives a "
                         f"K/V half-tile that {full['waves_per_group']} waves cannot split into "
                         "whole 16-byte loads; use a larger block_n or fewer waves")
    if head_dim == 128 and full["block_n"] == 64 and full["waves_per_group"] == 4:
        raise ValueError("flydsl_attn: head_dim 128 with block_n=64 and 4 waves per group needs "
                         "more than the 256 registers a wave has at 2 waves per SIMD (it spilled "
                         "to scratch); use block_n=32, or waves_per_group=2")
    return full


def loads_per_lane(head_dim: int, config: dict) -> int:
    """16-byte global loads per lane per tensor (K or V) for one tile share."""
    group_threads = config["waves_per_group"] * WAVE_SIZE
    return (config["block_n"] // GROUPS) * (head_dim // 8) // group_threads


def block_m(config: dict) -> int:
    """Query rows per workgroup."""
    return GROUPS * config["waves_per_group"] * ROWS_PER_WAVE


def threads(config: dict) -> int:
    return GROUPS * config["waves_per_group"] * WAVE_SIZE


def lds_pitch(head_dim: int) -> int:
    """Elements per K/V row in LDS."""
    return head_dim + LDS_ROW_PAD


def lds_slot_elems(head_dim: int, config: dict) -> int:
    """One ring slot: a K tile then a V tile, BLOCK_N rows each."""
    return 2 * config["block_n"] * lds_pitch(head_dim)


def lds_bytes(head_dim: int, config: dict) -> int:
    return KV_STAGES * lds_slot_elems(head_dim, config) * ELEM_BYTES


def num_kv_tiles(Sq_block_start: int, Sk: int, causal: bool, config: dict) -> int:
    """KV tiles a workgroup visits: past its last row's causal diagonal every key is masked.
    Both groups visit the same count, so their barrier counts match."""
    hi = min(Sk, Sq_block_start + block_m(config)) if causal else Sk
    return -(-hi // config["block_n"])


def slot(tile: int) -> int:
    return tile % KV_STAGES


def tile_written_in(group: int, j: int) -> int:
    """The K/V tile whose share a wave of `group` writes into LDS during its phase B_j.

    Tile t is read in A_t (K) and A_{t+1} (V), i.e. at barrier intervals 2t..2t+3 counted over
    both groups; it must be written in interval 2t-2 or 2t-1, after tile t-3 left its slot.
    Group 0 runs B_j in interval 2j+1, group 1 in 2j+2, hence t = j+1 for group 0 and j+2 for
    group 1. The prologue writes tile 0 (both groups) and tile 1 (group 1)."""
    return j + 1 + group


def tile_loaded_in(group: int, j: int) -> int:
    """The tile whose share a wave of `group` fetches from global memory into registers in
    B_j, to write into LDS in B_{j+1}."""
    return tile_written_in(group, j + 1)


def kv_rows_of_group(group: int, config: dict) -> range:
    """Rows of a K/V tile that `group` moves: each group moves one half."""
    half = config["block_n"] // GROUPS
    return range(group * half, (group + 1) * half)


# ---- lane mappings: where each lane's data comes from. fwd.py computes its addresses with
# these (on FlyDSL integers), and tests/cpu/test_flydsl_attn_lanes.py replays them lane by lane
# on NumPy against the MFMA and ds_read_b64_tr_b16 data layouts.
def kv_chunk(lane_in_group, group, r, head_dim: int, config: dict):
    """(row in the K/V tile, byte column) of a lane's r-th 16-byte chunk of its group's half."""
    i = lane_in_group + config["waves_per_group"] * WAVE_SIZE * r
    chunks_per_row = head_dim // 8
    return group * (config["block_n"] // GROUPS) + i // chunks_per_row, (i % chunks_per_row) * 16


def q_operand_col(lane, step):
    """First of the 8 head-dim columns of Q (row lane % 32) a lane holds for k-step `step` of
    Sᵀ = K Qᵀ; K's A operand uses the same columns."""
    return step * MFMA_K + (lane // 32) * 8


def k_operand_offset(lane, key_block, step, head_dim: int):
    """Byte offset in the K tile of a lane's 8 elements (ds_read_b128) for key block/k-step."""
    return ((key_block * MFMA_M + lane % 32) * lds_pitch(head_dim) * ELEM_BYTES
            + q_operand_col(lane, step) * ELEM_BYTES)


def v_tr_offset(lane, step, d_block, second, head_dim: int):
    """Byte offset in the V tile a lane hands to ds_read_b64_tr_b16 for PV k-step `step`
    (keys 16·step ..), head-dim block `d_block`, first (keys +4h..) or second (+8+4h..) read:
    in its 16-lane group (h = lane // 32, column half = (lane // 16) % 2), lane j reads key row
    4h + j // 4 and 4 head-dim columns starting 16·half + 4·(j % 4)."""
    key = step * MFMA_K + (lane // 32) * 4 + (lane % 16) // 4 + 8 * second
    dcol = d_block * MFMA_M + ((lane // 16) % 2) * 16 + (lane % 4) * 4
    return key * lds_pitch(head_dim) * ELEM_BYTES + dcol * ELEM_BYTES


def acc_row(lane, e):
    """Row of element e of a lane's 32x32 accumulator (its column is lane % 32)."""
    return 8 * (e // 4) + 4 * (lane // 32) + e % 4
