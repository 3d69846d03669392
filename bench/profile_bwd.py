"""Three backwards per named kernel through libattnpack, at B4 H16 S4096 d128 bf16 (causal with
--causal): a target for ncu (docs/gluon-family.md, "The backward: where the time goes").

    ncu --launch-skip 3 --launch-count 3 -k regex:attn_bwd --section SpeedOfLight \\
        python3 bench/profile_bwd.py gluon-bwd.apk gluon/bwd/bf16-d128-full/M64_stages2_det0

O and LSE are random (LSE around log(Sk)): the kernels' time does not depend on the values.
"""
import math
import sys

import torch

from attnpack import runtime as rt

args = [a for a in sys.argv[1:] if a != "--causal"]
causal = "--causal" in sys.argv
archive, names = args[0], args[1:]
B, H, S, D = 4, 16, 4096, 128
q, k, v, o, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(5))
lse = torch.full((B, H, S), math.log(S), device="cuda") + torch.rand(B, H, S, device="cuda")
with rt.Bundle(archive) as b:
    for name in names:
        for _ in range(3):
            rt.backward(b, do, q, k, v, o, lse, causal=causal, kernel=name)
torch.cuda.synchronize()
