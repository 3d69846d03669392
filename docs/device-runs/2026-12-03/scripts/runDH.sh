#!/usr/bin/env bash
# Prepared in the twenty-second session for the next one (not run). The cases of
# tests/gpu/test_gluon_attn.py that run99 did not run on the forward with named-barrier slot
# releases (it ran the smoke test over every kernel, the growing maxima, the persistent units,
# every bf16 causal case and the B1 H8 fp16 cases without a mask: 525 of 1625): bf16 without a
# mask and fp16, about 1100 cases. The log says how far it got if the time runs out.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/gpu_test_file.sh tests/gpu/test_gluon_attn.py 570 \
  -k "match_math_sdpa and not True-bf16 and not (1-8-8 and False-fp16)"
