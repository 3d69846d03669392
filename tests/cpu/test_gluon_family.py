"""The Gluon family on the CPU: build, verify, and launch through the recording driver.

The kernels run on the GPU in tests/gpu/test_gluon_attn.py; these tests pin the part that can
be checked without one: that the archive's launch spec passes each host TMA descriptor exactly
as Triton 3.6's own launcher would (descriptor, then the tensor's shape and strides), at the
offsets the cubin declares, and that the runtime encodes each descriptor from the problem with
the arguments Triton's fill_tma_descriptor uses.
"""
import math
import re
import struct

import numpy as np
import pytest

from attnpack import abi
from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.elf import kernel_facts
from attnpack.archive.verify import verify_archive
from attnpack.builder import BuildRequest, build_archives
from attnpack.builder.backends.triton import cuobjdump, disassemble
from attnpack.builder.build import plan_variants
from attnpack.family import FunctionalKey, load_families
from gluon_plain import kernel_module, launch_order
from test_runtime_fixtures import PARAM_ALIGN, PARAM_SIZE, param_offsets

KERNEL = "gluon/fwd/bf16-d128-causal/M64_N128_stages2"
PERSISTENT = "gluon/fwd/bf16-d128-causal/M64_N128_stages2_persistent1"


@pytest.fixture(scope="module")
def gluon_archive(tmp_path_factory):
    """The gluon family's bf16 head-dim-128 variants for sm_90 (every config, causal and full),
    with the checked-in tuning database present (its triton entries are filtered out, not an error)."""
    out = tmp_path_factory.mktemp("gluon")
    req = BuildRequest(archs=("sm_90",), out_dir=out, all_variants=True, families=("gluon",),
                       ops=("fwd",), dtypes=("bf16",), head_dims=(128,), jobs=2,
                       cache_dir=tmp_path_factory.mktemp("cache"))
    [path] = build_archives(req)
    return path


def _fwd_step(rec):
    """A forward kernel's attention step: its only one, or with the split tail the one after
    the counters' zeroing."""
    [step] = [s for s in rec["steps"] if s["name"] == "fwd"]
    return step


def test_archive_verifies_with_no_problems(gluon_archive):
    ar, problems, warnings = verify_archive(gluon_archive)
    assert problems == [] and warnings == []
    declared = [v.name for v in load_families()["gluon"].all_variants("sm_90")
                if v.op == "fwd" and v.key.dtype == "bf16" and v.key.head_dim == 128]
    # the 12 two-consumer configs, causal and full, less the persistent N128 3-stage one, whose
    # 256 KiB of shared memory sm_90 does not have, plus its 2-stage stand-in, causal and full,
    # and the split tail's two persistent configs without a mask (three consumers serve head
    # dim 64 only)
    assert sorted(k["name"] for k in ar.kernels) == sorted(declared) and len(declared) == 26
    assert {k["family"] for k in ar.kernels} == {"gluon"}


def test_descriptor_params_are_tritons_expansion_at_the_cubins_offsets(gluon_archive):
    ar = read_archive(gluon_archive)
    [step] = ar.kernel(KERNEL)["steps"]
    expansion = lambda d, t: [[d, "tensormap", 1], ["B", "i32", 1],
                              ["Hkv" if t in "kv" else "Hq", "i32", 1],
                              ["Sk" if t in "kv" else "Sq", "i32", 1], ["D", "i32", 1],
                              *[[f"{t}_stride_{a}", "i64", 1] for a in "bhsd"]]
    assert [p[:3] for p in step["params"]] == [
        *expansion("q_desc", "q"), *expansion("k_desc", "k"), *expansion("v_desc", "v"),
        *expansion("o_desc", "o"), ["lse", "ptr", 16], ["B", "i32", 1], ["Hq", "i32", 1],
        ["Hkv", "i32", 1],
        ["Sq", "i32", 1], ["Sk", "i32", 1], ["sm_scale", "f32", 1],
        ["global_scratch", "ptr", 1], ["profile_scratch", "ptr", 1]]
    # d128 with a 128-byte swizzle: TMA boxes are 64 elements (128 bytes) wide, so the kernel
    # copies each tile as two boxes and the descriptor is encoded with the 64-wide box.
    assert step["tensormaps"] == [
        {"param": p, "tensor": p[0], "box": [1, 1, rows, 64], "swizzle": 128,
         "l2_promotion": 128, "oob_fill": "zero"}
        for p, rows in (("q_desc", 64), ("k_desc", 128), ("v_desc", 128), ("o_desc", 64))]
    facts = kernel_facts(ar.image(step["image"]), step["symbol"])
    types = [p[1] for p in step["params"]]
    assert facts.param_base == 0x210
    assert facts.params == [(off, PARAM_SIZE[t]) for off, t in zip(param_offsets(types), types)]
    # the index carries the cubin's own offsets; the documented rule reproduces them
    assert [p[3] for p in step["params"]] == param_offsets(types)
    # descriptors at 48, 240, 432, 624: 64-byte aligned in the constant bank, not in the buffer
    assert [off for off, size in facts.params if size == 128] == [48, 240, 432, 624]
    assert step["kernarg_size"] == facts.kernarg_size == 848
    assert step["block"] == [384, 1, 1]   # 4 + 4 consumer warps + 1 load warp, padded to 12
    assert step["grid"] == [[["Sq", 128]], [["B", 1], ["Hq", 1]], []]


def test_gluon_is_never_a_default():
    families = load_families()
    assert families["gluon"].priority == 1000 and families["gluon"].archs == ("sm_90",)
    variants, defaults = plan_variants(BuildRequest(archs=("sm_90",), out_dir=None), "sm_90",
                                       families)
    assert not [v.name for v in variants if v.family == "gluon"]
    assert {v.family for v in defaults} == {"triton"}
    everything, _ = plan_variants(BuildRequest(archs=("sm_90",), out_dir=None, all_variants=True),
                                  "sm_90", families)
    # 12 two-consumer configs x 4 keys per head dim, less what does not fit 227 KiB of shared
    # memory: the persistent N128 3-stage config at head dims 96 and 128 (tiles 128 wide), and
    # at 256 all but the N64 2-stage pair (plain and overlapped); the overlapped persistent
    # N128 2-stage config at 96 and 128 only; the 6 three-consumer configs at
    # head dim 64 only (wider ones spill or measured slower than two consumers); and the 8
    # four-consumer configs, head dim 64 and 64-key tiles only (everything else spills); the
    # split tail's configs without a mask, three at head dim 64 and two at 96 and 128
    fwd = [v for v in everything if v.family == "gluon" and v.op == "fwd"]
    per_dim = {d: len([v for v in fwd if v.key.head_dim == d]) for d in (64, 96, 128, 256)}
    assert per_dim == {64: 110, 96: 52, 128: 52, 256: 8}
    tail = [v for v in fwd if v.config.get("tail")]
    assert len(tail) == 14 and not any(v.key.causal for v in tail)
    assert all(v.config["persistent"] and len(v.steps) == 2 for v in tail)
    fwd = [v for v in fwd if not v.config.get("tail")]
    three = {v.name.split("/")[-1] for v in fwd if v.config.get("consumers") == 3}
    assert len(three) == 6 and all(n.endswith("_consumers3") for n in three)
    assert all(v.key.head_dim == 64 for v in fwd if v.config.get("consumers") == 3)
    four = [v for v in fwd if v.config.get("consumers") == 4]
    assert len({v.config_tag for v in four}) == 8 and len(four) == 32
    assert all(v.name.endswith("_consumers4") and v.key.head_dim == 64 and v.config["N"] == 64
               for v in four)
    # the backward serves 64, 128, and 96 on 128-wide tiles; 256 on the wide kernels only
    # (bwd.py's would not fit their registers there)
    bwd = [v for v in everything if v.family == "gluon" and v.op == "bwd"]
    assert {v.key.head_dim for v in bwd} == {64, 96, 128, 256}
    assert {v.key.head_dim for v in bwd if v.config.get("wide")} == {256}
    assert {v.config_tag for v in bwd if v.key.head_dim == 256} == {"M64_stages2_det0_wide1",
                                                                    "M64_stages2_det1_wide1"}


def test_padded_head_dims_load_tiles_of_the_next_power_of_two():
    """Head dim 96 runs on 128-wide tiles: its tensor maps' blocks and HEAD_DIM say 128, so TMA
    zero-fills columns 96..127 on load and drops them on store (the runtime encodes the tensor's
    own 96 as the map's extent)."""
    gluon = load_families()["gluon"]
    for d, tile in ((64, 64), (96, 128), (128, 128), (256, 256)):
        for v in gluon.all_variants("sm_90"):
            if v.key.head_dim != d:
                continue
            for step in v.steps:
                if step.name == "fwd_tail_zero":  # the split tail's counters only
                    continue
                assert step.kernel.constexprs["HEAD_DIM"] == tile
                assert {m.block[3] for m in step.tensormaps} <= {tile, tile // 2}
                if v.op == "bwd" or v.config.get("tail"):
                    # the plain-pointer steps (O in the dQ kernel too, and the split tail's
                    # merged O), dK/dV stores and the dQ accumulator keep 96
                    assert step.kernel.constexprs["D"] == d
    assert gluon.key_excluded("sm_90", "bwd", FunctionalKey("bf16", 96, True)) is None
    assert gluon.key_excluded("sm_90", "bwd", FunctionalKey("bf16", 256, True)) is None  # wide
    assert gluon.key_excluded("sm_90", "fwd", FunctionalKey("bf16", 96, True)) is None


def _expected_args(step: dict, values: dict) -> bytes:
    """Packed arguments, written from the spec independently of the runtime: each value at the
    cubin layout's offset; a descriptor slot holds what the recording driver writes there (the
    viewed tensor's address, then zeros)."""
    types = [p[1] for p in step["params"]]
    offsets = param_offsets(types)
    out = bytearray(step["kernarg_size"])
    pack = {"ptr": "<Q", "i64": "<q", "i32": "<i", "f32": "<f", "tensormap": "<Q"}
    for (word, typ, _, off), rule in zip(step["params"], offsets):
        assert off == rule
        assert off % PARAM_ALIGN[typ] == (0 if typ != "tensormap" else 48)
        struct.pack_into(pack[typ], out, off, values[word])
    return bytes(out)


def test_recorded_launch_packs_descriptors_shapes_and_strides(gluon_archive):
    ar = read_archive(gluon_archive)
    [step] = ar.kernel(KERNEL)["steps"]
    # BSHD q/o, BHSD k/v, GQA 4, Sq != Sk, an explicit scale
    B, Hq, Hkv, Sq, Sk, D = 3, 32, 8, 1000, 17, 128
    ptr = {"q": 0x7f0000001000, "k": 0x7f0000101000, "v": 0x7f0000201000,
           "o": 0x7f0000301000, "lse": 0x7f0000401000}
    strides = {"q": (Sq * Hq * D, D, Hq * D, 1), "o": (Sq * Hq * D, D, Hq * D, 1),
               "k": (Hkv * Sk * D, Sk * D, D, 1), "v": (Hkv * Sk * D, Sk * D, D, 1)}
    prob = rt.make_problem("fwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D, causal=True,
                           scale=0.3, strides=strides, pointers=ptr, kernel=KERNEL)
    with rt.Bundle(gluon_archive, recording=True) as bundle:
        bundle.forward(prob, stream=0x1234)
        [launch] = bundle.recorded_launches()["launches"]
    scale = struct.unpack("<f", struct.pack("<f", 0.3))[0]
    values = {"B": B, "Hq": Hq, "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "D": D, "sm_scale": scale,
              "lse": ptr["lse"], "global_scratch": 0, "profile_scratch": 0,
              **{f"{t}_desc": ptr[t] for t in "qkvo"}}
    for t in "qkvo":
        for axis, stride in zip("bhsd", strides[t]):
            values[f"{t}_stride_{axis}"] = stride
    assert bytes.fromhex(launch["args"]) == _expected_args(step, values)
    assert launch["arg_offsets"] == param_offsets([p[1] for p in step["params"]])
    assert launch["grid"] == [math.ceil(Sq / 128), B * Hq, 1]
    assert launch["block"] == [384, 1, 1] and launch["cluster"] == [1, 1, 1]
    assert launch["shared"] == step["shared"] > 160 * 1024
    # What Triton's fill_tma_descriptor passes to cuTensorMapEncodeTiled: dims innermost first,
    # byte strides of dims 1.., the compiled box, element strides 1, no interleave, 128-byte
    # swizzle (3), L2 promotion 128B (2), no OOB NaN fill (0); bf16 is CU_TENSOR_MAP_DATA_TYPE 9.
    def encode(t, s, h):
        sb, sh, ss, _ = strides[t]
        rows = 64 if t in "qo" else 128
        return {"data_type": 9, "rank": 4, "address": ptr[t], "dims": [D, s, h, B],
                "strides": [ss * 2, sh * 2, sb * 2], "box": [64, rows, 1, 1],
                "element_strides": [1, 1, 1, 1], "interleave": 0, "swizzle": 3,
                "l2_promotion": 2, "oob_fill": 0}
    assert launch["tensormaps"] == [encode("q", Sq, Hq), encode("k", Sk, Hkv),
                                    encode("v", Sk, Hkv), encode("o", Sq, Hq)]


def test_persistent_kernel_launches_one_program_per_sm(gluon_archive):
    """The persistent configs: grid num_sms (132 on the recording driver's pretend H200), B as
    a kernel argument for the tile count, and two O tiles of shared memory of their own."""
    ar = read_archive(gluon_archive)
    [step] = ar.kernel(PERSISTENT)["steps"]
    assert step["grid"] == [[["num_sms", 1]], [], []]
    [plain] = ar.kernel(KERNEL)["steps"]
    assert step["params"] == plain["params"]
    assert 0 <= step["shared"] - plain["shared"] - 2 * 64 * 128 * 2 < 64  # O tiles + alignment
    ptrs = {t: 0x7f0000000000 + (i << 24) for i, t in enumerate(("q", "k", "v", "o", "lse"))}
    with rt.Bundle(gluon_archive, recording=True) as bundle:
        for B in (1, 600):  # fewer work tiles than SMs, and many more
            bundle.forward(rt.make_problem("fwd", "bf16", B=B, Hq=8, Hkv=8, Sq=1000, Sk=1000,
                                           D=128, causal=True, kernel=PERSISTENT, pointers=ptrs))
        launches = bundle.recorded_launches()["launches"]
    assert [l["grid"] for l in launches] == [[132, 1, 1], [132, 1, 1]]
    assert [l["shared"] for l in launches] == [step["shared"]] * 2


TAIL = "gluon/fwd/bf16-d128-full/M64_N128_stages2_persistent1_tail1"


def test_split_tail_kernel_zeroes_its_counters_then_runs_the_forward(gluon_archive):
    """A split-tail forward is two launches of one program per SM (132 on the recording
    driver's pretend H200): the counters' zeroing, then the forward, which gets the same counter
    buffer, its other workspace slots and O by pointer beside the descriptors; the workspace
    is sized by the device's SM count (format 2.6), 2 pieces' slots a program."""
    ar = read_archive(gluon_archive)
    rec = ar.kernel(TAIL)
    assert [s["name"] for s in rec["steps"]] == ["fwd_tail_zero", "fwd"]
    assert rec["workspace"] == [{"name": "tail_part", "shape": ["num_sms", "const:32768"]},
                                {"name": "tail_stat", "shape": ["num_sms", "const:512"]},
                                {"name": "tail_ctr", "shape": ["num_sms", "const:16"]}]
    zero, fwd = rec["steps"]
    words = [p[0] for p in fwd["params"]]
    assert zero["params"][0][:2] == ["tail_ctr", "ptr"]
    assert zero["grid"] == [[["num_sms", 1]], [], []]
    first = words.index("tail_part")
    assert words[first:first + 7] == ["tail_part", "tail_stat", "tail_ctr", "o", "o_stride_b",
                                      "o_stride_h", "o_stride_s"]
    ptrs = {t: 0x7f0000000000 + (i << 24) for i, t in enumerate(("q", "k", "v", "o", "lse"))}
    problem = rt.make_problem("fwd", "bf16", B=2, Hq=8, Hkv=8, Sq=1000, Sk=1000, D=128,
                              kernel=TAIL, pointers=ptrs)
    with rt.Bundle(gluon_archive, recording=True) as bundle:
        part, stat, ctr = 132 * 32768 * 4, 132 * 512 * 4, 132 * 16 * 4
        size = bundle.workspace_size(problem)
        assert size == part + stat + ctr
        bundle.forward(problem, workspace=0x7e0000000000, workspace_size=size)
        launches = bundle.recorded_launches()["launches"]
    assert [l["grid"] for l in launches] == [[132, 1, 1], [132, 1, 1]]
    assert [l["symbol"] for l in launches] == ["attn_fwd_tail_zero", "attn_fwd_pingpong_tail"]


def test_split_tail_counts_in_with_release_and_reads_with_acquire(gluon_archive):
    """The split tail's memory order, as the machine code has it: each consumer's warps add to
    their counters with a GPU-scope release (ptxas: one elected `REDG.E.ADD.STRONG.GPU` a warp
    behind a `MEMBAR.ALL.GPU`, after the piece's workspace stores), and read them with an
    acquire (`LDG.E.STRONG.GPU`, then `CCTL.IVALL`, so the merge's loads miss the L1) before
    any load of the other pieces' slots. A compiler that weakened either would fail here."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(gluon_archive)
    code = sass.instructions(ar.image(_fwd_step(ar.kernel(TAIL))["image"]))
    ops = [sass.opcode(line) for line in code]
    adds = [i for i, op in enumerate(ops) if op == "REDG.E.ADD.STRONG.GPU"]
    reads = [i for i, op in enumerate(ops) if op == "LDG.E.STRONG.GPU"]
    assert len(adds) == 2 and len(reads) == 4  # two consumers; two rows a thread each
    for a in adds:
        assert "MEMBAR.ALL.GPU" in ops[a - 4:a] and "STG.E.64" in ops[a - 80:a], code[a - 6:a + 1]
    for r in reads:
        assert ops[r + 1] == "CCTL.IVALL", code[r:r + 2]
    for first, second in (reads[:2], reads[2:]):
        add = max(a for a in adds if a < first)
        assert add < first and not [op for op in ops[add:second] if op.startswith("LDG.E")
                                    and op != "LDG.E.STRONG.GPU"]


THREE_CONSUMERS = ("gluon/fwd/bf16-d64-causal/M64_N64_stages3_overlap1_persistent1_consumers3",
                   "gluon/fwd/bf16-d64-full/M64_N128_stages3_consumers3")
# A causal one on a 2-stage ring, whose consumer 0 skips up to three key tiles, more than the
# ring has slots (fwd._attend releases them oldest first), and a plain non-persistent one.
FOUR_CONSUMERS = ("gluon/fwd/bf16-d64-causal/M64_N64_stages2_overlap1_persistent1_consumers4",
                  "gluon/fwd/bf16-d64-full/M64_N64_stages3_consumers4")


@pytest.fixture(scope="module")
def many_consumer_cubins():
    """Two of the three-consumer kernels and two of the four-consumer ones (head dim 64),
    compiled alone: {name: (step, cubin, warps)}."""
    from attnpack.builder.compile import CompileJob
    variants = {v.name: v for v in load_families()["gluon"].all_variants("sm_90")}
    out = {}
    for name in THREE_CONSUMERS + FOUR_CONSUMERS:
        [step] = variants[name].steps
        job = CompileJob(variants[name], step)
        compiled = job.backend.compile(job)
        out[name] = step, compiled.image, compiled.meta["num_warps"]
    return out


def _assert_turns(name, sass, consumers):
    """The turn barriers are the top `consumers` ids, each taken (bar.sync) and passed
    (bar.arrive) over two warpgroups. A forward kernel releases its ring slots on barriers
    counted over every consumer's 128 threads and the loader's 32 (the consumers arrive, the
    loader syncs), whose ids, 5 and up by slot (named_barrier.FIRST_SLOT_BARRIER), are in
    registers. Triton's own barriers keep below both."""
    bars = set(re.findall(r"BAR\.(SYNC|ARV)\S* (0x[0-9a-f]+|R\d+)(?:, (0x[0-9a-f]+))?", sass))
    turns = {(op, int(i, 16)) for op, i, n in bars if n == "0x100"}
    ids = range(16 - consumers, 16)
    assert turns == {(op, i) for op in ("SYNC", "ARV") for i in ids}, name
    slot_count = hex(32 + 128 * consumers)
    slots = {op for op, i, n in bars if n == slot_count}
    assert slots == ({"SYNC", "ARV"} if "/fwd/" in name else set()), (name, sorted(bars))
    others = {int(i, 16) for op, i, n in bars if n not in ("0x100", slot_count)}
    assert others and max(others) < min(ids[0], 5), (name, sorted(bars))


def test_turns_use_hardware_barriers_triton_leaves_alone(gluon_archive, many_consumer_cubins):
    """The consumers pass the turn with a non-blocking bar.arrive and take it with bar.sync, on
    hardware barriers 14 and 15 (13-15 with three consumers, 12-15 with four) over two
    warpgroups (256 threads).
    Triton's own barriers in the kernel (its warpgroup syncs, the partition set-up) must keep to
    lower ids: a Triton that took one of ours would break the turn, and this fails first.
    Checked in the SASS of every kernel, disassembled with the cuobjdump Triton ships."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    ar = read_archive(gluon_archive)
    kernels = [(rec["name"], ar.image(_fwd_step(rec)["image"]),
                rec["config"].get("consumers", 2)) for rec in ar.kernels]
    kernels += [(name, cubin, step.kernel.constexprs["CONSUMERS"])
                for name, (step, cubin, _) in many_consumer_cubins.items()]
    assert sorted(n for _, _, n in kernels)[-4:] == [3, 3, 4, 4]
    for name, cubin, consumers in kernels:
        sass = disassemble(cubin)
        _assert_turns(name, sass, consumers)
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{name} spills"


def test_key_tile_loops_keep_one_warpgroup_barrier(gluon_archive):
    """Each consumer's key-tile loop (an innermost loop closed by a conditional branch, with
    wgmmas and a turn taken in it) holds one warpgroup BAR.SYNC, which Triton's barrier pass
    puts before the tile's k_ready wait, and releases its ring slot on named barriers, BAR.ARV
    with the id in a register: twice a trip with a 2-stage ring (K, then V), once with 3. With
    mbarrier.arrive the pass bracketed each release with warpgroup barriers: three a trip with
    2 stages, two with 3 (docs/gluon-family.md, item 20)."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(gluon_archive)
    for rec in ar.kernels:
        code = sass.instructions(ar.image(_fwd_step(rec)["image"]))
        loops = [code[first:last + 1] for first, last in sass.innermost(sass.loops(code))
                 if code[last].startswith("@")]
        loops = [body for body in loops
                 if any(sass.opcode(line).startswith("HGMMA") for line in body)
                 and any(re.search(r"BAR\.SYNC\S* 0x[c-f], 0x100", line) for line in body)]
        consumers = rec["config"].get("consumers", 2)
        releases = 2 if rec["config"]["stages"] == 2 else 1
        assert len(loops) == consumers, (rec["name"], len(loops))
        for body in loops:
            warpgroup = [line for line in body if re.search(r"BAR\.SYNC\S* 0x[0-4], 0x80", line)]
            arrives = [line for line in body if re.search(r"BAR\.ARV R\d+", line)]
            assert (len(warpgroup), len(arrives)) == (1, releases), rec["name"]


def test_three_consumer_kernels_launch_512_threads_over_192_row_tiles(many_consumer_cubins):
    """Three consumer warpgroups and the loader's, 16 warps; a work tile is 3 x 64 query rows."""
    for name in THREE_CONSUMERS:
        step, cubin, warps = many_consumer_cubins[name]
        facts = kernel_facts(cubin, "attn_fwd_pingpong")
        assert facts.kernarg_size == 848 and warps == 16, name
        assert step.kernel.constexprs["CONSUMERS"] == 3
        assert step.kernel.constexprs["CONSUMER_REGS"] * 3 * 128 + \
            step.kernel.constexprs["LOAD_REGS"] * 128 <= 65536
        persistent = step.kernel.constexprs["PERSISTENT"]
        assert step.grid == (((("num_sms", 1),), (), ()) if persistent
                             else ((("Sq", 192),), (("B", 1), ("Hq", 1)), ())), name


def test_four_consumer_kernels_split_20_warps_registers_over_256_row_tiles(
        many_consumer_cubins):
    """Four consumer warpgroups and the loader's warp, which Triton pads to a warpgroup: 20
    warps, launched with 65536 / 640 rounded down to 8 = 96 registers a thread. setmaxnreg then
    gives consumers 1-3 112 each, the loader's warpgroup 24 and consumer 0 (the default
    partition) the 120 left: 61 440 registers, the launch's all. The wgmmas are not serialized
    (ptxas does that where registers run short, as at 128-key tiles here); no spills (above)."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    for name in FOUR_CONSUMERS:
        step, cubin, warps = many_consumer_cubins[name]
        facts = kernel_facts(cubin, "attn_fwd_pingpong")
        assert facts.kernarg_size == 848 and warps == 20, name
        assert facts.resources["registers"] == 96 and facts.resources["stack_bytes"] == 0, name
        consts = step.kernel.constexprs
        assert (consts["CONSUMERS"], consts["CONSUMER_REGS"], consts["LOAD_REGS"]) == (4, 112, 24)
        code = disassemble(cubin)
        regs = {int(n, 16) for n in re.findall(r"USETMAXREG\.\S+ (?:UP\d+, )?(0x[0-9a-f]+)", code)}
        assert {120, 112, 24} <= regs, (name, sorted(regs))
        assert (120 + 3 * 112 + 24) * 128 == facts.resources["registers"] * warps * 32
        assert not sass.wgmma_serialized(sass.instructions(cubin)), name
        assert step.grid == (((("num_sms", 1),), (), ()) if consts["PERSISTENT"]
                             else ((("Sq", 256),), (("B", 1), ("Hq", 1)), ())), name


def test_descriptor_pitch_and_alignment_are_checked(gluon_archive):
    ptrs = {t: 0x7f0000000000 + (i << 24) for i, t in enumerate(("q", "k", "v", "o", "lse"))}
    base = dict(B=1, Hq=8, Hkv=8, Sq=128, Sk=128, D=128, causal=True, kernel=KERNEL,
                pointers=ptrs)
    with rt.Bundle(gluon_archive, recording=True) as bundle:
        # a q row pitch of 136 elements (272 bytes) is fine; 132 (264 bytes) is not 16-byte
        with pytest.raises(rt.Unsupported) as e:
            bundle.forward(rt.make_problem("fwd", "bf16", **base,
                                           strides={"q": (8 * 128 * 132, 128 * 132, 132, 1)}))
        assert e.value.reason == ("q_stride_s=132 is a 264-byte pitch, not a multiple of 16 "
                                  "(tensor map q_desc)")
        bundle.forward(rt.make_problem("fwd", "bf16", **base,
                                       strides={"q": (8 * 128 * 136, 128 * 136, 136, 1)}))
        assert len(bundle.recorded_launches()["launches"]) == 1


@pytest.mark.parametrize("consumers", [2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Hq,Sq", [(1, 1, 1), (1, 1, 128), (3, 5, 384), (2, 7, 640),
                                     (64, 32, 256), (1, 16, 16384), (5, 3, 1000)])
def test_persistent_units_cover_every_tile_once_at_equal_causal_cost(B, Hq, Sq, causal,
                                                                      consumers):
    """The persistent forward's work order, run as plain Python (fwd._units, _unit_tiles and
    _tile are integer arithmetic; the GPU runs the same source): every (b, h, row block) is
    served exactly once; under causal each unit visits row_blocks + 1 spans of a work tile's
    rows in keys (the middle row block of an odd count is a unit alone), the longer row block
    first; without a mask a unit is one row block, a head's consecutive and its last first."""
    fwd, rows = kernel_module("fwd"), consumers * 64
    row_blocks = -(-Sq // rows)
    seen, costs = [], []
    for unit in range(fwd._units.fn(B, Hq, row_blocks, True, causal)):
        spans = []
        for half in range(fwd._unit_tiles.fn(unit, row_blocks, True, causal)):
            b, h, start = fwd._tile.fn(unit, half, row_blocks, Hq, rows, True, causal)
            assert 0 <= b < B and 0 <= h < Hq and start % rows == 0
            seen.append((b, h, start // rows))
            spans.append(start // rows + 1)
        assert spans == sorted(spans, reverse=True)  # the longer row block first
        costs.append(sum(spans))
    assert sorted(seen) == [(b, h, r) for b in range(B) for h in range(Hq)
                            for r in range(row_blocks)]
    if causal:
        middle = [(row_blocks + 1) // 2] if row_blocks % 2 else []
        assert sorted(set(costs)) == sorted(set([row_blocks + 1] * (row_blocks > 1) + middle))
    else:
        assert costs == [row_blocks - (u % row_blocks) for u in range(len(costs))]


class _IntegerGl:
    """gl's scalar functions over Python integers, to run fwd's index helpers as plain Python."""
    minimum = staticmethod(min)
    cdiv = staticmethod(lambda a, b: -(-a // b))
    static_range = range


@pytest.mark.parametrize("programs", [132, 78, 7, 1])
@pytest.mark.parametrize("tiles,n_kv", [(2048, 16), (4096, 32), (2048, 8), (200, 8), (68, 4),
                                        (3, 1), (1, 2), (264, 16), (133, 2), (1000, 3), (5, 64)])
def test_split_tail_covers_every_key_tile_once_and_shortens_the_last_round(
        monkeypatch, tiles, n_kv, programs):
    """The split tail's work order (fwd._tail_split, _tail_units, _tail_unit), run as plain
    Python: every (tile, key tile) is computed exactly once; a tile's pieces are consecutive
    key ranges, the first a key tile longer where they do not divide, at most TAIL_MAX_PIECES,
    each at least one key tile, taken piece by piece (every split tile's first piece, then its
    second, ...), their slots inside the workspace's TAIL_SLOTS per program; and the last
    round, in tiles, is the shortest that 1..TAIL_MAX_PIECES pieces give (none where nothing is
    left over: 2048 tiles on 128 programs). On 132 SMs the bench's 2048 tiles of 16 key tiles
    take 15 whole rounds and thirds of the 68 left (15.69 rounds, from 16); 4096 take 31 and
    quarters of 4."""
    fwd = kernel_module("fwd")
    monkeypatch.setattr(fwd, "gl", _IntegerGl)
    most, slots = fwd.TAIL_MAX_PIECES.value, fwd.TAIL_SLOTS.value
    monkeypatch.setattr(fwd, "TAIL_MAX_PIECES", most)
    monkeypatch.setattr(fwd, "TAIL_SLOTS", slots)
    whole, pieces = fwd._tail_split.fn(tiles, programs, n_kv)
    rest = tiles - whole
    assert whole % programs == 0 and 0 <= rest < programs and 1 <= pieces <= most
    assert pieces <= n_kv and rest * pieces <= slots * programs and (rest or pieces == 1)
    covered, load = [], [0.0] * programs
    units = fwd._tail_units.fn(tiles, whole, pieces)
    for unit in range(units):
        tile, lo, hi = fwd._tail_unit.fn(unit, whole, pieces, rest, n_kv)
        assert 0 <= tile < tiles and 0 <= lo < hi <= n_kv
        if unit >= whole:  # piece i of tile whole + t is unit whole + i·rest + t, its slot
            piece = (unit - whole) // rest
            assert tile == whole + (unit - whole) % rest and unit - whole < slots * programs
            assert hi - lo == n_kv // pieces + (piece < n_kv % pieces)  # the longer ones first
        covered += [(tile, j) for j in range(lo, hi)]
        load[unit % programs] += (hi - lo) / n_kv
    assert sorted(covered) == [(t, j) for t in range(tiles) for j in range(n_kv)]
    best = min(-(-rest * k // programs) / k for k in range(1, most + 1)
               if k == 1 or (k <= n_kv and rest * k <= slots * programs))
    last_round = -(-rest * pieces // programs) / pieces if rest else 0
    assert last_round == (best if rest else 0)
    if (tiles, n_kv, programs) == (2048, 16, 132):
        # thirds of 16 key tiles are 6, 5 and 5, the 68 first pieces the 6-tile ones: a
        # program takes at most a 6- and a 5-tile piece, and the last ends at 15.69 rounds
        assert (whole, pieces) == (1980, 3) and max(load) == pytest.approx(15 + 11 / 16)
    if (tiles, n_kv, programs) == (4096, 32, 132):
        assert (whole, pieces) == (4092, 4) and max(load) == pytest.approx(31.25)


@pytest.mark.parametrize("Sq,Sk", [(1, 1), (128, 128), (200, 200), (640, 640), (1000, 3000),
                                   (300, 100), (4096, 1000), (1024, 1024)])
@pytest.mark.parametrize("N", [64, 128])
@pytest.mark.parametrize("consumers", [2, 3, 4])
def test_causal_consumers_compute_every_visible_key_tile_and_skip_only_masked_ones(
        monkeypatch, Sq, Sk, N, consumers):
    """Top-left causal (key k visible to query q iff k <= q, k < Sk): a work tile visits the key
    tiles its last row can see; a consumer skips (fwd._own_tiles) only tiles that none of its
    rows can see, at most fwd._max_skipped of them, and the last consumer skips none. Run as
    plain Python, gl's minimum and cdiv standing in as integer functions."""
    fwd, m = kernel_module("fwd"), 64
    monkeypatch.setattr(fwd, "gl", _IntegerGl)
    skipped = 0
    for start in range(0, Sq, consumers * m):
        n_tiles = fwd._kv_tiles.fn(start, Sk, consumers * m, N, True)
        last_visible = min(Sk, start + consumers * m)  # one past the last key any row here sees
        assert (n_tiles - 1) * N < last_visible <= n_tiles * N
        for consumer in range(consumers):
            row0 = start + consumer * m
            n_own = fwd._own_tiles.fn(n_tiles, row0, consumer, consumers, m, N, True)
            visible = min(Sk, row0 + m)  # one past the last key this consumer's rows see
            assert n_own * N >= visible and 1 <= n_own <= n_tiles
            assert all(j * N >= visible for j in range(n_own, n_tiles))  # skipped: all masked
            assert n_tiles - n_own <= fwd._max_skipped(consumer, consumers, m, N, True)
            if consumer == consumers - 1 or (consumers == 2 and N > m):
                assert n_own == n_tiles
            if fwd._max_skipped(consumer, consumers, m, N, True) == 0:
                assert n_own == n_tiles  # nothing compiled for skipping
            skipped += n_tiles - n_own
    # with 64-key tiles consumer 0 skips one tile wherever its rows stop short of the keys;
    # three or four consumers' 192 or 256 rows reach past some consumer's last key tile
    # wherever there are two
    assert (skipped > 0) == ((N == m or consumers > 2) and Sk > N)


@pytest.mark.parametrize("consumers,N,most", [
    (2, 64, [1, 0]), (2, 128, [0, 0]), (3, 64, [2, 1, 0]), (3, 128, [1, 1, 0]),
    (4, 64, [3, 2, 1, 0]), (4, 128, [1, 1, 0, 0])])
def test_max_skipped_is_the_most_any_work_tile_skips(monkeypatch, consumers, N, most):
    """fwd._max_skipped is exact, not only a bound: its value is what the static loops of
    fwd._attend unroll, and where it exceeds the ring's stages (consumer 0 of four, 64-key tiles,
    2 stages) the skipped slots are released oldest first. Every start a work tile can have
    (multiples of its rows, and keys reaching past it) against each consumer's skipped tiles."""
    fwd, m = kernel_module("fwd"), 64
    monkeypatch.setattr(fwd, "gl", _IntegerGl)
    tile = consumers * m
    seen = [0] * consumers
    for start in range(0, 2 * N * tile, tile):
        n_tiles = fwd._kv_tiles.fn(start, 10 ** 9, tile, N, True)
        for consumer in range(consumers):
            n_own = min(n_tiles, -(-(start + (consumer + 1) * m) // N))
            seen[consumer] = max(seen[consumer], n_tiles - n_own)
    assert seen == most
    assert [fwd._max_skipped(c, consumers, m, N, True) for c in range(consumers)] == most
    assert [fwd._max_skipped(c, consumers, m, N, False) for c in range(consumers)] == \
        [0] * consumers


def test_key_tile_loop_issues_one_exp2_per_score_and_row(gluon_archive):
    """The persistent N128 kernel's key-tile loop, found in its SASS by attnpack.builder.sass: a
    consumer thread holds 64 x 128 / 128 = 64 scores of two rows, so one trip issues 64 + 2
    exponentials (p, and alpha per row) and the QKᵀ and PV wgmmas, 8 k-steps of 16 each."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(gluon_archive)
    [rec] = [r for r in ar.kernels if r["name"] == PERSISTENT]
    code = sass.instructions(ar.image(_fwd_step(rec)["image"]))
    trips = [sass.opcodes(code, span) for span in sass.innermost(sass.loops(code))]
    key_tile = [t for t in trips if t["HGMMA.64x128x16.F32.BF16"] == 16]
    assert len(key_tile) == 2, trips  # one loop per consumer partition
    assert all(t["MUFU.EX2"] == 64 + 2 for t in key_tile), key_tile


def test_overlapped_softmax_runs_beside_the_last_tiles_pv(gluon_archive, many_consumer_cubins):
    """The overlapped schedule issues QKᵀ(j) and PV(j - 1), waits for QKᵀ(j) alone (at most one
    wgmma group left in flight), runs softmax(j) and only then waits for PV(j - 1): in
    attnpack.builder.sass.wgmma_order's letters each of its key-tile loops must read `GGW1eW0`,
    every exponential between the two waits. ptxas had moved the second wait above the first
    exponential while it shared the softmax's basic block (`GGW1W0e`), and the softmax then ran
    after PV(j - 1), not beside it. fwd._end_block ends the block on 128-wide tiles; at head
    dims 64 and 256 those kernels measured slower so (run136), and keep ptxas' order. The plain
    schedule's loops wait for no single group and are left out."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(gluon_archive)
    kernels = [(rec["name"], ar.image(_fwd_step(rec)["image"])) for rec in ar.kernels]
    kernels += [(name, cubin) for name, (_, cubin, _) in many_consumer_cubins.items()]
    orders_of = {}
    for name, cubin in kernels:
        code = sass.instructions(cubin)
        orders = [sass.wgmma_order(code, span) for span in sass.innermost(sass.loops(code))]
        orders_of[name] = [o for o in orders if "W1" in o]
    overlapped = {name for name, _ in kernels if "overlap1" in name}
    assert {name for name, orders in orders_of.items() if orders} == overlapped
    beside = {name for name in overlapped if "-d128-" in name}
    assert len(beside) >= 15 and len(overlapped - beside) >= 2, sorted(overlapped)
    for name in overlapped:
        order = "W1eW0" if name in beside else "W1W0e"
        assert all(o.count("W1") == o.count(order) for o in orders_of[name]), (name,
                                                                               orders_of[name])


def test_no_kernel_has_its_wgmmas_serialized(gluon_archive):
    """ptxas serializes every wgmma of a kernel (C7512) when one wgmma's register operand may be
    reused while it runs; the kernel then stalls on each k-step. No forward kernel may be so."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(gluon_archive)
    serialized = [r["name"] for r in ar.kernels
                  if sass.wgmma_serialized(sass.instructions(ar.image(_fwd_step(r)["image"])))]
    assert serialized == []


class _NumpyGl:
    """gl's tensor functions over numpy float32 arrays, to run fwd's softmax helpers
    (_reference, _softmax, _row_lse) as plain Python. fma rounds once, as the GPU's FFMA does:
    a product of two float32s is exact in float64."""
    int32, float32 = np.int32, np.float32
    abs, where, maximum, minimum, exp2, log2 = (np.abs, np.where, np.maximum, np.minimum,
                                                np.exp2, np.log2)
    expand_dims = staticmethod(np.expand_dims)
    max = staticmethod(lambda x, axis: np.max(x, axis))
    sum = staticmethod(lambda x, axis: np.sum(x, axis, dtype=np.float32))
    arange = staticmethod(lambda a, b, layout=None: np.arange(a, b))
    SliceLayout = staticmethod(lambda *args: None)
    cast = staticmethod(lambda x, dtype, bitcast=False:
                        x.view(dtype) if bitcast else x.astype(dtype))
    fma = staticmethod(lambda x, y, z: (np.float64(x) * y + z).astype(np.float32))


def _numpy_fwd(monkeypatch):
    """fwd with gl over numpy (_NumpyGl), its float constants as float32 and _reference plain
    Python (the helpers under test call it)."""
    fwd = kernel_module("fwd")
    if fwd.gl is not _NumpyGl:
        monkeypatch.setattr(fwd, "gl", _NumpyGl)
        for name in ("HUGE_SCALED_MAX", "ULP_BUMP", "LOG2E", "LN2"):
            monkeypatch.setattr(fwd, name, np.float32(getattr(fwd, name).value))
        monkeypatch.setattr(fwd, "_reference", fwd._reference.fn)
    return fwd


def _attend_tiles(fwd, s, v, scale, block_n, key_tiles, causal=False):
    """(acc, m, l) of rows with float32 scores s [M, Sk] over the key tiles `key_tiles`, one
    by one through fwd._softmax as _attend calls it (absolute tile indices for the mask)."""
    rows, Sk = s.shape
    m_i = np.full(rows, -np.inf, np.float32)
    l_i = np.zeros(rows, np.float32)
    r_i = np.full(rows, -np.inf, np.float32)
    acc = np.zeros((rows, v.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in key_tiles:
            tile = np.zeros((rows, block_n), np.float32)  # TMA zero-fills keys past Sk
            tile[:, :min(block_n, Sk - j * block_n)] = s[:, j * block_n:(j + 1) * block_n]
            v_tile = np.zeros((block_n, v.shape[1]), np.float32)
            v_tile[:min(block_n, Sk - j * block_n)] = v[j * block_n:(j + 1) * block_n]
            p, alpha, m_i, l_i, r_i = fwd._softmax.fn(
                tile, m_i, l_i, r_i, j, 0, Sk, np.float32(scale * fwd.LOG2E), None, rows, block_n,
                causal)
            assert p.dtype == alpha.dtype == np.float32 and (p <= 1).all() and (alpha <= 1).all()
            acc = acc * alpha[:, None] + p @ v_tile
    return acc, m_i, l_i


def _online_softmax(monkeypatch, s, v, scale, block_n, causal=False):
    """O and LSE of one consumer's rows from their float32 scores s [M, Sk], key tile by key
    tile through fwd._softmax as _attend calls it, then fwd._row_lse as the epilogue does."""
    fwd = _numpy_fwd(monkeypatch)
    acc, m_i, l_i = _attend_tiles(fwd, s, v, scale, block_n, range(-(-s.shape[1] // block_n)),
                                  causal)
    with np.errstate(over="ignore", invalid="ignore"):
        return acc / l_i[:, None], fwd._row_lse.fn(m_i, l_i, np.float32(scale))


def _split_softmax(monkeypatch, s, v, scale, block_n, ranges):
    """O and LSE of rows without a mask computed as a split tail does: each range of key tiles
    (lo, hi) through fwd._softmax as a piece's _attend calls it (from its key tile lo), then
    the pieces merged in order by fwd._merge_step and finished as _tail_epilogue does."""
    fwd = _numpy_fwd(monkeypatch)
    rows = s.shape[0]
    qk_scale = np.float32(scale * fwd.LOG2E)
    m = np.full(rows, -np.inf, np.float32)
    r = np.full(rows, -np.inf, np.float32)
    l = np.zeros(rows, np.float32)
    merged = np.zeros((rows, v.shape[1]), np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for lo, hi in ranges:
            acc, m_i, l_i = _attend_tiles(fwd, s, v, scale, block_n, range(lo, hi))
            m, r, l, merged = fwd._merge_step.fn(m, r, l, merged, m_i, l_i, acc, qk_scale)
            assert m.dtype == r.dtype == l.dtype == merged.dtype == np.float32
        return merged * (1 / l)[:, None], fwd._row_lse.fn(m, l, np.float32(scale))


def _growing_scores(seed, Sk, magnitude, rows=64, d=16):
    """Float32 scores [rows, Sk] of a size, every other row's max growing along the keys (the
    later tiles rescale the earlier ones), and values [Sk, d]."""
    rng = np.random.default_rng(seed)
    s = (rng.standard_normal((rows, Sk)) * magnitude).astype(np.float32)
    ramp = np.linspace(0, 4 * magnitude, Sk, dtype=np.float32)
    s += ramp[None, :] * (np.arange(rows) % 2)[:, None]
    return s, rng.standard_normal((Sk, d)).astype(np.float32)


def _piece_ranges(n_kv, pieces):
    return [(k * n_kv // pieces, (k + 1) * n_kv // pieces) for k in range(pieces)]


@pytest.mark.parametrize("pieces", [2, 3, 4])
@pytest.mark.parametrize("Sk,block_n", [(2048, 128), (300, 64), (1000, 128)])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 3e3])
def test_split_tail_merge_keeps_o_and_lse(monkeypatch, magnitude, Sk, block_n, pieces):
    """A tile cut into pieces along its keys and merged (fwd._merge_step): O and the LSE match
    float64 as the unsplit softmax does, and the unsplit one to float32 rounding, with maxima
    that grow along the keys so that later pieces rescale the earlier ones."""
    s, v = _growing_scores(11, Sk, magnitude)
    ranges = _piece_ranges(-(-Sk // block_n), pieces)
    o, lse = _split_softmax(monkeypatch, s, v, 0.125, block_n, ranges)
    o_ref, lse_ref = _float64_softmax(s, v, 0.125)
    o_one, lse_one = _online_softmax(monkeypatch, s, v, 0.125, block_n)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert np.abs(o - o_ref).max() <= 1e-5 * max(1.0, np.abs(o_ref).max())
    assert np.abs(lse - lse_ref).max() <= 4e-7 * max(1.0, np.abs(lse_ref).max())
    assert np.abs(o - o_one).max() <= 4e-6 * max(1.0, np.abs(o_one).max())


@pytest.mark.parametrize("value", [133120.0, 1e18, -1e18])
@pytest.mark.parametrize("winner", [0, 150, 299])
def test_split_tail_merge_is_exact_on_extreme_scores(monkeypatch, value, winner):
    """Past 2^29 in the exponent the piece holding the max keeps O and the LSE exact, the other
    pieces drop out (_merge_step, as _softmax drops earlier key tiles), wherever the winner
    lies: in the first piece, a middle one or the last."""
    rows, Sk, d = 8, 300, 4
    q_dot_k = np.float32(value) * np.float32(value) * 64 * np.sign(value)
    keys = np.float32(q_dot_k) * (1 - np.abs(np.arange(Sk) - winner) / 128.0 * np.sign(q_dot_k))
    s = np.tile(keys.astype(np.float32), (rows, 1))
    v = np.random.default_rng(2).standard_normal((Sk, d)).astype(np.float32)
    o, lse = _split_softmax(monkeypatch, s, v, 0.125, 64, _piece_ranges(5, 3))
    assert np.array_equal(o, np.tile(v[winner], (rows, 1)))
    assert np.array_equal(lse, np.full(rows, np.float32(np.float64(s[0, winner]) * 0.125)))


def _float64_softmax(s, v, scale, causal=False):
    z = s.astype(np.float64) * scale
    if causal:
        z = np.where(np.arange(s.shape[1])[None, :] <= np.arange(s.shape[0])[:, None], z, -np.inf)
    top = z.max(1, keepdims=True)
    w = np.exp(z - top)
    return (w @ v.astype(np.float64)) / w.sum(1, keepdims=True), top[:, 0] + np.log(w.sum(1))


@pytest.mark.parametrize("Sk", [300, 40])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_n", [64, 128])
@pytest.mark.parametrize("magnitude", [1.0, 30.0, 3e3])
def test_softmax_reference_keeps_o_and_lse_of_ordinary_scores(monkeypatch, magnitude, block_n,
                                                              causal, Sk):
    """p = exp2(a·s − r) with r m·scale rounded up (fwd._reference): against float64, O and the
    LSE of scores of every size a model gives, including maxima that grow along the keys (the
    later tiles rescale the earlier ones through r_i − r_new). Sk = 40 keys for 64 rows: under
    causal the later rows' last visible key is Sk - 1, not the row (the mask's min(row, Sk - 1))."""
    s, v = _growing_scores(7, Sk, magnitude)
    o, lse = _online_softmax(monkeypatch, s, v, 0.125, block_n, causal)
    o_ref, lse_ref = _float64_softmax(s, v, 0.125, causal)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert np.abs(o - o_ref).max() <= 1e-5 * max(1.0, np.abs(o_ref).max())
    assert np.abs(lse - lse_ref).max() <= 4e-7 * max(1.0, np.abs(lse_ref).max())


@pytest.mark.parametrize("value", [133120.0, 65504.0, 1e18, -1e18])
@pytest.mark.parametrize("kind", ["ties", "onehot"])
def test_softmax_reference_is_exact_on_extreme_scores(monkeypatch, value, kind):
    """Scores past 2^29 in the exponent (PyTorch's extreme-value contract, e.g. q = k = 133120
    in bf16 at head dim 64: q.k/8 ~ 1.4e11): a = K, a power of two, so ties with the max get p = 1
    exactly and scores far below it 0. With scale 1/8 a one-hot winner's answers are exact (O is
    its v, the LSE m/8); ties give v's mean and m/8 + ln Sk to float32's rounding."""
    rows, Sk, d = 8, 200, 4
    q_dot_k = np.float32(value) * np.float32(value) * 64 * np.sign(value)
    if kind == "ties":
        s = np.full((rows, Sk), q_dot_k, np.float32)
    else:  # key 0 wins every row outright: the others lie an exponent-worth below it
        keys = q_dot_k * (1 - np.arange(Sk) / 64.0 * np.sign(q_dot_k))
        s = np.tile(keys.astype(np.float32), (rows, 1))
    v = np.random.default_rng(1).standard_normal((Sk, d)).astype(np.float32)
    o, lse = _online_softmax(monkeypatch, s, v, 0.125, 64)
    if kind == "onehot":
        assert np.array_equal(o, np.tile(v[0], (rows, 1)))
        assert np.array_equal(lse, np.full(rows, np.float32(np.float64(s[0, 0]) * 0.125)))
    else:
        assert np.allclose(o, v.mean(0), rtol=1e-5, atol=1e-6)
        assert np.allclose(lse, np.float64(s[0, 0]) * 0.125 + math.log(Sk), rtol=1e-7)


def test_softmax_reference_follows_maxima_across_its_two_ranges(monkeypatch):
    """Rows whose running max crosses 2^29 in the exponent (and back, for negative scores), or
    doubles past it so K halves, between key tiles: O and the LSE stay finite and match float64
    (where the max moves past 2^29 the earlier tiles weigh under 2^-32 of it)."""
    scale = 0.125
    edge = np.float32(2.0 ** 29 / (scale * math.log2(math.e)))  # |m|·scale·log2 e = 2^29
    ladders = [
        [edge * 0.5, edge * 0.999, edge * 1.001, edge * 2.5],     # normal -> huge -> K halves
        [-edge * 8, -edge * 1.5, -edge * 0.9, -edge * 0.01],       # huge -> normal (negative)
        [edge * 0.999, edge * 0.999, edge * 0.999, edge * 0.999],  # ties just below the edge
    ]
    block_n, d = 64, 8
    rng = np.random.default_rng(3)
    s = np.stack([np.repeat(np.array(ladder, np.float32), block_n) for ladder in ladders])
    s[:, ::7] -= np.abs(s[:, ::7]) * np.float32(1e-6)  # a spread below each tile's max
    v = rng.standard_normal((s.shape[1], d)).astype(np.float32)
    o, lse = _online_softmax(monkeypatch, s, v, scale, block_n)
    o_ref, lse_ref = _float64_softmax(s, v, scale)
    assert np.isfinite(o).all() and np.isfinite(lse).all()
    assert np.abs(o - o_ref).max() <= 1e-5 * np.abs(o_ref).max()
    assert np.abs(lse - lse_ref).max() <= 4e-7 * np.abs(lse_ref).max()


@pytest.mark.parametrize("row_blocks,heads", [(1, 1), (64, 64), (16, 8), (32, 28), (24, 13),
                                              (2, 1024), (7, 3)])
def test_non_persistent_causal_tiles_start_longest_first_within_head_groups(
        monkeypatch, row_blocks, heads):
    """fwd._one_tile_unit and fwd._tile over a non-persistent grid in launch order (linear id,
    x fastest): every (head, row block) exactly once; under causal HEAD_GROUP heads at a time,
    block by block across a group from the longest (the last row block) down, and a last group
    of fewer heads longest first head by head; without causal a head's row blocks side by side."""
    fwd, group = kernel_module("fwd"), kernel_module("grid").HEAD_GROUP.value
    order = {True: [], False: []}
    for _ in launch_order(monkeypatch, fwd, row_blocks, heads):
        for causal in (True, False):
            unit = fwd._one_tile_unit.fn(row_blocks, causal)
            _, h, start = fwd._tile.fn(unit, 0, row_blocks, heads, 1, False, causal)
            order[causal].append((h, start))
    every = sorted((h, r) for h in range(heads) for r in range(row_blocks))
    assert sorted(order[True]) == every and sorted(order[False]) == every
    for g in range(0, heads, group):
        width = min(group, heads - g)
        mine = order[True][g * row_blocks:(g + width) * row_blocks]
        assert sorted(h for h, _ in mine) == [h for h in range(g, g + width)
                                              for _ in range(row_blocks)]  # groups in turn
        if g + group <= heads:  # longest first across the group
            assert [r for _, r in mine] == sorted((r for _, r in mine), reverse=True)
        else:  # head by head, each longest first
            assert mine == [(h, r) for h in range(g, heads) for r in reversed(range(row_blocks))]
    assert order[False] == [(h, r) for h in range(heads) for r in range(row_blocks)]
