"""One cold start, in this (fresh) process; prints one JSON line. Run by attnpack.bench.dynamic:

    python -m attnpack.bench.cold --backend attnpack --shape 1,32,8,1024,1024,128 --causal
    python -m attnpack.bench.cold --backend triton_jit --kernel triton/fwd/... --shape ...

Backends:
- attnpack, default, and cudnn, flash, efficient (forced): F.sdpa's very first call (wall
  time to completion) after the inputs exist. attnpack's includes opening the archive and
  loading the kernel image; its enable() (loading the extension, settling PyTorch's SDPA
  order) is timed apart and reported beside it;
- triton_compile: triton.compile of each launch step of the named kernel for this GPU, from
  its family's source, as Triton's JIT does on a cache miss (run with an empty TRITON_CACHE_DIR);
- triton_jit: the named kernel's first launch through Triton's own JIT (attnpack.jit):
  compile, module load and launch. Not possible for kernels taking TMA descriptors (gluon):
  attnpack.jit passes tensors, not descriptors; triton_compile still measures those.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

FORCED = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}


def _arch(torch) -> str:
    props = torch.cuda.get_device_properties(0)
    return props.gcnArchName.split(":")[0] if torch.version.hip else f"sm_{props.major}{props.minor}"


def _variant(name: str, arch: str):
    """The family variant the archive calls `name`; searched among the declared variants."""
    from attnpack.family import load_families
    family = name.split("/")[0]
    spec = load_families().get(family)
    if spec is None:
        raise LookupError(f"kernel {name}: no family {family!r} in aot/kernels")
    for variant in spec.all_variants(arch) + spec.default_variants(arch):
        if variant.name == name:
            return variant
    raise LookupError(f"kernel {name}: not among family {family}'s declared variants for {arch}")


def _inputs(torch, args):
    b, hq, hkv, sq, sk, d = args.shape
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    q = torch.randn(b, hq, sq, d, device="cuda", dtype=dt)
    k = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    v = torch.randn(b, hkv, sk, d, device="cuda", dtype=dt)
    torch.cuda.synchronize()
    return q, k, v


def _timed_ms(torch, fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def sdpa_first_call(args) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = _inputs(torch, args)
    kw = {"is_causal": args.causal, **({"enable_gqa": True} if q.shape[1] != k.shape[1] else {})}
    call = lambda: F.scaled_dot_product_attention(q, k, v, **kw)  # noqa: E731
    result = {}
    if args.backend == "attnpack":
        import attnpack.torch as attnpack_torch
        start = time.perf_counter()
        attnpack_torch.enable()
        result["enable_ms"] = (time.perf_counter() - start) * 1e3
        result["first_call_ms"] = _timed_ms(torch, call)
        result["second_call_ms"] = _timed_ms(torch, call)
        stats = attnpack_torch.stats()
        result["kernels"], result["fallbacks"] = stats["calls"], stats["fallbacks"]
    elif args.backend in FORCED:
        with sdpa_kernel(getattr(SDPBackend, FORCED[args.backend])):
            result["first_call_ms"] = _timed_ms(torch, call)
            result["second_call_ms"] = _timed_ms(torch, call)
    else:
        result["first_call_ms"] = _timed_ms(torch, call)
        result["second_call_ms"] = _timed_ms(torch, call)
    return result


def triton_compile(args) -> dict:
    import triton

    from attnpack.builder.backends.triton import gpu_target, options, source
    from attnpack.builder.compile import CompileJob
    arch = args.arch or _arch(importlib.import_module("torch"))  # torch only to ask the GPU
    variant = _variant(args.kernel, arch)
    if variant.backend != "triton":
        return {"kernel": args.kernel, "method": "triton.compile per launch step",
                "error": f"built by the {variant.backend} backend, not by triton.compile"}
    steps = {}
    for step in variant.steps:
        job = CompileJob(variant, step)
        start = time.perf_counter()
        triton.compile(source(job), target=gpu_target(arch), options=options(job))
        steps[step.name] = (time.perf_counter() - start) * 1e3
    return {"kernel": args.kernel, "method": "triton.compile per launch step",
            "compile_ms": sum(steps.values()), "steps_ms": steps}


def triton_jit(args) -> dict:
    import torch

    from attnpack import jit
    arch = _arch(torch)
    variant = _variant(args.kernel, arch)
    if any(step.tensormaps for step in variant.steps):
        return {"kernel": args.kernel, "method": "attnpack.jit.launch",
                "error": "takes TMA descriptors, which attnpack.jit cannot pass; see triton_compile"}
    import triton
    q, k, v = _inputs(torch, args)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
    tensors = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
    # Triton's driver helpers are built on first use with an empty cache: counted apart, since
    # a process pays them once, not per kernel.
    driver = _timed_ms(torch, lambda: triton.runtime.driver.active.get_current_target())
    first = _timed_ms(torch, lambda: jit.launch(variant, tensors))
    second = _timed_ms(torch, lambda: jit.launch(variant, tensors))
    return {"kernel": args.kernel, "method": "attnpack.jit.launch", "driver_init_ms": driver,
            "first_call_ms": first, "second_call_ms": second}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", required=True,
                        choices=("attnpack", "default", *FORCED, "triton_compile", "triton_jit"))
    parser.add_argument("--shape", required=True, type=lambda s: tuple(int(x) for x in s.split(",")),
                        help="B,Hq,Hkv,Sq,Sk,D")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--kernel", help="for triton_compile / triton_jit: the archive's kernel name")
    parser.add_argument("--arch", help="for triton_compile: the target (default: this GPU's); "
                                       "compiling needs no GPU")
    args = parser.parse_args(argv)
    if args.backend.startswith("triton") and not args.kernel:
        parser.error(f"--backend {args.backend} needs --kernel")
    run = {"triton_compile": triton_compile, "triton_jit": triton_jit}.get(args.backend,
                                                                            sdpa_first_call)
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
