"""Lane-level replay of the FlyDSL kernel's data movement, on NumPy.

fwd.py takes every per-lane address from the functions in tiles.py. Here the same functions
drive a model of one wave: the K/V tiles are stored into an LDS image by the global->LDS
chunk mapping, read back by each lane as the kernel reads them, fed to a model of
v_mfma_f32_32x32x16 and of ds_read_b64_tr_b16, and the products must equal Sᵀ = K Qᵀ and
Oᵀ = Vᵀ Pᵀ computed directly. What is assumed about the hardware (and cannot be checked here):
  - 32x32 MFMA operands: lane l holds row (A) / column (B) l % 32, k-slot (l // 32, e), and the
    product pairs A and B elements of equal k-slot; the accumulator element e of lane l is at
    row 8·(e // 4) + 4·(l // 32) + e % 4, column l % 32 (the CDNA 32x32 layout);
  - ds_read_b64_tr_b16: in each group of 16 lanes, lane j reads 4 contiguous 16-bit elements;
    result lane i, element e is element i % 4 of what lane 4·e + i // 4 read (a 4x16 tile,
    read as 4 rows of 4 chunks, handed out column-wise), as documented for CDNA4 and used by
    other gfx950 kernels (Mojo's _load_tr16_b64_row distributes a 4x16 tile row-major 4x4 over
    the 16 lanes, 4 elements each).
"""
import numpy as np
import pytest

from flydsl_attn_loader import flydsl_attn

t = flydsl_attn().tiles
LANES = 64


def mfma_32x32(a_lanes, b_lanes):
    """C[i, j] = sum over k-slots (h, e) of A(lane i + 32h)[e] * B(lane j + 32h)[e]."""
    a = np.stack([a_lanes[:32], a_lanes[32:]])       # [h, i, e]
    b = np.stack([b_lanes[:32], b_lanes[32:]])       # [h, j, e]
    return np.einsum("hie,hje->ij", a, b)


def to_lanes(c):
    """A 32x32 accumulator as each lane's 16 elements."""
    return np.array([[c[t.acc_row(l, e), l % 32] for e in range(16)] for l in range(LANES)])


def ds_read_tr_b16(lds, byte_offsets):
    """ds_read_b64_tr_b16 on an LDS image of 16-bit elements."""
    src = np.stack([lds[o // 2:o // 2 + 4] for o in byte_offsets])   # [lane, 4]
    out = np.empty_like(src)
    for g in range(0, LANES, 16):
        for i in range(16):
            for e in range(4):
                out[g + i, e] = src[g + 4 * e + i // 4, i % 4]
    return out


def lds_image(k_tile, v_tile, D, cfg):
    """One ring slot as the kernel's store_kv leaves it; also checks each element is written
    exactly once."""
    pitch = t.lds_pitch(D)
    lds = np.zeros(t.lds_slot_elems(D, cfg))
    written = np.zeros((2, cfg["block_n"], D), dtype=int)
    v_base = cfg["block_n"] * pitch
    for group in range(t.GROUPS):
        for lane_in_group in range(cfg["waves_per_group"] * LANES):
            for r in range(t.loads_per_lane(D, cfg)):
                row, byte_col = t.kv_chunk(lane_in_group, group, r, D, cfg)
                c0 = byte_col // 2
                lds[row * pitch + c0:row * pitch + c0 + 8] = k_tile[row, c0:c0 + 8]
                lds[v_base + row * pitch + c0:v_base + row * pitch + c0 + 8] = v_tile[row, c0:c0 + 8]
                written[:, row, c0:c0 + 8] += 1
    assert (written == 1).all()
    return lds


@pytest.mark.parametrize("D,config", [(64, {}), (128, {}), (128, {"block_n": 64, "waves_per_group": 2}),
                                      (64, {"block_n": 32, "waves_per_group": 2})])
def test_one_wave_one_tile(D, config):
    cfg = t.check_config(D, "bf16", config)
    N = cfg["block_n"]
    rng = np.random.default_rng(D + N)
    q = rng.standard_normal((32, D))
    k_tile, v_tile = rng.standard_normal((N, D)), rng.standard_normal((N, D))
    lds = lds_image(k_tile, v_tile, D, cfg)
    pitch_b = t.lds_pitch(D) * t.ELEM_BYTES
    v_base_b = N * pitch_b

    # Sᵀ = K Qᵀ, one 32-key block at a time
    s_lanes = []
    for nb in range(N // t.MFMA_M):
        c = np.zeros((32, 32))
        for step in range(D // t.MFMA_K):
            a = np.stack([lds[t.k_operand_offset(l, nb, step, D) // 2:][:8] for l in range(LANES)])
            b = np.stack([q[l % 32, t.q_operand_col(l, step):][:8] for l in range(LANES)])
            c += mfma_32x32(a, b)
        s_lanes.append(to_lanes(c))
        np.testing.assert_allclose(c, k_tile[nb * 32:(nb + 1) * 32] @ q.T, rtol=1e-12, atol=1e-12)

    # Pᵀ from the Sᵀ accumulators (any values: use the scores), Oᵀ = Vᵀ Pᵀ via transposed reads
    p_full = np.zeros((32, N))          # P[q, key] as the lanes hold it
    for nb, lanes in enumerate(s_lanes):
        for l in range(LANES):
            for e in range(16):
                p_full[l % 32, nb * 32 + t.acc_row(l, e)] = lanes[l, e]
    np.testing.assert_allclose(p_full, q @ k_tile.T, rtol=1e-12, atol=1e-12)
    for db in range(D // t.MFMA_M):
        c = np.zeros((32, 32))
        for step in range(N // t.MFMA_K):
            lo = ds_read_tr_b16(lds, [v_base_b + t.v_tr_offset(l, step, db, 0, D) for l in range(LANES)])
            hi = ds_read_tr_b16(lds, [v_base_b + t.v_tr_offset(l, step, db, 1, D) for l in range(LANES)])
            a = np.concatenate([lo, hi], axis=1)
            nb, half = divmod(step, 2)
            b = s_lanes[nb][:, 8 * half:8 * half + 8]
            c += mfma_32x32(a, b)
        expect = v_tile[:, db * 32:(db + 1) * 32].T @ p_full.T
        np.testing.assert_allclose(c, expect, rtol=1e-10, atol=1e-10)


def test_softmax_and_store_lane_facts():
    """The facts fwd.py's softmax and epilogue rely on: a lane's keys are 4h + a lane-free
    offset (the mask compares immediates); the model's half split is (key // 4) % 2 == h; an
    O store writes 4 adjacent head dims per band."""
    for l in range(LANES):
        h = l // 32
        for e in range(16):
            assert t.acc_row(l, e) == t.acc_row(0, e) + 4 * h
            assert (t.acc_row(l, e) // 4) % 2 == h
        for band in range(4):
            assert [t.acc_row(l, 4 * band + i) for i in range(4)] == \
                [t.acc_row(l, 4 * band) + i for i in range(4)]
