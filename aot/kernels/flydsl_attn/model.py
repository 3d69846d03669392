"""A PyTorch model of the FlyDSL kernel's schedule, runnable on the CPU.

It runs what fwd.py runs, tile by tile and phase by phase, in the same order:
  - a workgroup owns tiles.block_m(config) query rows, each wave 32 of them, group 0 the first
    half and group 1 the second;
  - the phases A_0, B_0, A_1, ..., B_{n-1}, A_n of both groups are interleaved by barrier
    interval exactly as the barriers order them (group g runs phase p in interval p + g);
  - K/V tiles pass through a 3-slot LDS ring written by halves, each group its rows, in the
    phase tiles.tile_written_in() names; every read checks that its slot holds the tile it
    expects, written in an earlier interval, so a schedule hazard fails the model loudly;
  - the softmax is the kernel's: scores masked to -inf (keys past Sk; causal top-left), base-2
    running max m on scaled scores, p = exp2(s·c - m), alpha = exp2(m_old - m_new), Oᵀ *= alpha,
    P rounded to the input dtype before Pᵀ·V, the row sum l kept as two partial sums (the lane
    halves: keys with (key // 4) % 2 == h), added at the end; LSE = (m + log2 l)·ln 2.
Accumulation is in `acc_dtype` (float32 like the MFMA accumulators, or float64 for tests).
"""
from __future__ import annotations

import torch

from . import tiles


class ScheduleError(AssertionError):
    pass


class _LdsRing:
    """Which tile's rows each slot holds, and in which barrier interval they were written."""

    def __init__(self, config: dict):
        self.block_n = config["block_n"]
        self.rows = [[None] * self.block_n for _ in range(tiles.KV_STAGES)]
        self.config = config

    def write(self, group: int, tile: int, interval: int, reads_now: set):
        s = tiles.slot(tile)
        if s in reads_now:
            raise ScheduleError(f"interval {interval}: group {group} writes slot {s} (tile {tile}) "
                                "while the other group reads it")
        for r in tiles.kv_rows_of_group(group, self.config):
            self.rows[s][r] = (tile, interval)

    def read(self, tile: int, interval: int):
        s = tiles.slot(tile)
        for r, entry in enumerate(self.rows[s]):
            if entry is None or entry[0] != tile or entry[1] >= interval:
                raise ScheduleError(f"interval {interval}: reading tile {tile} from slot {s}, but row "
                                    f"{r} holds {entry} (tile, written in interval)")


def _group_phases(n_tiles: int) -> list[tuple[str, int]]:
    """One group's phases in order: A_0, B_0, ..., B_{n-1}, A_n."""
    phases = []
    for j in range(n_tiles):
        phases += [("A", j), ("B", j)]
    return phases + [("A", n_tiles)]


def forward(q, k, v, causal: bool, sm_scale: float, config: dict | None = None,
            acc_dtype=torch.float32, check_schedule: bool = True):
    """(o, lse) for q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]; o in q's dtype, lse float32 [B, Hq, Sq]."""
    B, Hq, Sq, D = q.shape
    _, Hkv, Sk, _ = k.shape
    cfg = tiles.check_config(D, "fp16" if q.dtype == torch.float16 else "bf16", config or {})
    if Hq % Hkv:
        raise ValueError(f"Hq={Hq} is not a multiple of Hkv={Hkv}")
    if Sk < 1:
        raise ValueError("Sk must be >= 1 (the runtime launches no empty problem; see family.py)")
    BLOCK_M, BLOCK_N = tiles.block_m(cfg), cfg["block_n"]
    rows_per_group = BLOCK_M // tiles.GROUPS
    c = sm_scale * tiles.LOG2E
    o = torch.zeros(B, Hq, Sq, D, dtype=acc_dtype)
    lse = torch.zeros(B, Hq, Sq, dtype=torch.float32)
    key_half = (torch.arange(BLOCK_N) // 4) % 2      # which lane half holds each key of a tile
    for b in range(B):
        for h in range(Hq):
            h_kv = h // (Hq // Hkv)
            for start_m in range(0, Sq, BLOCK_M):
                n_tiles = tiles.num_kv_tiles(start_m, Sk, causal, cfg)
                # padded operands, as the buffer loads see them (rows past the end read 0)
                rows = torch.arange(start_m, start_m + BLOCK_M)
                q_blk = torch.zeros(BLOCK_M, D, dtype=acc_dtype)
                valid = rows < Sq
                q_blk[valid] = q[b, h, rows[valid]].to(acc_dtype)

                def kv_tile(t, src):
                    keys = torch.arange(t * BLOCK_N, (t + 1) * BLOCK_N)
                    out = torch.zeros(BLOCK_N, D, dtype=acc_dtype)
                    ok = keys < Sk
                    out[ok] = src[b, h_kv, keys[ok]].to(acc_dtype)
                    return out

                state = []
                for g in range(tiles.GROUPS):
                    state.append({
                        "rows": rows[g * rows_per_group:(g + 1) * rows_per_group],
                        "q": q_blk[g * rows_per_group:(g + 1) * rows_per_group],
                        "m": torch.full((rows_per_group,), float("-inf"), dtype=acc_dtype),
                        "l": torch.zeros(tiles.GROUPS, rows_per_group, dtype=acc_dtype),
                        "acc": torch.zeros(rows_per_group, D, dtype=acc_dtype),
                        "s": None, "p": None, "phases": _group_phases(n_tiles),
                    })
                ring = _LdsRing(cfg)
                # prologue (before the first barrier): every group writes tiles 0 and 1
                for g in range(tiles.GROUPS):
                    ring.write(g, 0, -1, set())
                    ring.write(g, 1, -1, set())
                n_intervals = len(state[0]["phases"]) + tiles.GROUPS - 1
                for interval in range(n_intervals):
                    running = [(g, state[g]["phases"][interval - g]) for g in range(tiles.GROUPS)
                               if 0 <= interval - g < len(state[g]["phases"])]
                    reads = set()
                    for g, (kind, j) in running:  # reads first: the slots busy this interval
                        if kind == "A":
                            if j < n_tiles:
                                reads.add(tiles.slot(j))
                            if j > 0:
                                reads.add(tiles.slot(j - 1))
                    for g, (kind, j) in running:
                        st = state[g]
                        if kind == "A":
                            if j > 0:  # Oᵀ += Vᵀ_{j-1} Pᵀ_{j-1}
                                if check_schedule:
                                    ring.read(j - 1, interval)
                                st["acc"] = st["acc"] + st["p"].to(acc_dtype) @ kv_tile(j - 1, v)
                            if j < n_tiles:  # Sᵀ_j = K_j Qᵀ (kept as S here)
                                if check_schedule:
                                    ring.read(j, interval)
                                st["s"] = st["q"] @ kv_tile(j, k).T
                        else:
                            s = st["s"]
                            keys = torch.arange(j * BLOCK_N, (j + 1) * BLOCK_N)
                            visible = (keys[None, :] < Sk).expand(len(st["rows"]), -1)
                            if causal:
                                visible = visible & (keys[None, :] <= st["rows"][:, None])
                            s = torch.where(visible, s, torch.tensor(float("-inf"), dtype=acc_dtype))
                            m_new = torch.maximum(st["m"], s.max(dim=1).values * c)
                            p = torch.exp2(s * c - m_new[:, None])
                            alpha = torch.exp2(st["m"] - m_new)
                            halves = torch.stack([p[:, key_half == hh].sum(dim=1)
                                                  for hh in range(tiles.GROUPS)])
                            st["l"] = st["l"] * alpha[None, :] + halves
                            st["acc"] = st["acc"] * alpha[:, None]
                            st["m"] = m_new
                            st["p"] = p.to(q.dtype)  # the MFMA's B operand is bf16/fp16
                            ring.write(g, tiles.tile_written_in(g, j), interval, reads)
                for g in range(tiles.GROUPS):
                    st = state[g]
                    l_total = st["l"].sum(dim=0)
                    keep = st["rows"] < Sq
                    r = st["rows"][keep]
                    o[b, h, r] = (st["acc"] / l_total[:, None])[keep]
                    lse[b, h, r] = ((st["m"] + torch.log2(l_total)) * tiles.LN2)[keep].float()
    return o.to(q.dtype) if q.dtype in (torch.bfloat16, torch.float16) else o, lse
