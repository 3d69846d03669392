"""How far the fast backward's preprocess is from the GPU's copy bandwidth (thirty-ninth
session, docs/gluon-bwd.md, "The accumulator's zeroing moved into the dK/dV kernel").

run167 timed it at 97 µs on an H100 for the MHA rows of bench/shapes.json: it reads O and dO
(2 x 67 MB bf16) and writes Δ and zeros over dQ's fp32 accumulator (134 MB), 268 MB, about
2.8 TB/s. This times, at B16 H16 S1024 d128 (and one head-dim-64 row), the shipped kernel
(`bwd.attn_bwd_preprocess`, 64 rows a program, 4 warps) beside variants of the same work, all
checked against torch first, and two references for the bytes: torch's copy of one fp32 tensor
of the accumulator's size into another (`acc.copy_(src)`: the same 268 MB, read 134 and write
134) and `acc.zero_()` alone.
Each time is triton.testing.do_bench's median (the L2 cleared between reps).
    usage (device, repo root): python3 .carry/preprocess_sweep.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "aot" / "kernels"))
from gluon_attn import bwd  # noqa: E402  the shipped kernel, as the runtime's build compiles it


@gluon.jit
def _variant(o, do, delta, acc, Sq, Hq, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
             WARPS: gl.constexpr, ZERO: gl.constexpr, ZERO_FIRST: gl.constexpr):
    """The preprocess's work on contiguous [B, H, S, D] tensors, BLOCK_M rows a program over
    WARPS warps; ZERO_FIRST issues the zero stores before the loads."""
    lanes_d: gl.constexpr = HEAD_DIM // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // lanes_d, lanes_d], [WARPS, 1], [1, 0])
    bh = gl.program_id(1)
    rows = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    base = bh.to(gl.int64) * Sq * HEAD_DIM
    at = base + gl.expand_dims(rows.to(gl.int64) * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    if ZERO and ZERO_FIRST:
        gl.store(acc + at, gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout))
    o_tile = gl.load(o + at).to(gl.float32)
    do_tile = gl.load(do + at).to(gl.float32)
    gl.store(delta + bh.to(gl.int64) * Sq + rows, gl.sum(o_tile * do_tile, 1))
    if ZERO and not ZERO_FIRST:
        gl.store(acc + at, gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout))


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


class Work:
    """The preprocess's inputs at B, H, S, D (contiguous bf16 O and dO), its outputs (Δ, dQ's
    fp32 accumulator), torch's Δ, and the MB a call with the zeroing moves."""

    def __init__(self, B: int, H: int, S: int, D: int):
        self.shape = (B, H, S, D)
        self.o = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        self.do = torch.randn_like(self.o)
        self.want = (self.o.float() * self.do.float()).sum(-1)
        self.delta = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        self.acc = torch.empty(B, H, S, D, device="cuda", dtype=torch.float32)
        self.mb = (2 * self.o.numel() * 2 + self.acc.numel() * 4) / 1e6

    def timed(self, run, zero: bool = True) -> tuple[float, bool, float]:
        """(µs, whether Δ and (with `zero`) the accumulator came out right, Δ's error) of
        `run`, checked once on outputs filled with NaN first, then timed."""
        self.delta.fill_(float("nan"))
        self.acc.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        err = (self.delta - self.want).abs().max().item()
        ok = (err < 1e-2 * max(1.0, self.want.abs().max().item())
              and (not zero or not self.acc.any().item()))
        return _time(run), ok, err

    def shipped(self) -> None:
        """The shipped preprocess (64 rows a program, 4 warps) on every SM."""
        B, H, S, D = self.shape
        s = self.o.stride()
        bwd.attn_bwd_preprocess[(triton.cdiv(S, 64), B * H)](
            self.o, self.do, self.delta, self.acc, s[0], s[1], s[2], s[0], s[1], s[2], H, S,
            HEAD_DIM=D, D=D, BLOCK_M=64, ZERO_DQ=True, num_warps=4)


def sweep(B: int, H: int, S: int, D: int) -> None:
    work = Work(B, H, S, D)
    o, do, delta, acc, mb = work.o, work.do, work.delta, work.acc, work.mb

    def check(name: str, run, zero: bool = True) -> None:
        moved = mb if zero else mb / 2  # without the zeroing: O and dO read, Δ written
        us, ok, err = work.timed(run, zero)
        print(f"  {name:44s} {us:8.1f} us  {moved / us:6.2f} TB/s  {'ok' if ok else 'WRONG'}"
              f" (Δ error {err:.1e})", flush=True)

    print(f"B{B} H{H} S{S} d{D}: {mb:.0f} MB read and written", flush=True)
    check("shipped (64 rows, 4 warps)", work.shipped)
    for rows, warps, zero_first in ((64, 4, True), (128, 4, False), (128, 8, False),
                                    (128, 8, True), (32, 4, False), (32, 2, False),
                                    (64, 2, False), (256, 8, False)):
        run = (lambda r=rows, w=warps, z=zero_first: _variant[(S // r, B * H)](
            o, do, delta, acc, S, H, HEAD_DIM=D, BLOCK_M=r, WARPS=w, ZERO=True, ZERO_FIRST=z,
            num_warps=w))
        check(f"{rows} rows, {warps} warps{', zeros first' if zero_first else ''}", run)
    check("64 rows, 4 warps, no zeroing (reads only)",
          lambda: _variant[(S // 64, B * H)](o, do, delta, acc, S, H, HEAD_DIM=D, BLOCK_M=64,
                                             WARPS=4, ZERO=False, ZERO_FIRST=False, num_warps=4),
          zero=False)
    src = torch.empty(B, H, S, D, device="cuda", dtype=torch.float32)
    for name, run, moved in (("torch acc.zero_()", acc.zero_, acc.numel() * 4 / 1e6),
                             ("torch acc.copy_(src), both fp32", lambda: acc.copy_(src),
                              acc.numel() * 8 / 1e6)):
        us = _time(run)
        print(f"  {name:44s} {us:8.1f} us  {moved / us:6.2f} TB/s ({moved:.0f} MB)", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    sweep(16, 16, 1024, 128)
    sweep(16, 32, 1024, 64)
