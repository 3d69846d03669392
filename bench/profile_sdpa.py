"""One F.sdpa call at a given shape, fenced by cudaProfilerStart/Stop, for ncu: attnpack
(`attnpack.torch.enable()`) or PyTorch's default (cuDNN on the H200), so both sides of a row of
`attnpack bench` can be profiled the same way (docs/performance.md, "Rows below 1x").

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section WarpStateStats --section LaunchStats --section Occupancy \\
        python3 bench/profile_sdpa.py --shape 2,16,8,4096,4096,256 --causal --backend attnpack

Needs the built extension and bundle (ATTNPACK_TORCH_LIB, ATTNPACK_BUNDLE_DIR as for
`attnpack bench`). Prints what served the call.
"""
import argparse

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--shape", required=True, help="B,Hq,Hkv,Sq,Sk,D")
parser.add_argument("--causal", action="store_true")
parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
parser.add_argument("--backend", default="attnpack", choices=("attnpack", "default"))
parser.add_argument("--op", default="fwd", choices=("fwd", "fwdbwd"))
args = parser.parse_args()

B, Hq, Hkv, Sq, Sk, D = (int(x) for x in args.shape.split(","))
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
grad = args.op == "fwdbwd"
q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype, requires_grad=grad)
k, v = (torch.randn(B, Hkv, Sk, D, device="cuda", dtype=dtype, requires_grad=grad) for _ in range(2))
if args.backend == "attnpack":
    import attnpack.torch
    attnpack.torch.enable()


def call():
    out = F.scaled_dot_product_attention(q, k, v, is_causal=args.causal, enable_gqa=Hq != Hkv)
    if grad:
        out.backward(torch.ones_like(out))


for _ in range(3):  # warm-up: kernels loaded, caches and cuDNN plans built
    call()
torch.cuda.synchronize()
if args.backend == "attnpack":
    attnpack.torch.reset_stats()
torch.cuda.profiler.start()
call()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
if args.backend == "attnpack":
    print("served:", attnpack.torch.stats())
