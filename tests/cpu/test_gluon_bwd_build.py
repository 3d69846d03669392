"""The Gluon backward (aot/kernels/gluon_attn/bwd.py) on the CPU: build, verify, launch specs.

The kernels run on the GPU in tests/gpu/test_gluon_bwd.py. Here: every declared backward
variant compiles for sm_90 with no register spills (no stack frame; SPILL_ALLOWED names the one
exception) and within sm_90's 227 KiB of shared memory; `verify` finds no problem; the launch
specs hold the steps, workspace and tensor maps each variant declares (the fast one's fp32 dQ
accumulator is [B, Hq, Sq, D], the deterministic one has none); the recording driver carves
that workspace and passes each buffer, or a tensor map over it, to the steps that take it;
head dim 96 runs on 128-wide tiles; and the fast kernels' SASS adds dQ the way their config
says (TMA reduce-adds or atomics) and issues it where their config says (after dV and dK are
done, or with `dqq` queued behind them).
"""
import math
import re
import struct

import pytest

from attnpack import runtime as rt
from attnpack.archive import read_archive
from attnpack.archive.elf import kernel_facts
from attnpack.archive.verify import verify_archive
from attnpack.builder import BuildRequest, build_archives
from attnpack.builder.backends.triton import cuobjdump, disassemble
from attnpack.family import FunctionalKey, load_families
from gluon_plain import GridProgram, kernel_module, launch_order
from test_runtime_fixtures import param_offsets

SHARED_MEMORY_LIMIT = 227 * 1024
FAST = "gluon/bwd/bf16-d128-causal/M64_stages2_det0"
TMA = "gluon/bwd/bf16-d128-causal/M64_stages2_det0_tma1"
DET = "gluon/bwd/bf16-d128-causal/M64_stages2_det1_qN64"
CONFIGS_PER_KEY = 11   # family.BWD_CONFIGS, head dims 64, 96 and 128
PERSISTENT = "gluon/bwd/bf16-d128-causal/M64_stages2_det0_tma1_persistent1"
PERSISTENT_PER_KEY = 3  # the persistent tma1 configs (2 and 3 stages) and the det1 qN64 one
# 128 query rows a dK/dV step, head dim 64 only: tma1 and tma1 persistent x (fp16, bf16) x
# (full, causal)
M128_KERNELS = 8
M128_PERSISTENT_KERNELS = 4
# tma1 with the dQ queued behind dV and dK (`dqq`), 2 and 3 stages: 128-wide tiles without a
# mask only, x (fp16, bf16) x (96, 128)
DQQ = "gluon/bwd/bf16-d128-full/M64_stages2_det0_tma1_dqq1"
DQQ_KERNELS = 8
# the convert started early (`early`, bwd.py READY): tma1 and dqq at 2 and 3 stages, 128-wide
# tiles: (tma1 x (full, causal) + dqq x full) x (fp16, bf16) x (96, 128)
EARLY = "gluon/bwd/bf16-d128-full/M64_stages2_det0_tma1_early1"
EARLY_KERNELS = 24
WIDE = "gluon/bwd/bf16-d256-causal/M64_stages2_det0_wide1"
WIDE_DET = "gluon/bwd/bf16-d256-causal/M64_stages2_det1_wide1"
WIDE_KERNELS = 8       # the two wide configs x (fp16, bf16) x (full, causal), head dim 256
# The TMA-reduce dK/dV kernel at causal head dim 128 (and 96, on 128-wide tiles) spills a few
# loop-invariant registers
# (ptxas: 16-24 bytes, 240 registers a thread being the ceiling of two consumer warpgroups):
# stored before the tile loop, reloaded after it (at 3 stages one reload a tile). It still
# measured the fastest det0 kernel at those keys (docs/gluon-bwd.md), so it is declared; the
# bound keeps any larger spill, or a spill anywhere else, a failure.
# The wide kernel (head dim 256) under causal spills the same way: loop-carried
# scalars of consumer 0, whose mask code is the extra pressure (no spill without a mask).
# Since the causal programs are read in head groups (bwd.py, _block_and_head) the causal dK/dV
# kernels keep their block and head in registers where they re-read the program ids before:
# 8 bytes more each (tma 16 -> 24, wide 24 -> 32) and 8-16 in the atomic one, which spilled
# nothing before. Run69 measured the grouped kernels, spills and all, against the ungrouped
# ones by cycles: the fastest per shape 1.042x over 33 causal shapes (docs/gluon-bwd.md).
# The early convert's dK/dV kernel (`early`) spills as its tma1 twin does, under causal only.
SPILL_ALLOWED = {"attn_bwd_dkdv_dq_tma": (32, (96, 128)),
                 "attn_bwd_dkdv_dq_tma_ready": (32, (96, 128)),
                 "attn_bwd_dkdv_dq_atomic": (16, (96, 128)),
                 "attn_bwd_dkdv_wide_dq_atomic": (32, (256,))}
# The persistent dK/dV kernels (bwd.py, PERSISTENT) carry their work-unit counters around each
# key block's tile loop: on 128-wide tiles ptxas keeps a few of them in the stack frame, stored
# before a block's tile loop and reloaded after it (once a key block, none inside the loop; at
# 120 bytes under causal, 40 without a mask, in the det1 kernel 32 under causal: the causal
# order's flag, bwd._snake_order, added 8-16 to the 104 and 24 before it).
PERSISTENT_SPILL_ALLOWED = {"attn_bwd_dkdv_dq_tma": 120, "attn_bwd_dkdv": 32}
# The head-dim-64 dK/dV kernels with 128 query rows a step (tma1): Sᵀ and dPᵀ of 128 queries fill
# the consumers' 240 registers, and ptxas keeps 16 bytes in the stack frame (11 local accesses in
# the SASS); the persistent one's counters take it to 72 bytes without a mask and 104 under
# causal (about 100 local accesses, some inside the tile loop). Run128 measured them, spills and
# all, the fastest kernels of every head-dim-64 bench row (docs/gluon-bwd.md).
M128_SPILL_ALLOWED = {False: 16, True: 104}  # by persistent


@pytest.fixture(scope="module")
def bwd_archive(tmp_path_factory):
    """Every declared gluon backward variant for sm_90 (the shared compile cache makes a
    rebuild cheap; a cold build is about 70 images, two minutes on two cores)."""
    out = tmp_path_factory.mktemp("gluon-bwd")
    [path] = build_archives(BuildRequest(archs=("sm_90",), out_dir=out, all_variants=True,
                                         families=("gluon",), ops=("bwd",), jobs=2))
    return path


def declared():
    return [v for v in load_families()["gluon"].all_variants("sm_90") if v.op == "bwd"]


def test_every_declared_variant_builds_and_verifies(bwd_archive):
    ar, problems, warnings = verify_archive(bwd_archive)
    # a stack frame (spill) is a warning: only the allowed ones (test_no_spills_...) appear
    assert problems == []
    assert all("stack frame" in w and any(f"({s})" in w for s in
                                          {**SPILL_ALLOWED, **PERSISTENT_SPILL_ALLOWED})
               for w in warnings)
    # 8 configs x (fp16, bf16) x (64, 96, 128) x (full, causal), the dqq ones, and the wide
    # ones at 256
    assert sorted(k["name"] for k in ar.kernels) == sorted(v.name for v in declared())
    assert len(ar.kernels) == (12 * CONFIGS_PER_KEY + DQQ_KERNELS + WIDE_KERNELS + M128_KERNELS
                               + EARLY_KERNELS)


def test_no_spills_and_shared_memory_fits(bwd_archive):
    ar = read_archive(bwd_archive)
    seen = 0
    for kernel in ar.kernels:
        for step in kernel["steps"]:
            facts = kernel_facts(ar.image(step["image"]), step["symbol"])
            where = f"{kernel['name']} {step['name']}"
            allowed = 0
            if step["symbol"] in SPILL_ALLOWED and kernel["key"]["causal"] \
                    and kernel["key"]["head_dim"] in SPILL_ALLOWED[step["symbol"]][1]:
                allowed = SPILL_ALLOWED[step["symbol"]][0]
            if "_persistent1" in kernel["name"] and kernel["key"]["head_dim"] in (96, 128):
                allowed = PERSISTENT_SPILL_ALLOWED.get(step["symbol"], 0)
            if kernel["name"].split("/")[-1].startswith("M128_") and step["name"] == "bwd_dkdv":
                allowed = M128_SPILL_ALLOWED["_persistent1" in kernel["name"]]
            assert facts.resources.get("stack_bytes", 0) <= allowed, where
            assert facts.resources.get("local_bytes", 0) <= allowed, where
            assert step["shared"] <= SHARED_MEMORY_LIMIT, where
            # the warp-specialized kernels: 2 consumer warpgroups + a load warp (padded to 4)
            warps = 12 if step["name"] in ("bwd_dkdv", "bwd_dq") else 4
            assert step["block"] == [32 * warps, 1, 1], where
            seen += 1
    # three steps a kernel, two in the deterministic ones but the wide (dQ, then dK/dV)
    det = sum(1 for k in ar.kernels if "_det1" in k["name"] and "_wide1" not in k["name"])
    assert seen == 3 * (12 * CONFIGS_PER_KEY + DQQ_KERNELS + WIDE_KERNELS + M128_KERNELS
                        + EARLY_KERNELS) - det


def test_steps_and_workspace_per_variant(bwd_archive):
    ar = read_archive(bwd_archive)
    fast, det = ar.kernel(FAST), ar.kernel(DET)
    assert [s["name"] for s in fast["steps"]] == ["bwd_preprocess", "bwd_dkdv", "bwd_dq_convert"]
    # the deterministic dQ kernel computes Δ and runs first: no preprocess
    assert [s["name"] for s in det["steps"]] == ["bwd_dq", "bwd_dkdv"]
    assert fast["workspace"] == [{"name": "delta", "shape": ["B", "Hq", "Sq"]},
                                 {"name": "dq_accum", "shape": ["B", "Hq", "Sq", "D"]}]
    assert det["workspace"] == [{"name": "delta", "shape": ["B", "Hq", "Sq"]}]
    words = lambda k, i: [p[0] for p in k["steps"][i]["params"]]
    assert "dq_accum" in words(fast, 0) and "dq_accum" in words(fast, 1)
    assert not any("dq_accum" in words(det, i) for i in range(2))
    # its dQ step reads O as it is (strides) and writes Δ, which the dK/dV step reads
    assert {"o", "o_stride_b", "o_stride_h", "o_stride_s", "delta"} <= set(words(det, 0))
    assert "delta" in words(det, 1) and "o" not in words(det, 1)
    # dK/dV: one program per 128 keys of a kv head; dQ: one per 128 query rows of a query head
    assert fast["steps"][1]["grid"] == [[["Sk", 128]], [["B", 1], ["Hkv", 1]], []]
    assert det["steps"][0]["grid"] == [[["Sq", 128]], [["B", 1], ["Hq", 1]], []]
    assert [m["param"] for m in fast["steps"][1]["tensormaps"]] == ["q_desc", "k_desc", "v_desc",
                                                                    "do_desc"]
    assert [m["param"] for m in det["steps"][0]["tensormaps"]] == ["q_desc", "k_desc", "v_desc",
                                                                   "do_desc", "dq_desc"]
    # the TMA-reduce variant: the same steps and workspace; its dK/dV kernel views the
    # accumulator through a tensor map of [M, D/2] fp32 boxes (two 32-column boxes each)
    tma = ar.kernel(TMA)
    assert [s["name"] for s in tma["steps"]] == [s["name"] for s in fast["steps"]]
    assert tma["workspace"] == fast["workspace"]
    [acc_map] = [m for m in tma["steps"][1]["tensormaps"] if m["tensor"] == "dq_accum"]
    assert acc_map == {"param": "dq_desc", "tensor": "dq_accum", "box": [1, 1, 64, 32],
                       "swizzle": 128, "l2_promotion": 128, "oob_fill": "zero"}
    assert [p[:2] for p in tma["steps"][1]["params"]
            if p[0].startswith("dq_accum_stride_")] == [[f"dq_accum_stride_{a}", "i64"]
                                                       for a in "bhsd"]


def test_determinism_is_declared_by_the_family():
    assert {v.config_tag: v.deterministic for v in declared()
            if v.key.tag == "bf16-d128-causal"} == {
        "M64_stages2_det0": False, "M64_stages3_det0": False,
        "M64_stages2_det0_tma1": False, "M64_stages3_det0_tma1": False,
        "M64_stages2_det0_tma1_early1": False, "M64_stages3_det0_tma1_early1": False,
        "M64_stages2_det0_tma1_persistent1": False, "M64_stages3_det0_tma1_persistent1": False,
        "M64_stages2_det1_qN64_persistent1": True, "M64_stages2_det1_qN64": True,
        "M64_stages3_det1_qN64": True, "M64_stages2_det1_qN128": True,
        "M64_stages3_det1_qN128_qS2": True}


def test_recorded_launch_carves_the_dq_accumulator(bwd_archive):
    """B=2, Hq=8, Hkv=2, Sq=1000, Sk=300, D=128: Δ (B·Hq·Sq floats) then, 256-byte aligned, the
    accumulator (B·Hq·Sq·D floats); preprocess and dK/dV get its address, the convert too, and
    the TMA variant's dK/dV a tensor map over it. The deterministic variant: its dQ kernel
    first (one program per 128 query rows, Δ's address and O's), then dK/dV."""
    B, Hq, Hkv, Sq, Sk, D = 2, 8, 2, 1000, 300, 128
    ptrs = {t: 0x7f0000000000 + (i << 28) for i, t in
            enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse"))}
    base = 0x7e0000000000
    delta_bytes = 4 * B * Hq * Sq
    acc_offset = -(-delta_bytes // 256) * 256
    ar = read_archive(bwd_archive)
    with rt.Bundle(bwd_archive, recording=True) as bundle:
        for name in (FAST, DET, TMA):
            prob = rt.make_problem("bwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D,
                                   causal=True, pointers=ptrs, kernel=name)
            size = bundle.workspace_size(prob)
            assert size == (delta_bytes if name == DET else acc_offset + 4 * B * Hq * Sq * D)
            bundle.backward(prob, workspace=base, workspace_size=size)
        launches = bundle.recorded_launches()["launches"]
    assert len(launches) == 8
    steps = ar.kernel(FAST)["steps"] + ar.kernel(DET)["steps"] + ar.kernel(TMA)["steps"]
    for launch, step in zip(launches, steps):
        types = [p[1] for p in step["params"]]
        args = bytes.fromhex(launch["args"])
        at = dict(zip((p[0] for p in step["params"]), param_offsets(types)))
        read = lambda word: struct.unpack_from("<Q", args, at[word])[0]
        if "delta" in at:
            assert read("delta") == base
        if "dq_accum" in at:
            assert read("dq_accum") == base + acc_offset
        if "o" in at:
            assert read("o") == ptrs["o"]
    acc_map = launches[6]["tensormaps"][-1]
    assert (acc_map["data_type"], acc_map["address"], acc_map["dims"], acc_map["box"]) == \
        (7, base + acc_offset, [D, Sq, Hq, B], [32, 64, 1, 1])
    grids = [launch["grid"] for launch in launches]
    fast_grids = [[math.ceil(Sq / 64), B * Hq, 1], [math.ceil(Sk / 128), B * Hkv, 1],
                  [math.ceil(Sq / 64), B * Hq, 1]]
    assert grids == fast_grids + [[math.ceil(Sq / 128), B * Hq, 1],
                                  [math.ceil(Sk / 128), B * Hkv, 1]] + fast_grids


def test_head_dim_96_runs_on_128_wide_tiles(bwd_archive):
    """Tiles of 128 columns (TMA zero-fills q, k, v and dO past 96; dK, dV and dQ drop those
    columns), while the accumulator and the plain-pointer steps keep rows of 96."""
    name = "gluon/bwd/bf16-d96-causal/M64_stages3_det0_tma1"
    variant = next(v for v in declared() if v.name == name)
    assert [(s.kernel.constexprs["HEAD_DIM"], s.kernel.constexprs["D"]) for s in variant.steps] \
        == [(128, 96)] * 3
    B, Hq, Hkv, Sq, Sk, D = 1, 4, 2, 200, 300, 96
    ptrs = {t: 0x7f0000000000 + (i << 28) for i, t in
            enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse"))}
    acc_offset = -(-4 * B * Hq * Sq // 256) * 256
    with rt.Bundle(bwd_archive, recording=True) as bundle:
        prob = rt.make_problem("bwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D,
                               causal=True, pointers=ptrs, kernel=name)
        size = bundle.workspace_size(prob)
        assert size == acc_offset + 4 * B * Hq * Sq * D
        bundle.backward(prob, workspace=0x7e0000000000, workspace_size=size)
        dkdv = bundle.recorded_launches()["launches"][1]
    q_map, acc_map = dkdv["tensormaps"][0], dkdv["tensormaps"][-1]
    assert (q_map["dims"], q_map["box"]) == ([D, Sq, Hq, B], [64, 64, 1, 1])
    assert (acc_map["dims"], acc_map["box"], acc_map["strides"]) == \
        ([D, Sq, Hq, B], [32, 64, 1, 1], [D * 4, Sq * D * 4, Hq * Sq * D * 4])


def test_fast_variants_add_dq_the_way_they_declare(bwd_archive):
    """In the SASS of every fast dK/dV kernel: the tma1 ones add dQ with TMA reduce-adds
    (UTMAREDG) and no global atomics; the others with fp32 atomics (REDG.E.ADD.F32) and no TMA
    reduce. Disassembled with the cuobjdump Triton ships."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    ar = read_archive(bwd_archive)
    seen = {"tma": 0, "atomic": 0}
    for kernel in ar.kernels:
        if "det0" not in kernel["name"]:
            continue
        sass = disassemble(ar.image(kernel["steps"][1]["image"]))  # the dK/dV step
        reduces = len(re.findall(r"\bUTMAREDG\b", sass))
        atomics = len(re.findall(r"\bREDG\.E\.ADD\.F32", sass))
        if "_tma1" in kernel["name"]:
            assert reduces > 0 and atomics == 0, (kernel["name"], reduces, atomics)
            seen["tma"] += 1
        else:
            assert atomics > 0 and reduces == 0, (kernel["name"], reduces, atomics)
            seen["atomic"] += 1
    # 2 stage counts x (fp16, bf16) x (64, 96, 128) x (full, causal) of each, and of the
    # persistent tma1 ones, the dqq and M128 ones (TMA), and the wide kernels (atomics)
    assert seen == {"tma": 48 + DQQ_KERNELS + M128_KERNELS + EARLY_KERNELS,
                    "atomic": 24 + WIDE_KERNELS // 2}


def test_dq_queue_is_declared_on_128_wide_tiles_without_a_mask(bwd_archive):
    """`dqq` (bwd.py's DQ_QUEUE) is declared with the TMA reduce at head dims 96 and 128 without
    a mask only (run94 measured the schedule slower under causal and at head dim 64), is not
    deterministic, and launches exactly what its tma1 twin does: the same steps, symbols,
    params, tensor maps, grids and workspace, only another dK/dV image."""
    dqq = [v for v in declared() if v.config.get("dqq")]
    assert sorted(v.name for v in dqq) == sorted(
        f"gluon/bwd/{dtype}-d{d}-full/M64_stages{stages}_det0_tma1_dqq1{early}"
        for dtype in ("fp16", "bf16") for d in (96, 128) for stages in (2, 3)
        for early in ("", "_early1"))
    assert not any(v.deterministic for v in dqq)
    # the constexpr is on where the knob is, off in every other fast kernel, absent in det1
    for v in declared():
        if v.config["det"] or v.config.get("wide"):
            assert "DQ_QUEUE" not in v.steps[1].kernel.constexprs, v.name
        else:
            assert v.steps[1].kernel.constexprs["DQ_QUEUE"] is bool(v.config.get("dqq")), v.name
    family = load_families()["gluon"]
    for d, causal in ((64, False), (64, True), (96, True), (128, True)):
        reason = family.excluded("sm_90", "bwd", FunctionalKey("bf16", d, causal), dqq[0].config)
        assert reason is not None and "run94" in reason, (d, causal)
    ar = read_archive(bwd_archive)
    queued, twin = ar.kernel(DQQ), ar.kernel(DQQ.removesuffix("_dqq1"))
    assert not queued["deterministic"] and queued["workspace"] == twin["workspace"]
    same = lambda k: [(s["name"], s["symbol"], s["params"], s["tensormaps"], s["grid"],
                       s["block"], s["shared"]) for s in k["steps"]]
    assert same(queued) == same(twin)
    assert queued["steps"][1]["image"] != twin["steps"][1]["image"]


_REGISTER_A_WGMMA = re.compile(r"\bHGMMA\.\S+ R\d+, R\d+, gdesc")   # dV += Pᵀ·dO, dK += dSᵀ·Q
_DQ_WGMMA = re.compile(r"\bHGMMA\.\S+ R\d+, gdesc\[\w+\]\.tnspA")   # dQ = dS·K, dSᵀ from shared


def test_fast_kernels_issue_dq_where_their_config_says(bwd_archive):
    """In the SASS of every fast dK/dV kernel, from a consumer's dK GEMM (the last wgmma with a
    register A operand) to its dQ GEMM: the default kernels wait for the tensor cores there
    (dV and dK done), the dqq ones do not (dQ queued behind them); after the dQ GEMM those wait
    with one group in flight, release the (Q, dO) slot (an mbarrier arrive), then wait for dQ."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(bwd_archive)
    seen = 0
    for kernel in ar.kernels:
        if "det0" not in kernel["name"] or "wide1" in kernel["name"]:
            continue
        code = sass.instructions(ar.image(kernel["steps"][1]["image"]))
        starts = [i for i, line in enumerate(code)
                  if _DQ_WGMMA.search(line) and not _DQ_WGMMA.search(code[i - 1])]
        assert len(starts) >= 2, kernel["name"]    # one tile loop a consumer, at least
        for start in starts:
            dk = max(i for i in range(start) if _REGISTER_A_WGMMA.search(code[i]))
            waits = [line for line in code[dk:start] if "WARPGROUP.DEPBAR" in line]
            if "_dqq1" not in kernel["name"]:
                assert waits, (kernel["name"], start)
                continue
            assert waits == [], (kernel["name"], start, waits)
            after = [sass.opcode(line) + (" 0x1" if "gsb0, 0x1" in line else "")
                     for line in code[start:] if "DEPBAR" in line or "SYNCS.ARRIVE" in line]
            assert after[:3] == ["WARPGROUP.DEPBAR.LE 0x1", "SYNCS.ARRIVE.TRANS64.A1T0",
                                 "WARPGROUP.DEPBAR.LE"], (kernel["name"], after[:4])
        seen += 1
    assert seen == 72 + DQQ_KERNELS + M128_KERNELS + EARLY_KERNELS


def test_no_step_has_its_wgmmas_serialized(bwd_archive):
    """No backward step's wgmmas are serialized by ptxas (C7512: each k-step would wait for
    itself; attnpack.builder.sass.wgmma_serialized). The deterministic dQ kernel was, while it
    kept its dQ accumulator in flight across key tiles."""
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    ar = read_archive(bwd_archive)
    serialized = [(kernel["name"], step["name"]) for kernel in ar.kernels
                  for step in kernel["steps"]
                  if sass.wgmma_serialized(sass.instructions(ar.image(step["image"])))]
    assert serialized == []


def test_head_dim_256_runs_on_the_wide_kernel(bwd_archive):
    """Head dim 256 has the wide kernels only (64 keys a program, grid Sk/64): the fast one with
    the fast variant's preprocess, accumulator and convert around it, the deterministic one
    with its own dQ kernel (64 query rows a program) and no accumulator; the wide configs are
    excluded at the other head dims and the others at 256."""
    ar = read_archive(bwd_archive)
    wide = ar.kernel(WIDE)
    assert [s["name"] for s in wide["steps"]] == ["bwd_preprocess", "bwd_dkdv", "bwd_dq_convert"]
    assert wide["steps"][1]["symbol"] == "attn_bwd_dkdv_wide_dq_atomic"
    assert wide["steps"][1]["grid"] == [[["Sk", 64]], [["B", 1], ["Hkv", 1]], []]
    assert wide["workspace"] == ar.kernel(FAST)["workspace"]
    assert not wide["deterministic"]
    det = ar.kernel(WIDE_DET)
    assert det["deterministic"]
    assert [(s["name"], s["symbol"]) for s in det["steps"]] == [
        ("bwd_preprocess", "attn_bwd_preprocess"), ("bwd_dkdv", "attn_bwd_dkdv_wide"),
        ("bwd_dq", "attn_bwd_dq_wide")]
    assert det["workspace"] == ar.kernel(DET)["workspace"]
    assert det["steps"][1]["grid"] == [[["Sk", 64]], [["B", 1], ["Hkv", 1]], []]
    assert det["steps"][2]["grid"] == [[["Sq", 64]], [["B", 1], ["Hq", 1]], []]
    assert [k["name"] for k in ar.kernels if k["key"]["head_dim"] == 256] == \
        [k["name"] for k in ar.kernels if "wide1" in k["name"]]
    family = load_families()["gluon"]
    key = lambda d: next(v.key for v in declared() if v.key.head_dim == d)
    wide_configs = [c for c in family.configs["bwd"] if c.get("wide")]
    assert all(family.excluded("sm_90", "bwd", key(128), c) is not None for c in wide_configs)
    assert all(family.excluded("sm_90", "bwd", key(256), c) is not None
               for c in family.configs["bwd"] if not c.get("wide"))
    # the recorded launch: one program per 64 keys of each kv head
    B, Hq, Hkv, Sq, Sk = 2, 16, 8, 300, 1000
    ptrs = {t: 0x7f0000000000 + (i << 28) for i, t in
            enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse"))}
    with rt.Bundle(bwd_archive, recording=True) as bundle:
        prob = rt.make_problem("bwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=256,
                               causal=True, pointers=ptrs, kernel=WIDE)
        size = bundle.workspace_size(prob)
        bundle.backward(prob, workspace=0x7e0000000000, workspace_size=size)
        grids = [launch["grid"] for launch in bundle.recorded_launches()["launches"]]
    assert grids[1] == [math.ceil(Sk / 64), B * Hkv, 1]


@pytest.mark.parametrize("blocks,heads", [(1, 1), (16, 8), (16, 128), (64, 16), (24, 13),
                                          (4, 1024), (7, 3), (32, 9)])
def test_causal_programs_start_longest_block_first_within_head_groups(monkeypatch, blocks, heads):
    """bwd._block_and_head over a causal grid in launch order (linear id, x fastest): every
    (block, head) exactly once; HEAD_GROUP heads at a time, a group's programs block by block
    across its heads, so no program of a group starts before every longer one of that group
    (block 0 is the longest a dK/dV program has; dQ reverses its blocks the same way), and a
    last group of fewer heads in the grid's order. Without causal the grid's own order."""
    bwd, group = kernel_module("bwd"), kernel_module("grid").HEAD_GROUP.value
    order = []
    for x, y in launch_order(monkeypatch, bwd, blocks, heads):
        order.append(bwd._block_and_head.fn(True))
        assert bwd._block_and_head.fn(False) == (x, y)
    assert sorted(order) == [(b, h) for b in range(blocks) for h in range(heads)]
    for g in range(0, heads, group):
        mine = [(b, h) for b, h in order if g <= h < g + group]
        assert order[g * blocks:g * blocks + len(mine)] == mine     # groups in turn
        if g + group <= heads:  # a whole group: longest (block 0) first across its heads
            assert [b for b, _ in mine] == sorted(b for b, _ in mine)
        else:  # the last, fewer heads: the grid's own order
            assert mine == [(b, h) for h in range(g, heads) for b in range(blocks)]


@pytest.mark.parametrize("BH,blocks,programs,snake", [
    (16, 24, 132, True),    # Qwen2-7B B4 S3000: 16 (batch, kv head) pairs
    (17, 24, 132, True),    # 17 x 12 = 204 pairs, 0.77 of 2 rounds
    (17, 30, 132, False),   # 17 x 15 = 255 pairs, 0.97 of 2 rounds
    (32, 64, 132, False),   # 1024 pairs, 0.97 of 8 rounds
    (24, 12, 132, True),    # 144 pairs, 0.55 of 2 rounds
    (512, 4, 132, False)])
def test_persistent_causal_order_is_the_snake_for_few_heads_or_ragged_pairs(
        monkeypatch, BH, blocks, programs, snake):
    """bwd._snake_order (grid.snake_order): the snake where B·Hkv <= 16 or where the pairs would
    fill less than 0.9 of their rounds; never without a mask."""
    bwd, grid = kernel_module("bwd"), kernel_module("grid")
    monkeypatch.setattr(grid, "gl", GridProgram(0, 0, programs, 1))
    monkeypatch.setattr(grid, "SNAKE_MAX_STREAMS", grid.SNAKE_MAX_STREAMS.value)
    monkeypatch.setattr(bwd, "snake_order", grid.snake_order.fn)
    assert bool(bwd._snake_order.fn(BH, blocks, True)) is snake
    assert bwd._snake_order.fn(BH, blocks, False) is False


@pytest.mark.parametrize("causal,snake", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("programs", [1, 7, 132])
@pytest.mark.parametrize("BH,blocks", [(1, 1), (1, 2), (3, 5), (2, 8), (512, 4), (7, 9),
                                       (16, 24), (8, 64)])
def test_persistent_units_cover_every_key_block_once_in_a_balanced_order(
        monkeypatch, BH, blocks, programs, causal, snake):
    """The persistent dK/dV kernels' work order, run as plain Python for every program of a
    launch (bwd._block_units, _unit_blocks, _unit_block and grid.snake_rank are integer
    arithmetic; the GPU runs the same source), in both causal orders whatever _snake_order
    would pick: every (batch·kv head, key block) is served exactly once. Without a mask unit u
    is block u % blocks of head u // blocks. Pairs: a unit is block i and block blocks - 1 - i
    of one head, the longer first, so every unit sees blocks + 1 blocks' worth of queries (the
    middle block of an odd count alone). Snake: round r hands out the blocks ranked longest
    first (block 0 across the heads, then block 1, ...) in program order when r is even and in
    reverse when odd, so no program's work (query tiles of 128 rows, blocks - block a block)
    exceeds the even share by more than one block's."""
    bwd, grid = kernel_module("bwd"), kernel_module("grid")
    monkeypatch.setattr(bwd, "snake_rank", grid.snake_rank.fn)
    served, loads = {}, []
    for p in range(programs):
        program = GridProgram(p, 0, programs, 1)
        monkeypatch.setattr(bwd, "gl", program)
        monkeypatch.setattr(grid, "gl", program)
        load = 0
        for unit in range(p, bwd._block_units.fn(BH, blocks, snake, causal), programs):
            spans = []
            for half in range(bwd._unit_blocks.fn(unit, blocks, snake, causal)):
                block, bh = bwd._unit_block.fn(unit, half, BH, blocks, snake, causal)
                assert 0 <= block < blocks and 0 <= bh < BH
                assert (bh, block) not in served.values()
                served[(unit, half)] = (bh, block)
                spans.append(blocks - block)  # query tiles of 128 rows a causal block sees
            if causal and not snake:
                assert spans == sorted(spans, reverse=True)
                assert sum(spans) == (blocks + 1 if len(spans) == 2 else (blocks + 1) // 2)
            load += sum(spans)
        loads.append(load)
    assert sorted(served.values()) == [(bh, k) for bh in range(BH) for k in range(blocks)]
    if not causal:
        assert served == {(u, 0): (u // blocks, u % blocks) for u in range(BH * blocks)}
    elif snake:
        ranked = [(bh, k) for k in range(blocks) for bh in range(BH)]  # longest first
        for first in range(0, BH * blocks, programs):
            width = min(programs, BH * blocks - first)
            order = [served[(first + p, 0)] for p in range(width)]
            expected = ranked[first:first + width]
            assert order == (expected[::-1] if first // programs % 2 else expected)
        assert max(loads) <= sum(loads) / programs + blocks


def test_persistent_kernels_launch_one_program_per_sm(bwd_archive):
    """The persistent configs: the dK/dV step's grid is num_sms (132 on the recording driver's
    pretend H200) with B among its arguments; the other steps and the workspace are their
    non-persistent twin's."""
    family = load_families()["gluon"]
    persistent = [v for v in declared() if v.config.get("persistent")]
    assert len(persistent) == 12 * PERSISTENT_PER_KEY + M128_PERSISTENT_KERNELS
    for v in persistent:
        assert v.steps[1].grid == ((("num_sms", 1),), (), ()), v.name
        assert v.steps[1].kernel.constexprs["PERSISTENT"] is True
        assert v.deterministic is bool(v.config["det"])
    for v in declared():
        if not v.config.get("wide") and not v.config.get("early"):
            assert v.steps[1].kernel.constexprs["PERSISTENT"] is bool(v.config.get("persistent"))
    assert family.excluded("sm_90", "bwd", FunctionalKey("bf16", 256, True),
                           persistent[0].config) is not None  # 256 runs on the wide kernel
    ar = read_archive(bwd_archive)
    mine, twin = ar.kernel(PERSISTENT), ar.kernel(PERSISTENT.removesuffix("_persistent1"))
    assert mine["workspace"] == twin["workspace"]
    assert [s["name"] for s in mine["steps"]] == [s["name"] for s in twin["steps"]]
    assert mine["steps"][0] == twin["steps"][0] and mine["steps"][2] == twin["steps"][2]
    assert "B" in [p[0] for p in mine["steps"][1]["params"]]
    ptrs = {t: 0x7f0000000000 + (i << 28) for i, t in
            enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse"))}
    with rt.Bundle(bwd_archive, recording=True) as bundle:
        prob = rt.make_problem("bwd", "bf16", B=2, Hq=8, Hkv=2, Sq=512, Sk=512, D=128,
                               causal=True, pointers=ptrs, kernel=PERSISTENT)
        size = bundle.workspace_size(prob)
        bundle.backward(prob, workspace=0x7e0000000000, workspace_size=size)
        grids = [launch["grid"] for launch in bundle.recorded_launches()["launches"]]
    assert grids[1] == [132, 1, 1]


class _PlainBlock:
    """bwd.KeyBlock's fields as plain ints (its Gluon aggregate takes tensors only)."""
    def __init__(self, b, h_kv, n0, h_first, h_end, m_first):
        self.b, self.h_kv, self.n0 = b, h_kv, n0
        self.h_first, self.h_end, self.m_first = h_first, h_end, m_first


class _PlainGl(GridProgram):
    cdiv = staticmethod(lambda a, b: -(-a // b))
    maximum = staticmethod(max)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Hq,Hkv,Sq,Sk", [(2, 2, 1000, 300), (8, 2, 512, 512), (4, 1, 64, 1000),
                                          (2, 2, 1, 128), (8, 1, 4096, 4096), (2, 2, 300, 1)])
def test_early_convert_waits_for_exactly_the_adds_the_dkdv_walk_makes(
        monkeypatch, head_dim, causal, Hq, Hkv, Sq, Sk):
    """`early` (bwd.py READY), run as plain Python: every dK/dV program walks its key block's
    query tiles (bwd._key_block_at, KeyBlock.num_tiles and next_tile, the kernel's own source)
    and each consumer adds its dQ share (_dq_mine: both on 128-wide tiles, alternate tiles on
    64-wide ones); the count of adds into each query tile is what the convert waits for
    (bwd._tile_adds), and _publish_adds finds the tiles by _block_tile in the walk's order. A
    count too low would convert a tile before its last add; too high, wait forever."""
    bwd = kernel_module("bwd")
    num_tiles, next_tile = bwd.KeyBlock.num_tiles.fn, bwd.KeyBlock.next_tile.fn
    monkeypatch.setattr(bwd, "gl", _PlainGl(0, 0, 1, 1))
    monkeypatch.setattr(bwd, "KeyBlock", _PlainBlock)
    monkeypatch.setattr(bwd, "HALF_N", bwd.HALF_N.value)
    monkeypatch.setattr(bwd, "KEYS_PER_DKDV_PROGRAM", bwd.KEYS_PER_DKDV_PROGRAM.value)
    adds = {}
    for bh in range(Hkv):  # B = 1
        for block in range(-(-Sk // 128)):
            blk = bwd._key_block_at.fn(block, bh, Hq, Hkv, 64, causal, 2)
            per_head = -(-max(Sq - blk.m_first, 0) // 64)
            h, m0 = blk.h_first, blk.m_first
            for t in range(num_tiles(blk, Sq, 64)):
                assert bwd._block_tile.fn(blk, t, per_head, 64) == (h, m0)
                for consumer in (0, 1):
                    if head_dim >= 128 or t % 2 == consumer:
                        adds[(h, m0)] = adds.get((h, m0), 0) + 1
                h, m0 = next_tile(blk, h, m0, Sq, 64)
    for h in range(Hq):
        for m0 in range(0, Sq, 64):
            assert adds.get((h, m0), 0) == bwd._tile_adds.fn(m0, Sk, head_dim, causal), (h, m0)


def test_early_convert_is_declared_launched_and_built_as_it_says(bwd_archive):
    """`early`: the non-persistent tma1 and dqq kernels of 64-row tiles at head dims 96/128,
    not deterministic; three steps whose preprocess zeroes the counters, dK/dV publishes, and
    convert waits; a third workspace buffer, [B, Hq, cdiv(Sq, 64)] counters, after Δ and the
    accumulator (256-byte aligned), the same address in all three launches. In the SASS: the
    convert spins on an acquire load (LDG.E.STRONG.GPU with its L1 invalidation, CCTL.IVALL)
    with NANOSLEEP; each dK/dV consumer waits for its bulk reduces, fences the async proxy
    (FENCE.VIEW.ASYNC.G) and publishes with release adds (MEMBAR.ALL.GPU, REDG.E.ADD.STRONG.GPU);
    the convert's one wait for the grid ahead comes after its spin and its stores."""
    early = [v for v in declared() if v.config.get("early")]
    assert len(early) == EARLY_KERNELS and not any(v.deterministic for v in early)
    assert {(v.key.head_dim, v.config.get("dqq", 0), v.key.causal) for v in early} == {
        (d, q, c) for d in (96, 128) for q, c in ((0, False), (0, True), (1, False))}
    family = load_families()["gluon"]
    for key in (FunctionalKey("bf16", 64, False), FunctionalKey("bf16", 256, False)):
        assert family.excluded("sm_90", "bwd", key, early[0].config) is not None
    for other in ({"persistent": 1}, {"M": 128}, {"tma": 0}):
        config = {**early[0].config, **other}
        assert "READY" in family.excluded("sm_90", "bwd", early[0].key, config)
    ar = read_archive(bwd_archive)
    kernel, twin = ar.kernel(EARLY), ar.kernel(EARLY.removesuffix("_early1"))
    assert [s["symbol"] for s in kernel["steps"]] == [
        "attn_bwd_preprocess_ready", "attn_bwd_dkdv_dq_tma_ready", "attn_bwd_dq_convert_ready"]
    assert kernel["workspace"] == twin["workspace"] + [{"name": "dq_ready",
                                                        "shape": ["B", "Hq", "Sq/64"]}]
    assert [s["grid"] for s in kernel["steps"]] == [s["grid"] for s in twin["steps"]]
    B, Hq, Hkv, Sq, Sk, D = 2, 8, 2, 1000, 300, 128
    ptrs = {t: 0x7f0000000000 + (i << 28) for i, t in
            enumerate(("q", "k", "v", "o", "do", "dq", "dk", "dv", "lse"))}
    base = 0x7e0000000000
    with rt.Bundle(bwd_archive, recording=True) as bundle:
        prob = rt.make_problem("bwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Sk=Sk, D=D,
                               causal=False, pointers=ptrs, kernel=EARLY)
        size = bundle.workspace_size(prob)
        bundle.backward(prob, workspace=base, workspace_size=size)
        launches = bundle.recorded_launches()["launches"]
    align = lambda n: -(-n // 256) * 256
    ready_at = align(align(4 * B * Hq * Sq) + 4 * B * Hq * Sq * D)
    assert size == ready_at + 4 * B * Hq * math.ceil(Sq / 64)
    assert len(launches) == 3
    for launch, step in zip(launches, kernel["steps"]):
        names = [p[0] for p in step["params"]]
        at = dict(zip(names, param_offsets([p[1] for p in step["params"]])))
        assert struct.unpack_from("<Q", bytes.fromhex(launch["args"]), at["dq_ready"])[0] == \
            base + ready_at
    if not cuobjdump().is_file():
        pytest.skip(f"no cuobjdump in the triton package ({cuobjdump()})")
    from attnpack.builder import sass
    pre, dkdv, convert = ("\n".join(sass.instructions(ar.image(s["image"])))
                          for s in kernel["steps"])
    assert re.search(r"LDG\.E\.STRONG\.GPU .*\n\s*CCTL\.IVALL", convert) and "NANOSLEEP" in convert
    assert len(re.findall(r"FENCE\.VIEW\.ASYNC\.G", dkdv)) == 2  # one a consumer
    assert len(re.findall(r"MEMBAR\.ALL\.GPU[^\n]*\n(?:[^\n]*\n){0,4}?[^\n]*REDG\.E\.ADD\.STRONG"
                          r"\.GPU", dkdv)) == 2
    assert "STRONG" not in "\n".join(sass.instructions(ar.image(twin["steps"][2]["image"])))
    assert "UTMAREDG" in dkdv and re.search(r"STG\.E [^\n]*, RZ", pre)
    # griddepcontrol.wait (ACQBULK) and launch_dependents (PREEXIT) once in each step; the
    # convert waits for the dK/dV grid only after its spin and its stores (one program does)
    ops = [[sass.opcode(line) for line in code.splitlines()] for code in (pre, dkdv, convert)]
    assert [(o.count("ACQBULK"), o.count("PREEXIT")) for o in ops] == [(1, 1)] * 3
    last_store = max(i for i, op in enumerate(ops[2]) if op.startswith("STG"))
    assert ops[2].index("ACQBULK") > max(ops[2].index("NANOSLEEP"), last_store)
