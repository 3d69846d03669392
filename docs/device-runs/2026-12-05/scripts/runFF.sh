#!/usr/bin/env bash
# Thirty-ninth session, after run167 (the preprocess 97 µs on an H100 at B16 H16 S1024 d128,
# 268 MB moved, about 2.8 TB/s): preprocess_sweep.py, the shipped preprocess beside variants of
# the same work (rows a program, warps, zero stores first) and torch's zero_ and copy_ of the
# same bytes, each checked against torch before it is timed. No build needed (Triton's JIT).
# On one GPU; say which.
#   usage (device, repo root): OUT=$OUT bash .carry/runFF.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
PYTHONPATH=$PWD/python timeout 240 python3 .carry/preprocess_sweep.py
echo "sweep rc $? at $SECONDS s"
