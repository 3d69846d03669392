"""attnpack tune: measure every candidate kernel per key on the local GPU, keep the fastest
correct one.

For each key (op, dtype, head dim, causal, GQA class, Sq bucket, Sk bucket, streams class):
1. the candidates are the tuning archive's kernels (`attnpack build --all`) for that op and
   functional key, launched through the runtime, forced by name;
2. each is checked against a float32 math reference at a small batch; a candidate with any NaN,
   or an error more than REJECT_FACTOR times the best candidate's (with a floor), is rejected
   and recorded as such, never selected;
3. the survivors are timed at steady state at a size big enough that launch overhead cannot
   decide (warm-up, L2 flush before every run, CUDA events, median of REPS), taking turns call
   by call (`Bench.turns_us`), so every candidate meets the same clocks; a prefill key of
   the lowest or the highest streams class at two sizes, its timing batch's and one at the
   class's bound (`timing_shapes`), the winner then being the fastest by the geometric mean
   of each candidate's time over the fastest at either size (`class_scores`); a prefill key
   named in another class than its timing batch's (`--keys` with `streams`) at that class's
   bound alone (`class_bound_batch`);
4. the close contenders (within RUNOFF_MARGIN of the fastest, at most RUNOFF_MOST) are timed
   again in RUNOFF_ROUNDS rounds of turns among themselves, and each keeps the median of all
   its runs (`runoff`);
5. PyTorch's native backends (cuDNN, flash, efficient) are timed on the same shape, before the
   candidates and again after them, each keeping the median of both runs (`pooled_medians`).
The entry records whether the winner is deterministic and, if not, the fastest deterministic
candidate (`attnpack.tune.db.record_determinism`).
The result is written after every key, so an interrupted run keeps what it measured and a
re-run skips keys already in the output.
"""
from __future__ import annotations

import datetime
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Iterable

from attnpack.tune.buckets import SEQLEN_BOUNDS, STREAM_BOUNDS, seqlen_bucket, streams_class
from attnpack.keys import TuneKey
from attnpack.tune.db import (TuningDb, entry_gpu, gpu_file_name, load_db, record_determinism,
                             save_db)

REJECT_FACTOR = 3.0
ERROR_FLOOR = {"bf16": 4e-3, "fp16": 5e-4}    # no candidate is rejected below these errors
TIMED_FLOP = 2e11        # forward FLOPs per timed call; ~0.3 ms on an H200 in bf16
CHECK_HEADS_KV = 2        # the correctness check runs at B=1, Hkv=2
REPS, WARMUP = 20, 5
SETTLE_SECONDS = 1.0
MAX_GRID_Y = 65535
TIMED_BYTES = 8 << 30
TIMING_HEADS_KV = 8
# The backward's dK/dV kernels run about one program per BWD_KEYS_PER_PROGRAM keys of a (batch,
# KV head) pair (the Gluon ones exactly; 64 in its head-dim-256 wide kernels; the triton ones
# 64 or 128 by config). A long key's TIMED_FLOP batch can leave them two waves on an H200 (B = 1
# x 8 KV heads at Sk 4096: 256 programs), where the tail of a causal grid decides, and a kernel
# that loses at the shapes the key serves wins the key: run62 picked the deterministic Gluon
# backward at GQA 8, head dim 128, causal, Sq = Sk 4096 by 1.4 % at B = 1, while at B = 4 (1024
# programs; Qwen2.5-72B) the fast one was 1.14x faster in the same run (run63's cycles), and at
# 384-512 programs 1.05-1.13x. Backward keys are timed with at least BWD_MIN_PROGRAMS of them,
# as far as the key's streams class and the caps allow.
BWD_MIN_PROGRAMS = 512
BWD_KEYS_PER_PROGRAM = 128
# decode keys: sequences timed per streams class; x 8 KV heads, 32, 128, 256 and 512 (batch, KV
# head) pairs. DECODE_CLASS is the class a decode entry with neither class nor shape (written
# before the classes, when decode keys were timed at 16 sequences) was measured in.
DECODE_SEQUENCES = {64: 4, 128: 16, 256: 32, 512: 64}
DECODE_CLASS = 128
# The run-off. The same kernel timed at the same key in two tuning runs (run42 and run43 of
# 2026-12-02, on two machines) differed by 0.88-1.14x (5-95 % of 1540 pairs, after the
# machines' 0.97x): one median of REPS decides little between candidates that close.
RUNOFF_MARGIN = 0.08
RUNOFF_MOST = 4
RUNOFF_ROUNDS = 2


# The diagonal from 128 up, plus short-query and prefix-like shapes; decode (Sq bucket 16) keys
# are tuned where models need them (`attnpack tune --keys`), not over the whole grid.
STANDARD_PAIRS = tuple((s, s) for s in SEQLEN_BOUNDS if s >= 128) + (
    (128, 4096), (1024, 8192), (4096, 1024))


def standard_keys(ops=("fwd", "bwd"), dtypes=("bf16", "fp16"), head_dims=(64, 128),
                  gqas=(1, 2, 4, 8), pairs=STANDARD_PAIRS) -> list[TuneKey]:
    """The shipped grid: Sq = Sk over every bucket, plus short-query and prefix-like Sq != Sk.

    `pairs` are (Sq, Sk) in tokens; each key holds their buckets."""
    pairs = sorted({(seqlen_bucket(sq), seqlen_bucket(sk)) for sq, sk in pairs})
    return [natural_key(op, dt, hd, causal, g, sq, sk)
            for op in ops for dt in dtypes for hd in head_dims for causal in (False, True)
            for g in gqas for sq, sk in pairs]


def natural_key(op: str, dtype: str, head_dim: int, causal: bool, gqa: int, sq: int,
                sk: int) -> TuneKey:
    """The key with the streams class it is tuned in when none is named: a prefill key's is
    its timing batch's (B·Hkv), a decode key's DECODE_CLASS (16 sequences)."""
    streams = (DECODE_CLASS if sq <= SEQLEN_BOUNDS[0] else
               streams_class(_prefill_batch(op, head_dim, causal, gqa, sq, sk), TIMING_HEADS_KV))
    return TuneKey(op, dtype, head_dim, bool(causal), gqa, sq, sk, streams)


def keys_from_fields(fields: dict) -> list[TuneKey]:
    """The keys one entry of a `--keys` file names: the TuneKey fields, where `streams` may be
    left out. Then a prefill key is tuned in its timing batch's class (natural_key) and a decode
    key in every class, since which decode kernel wins depends on it (buckets.py)."""
    if "streams" in fields:
        return [TuneKey(**fields)]
    key = natural_key(**fields)
    if key.sq > SEQLEN_BOUNDS[0]:
        return [key]
    return [key._replace(streams=c) for c in STREAM_BOUNDS]


def flops(op: str, B: int, Hq: int, Sq: int, Sk: int, D: int, causal: bool) -> float:
    """4·B·Hq·D per visible (query, key) pair forward; bwd 2.5x. Without a mask every pair is
    visible (FlashAttention's 4·B·Hq·Sq·Sk·D). Causal is top-left aligned, as F.sdpa's: query
    i sees keys 0..i, so Sq << Sk does a sliver of the work, not half of it."""
    pairs = causal_pairs(Sq, Sk) if causal else Sq * Sk
    return 4.0 * B * Hq * pairs * D * (2.5 if op == "bwd" else 1.0)


def causal_pairs(Sq: int, Sk: int) -> int:
    """(query, key) pairs a top-left causal mask keeps: sum over i < Sq of min(i + 1, Sk)."""
    if Sq <= Sk:
        return Sq * (Sq + 1) // 2
    return Sk * (Sk + 1) // 2 + (Sq - Sk) * Sk


def _most_batches(op: str, hq: int, hkv: int, sq: int, sk: int, head_dim: int) -> int:
    """The largest timing batch the caps allow: B·Hq within a grid's y dimension, and q, k, v,
    o (with their gradients for bwd) within TIMED_BYTES; at least 1."""
    bytes_per_batch = 2 * head_dim * (2 * hq * sq + 2 * hkv * sk) * (2 if op == "bwd" else 1)
    return max(1, min(MAX_GRID_Y // hq, TIMED_BYTES // bytes_per_batch))


def _prefill_batch(op: str, head_dim: int, causal: bool, gqa: int, sq: int, sk: int) -> int:
    hkv, hq = TIMING_HEADS_KV, TIMING_HEADS_KV * gqa
    per_batch = flops("fwd", 1, hq, sq, sk, head_dim, causal)
    most = _most_batches(op, hq, hkv, sq, sk, head_dim)
    batch = min(most, math.ceil(TIMED_FLOP / per_batch))
    if op == "bwd":
        if streams_class(batch, hkv) == STREAM_BOUNDS[0]:
            most = min(most, max(1, STREAM_BOUNDS[0] // hkv))  # the key keeps its class
        programs = math.ceil(sk / BWD_KEYS_PER_PROGRAM) * hkv
        batch = max(batch, min(most, math.ceil(BWD_MIN_PROGRAMS / programs)))
    return batch


def timing_shape(key: TuneKey) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, Hkv, Sq, Sk, D): Hkv=8, Hq=8·gqa, B grown until a call does TIMED_FLOP (a
    backward's also until its dK/dV kernel runs BWD_MIN_PROGRAMS programs, within its streams
    class), but B·Hq stays within a launch grid's y dimension (MAX_GRID_Y), where the kernels
    put it, and q, k, v, o (with their gradients for bwd) within TIMED_BYTES. Such a key's
    streams class is that batch's (natural_key); a key named in another class is timed at that
    class's bound instead (class_bound_batch).

    Decode keys (Sq bucket 16) are timed as serving runs them instead: one new token (Sq = 1)
    for the batch DECODE_SEQUENCES names for the key's streams class. Grown to TIMED_FLOP the
    batch would fill the GPU with (batch, head) programs and hide what decode kernels are for:
    few programs, long K/V."""
    hkv, hq = TIMING_HEADS_KV, TIMING_HEADS_KV * key.gqa
    if key.sq <= SEQLEN_BOUNDS[0]:
        if key.streams not in DECODE_SEQUENCES:
            raise ValueError(f"{key.text}: decode keys are tuned in streams classes "
                             f"{sorted(DECODE_SEQUENCES)}")
        return DECODE_SEQUENCES[key.streams], hq, hkv, 1, key.sk, key.head_dim
    B = _prefill_batch(key.op, key.head_dim, key.causal, key.gqa, key.sq, key.sk)
    if streams_class(B, hkv) != key.streams:
        B = class_bound_batch(key)
    return B, hq, hkv, key.sq, key.sk, key.head_dim


def class_bound_batch(key: TuneKey) -> int:
    """The batch a prefill key named in another streams class than its timing batch's is timed
    at: the class's bound, B·Hkv = key.streams (8 KV heads: B 8, 16, 32, 64), where rows sit
    (bench/shapes.json's B16 x 16 heads at S1024 is 256 pairs, class 256, while its key's
    timing batch, B47 x 8, is in 512). A batch of a few hundred pairs gives a GPU of 132 SMs a
    round count whose last round the winner depends on (docs/tuning.md, "Keys in the rows'
    classes"). Refused where the caps (grid, memory) keep the batch out of that class."""
    hkv, hq = TIMING_HEADS_KV, TIMING_HEADS_KV * key.gqa
    B = min(max(1, key.streams // hkv),
            _most_batches(key.op, hq, hkv, key.sq, key.sk, key.head_dim))
    if streams_class(B, hkv) != key.streams:
        raise ValueError(f"{key.text}: streams class {key.streams} would be timed at B={B} x "
                         f"{hkv} KV heads, class {streams_class(B, hkv)}; tune it in the class "
                         f"of its timing batch (leave `streams` out of the keys file)")
    return B


def timing_shapes(key: TuneKey) -> list[tuple[int, int, int, int, int, int]]:
    """The shapes a key is timed at: timing_shape's, and for a prefill key of the lowest or the
    highest streams class also one at the class's bound, where the rows it serves sit but its
    timing batch does not (a key named in another class than its timing batch's is timed at
    that class's bound alone, class_bound_batch):
    - class 64 (B·Hkv up to STREAM_BOUNDS[0], long sequences) also at its top, B·Hkv = 64,
      where the caps allow a larger batch. Its keys are timed at a few pairs: run98 timed every
      kernel of the bf16 head-dim-64 key without a mask at S8192 at both ends, B2 and B8 x 8
      KV heads (docs/device-runs/2026-12-03/run98_c4_tests_timing): the four-consumer N64
      kernel was the fastest at B2 by 2 % and more than 8 % behind the fastest at B8, which the
      three-consumer N128 one led there.
    - class 512 (more than STREAM_BOUNDS[-2] pairs, open above: short sequences, whose timing
      batch grows to 1000-3000 pairs) also at B·Hkv = STREAM_BOUNDS[-1], 512 pairs, where
      training batches of short sequences sit (B32 x 16 heads, B64 x 8). Run116 timed every
      bf16 Gluon backward kernel at the bench rows by turns: at B32 H16 S512 head dim 128 the
      deterministic qN64 kernels were 2.4-3.1 % faster than the key's pick, which had won by
      0.4 % at its timing batch, B187 x 8 (docs/tuning.md, "Both ends of the open class")."""
    shape = timing_shape(key)
    B, Hq, Hkv, Sq, Sk, D = shape
    if key.sq <= SEQLEN_BOUNDS[0] or key.streams != natural_key(
            key.op, key.dtype, key.head_dim, key.causal, key.gqa, key.sq, key.sk).streams:
        return [shape]
    if key.streams == STREAM_BOUNDS[0]:
        top = min(STREAM_BOUNDS[0] // Hkv, _most_batches(key.op, Hq, Hkv, Sq, Sk, D))
        return [shape] if top <= B else [shape, (top, Hq, Hkv, Sq, Sk, D)]
    if key.streams == STREAM_BOUNDS[-1]:
        bound = STREAM_BOUNDS[-1] // Hkv
        return [shape] if bound == B else [shape, (bound, Hq, Hkv, Sq, Sk, D)]
    return [shape]


def class_scores(times: list[dict[str, float]]) -> dict[str, float]:
    """Each candidate timed at every shape: the geometric mean, over the shapes, of its time
    over the fastest time there (1.0 for a kernel fastest at every shape; lower is better)."""
    names = set(times[0]).intersection(*times[1:])
    bests = [min(t[n] for n in names) for t in times]
    return {n: math.exp(sum(math.log(t[n] / b) for t, b in zip(times, bests)) / len(times))
            for n in sorted(names)}


def pick(times: list[dict[str, float]]) -> tuple[str, dict[str, float] | None]:
    """The winner of candidates timed at one shape or more (their medians, one dict a shape),
    and their class_scores when there were several: the lowest score, ties to the faster at
    the first shape; with one shape the fastest."""
    if len(times) == 1:
        return min(times[0], key=times[0].get), None
    scores = class_scores(times)
    return min(scores, key=lambda n: (scores[n], times[0][n])), scores


def candidates(archive_index: dict, key: TuneKey) -> list[dict]:
    return [k for k in archive_index["kernels"]
            if k["op"] == key.op and k["key"] == key.functional.as_dict()]


class Bench:
    """The tuner's timing: attnpack.bench.timing.Timer's (warm-up, an L2 flush before every
    rep, the reps queued back to back, one wait at the end), with a GPU spin before each rep's
    start event, in microseconds."""

    def __init__(self, torch):
        from attnpack.bench.timing import Timer
        self.torch = torch
        self.timer = Timer(reps=REPS, warmup=WARMUP)

    def samples_us(self, fn: Callable[[], None]) -> list[float]:
        """WARMUP calls, then REPS timed ones: each one's GPU time in microseconds. Until
        2026-12-02 the tuner waited after every rep; the GPU then drained its queue, so the
        start event could fire before the host had launched the call, and the host's launch
        time was timed too: in the run that waited (run53), decode kernels of 15-50 us timed up
        to 2x apart between the bf16 and the fp16 key of one shape, which move the same bytes.
        The spin (timing.HOST_LEAD_CYCLES) lets the host, whose call goes through the ctypes
        binding (a Problem, a workspace query, tens of us of Python), queue the call before its
        start event fires."""
        from attnpack.bench.timing import HOST_LEAD_CYCLES
        return [ms * 1000.0 for ms in self.timer.samples(fn, REPS, lead_cycles=HOST_LEAD_CYCLES)]

    def turns_us(self, fns: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
        """The candidates `fns` timed against each other: each one's WARMUP calls, then REPS
        timed calls each, taking turns call by call in alternating order, all queued before one
        wait (attnpack.bench.timing.Timer.turns), in microseconds. Until 2026-12-04 each
        candidate made its REPS calls in a block of its own, one candidate after the other; a
        call's clock follows what the GPU ran before it: bench/kernel_ab.py, timing that way
        (run115), read one long forward kernel 11 % off the bench's turns. The tuner's run-off
        had kept its picks close: by turns it chose the same kernel at 34 of the 38 forward
        keys behind the bench rows (run116; docs/tuning.md, "Candidates take turns")."""
        from attnpack.bench.timing import HOST_LEAD_CYCLES
        times = self.timer.turns(fns, REPS, lead_cycles=HOST_LEAD_CYCLES)
        return {name: [ms * 1000.0 for ms in t] for name, t in times.items()}

    def settle(self, seconds: float = SETTLE_SECONDS) -> None:
        """Keep the GPU busy for about `seconds` (L2 flushes back to back) before the first
        key, so it is not timed while the clocks climb out of idle."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(20):
                self.timer.flush.zero_()
            self.torch.cuda.synchronize()


def runoff(samples: dict[str, list[float]],
           sample: Callable[[list[str]], dict[str, list[float]]],
           rounds: int = RUNOFF_ROUNDS, margin: float = RUNOFF_MARGIN,
           most: int = RUNOFF_MOST) -> list[str]:
    """Time the close contenders again: the candidates whose median of `samples` is within
    `margin` of the fastest, the `most` fastest of them, for `rounds` more rounds, slowest
    first in the first round and fastest first in the next. `sample(names)` times those once
    more, taking turns; their times join `samples`. Returns the contenders, fastest first by
    the first medians ([] when one stands alone)."""
    medians = pooled_medians(samples)
    best = min(medians.values())
    contenders = sorted((n for n, m in medians.items() if m <= best * (1 + margin)),
                        key=lambda n: (medians[n], n))[:most]
    if len(contenders) < 2:
        return []
    for r in range(rounds):
        for n, times in sample(contenders[::-1] if r % 2 == 0 else contenders).items():
            samples[n] = samples[n] + times
    return contenders


def _inputs(torch, dtype, B, Hq, Hkv, Sq, Sk, D, grad: bool):
    g = torch.Generator(device="cuda").manual_seed(B * 7919 + Sq * 31 + Sk)
    mk = lambda h, s: torch.randn(B, h, s, D, device="cuda", dtype=dtype, generator=g)
    q, k, v = mk(Hq, Sq), mk(Hkv, Sk), mk(Hkv, Sk)
    do = mk(Hq, Sq) if grad else None
    return q, k, v, do


def _reference(torch, q, k, v, do, causal):
    """float32 math SDPA (+ grads when `do` is given), GQA by the op itself."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    qf, kf, vf = (t.float().requires_grad_(do is not None) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal,
                                           enable_gqa=q.shape[1] != k.shape[1])
    if do is None:
        return (o,)
    o.backward(do.float())
    return o, qf.grad, kf.grad, vf.grad


def _rel_error(got, ref) -> float:
    got = got.float()
    if not bool(got.isfinite().all()):
        return math.inf
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


class Candidate:
    """Runs one archive kernel, forced by name, through the runtime."""

    def __init__(self, runtime, bundle, name: str, key: TuneKey, scale: float):
        self.runtime, self.bundle, self.name, self.key, self.scale = runtime, bundle, name, key, scale

    def forward(self, q, k, v):
        return self.runtime.forward(self.bundle, q, k, v, causal=self.key.causal,
                                    scale=self.scale, kernel=self.name)

    def error(self, torch, q, k, v, do, ref) -> float:
        if self.key.op == "fwd":
            o, _ = self.forward(q, k, v)
            return _rel_error(o, ref[0])
        fwd = self._fwd_for_bwd(q, k, v)
        o, lse = self.runtime.forward(self.bundle, q, k, v, causal=self.key.causal,
                                      scale=self.scale, kernel=fwd)
        grads = self.runtime.backward(self.bundle, do, q, k, v, o, lse, causal=self.key.causal,
                                      scale=self.scale, kernel=self.name)
        return max(_rel_error(g, r) for g, r in zip(grads, ref[1:]))

    def _fwd_for_bwd(self, q, k, v) -> str:
        """The forward the bundle selects for this problem (the backward consumes its LSE)."""
        B, Hq, Sq, D = q.shape
        problem = self.runtime.make_problem("fwd", self.key.dtype, B=B, Hq=Hq, Hkv=k.shape[1],
                                            Sq=Sq, Sk=k.shape[2], D=D, causal=self.key.causal)
        return self.bundle.select(problem).name

    def timed(self, torch, q, k, v, do) -> Callable[[], None]:
        if self.key.op == "fwd":
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
            return lambda: self.runtime.forward(self.bundle, q, k, v, causal=self.key.causal,
                                                scale=self.scale, out=o, lse=lse, kernel=self.name)
        o, lse = self.runtime.forward(self.bundle, q, k, v, causal=self.key.causal,
                                      scale=self.scale, kernel=self._fwd_for_bwd(q, k, v))
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        return lambda: self.runtime.backward(self.bundle, do, q, k, v, o, lse,
                                             causal=self.key.causal, scale=self.scale,
                                             dq=dq, dk=dk, dv=dv, kernel=self.name)


def native_samples(torch, bench: Bench, key: TuneKey, q, k, v, do) -> dict[str, list[float]]:
    """PyTorch's own fused backends on the same shape (those that accept it): each one's timed
    runs."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        gqa = q.shape[1] != k.shape[1]
        try:
            with sdpa_kernel(backend):
                if key.op == "fwd":
                    fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=key.causal,
                                                                enable_gqa=gqa)
                    fn()
                else:
                    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
                    o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=key.causal,
                                                       enable_gqa=gqa)
                    fn = lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True)
                    fn()
                out[name] = bench.samples_us(fn)
        except RuntimeError:
            continue  # this backend refuses the shape (no kernel), which is information too
    return out


def pooled_medians(*runs: dict[str, list[float]]) -> dict[str, float]:
    """Each backend's median over its runs in all of `runs` (a backend that refused the shape
    is in none of them)."""
    pooled: dict[str, list[float]] = {}
    for run in runs:
        for name, times in run.items():
            pooled.setdefault(name, []).extend(times)
    return {name: statistics.median(times) for name, times in pooled.items() if times}


def provenance(torch, status: str = "tuned") -> dict:
    import triton
    props = torch.cuda.get_device_properties(0)
    driver = ""
    try:
        import subprocess
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = torch.version.hip or "unknown"
    return {"gpu": props.name, "driver": driver, "torch": torch.__version__,
            "triton": triton.__version__, "date": datetime.date.today().isoformat(),
            "status": status}


def resumed_db(out_path: Path, arch: str, gpu: str) -> TuningDb:
    """The database `tune` writes into: out_path's, to go on with, or a new one. Refused where
    out_path is another arch's, or holds entries timed on another GPU model than `gpu` (the new
    header would name this GPU for them): tune into another file, and merge the two with
    `attnpack db merge --mixed-gpus` if both should be kept. Refused too where out_path lies in
    the arch's folder of GPU models' own entries (tuning_db/<arch>/) under another GPU's name."""
    db = load_db(out_path) if out_path.is_file() else TuningDb(arch, {})
    if db.arch != arch:
        raise ValueError(f"{out_path} is for {db.arch}, the archive for {arch}")
    if out_path.parent.name == arch and out_path.name != gpu_file_name(gpu):
        raise ValueError(f"{out_path} is where another GPU model's own entries live (load_gpu_dbs); "
                         f"this GPU's are {out_path.parent / gpu_file_name(gpu)}")
    other = sorted({entry_gpu(e, db) for e in db.entries.values()} - {None, gpu})
    if other:
        raise ValueError(f"{out_path} holds entries timed on {', '.join(other)}; this GPU is "
                         f"{gpu}: tune into another file (then `attnpack db merge --mixed-gpus` "
                         "to keep both)")
    return db


def tune(archive_path: Path, keys: Iterable[TuneKey], out_path: Path,
         progress: Callable[[int], Callable[[str], None]] = lambda n: (lambda label: None),
         log: Callable[[str], None] = print, minutes: float | None = None) -> TuningDb:
    """Tune `keys` into `out_path` (resuming it). With `minutes`, stop starting new keys once
    that much time has passed: what was measured is saved, and a re-run goes on from there."""
    import torch

    from attnpack import runtime
    from attnpack.archive import read_archive

    archive = read_archive(archive_path)
    keys = list(keys)
    for key in keys:  # a key its timing shape cannot be in is refused before any GPU work
        timing_shape(key)
    here = provenance(torch)
    db = resumed_db(out_path, archive.arch, here["gpu"])
    db.provenance = here
    bench = Bench(torch)
    bench.settle()
    advance = progress(len(keys))
    deadline = time.monotonic() + 60 * minutes if minutes else None
    with runtime.Bundle(archive_path) as bundle:
        for n, key in enumerate(keys):
            advance(key.text)
            if key in db.entries:
                continue  # measured by an earlier, interrupted run
            if deadline is not None and time.monotonic() > deadline:
                log(f"time budget of {minutes} min spent: {len(keys) - n} key(s) left for a re-run")
                break
            start = time.monotonic()
            entry = tune_key(torch, runtime, bundle, bench, archive.index, key, log)
            log(f"  ({time.monotonic() - start:.1f} s)")
            if entry is not None:
                db.put({**entry, "gpu": db.provenance["gpu"]})
                save_db(db, out_path)
    return db


def not_candidate_lines(unsupported: dict[str, str]) -> list[str]:
    """One log line per reason the runtime refused candidates for (kernel name -> its message):
    at a prefill key every decode kernel gives the same one, so the log says it once, with the
    configs it covers."""
    by_reason: dict[str, list[str]] = {}
    for name, message in sorted(unsupported.items()):
        by_reason.setdefault(message, []).append(name.rsplit("/", 1)[-1])
    return [f"  not candidates here ({reason}): {', '.join(configs)}"
            for reason, configs in by_reason.items()]


def tune_key(torch, runtime, bundle, bench: Bench, index: dict, key: TuneKey, log) -> dict | None:
    cands = candidates(index, key)
    if not cands:
        log(f"skip {key.text}: the archive has no {key.op} kernel for this key")
        return None
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[key.dtype]
    scale = 1.0 / math.sqrt(key.head_dim)
    grad = key.op == "bwd"
    # 1-2: correctness on a small batch against float32 math
    q, k, v, do = _inputs(torch, dtype, 1, CHECK_HEADS_KV * key.gqa, CHECK_HEADS_KV, key.sq,
                          key.sk, key.head_dim, grad)
    ref = _reference(torch, q, k, v, do, key.causal)
    errors, unsupported = {}, {}
    for c in cands:
        try:
            errors[c["name"]] = Candidate(runtime, bundle, c["name"], key, scale).error(
                torch, q, k, v, do, ref)
        except runtime.AttnpackError as e:
            if e.status == runtime.Status.UNSUPPORTED:  # its `requires` (a decode kernel at Sq > 16)
                unsupported[c["name"]] = e.message
                continue
            errors[c["name"]] = math.inf
            log(f"  {c['name']}: {e}")
    for line in not_candidate_lines(unsupported):
        log(line)
    if not errors:  # e.g. a backward key over an archive with no forward for O and LSE
        log(f"skip {key.text}: no candidate can run here (each says why above)")
        return None
    finite = [e for e in errors.values() if math.isfinite(e)]
    if not finite:
        log(f"skip {key.text}: no candidate is correct")
        return None
    bound = max(REJECT_FACTOR * min(finite), ERROR_FLOOR[key.dtype])
    rejected = [{"kernel": n, "error": (e if math.isfinite(e) else "nan/inf"), "bound": bound}
                for n, e in sorted(errors.items()) if not e <= bound]
    survivors = [n for n, e in sorted(errors.items()) if e <= bound]
    del q, k, v, do, ref
    # 3-5 at each timing shape (one, or two in the lowest streams class)
    runs = [_time_at(torch, runtime, bundle, bench, key, shape, survivors, dtype, scale, grad,
                     rejected, bound, log) for shape in timing_shapes(key)]
    if any(run is None for run in runs):
        log(f"skip {key.text}: no candidate runs the timing shape")
        return None
    times, contenders, natives, (B, Hq, Hkv, Sq, Sk, D) = runs[0]
    best, scores = pick([run[0] for run in runs])
    f = flops(key.op, B, Hq, Sq, Sk, D, key.causal)
    entry = {"op": key.op, "dtype": key.dtype, "head_dim": key.head_dim, "causal": key.causal,
             "gqa": key.gqa, "sq": key.sq, "sk": key.sk, "streams": key.streams,
             "family": index_family(index, best), "kernel": best,
             "time_us": round(times[best], 2), "tflops": round(f / times[best] / 1e6, 1),
             "error": errors[best],
             "shape": {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "D": D},
             "candidates": {n: round(t, 2) for n, t in sorted(times.items())},
             "rejected": rejected}
    if contenders:
        entry["runoff"] = {"rounds": RUNOFF_ROUNDS, "kernels": contenders}
    if len(runs) > 1:
        second_times, second_contenders, second_natives, second = runs[1]
        entry["second_shape"] = {
            "shape": dict(zip(("B", "Hq", "Hkv", "Sq", "Sk", "D"), second)),
            "candidates": {n: round(t, 2) for n, t in sorted(second_times.items())},
            "native": _native_record(second_natives)}
        if second_contenders:
            entry["second_shape"]["runoff"] = second_contenders
        entry["scores"] = {n: round(v, 4) for n, v in scores.items()}
    deterministic = {k["name"]: k["deterministic"] for k in index["kernels"]}
    entry = record_determinism(entry, deterministic.__getitem__)
    if natives:
        entry["native"] = _native_record(natives)
    log(f"{key.text}: {best} {times[best]:.1f} us "
        f"({entry['tflops']} TFLOP/s)" + (f", native {entry['native']['backend']} "
                                          f"{entry['native']['time_us']:.1f} us" if natives else "")
        + (f", rejected {len(rejected)}" if rejected else "")
        + (f", run-off of {len(contenders)}" if contenders else "")
        + (f"; at B={runs[1][3][0]} too, {len(runs[1][0])} timed, chosen by score "
           f"{entry['scores'][best]:.3f}" if len(runs) > 1 else ""))
    return entry


def _native_record(natives: dict[str, float]) -> dict | None:
    if not natives:
        return None
    backend = min(natives, key=natives.get)
    return {"backend": backend, "time_us": round(natives[backend], 2),
            "all_us": {n: round(t, 2) for n, t in sorted(natives.items())}}


def _time_at(torch, runtime, bundle, bench: Bench, key: TuneKey, shape, survivors: list[str],
             dtype, scale: float, grad: bool, rejected: list[dict], bound: float, log):
    """Steps 3-5 of the module's list at one timing shape: each survivor's median time there
    (after the run-off of the close ones), the run-off's contenders, PyTorch's backends' pooled
    medians, and the shape; None if no survivor runs it. A candidate that refuses the shape is
    added to `rejected`."""
    B, Hq, Hkv, Sq, Sk, D = shape
    q, k, v, do = _inputs(torch, dtype, B, Hq, Hkv, Sq, Sk, D, grad)
    natives_first = native_samples(torch, bench, key, q, k, v, do)  # 5 begins: see there

    # each candidate with buffers of its own, called once: one that refuses the shape says so
    # here, before the turns
    calls = {}
    for n in survivors:
        try:
            calls[n] = Candidate(runtime, bundle, n, key, scale).timed(torch, q, k, v, do)
            calls[n]()
        except runtime.AttnpackError as e:  # refuses the timing shape: recorded, not selected
            calls.pop(n, None)
            rejected.append({"kernel": n, "error": f"at the timing shape {shape}: {e}",
                             "bound": bound})
            log(f"  {n}: {e}")
    if not calls:
        return None
    try:
        samples = bench.turns_us(calls)
    except runtime.AttnpackError as e:  # it ran a moment ago; the key is left for a re-run
        log(f"  timing at {shape}: {e}")
        return None

    # 4: the close ones again
    def again(names: list[str]) -> dict[str, list[float]]:
        try:
            return bench.turns_us({n: calls[n] for n in names})
        except runtime.AttnpackError as e:  # they ran a moment ago: keep what they measured
            log(f"  run-off: {e}")
            return {}
    contenders = runoff(samples, again)
    # 5: PyTorch's own backends on the same shape, timed before the candidates and again after
    # them, each keeping the median of both runs: within a run a kernel's time drifts by up to
    # 13 % (docs/performance.md, run50), and a reference timed at one moment only is tied to it
    natives = pooled_medians(natives_first, native_samples(torch, bench, key, q, k, v, do))
    return pooled_medians(samples), contenders, natives, shape


def index_family(index: dict, name: str) -> str:
    return next(k["family"] for k in index["kernels"] if k["name"] == name)
