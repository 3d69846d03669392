"""Three forwards per named kernel through libattnpack, at B4 H16 S4096 d128 bf16 non-causal:
a target for ncu (docs/gluon-family.md, "Where the time goes").

    ncu --launch-skip 2 --launch-count 1 -k regex:attn_fwd --section SpeedOfLight \
        python3 bench/profile_fwd.py build-gpu/bundle/attnpack-0.1.0-sm_90.apk \
        gluon/fwd/bf16-d128-full/M64_N128_stages3
"""
import sys

import torch

from attnpack import runtime as rt

archive, names = sys.argv[1], sys.argv[2:]
q, k, v = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with rt.Bundle(archive) as b:
    for name in names:
        for _ in range(3):
            rt.forward(b, q, k, v, causal=False, kernel=name)
torch.cuda.synchronize()
