"""The Triton/Gluon compile backend: `triton.compile(ASTSource(...), target=GPUTarget(...))`.

Works on a CPU-only machine for CUDA (cubin) and HIP (hsaco). Everything Triton-specific lives
here: the kernel declaration (`TritonKernel`), the signature built from launch-spec words, the
cache key (Triton's AST hash), Triton's two trailing scratch pointers, its scratch sizes, and
its tensor descriptors lowered to TMA descriptors.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from attnpack import abi
from attnpack.builder.backends import (declared_kernel, params_at_image_offsets,
                                       register)
from attnpack.builder.compile import CompiledStep, CompileJob
from attnpack.targets import target

# Bump when the cached record's shape changes.
CACHE_SCHEMA = 1
# Line info embeds absolute source paths in the image; without it builds are path-independent.
os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
# Triton's tensordesc_meta "swizzle" is CUtensorMapSwizzle: NONE, 32B, 64B, 128B.
SWIZZLE_BYTES = (0, 32, 64, 128)
# tensordesc_meta "elem_type" is the device-side TMA dtype enum: 6 float16, 7 float32,
# 10 bfloat16.
TMA_ELEM_TYPE = {"fp16": 6, "bf16": 10, "fp32": 7}


@dataclass(frozen=True)
class TritonKernel:
    """A `@triton.jit` or `@gluon.jit` function and how to compile it for one step."""
    fn: Any
    constexprs: Mapping[str, Any]
    num_warps: int
    num_stages: int
    divisible_by_16: tuple[str, ...] = ()    # integer args promised to be multiples of 16
    options: Mapping[str, Any] = field(default_factory=dict)  # extra compiler options (AMD knobs)


def cuobjdump() -> Path:
    """The cuobjdump Triton ships with its NVIDIA backend (no CUDA toolkit needed)."""
    import triton
    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def disassemble(cubin: bytes) -> str:
    """`cuobjdump -sass` of an NVIDIA image (a cubin), through a temporary file."""
    tool = cuobjdump()
    if not tool.is_file():
        raise FileNotFoundError(f"{tool}: this triton ships no cuobjdump, which SASS needs")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "image.cubin"
        path.write_bytes(cubin)
        return subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True,
                              check=True).stdout


def gpu_target(arch: str):
    from triton.backends.compiler import GPUTarget
    t = target(arch)
    if t.vendor == "nvidia":
        return GPUTarget("cuda", int(arch[3:]), t.wave_size)
    return GPUTarget("hip", arch, t.wave_size)


def _kernel(job: CompileJob) -> TritonKernel:
    return declared_kernel(job, TritonKernel)


def source(job: CompileJob):
    """The ASTSource (GluonASTSource for Gluon kernels) of a step: a signature typed from the
    step's words, divisibility attributes, constexprs."""
    from triton.compiler import ASTSource
    kernel, step, variant = _kernel(job), job.step, job.variant
    fn = kernel.fn
    ws = tuple(w.name for w in variant.workspace)
    runtime = [p for p in fn.params if not p.is_constexpr]
    if len(runtime) != len(step.args):
        raise ValueError(f"{job.label}: kernel {fn.__name__} takes {len(runtime)} runtime "
                         f"parameters but the step declares {len(step.args)} args")
    gluon = getattr(fn, "is_gluon", lambda: False)()
    signature, attrs = {}, {}
    for p, word in zip(runtime, step.args):
        tmap = step.tensormap(word)
        if tmap is not None:
            # A host descriptor: Gluon reads the block shape and shared layout from the type;
            # Triton takes the block shape and picks the layout itself (checked after compiling)
            elem = abi.triton_type(tmap.tensor, variant.key.dtype, ws).lstrip("*")
            block = ",".join(str(e) for e in tmap.block)
            layout = f",{tmap.layout!r}" if gluon else ""
            signature[p.name] = f"tensordesc<{elem}[{block}]{layout}>"
            continue
        signature[p.name] = abi.triton_type(word, variant.key.dtype, ws)
        if abi.param_type(word, ws) == "ptr" or word in kernel.divisible_by_16:
            attrs[(p.num,)] = [["tt.divisibility", 16]]
    for p in fn.params:
        if p.is_constexpr:
            if p.name not in kernel.constexprs:
                raise ValueError(f"{job.label}: constexpr {p.name} has no value")
            signature[p.name] = "constexpr"
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(fn=fn, signature=signature, constexprs=dict(kernel.constexprs),
                              attrs=attrs)
    return ASTSource(fn=fn, signature=signature, constexprs=dict(kernel.constexprs), attrs=attrs)


def options(job: CompileJob) -> dict:
    kernel = _kernel(job)
    return {"num_warps": kernel.num_warps, "num_stages": kernel.num_stages, **kernel.options}


def _tensormap_records(job: CompileJob, meta: dict) -> list[dict]:
    """The step's descriptors as the runtime encodes them, checked against what Triton's own
    launcher would encode for the compiled kernel (its tensordesc_meta, in argument order)."""
    maps = [job.step.tensormap(w) for w in job.step.args if job.step.tensormap(w) is not None]
    described = meta.get("tensordesc_meta") or []
    if len(described) != len(maps):
        raise ValueError(f"{job.label}: the kernel lowers {len(described)} tensor descriptors to "
                         f"TMA descriptors, the step declares {len(maps)} tensor maps")
    records = []
    for m, md in zip(maps, described):
        # The box is the compiled kernel's, which may be a slice of the declared block: with a
        # 128-byte swizzle a TMA box row is at most 128 bytes, so a d128 16-bit tile is copied
        # as two 64-wide boxes, and Triton's launcher encodes the 64-wide box.
        box = [int(e) for e in md["block_size"]]
        fits = len(box) == len(m.block) and all(b >= 1 and t % b == 0
                                                for b, t in zip(box, m.block))
        # element tensors have the problem's dtype; lse and workspace buffers are float32
        dtype = job.variant.key.dtype if m.tensor in abi.TENSORS else "fp32"
        want = {"swizzle": m.swizzle, "elem_type": TMA_ELEM_TYPE[dtype]}
        got = {"swizzle": SWIZZLE_BYTES[md["swizzle"]], "elem_type": md["elem_type"]}
        if want != got or not fits or md.get("fp4_padded"):
            raise ValueError(f"{job.label}: tensor map {m.name} declares block {list(m.block)} "
                             f"{want}, the compiled kernel's descriptor is {dict(md)}")
        records.append({"param": m.name, "tensor": m.tensor, "box": box,
                        "swizzle": m.swizzle, "l2_promotion": m.l2_promotion,
                        "oob_fill": m.oob_fill})
    return records


def _params(job: CompileJob) -> list[tuple[str, str, int]]:
    """(word, wire type, divisibility) per kernel parameter, as the compiled image takes them:
    a tensor descriptor expands to descriptor, shape and strides; Triton appends its two
    scratch pointers."""
    kernel = _kernel(job)
    ws = tuple(w.name for w in job.variant.workspace)
    shapes = {w.name: tuple(w.shape) for w in job.variant.workspace}
    params = []
    for w in job.step.args:
        tmap = job.step.tensormap(w)
        if tmap is not None:
            params += [(word, typ, 1) for word, typ
                       in abi.tensormap_params(w, tmap.tensor, shapes.get(tmap.tensor))]
            continue
        typ = abi.param_type(w, ws)
        params.append((w, typ, 16 if typ == "ptr" or w in kernel.divisible_by_16 else 1))
    return params + [(w, "ptr", 1) for w in abi.TRITON_SCRATCH]


class TritonBackend:
    name = "triton"
    compilers = ("triton",)

    def versions(self) -> dict[str, str]:
        import triton
        return {"triton": triton.__version__}

    def cache_key(self, job: CompileJob) -> str:
        import triton
        text = json.dumps({"schema": CACHE_SCHEMA, "triton": triton.__version__,
                           "ast": source(job).hash(), "arch": job.variant.arch,
                           "options": options(job),
                           "line_info": os.environ.get("TRITON_DISABLE_LINE_INFO")},
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def compile(self, job: CompileJob) -> CompiledStep:
        import triton
        kernel = triton.compile(source(job), target=gpu_target(job.variant.arch),
                                options=options(job))
        md = kernel.metadata._asdict()
        kind = target(job.variant.arch).image_kind
        meta = {k: md.get(k, d) for k, d in (
            ("num_warps", 4), ("warp_size", 32), ("shared", 0), ("num_ctas", 1),
            ("global_scratch_size", 0), ("global_scratch_align", 1),
            ("profile_scratch_size", 0), ("profile_scratch_align", 1), ("launch_pdl", False))}
        if md.get("tensordesc_meta"):
            meta["tensordesc_meta"] = [dict(m) for m in md["tensordesc_meta"]]
        return CompiledStep(bytes(kernel.asm[kind] or b""), kind, md["name"], meta)

    def launch_spec(self, job: CompileJob, compiled: CompiledStep) -> dict:
        md = compiled.meta
        params, kernarg_size = params_at_image_offsets(compiled.image, compiled.symbol,
                                                       _params(job))
        return {
            "symbol": compiled.symbol, "params": params, "kernarg_size": kernarg_size,
            "block": [md["num_warps"] * md["warp_size"], 1, 1],
            "shared": md["shared"],
            "cluster": [md["num_ctas"], 1, 1],
            "scratch": {"global_size": md["global_scratch_size"],
                        "global_align": md["global_scratch_align"],
                        "profile_size": md["profile_scratch_size"],
                        "profile_align": md["profile_scratch_align"]},
            "tensormaps": _tensormap_records(job, md),
            # 2.5: the kernel waits for the grid ahead itself (griddepcontrol.wait), so it may be
            # launched with programmatic stream serialization (Triton's launch_pdl option)
            **({"pdl": True} if md.get("launch_pdl") else {}),
        }


register(TritonBackend())
