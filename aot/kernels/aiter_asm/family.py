"""AMD AITER's assembly flash attention as an attnpack family: 22 prebuilt code objects from
the pinned amd-aiter wheel (source.py), declared in kernels.py, taken through the prebuilt
backend, which checks every declared argument slot against each object's own metadata.

Built, not run: there is no AMD GPU here (docs/aiter-family.md).

- Variants: one per code object. The config names its build: on gfx942 the forward has an
  MI300 build (304 CUs) and an MI308 build (80 or 64 CUs); everything else has a single one.
  Functional keys differ per arch and op (`key_excluded`): forward bf16 head dim 128 on both
  archs; backward fp16/bf16 at head dims 64, 96, 128, 192 on gfx942 and 96, 128 on gfx950.
- Requirements (kernels.CodeObject.requires) go into the index; the runtime checks them before
  it chooses a kernel and answers UNSUPPORTED with their reason otherwise, so PyTorch falls
  back (the forward's bottom-right causal mask needs Sq == Sk; the backward is MHA only; a
  gfx942 forward needs the device's CU count of its build).
- The backward is one variant of three steps: a Triton prepare (delta and a zeroed dQ
  accumulator), the assembly kernel, and a Triton dQ convert (glue.py). The two glue steps name
  the triton backend themselves. It accumulates dQ with float atomics: not deterministic.
- Policy: priority 60 with `serves`, so the portable triton family stays every key's catch-all
  default and AITER serves only the tuning buckets it can (`attnpack db seed` gives them to it;
  a measured database decides on the GPU). Its notice (wheel, hashes, the MIT licence text) is
  written into the index of every archive that holds one of its kernels.
"""
from dataclasses import dataclass

from attnpack.builder.backends.prebuilt import Param, PrebuiltError, PrebuiltKernel
from attnpack.builder.backends.triton import TritonKernel
from attnpack.family import FamilySpec, FunctionalKey, Step, Workspace
from attnpack.keys import TuneKey

from . import glue, source, verify
from .kernels import BWD_WORKSPACE, CODE_OBJECTS, CodeObject, find

BUILDS = ("MI300", "MI308", "single")        # kernels.CU_VARIANTS, in config order
PADDING_NAMES = ("pad",)                     # AITER names every filler slot of its structs "pad"
GLUE_WARPS = 4


def _config_build(config) -> str:
    return config["build"]


def key_excluded(arch: str, op: str, key: FunctionalKey) -> str | None:
    if not any((o.arch, o.op, o.dtype, o.causal) == (arch, op, key.dtype, key.causal)
               and key.head_dim in o.head_dims for o in CODE_OBJECTS):
        return f"the wheel has no {op} code object for {key.text} on {arch}"
    return None


def excluded(arch: str, op: str, key: FunctionalKey, config) -> str | None:
    if find(arch, op, key.dtype, key.head_dim, key.causal, _config_build(config)) is None:
        return f"no {_config_build(config)} build of the {op} {key.text} object on {arch}"
    return None


def default_config(arch: str, op: str, key: FunctionalKey):
    # gfx942's forward: the MI300X build (AITER's own first case); a database tuned on an
    # MI308X picks the MI308 one.
    for build in BUILDS:
        if find(arch, op, key.dtype, key.head_dim, key.causal, build) is not None:
            return {"build": build}
    return {"build": "single"}   # not a key of this arch: excluded, as the builder says


def _code_object(arch: str, op: str, key: FunctionalKey, config) -> CodeObject:
    obj = find(arch, op, key.dtype, key.head_dim, key.causal, _config_build(config))
    if obj is None:
        raise KeyError(excluded(arch, op, key, config))
    return obj


@dataclass(frozen=True)
class CheckedMember(source.WheelMember):
    """A wheel member that is read only together with the family's whole static check of it
    (verify.check_code_object: slot names and kinds, pads tiling the segment, the required
    workgroup, wave64, no scratch, LDS), beyond the prebuilt backend's generic one."""
    code_object: CodeObject | None = None

    def read(self) -> bytes:
        image = super().read()
        problems = verify.check_code_object(self.code_object, image)
        if problems:
            raise PrebuiltError("; ".join(problems))
        return image


def _asm_step(obj: CodeObject) -> Step:
    params = tuple(Param(f.word, f.wire, f.offset, name=f.aiter_name) for f in obj.layout.fields)
    kernel = PrebuiltKernel(source=CheckedMember(obj.member, obj.sha256, obj), symbol=obj.symbol,
                            params=params, kernarg_size=obj.layout.size, block=(obj.block, 1, 1),
                            padding=PADDING_NAMES)
    return Step(obj.op if obj.op == "fwd" else "asm", tuple(p.word for p in params), obj.grid,
                kernel)


def _glue_step(name: str, head_dim: int) -> Step:
    spec = glue.GLUE_STEPS[name]
    kernel = TritonKernel(fn=spec["fn"], constexprs={"HEAD_DIM": head_dim,
                                                     "BLOCK_D": glue.block_d(head_dim),
                                                     "BLOCK_M": glue.BLOCK_M},
                          num_warps=GLUE_WARPS, num_stages=1)
    return Step(name, spec["args"], spec["grid"], kernel, backend="triton")


def steps(arch: str, op: str, key: FunctionalKey, config) -> tuple[Step, ...]:
    obj = _code_object(arch, op, key, config)
    if op == "fwd":
        return (_asm_step(obj),)
    # kernels.BWD_SEQUENCE: prepare -> asm -> convert_dq, run in order on one stream
    return (_glue_step("prepare", key.head_dim), _asm_step(obj),
            _glue_step("convert_dq", key.head_dim))


def requires(arch: str, op: str, key: FunctionalKey, config):
    return _code_object(arch, op, key, config).requires


def serves(arch: str, tune_key: TuneKey) -> str | None:
    """Where AITER serves within its keys, for `db seed` (the runtime checks the exact
    conditions per problem; these are the buckets that can meet them)."""
    if tune_key.op == "bwd" and tune_key.gqa != 1:
        return "the backward is MHA only"
    if tune_key.op == "fwd" and tune_key.causal and tune_key.sq != tune_key.sk:
        return "the causal forward needs Sq == Sk (bottom-right mask)"
    return None


def notice() -> str:
    with source.open_wheel() as wheel:
        return source.notice_text(wheel, [o.member for o in CODE_OBJECTS])


SPEC = FamilySpec(
    name="aiter_asm",
    backend="prebuilt",
    archs=("gfx942", "gfx950"),
    ops=("fwd", "bwd"),
    functional={"dtype": ("fp16", "bf16"), "head_dim": (64, 96, 128, 192),
                "causal": (False, True)},
    configs={"fwd": tuple({"build": b} for b in BUILDS), "bwd": ({"build": "single"},)},
    steps=steps,
    default_config=default_config,
    excluded=excluded,
    key_excluded=key_excluded,
    requires=requires,
    workspace={"bwd": tuple(Workspace(name, shape) for name, shape in BWD_WORKSPACE)},
    priority=60,
    serves=serves,
    deterministic_backward=False,   # dQ is accumulated with float32 atomics
    provenance={
        "license": "MIT",
        "origin": f"AMD AITER assembly (fmha_v3), prebuilt code objects from the PyPI wheel "
                  f"{source.WHEEL_NAME}",
        "package": f"{source.PACKAGE}=={source.VERSION}",
        "wheel_sha256": source.WHEEL_SHA256,
        "source": "https://github.com/ROCm/aiter",
    },
    notice=notice,
)
