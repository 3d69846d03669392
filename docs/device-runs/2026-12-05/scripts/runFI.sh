#!/usr/bin/env bash
# Prepared in the fortieth session (compiled for sm_90 on the CPU, not run): the first
# measurement of docs/gluon-bwd.md's "Next step, not built: the preprocess beside the dK/dV
# kernel": preprocess_share.py, the fast backward's preprocess as a persistent grid of P
# programs (one an SM) for P from 8 to all SMs, at four tile shapes, each checked against torch
# before it is timed, beside the shipped kernel on every SM. The plan pays only where a few SMs
# come near the DRAM's rate (the "model saving" column). No build needed (Triton's JIT), about
# 1-2 min. On either GPU; say which (the H200's HBM is faster than the H100's).
#   usage (device, repo root): OUT=$OUT bash .carry/runFI.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
PYTHONPATH=$PWD/python timeout 300 python3 .carry/preprocess_share.py
echo "share rc $? at $SECONDS s"
