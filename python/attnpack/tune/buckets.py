"""The bucketing rule, defined once. The C++ runtime implements the same rule over the same
boundaries, which the archive carries (index `tuning.buckets`), so the two cannot drift.

Rule: a value falls into the first boundary that is >= the value; a value beyond the last
boundary falls into the last one. Sequence lengths use SEQLEN_BOUNDS (so Sq=1000 and Sq=1024
share bucket 1024, Sq=1025 is in 2048, and Sq=100000 is in 16384). Bucket 16 is decode: one new
token, or a few speculative ones, against a long cache. A prefill tile of 64 or 128 query rows
does the same work for Sq=1 as for Sq=128, so a kernel timed at Sq=128 tells little about Sq=1;
decode keys are timed at Sq=16. The GQA ratio Hq/Hkv uses
GQA_BOUNDS (ratio 1 is MHA; 3 and 4 share class 4; 16 falls into 8).

The streams class buckets B·Hkv, the (batch, KV head) pairs, by STREAM_BOUNDS: class 64 holds
up to 64 pairs, 128 up to 128, 256 up to 256, and 512 everything above. It is what decides
split-KV decode: a decode kernel runs one program per pair, so 64 pairs leave most of an H200's
132 SMs idle and splitting each pair's keys over several programs wins (measured,
docs/triton-family.md "Decode"), while from some hundreds of pairs on the unsplit kernels win:
at 512 and 1024 pairs a decode kernel ran 1.13-1.14x faster than the pick of class 128, the
largest class until the sixteenth session (run81, bench/decode_rows.py). Decode keys are tuned in
every class. Prefill keys carry the class of the batch they were timed at
(attnpack.tune.runner.timing_shape), or, named in another class in a `--keys` file, that class,
timed at its bound (runner.class_bound_batch); selection treats the class as a tie-break between
entries equally near in GQA, Sq and Sk (tune/db.py, nearest_entry), so a prefill problem never
trades a nearer sequence bucket for it.
"""
from __future__ import annotations

SEQLEN_BOUNDS = (16, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GQA_BOUNDS = (1, 2, 4, 8)
STREAM_BOUNDS = (64, 128, 256, 512)


def bucket(value: int, bounds: tuple[int, ...]) -> int:
    if value < 1:
        raise ValueError(f"cannot bucket {value}: sizes start at 1")
    for b in bounds:
        if value <= b:
            return b
    return bounds[-1]


def seqlen_bucket(s: int) -> int:
    return bucket(s, SEQLEN_BOUNDS)


def gqa_class(hq: int, hkv: int) -> int:
    if hkv < 1 or hq % hkv:
        raise ValueError(f"Hq {hq} is not a multiple of Hkv {hkv}")
    return bucket(hq // hkv, GQA_BOUNDS)


def streams_class(b: int, hkv: int) -> int:
    """The streams class of B·Hkv (batch × KV heads)."""
    return bucket(b * hkv, STREAM_BOUNDS)
