"""The preprocess on a few SMs (fortieth session, docs/gluon-bwd.md, "Next step, not built: the
preprocess beside the dK/dV kernel", item 1): how fast P programs, one an SM, move the fast
backward's 268 MB (B16 H16 S1024 d128: O and dO read, Δ written, zeros over dQ's fp32
accumulator), for P from 8 to 132. The plan runs the preprocess beside the dK/dV kernel on SMs
of its own; it pays only if a few SMs get near the DRAM's rate, since the dK/dV kernel loses
P SMs for as long as the preprocess takes.

Each variant is a persistent grid of P programs walking tiles of BLOCK_M rows with a stride of
P, checked against torch before it is timed (triton.testing.do_bench's median, L2 cleared
between reps). A grid of at most 132 programs on an idle GPU gets one SM a program. Printed
for each: µs, TB/s, and the model's saving on a 132-SM GPU, the shipped preprocess's time less
P/132 of the variant's (the SM-time the dK/dV kernel would lose), before any DRAM contention
between the two.
    usage (device, repo root): python3 .carry/preprocess_share.py
"""
from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from preprocess_sweep import Work  # beside this file: the same inputs, checks and timing


@gluon.jit
def _persistent(o, do, delta, acc, Sq, tiles, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                WARPS: gl.constexpr):
    """Δ and the zeroed accumulator of tiles program_id, program_id + P, ... of BLOCK_M rows of
    contiguous [B, H, S, D] tensors (Sq a multiple of BLOCK_M)."""
    lanes_d: gl.constexpr = HEAD_DIM // 8
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // lanes_d, lanes_d], [WARPS, 1], [1, 0])
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    zeros = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout)
    per_head = Sq // BLOCK_M
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        bh = tile // per_head
        rows = (tile % per_head) * BLOCK_M + gl.arange(0, BLOCK_M,
                                                       layout=gl.SliceLayout(1, layout))
        at = (bh.to(gl.int64) * Sq * HEAD_DIM + gl.expand_dims(rows.to(gl.int64) * HEAD_DIM, 1)
              + gl.expand_dims(cols, 0))
        o_tile = gl.load(o + at).to(gl.float32)
        do_tile = gl.load(do + at).to(gl.float32)
        gl.store(acc + at, zeros)
        gl.store(delta + bh.to(gl.int64) * Sq + rows, gl.sum(o_tile * do_tile, 1))


def share(B: int, H: int, S: int, D: int) -> None:
    work = Work(B, H, S, D)
    o, do, delta, acc, mb = work.o, work.do, work.delta, work.acc, work.mb
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shipped_us, ok, err = work.timed(work.shipped)
    print(f"B{B} H{H} S{S} d{D}: {mb:.0f} MB read and written, {sms} SMs", flush=True)
    print(f"  {'shipped (64 rows, 4 warps, every SM)':40s} {shipped_us:8.1f} us  "
          f"{mb / shipped_us:6.2f} TB/s  {'ok' if ok else 'WRONG'} (Δ error {err:.1e})", flush=True)
    for rows, warps in ((64, 4), (128, 8), (128, 16), (256, 16)):
        tiles = B * H * (S // rows)
        for programs in (8, 16, 24, 32, 48, 66, sms):
            run = (lambda r=rows, w=warps, p=programs, t=tiles: _persistent[(p,)](
                o, do, delta, acc, S, t, HEAD_DIM=D, BLOCK_M=r, WARPS=w, num_warps=w))
            us, ok, err = work.timed(run)
            saving = shipped_us - us * programs / sms
            print(f"  {f'P={programs}, {rows} rows, {warps} warps':40s} {us:8.1f} us  "
                  f"{mb / us:6.2f} TB/s  {'ok' if ok else 'WRONG'} (Δ error {err:.1e})  "
                  f"model saving {saving:6.1f} us", flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), flush=True)
    share(16, 16, 1024, 128)
