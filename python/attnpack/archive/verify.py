"""attnpack verify: every check an archive must pass before it ships.

Structure and hashes (the reader), versions, index consistency, and for every image its ELF
machine and arch, entry symbol, parameter layout and resource use against the launch spec.
"""
from __future__ import annotations

from pathlib import Path

from attnpack import abi
from attnpack.archive.elf import ElfError, kernel_facts
from attnpack.archive.format import ArchiveError, tuning_tables
from attnpack.archive.reader import Archive, read_archive
from attnpack.keys import FunctionalKey, KernelName
from attnpack.targets import UnknownTarget, target


def _check_index(ar: Archive) -> list[str]:
    problems = []
    images = ar.index["images"]
    used = set()
    names = [k["name"] for k in ar.kernels]
    if len(set(names)) != len(names):
        problems.append("index: duplicate kernel names")
    problems += _check_families(ar)
    nvidia = ar.target.get("vendor") == "nvidia"
    for k in ar.kernels:
        where = f"kernel {k['name']}"
        key = k["key"]
        try:
            name = KernelName.parse(k["name"])
        except ValueError as e:
            problems.append(f"{where}: {e}")
        else:
            if (name.family, name.op, name.key) != (k["family"], k["op"], FunctionalKey.of(key)):
                problems.append(f"{where}: name disagrees with its family/op/key "
                                f"({FunctionalKey.of(key).tag})")
        if k["family"] not in ar.index.get("families", {}):
            problems.append(f"{where}: family {k['family']} has no entry in `families`")
        if not isinstance(k.get("deterministic"), bool):
            problems.append(f"{where}: `deterministic` is not a boolean")
        if key["dtype"] not in abi.DTYPES:
            problems.append(f"{where}: dtype {key['dtype']!r} is not one of {abi.DTYPES}")
        ws = tuple(w["name"] for w in k["workspace"])
        for w in k["workspace"]:
            bad = [s for s in w["shape"] if not _is_extent(s)]
            if bad:
                problems.append(f"{where}: workspace {w['name']} has unknown size words {bad}")
        problems += [f"{where}: {p}" for p in _check_requires(k.get("requires", []))]
        if not k["steps"]:
            problems.append(f"{where}: no launch steps")
        for s in k["steps"]:
            here = f"{where} step {s['name']}"
            if not 0 <= s["image"] < len(images):
                problems.append(f"{here}: image {s['image']} is out of range")
                continue
            used.add(s["image"])
            if images[s["image"]]["symbol"] != s["symbol"]:
                problems.append(f"{here}: symbol {s['symbol']} differs from its image's "
                                f"{images[s['image']]['symbol']}")
            problems += [f"{here}: {p}" for p in _check_tensormaps(s, k["workspace"])]
            if "pdl" in s and (not isinstance(s["pdl"], bool) or s["pdl"] and not nvidia):
                problems.append(f"{here}: `pdl` {s['pdl']!r}: a boolean, true only on NVIDIA "
                                "targets (programmatic launch is CUDA's)")
            problems += [f"{here}: {p}" for p in _check_params(s, ws)]
            for dim in s["grid"]:
                for var, div in dim:
                    if var not in abi.GRID_VARS or div < 1:
                        problems.append(f"{here}: bad grid factor [{var}, {div}]")
    for i in range(len(images)):
        if i not in used:
            problems.append(f"index: image {i} ({images[i]['symbol']}) is used by no kernel")
    by_name = {k["name"]: k for k in ar.kernels}
    tables = [("selection", e, "") for e in ar.index["selection"]]
    tuning = ar.index.get("tuning", {})
    gpus = [g.get("gpu") for g in tuning.get("by_gpu", [])]
    if gpus and (not all(gpus) or gpus != sorted(set(gpus))):
        problems.append(f"tuning: by_gpu's GPUs {gpus} are not non-empty, distinct and sorted")
    for gpu, entries in tuning_tables(tuning):
        table = "tuning" if gpu is None else f"tuning for {gpu!r}"
        tables += [(table, e, f" gqa{e['gqa']} sq{e['sq']} sk{e['sk']}"
                    + (f" streams{e['streams']}" if "streams" in e else ""))  # 2.3
                   for e in entries]
    # Both tables map a key to a kernel, which must exist and serve exactly that key; a tuning
    # entry's deterministic alternate (2.2) too, and it must be declared deterministic.
    for table, entry, buckets in tables:
        label = f"{table}: entry {entry['op']} {FunctionalKey.of(entry).text}{buckets}"
        for field in ("kernel", "deterministic_kernel"):
            if field not in entry:
                continue
            k = by_name.get(entry[field])
            if k is None:
                problems.append(f"{label} names missing kernel {entry[field]}")
            elif k["op"] != entry["op"] or any(k["key"][f] != entry[f]
                                               for f in ("dtype", "head_dim", "causal")):
                problems.append(f"{label} points at {entry[field]}, whose key differs")
            elif field == "deterministic_kernel" and not k["deterministic"]:
                problems.append(f"{label} names {entry[field]} as deterministic, which it is not")
    return problems


def _is_extent(word) -> bool:
    try:
        abi.workspace_extent(word)
    except (ValueError, AttributeError):
        return False
    return True


def _check_requires(records) -> list[str]:
    """Each requirement is [word, op, operand, why] the runtime can evaluate (abi.Requirement)."""
    if not isinstance(records, list):
        return ["`requires` is not an array"]
    problems = []
    for record in records:
        if not isinstance(record, list) or len(record) != 4:
            problems.append(f"requirement {record!r} is not [word, op, operand, why]")
            continue
        try:
            abi.Requirement.of(record)
        except (ValueError, TypeError) as e:
            problems.append(str(e))
    return problems


def _check_families(ar: Archive) -> list[str]:
    """Each family's policy is complete, and the compilers its backend used are recorded."""
    problems = []
    families = ar.index.get("families", {})
    if not isinstance(families, dict):
        return ["families: not a map of family name to policy"]
    for name, fam in families.items():
        where = f"families: {name}"
        if not isinstance(fam, dict):
            problems.append(f"{where}: the policy is not a map")
            continue
        if not isinstance(fam.get("priority"), int):
            problems.append(f"{where}: no integer priority")
        if not isinstance(fam.get("backend"), str):
            problems.append(f"{where}: no backend")
        prov = fam.get("provenance", {})
        if not isinstance(prov, dict):
            problems.append(f"{where}: provenance is not a map")
        elif missing := [k for k in ("license", "origin") if not prov.get(k)]:
            problems.append(f"{where}: provenance lacks {missing}")
        if "notice" in fam and not (isinstance(fam["notice"], str) and fam["notice"].strip()):
            problems.append(f"{where}: `notice` is not a text")
        compilers = fam.get("compilers", [])
        if not (isinstance(compilers, list) and all(isinstance(c, str) for c in compilers)):
            problems.append(f"{where}: `compilers` is not a list of compiler names")
            continue
        recorded = ar.meta.get("compilers", {})
        for c in compilers:
            if not (isinstance(recorded, dict) and recorded.get(c)):
                problems.append(f"meta: the {c} compiler version is not recorded "
                                f"(family {name} is built with it)")
    return problems


def _check_params(step: dict, ws: tuple[str, ...]) -> list[str]:
    """Each parameter is [word, type, divisibility, offset]: a word of the vocabulary (or the
    kernel's workspace, or a tensor map), a wire type the word may take, and an offset inside
    the argument segment that overlaps no other parameter."""
    problems, spans = [], []
    for param in step["params"]:
        if len(param) != 4:
            problems.append(f"param {param} is not [word, type, divisibility, offset]")
            continue
        word, typ, div, offset = param
        if typ not in abi.WIRE_SIZE:
            problems.append(f"param {word} has unknown wire type {typ!r}")
            continue
        if div < 1 or div & (div - 1):
            problems.append(f"param {word} has divisibility {div}, not a power of two")
        spans.append((offset, offset + abi.WIRE_SIZE[typ], word))
        if typ == "tensormap":
            continue  # checked with its expansion in _check_tensormaps
        try:
            allowed = abi.param_types(word, ws)
        except KeyError as e:
            problems.append(e.args[0])
            continue
        if typ not in allowed:
            problems.append(f"param {word} has type {typ}, the vocabulary allows {allowed}")
        elif (word not in ws and not abi.workspace_stride(word, ws)
              and not abi.parse(word).fits(typ)):
            problems.append(f"param {word} does not fit its type {typ}")
    for span in step.get("padding", []):
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) and v >= 0
                                                                  for v in span)):
            problems.append(f"padding {span!r} is not [offset, size]")
            continue
        spans.append((span[0], span[0] + span[1], "padding"))
    spans.sort()
    for (a0, a1, aw), (b0, _, bw) in zip(spans, spans[1:]):
        if a1 > b0:
            problems.append(f"params {aw} and {bw} overlap at byte {b0}")
    if spans and spans[-1][1] > step["kernarg_size"]:
        problems.append(f"param {spans[-1][2]} ends at byte {spans[-1][1]}, past the "
                        f"{step['kernarg_size']}-byte argument segment")
    return problems


def _check_tensormaps(step: dict, workspace: list[dict]) -> list[str]:
    """Each descriptor parameter is declared in `tensormaps` and followed by Triton's expansion
    (the viewed tensor's shape and strides); each declaration is one the runtime can encode.
    A map views an element tensor, or (2.4) one of the kernel's workspace buffers."""
    problems = []
    shapes = {w["name"]: tuple(w["shape"]) for w in workspace}
    maps = {m["param"]: m for m in step.get("tensormaps", [])}
    words = [p[0] for p in step["params"]]
    types = [p[1] for p in step["params"]]
    for i, (word, typ) in enumerate(zip(words, types)):
        if typ != "tensormap":
            continue
        m = maps.get(word)
        if m is None:
            problems.append(f"tensormap param {word} has no tensormaps entry")
            continue
        if m["tensor"] not in abi.TENSORS and m["tensor"] not in shapes:
            problems.append(f"tensor map {word} views {m['tensor']!r}, neither an element "
                            "tensor nor a workspace buffer of the kernel")
            continue
        try:
            want = abi.tensormap_params(word, m["tensor"], shapes.get(m["tensor"]))
        except ValueError as e:
            problems.append(f"tensor map {word}: {e}")
            continue
        got = [tuple(p[:2]) for p in step["params"][i:i + len(want)]]
        if got != want:
            problems.append(f"tensor map {word} is followed by {got[1:]}, Triton passes {want[1:]}")
    for word, m in maps.items():
        if word not in words or types[words.index(word)] != "tensormap":
            problems.append(f"tensor map {word} is not a tensormap parameter")
        rank = len(shapes.get(m["tensor"], abi.AXES))
        if len(m["box"]) != rank or not all(1 <= e <= 256 for e in m["box"]):
            problems.append(f"tensor map {word} box {m['box']} is not {rank} extents of 1..256")
        if m.get("swizzle", 0) not in abi.TENSORMAP_SWIZZLES or \
                m.get("l2_promotion", 0) not in abi.TENSORMAP_L2_PROMOTIONS or \
                m.get("oob_fill", "zero") not in abi.TENSORMAP_OOB_FILLS:
            problems.append(f"tensor map {word} has options the runtime cannot encode: {m}")
    return problems


def _check_image(ar: Archive, i: int, steps: list[dict], warnings: list[str]) -> list[str]:
    """Problems of one image (fatal); findings worth a look go to `warnings`."""
    rec = ar.index["images"][i]
    where = f"image {i} ({rec['symbol']})"
    try:
        raw = ar.image(i)
    except ArchiveError as e:
        return [f"{where}: {e.problem}"]
    kind = ar.target["image_kind"]
    if rec["kind"] != kind:
        return [f"{where}: is a {rec['kind']}, a {ar.arch} archive holds {kind}"]
    try:
        facts = kernel_facts(raw, rec["symbol"])
    except ElfError as e:
        return [f"{where}: {e}"]
    problems = []
    if facts.arch != ar.arch:
        problems.append(f"{where}: ELF is built for {facts.arch}, the archive targets {ar.arch}")
    if rec["symbol"] not in facts.symbols:
        problems.append(f"{where}: entry symbol missing from the ELF symbol table")
    t = target(ar.arch)
    res = facts.resources
    if facts.machine == "cuda":
        # Spilled registers live in the per-thread stack frame (local memory): slower, still
        # correct, and the sm_90 kernels are proven on the GPU, so this is a warning.
        stack = max(res.get("stack_bytes", 0), res.get("local_bytes", 0))
        if stack:
            warnings.append(f"{where}: {stack}-byte stack frame (register spills to local memory)")
        if res.get("registers", 0) > t.max_registers:
            problems.append(f"{where}: {res['registers']} registers > {t.max_registers}")
    else:
        # VGPR spills and scratch go to memory; AMD targets are never run here, so they fail.
        if res["vgpr_spills"] or res["scratch_bytes"]:
            problems.append(f"{where}: spills to memory ({res['vgpr_spills']} VGPR, "
                            f"{res['scratch_bytes']} scratch bytes)")
        # SGPR spills go to VGPR lanes (v_writelane), not memory: reported, not fatal.
        if res["sgpr_spills"]:
            warnings.append(f"{where}: {res['sgpr_spills']} SGPRs spilled to VGPR lanes "
                            f"({res['sgpr']} SGPRs in use)")
        if res["vgpr"] + res["agpr"] > t.max_registers:
            problems.append(f"{where}: {res['vgpr']}+{res['agpr']} VGPR/AGPR > {t.max_registers}")
        if res["wavefront_size"] != t.wave_size:
            problems.append(f"{where}: wavefront size {res['wavefront_size']}, expected "
                            f"{t.wave_size}")
    for s in steps:
        spec = [(p[3], abi.WIRE_SIZE.get(p[1], 0)) for p in s["params"] if len(p) == 4]
        # CUDA launches with one pointer per parameter, in order, so the list must be the
        # image's, whole; an AMD object that lists its arguments must have each one filled
        # exactly by the launch spec (see _fills_arguments), or listed as padding the step
        # leaves zero (format 2.1). An object that lists none (hand-written assembly) is checked
        # by its segment size.
        padding = [tuple(p) for p in s.get("padding", [])
                   if isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p)]
        if facts.machine == "cuda" and (spec != facts.params or padding):
            problems.append(f"{where}: ELF parameters (offset, size) {facts.params} disagree "
                            f"with the launch spec's {spec}"
                            + (f" and padding {padding}" if padding else ""))
        if facts.machine != "cuda" and facts.params:
            problems += [f"{where}: {p}" for p in _fills_arguments(spec + padding, facts.params)]
        if facts.kernarg_size != s["kernarg_size"]:
            problems.append(f"{where}: ELF kernarg size {facts.kernarg_size} != launch spec "
                            f"{s['kernarg_size']}")
        if s["shared"] > t.shared_bytes:
            problems.append(f"{where}: {s['shared']} bytes of shared memory > {t.shared_bytes}")
        if facts.machine != "cuda" and res["lds_bytes"] + s["shared"] > t.shared_bytes:
            # the group segment (static LDS) is allocated on top of the dynamic request
            problems.append(f"{where}: {res['lds_bytes']} bytes of static LDS + {s['shared']} "
                            f"dynamic > {t.shared_bytes}")
        if s["block"][0] > t.max_threads:
            problems.append(f"{where}: {s['block'][0]} threads per block > {t.max_threads}")
    return problems


def _fills_arguments(spec: list[tuple[int, int]], args: list[tuple[int, int]]) -> list[str]:
    """Launch-spec fields (offset, size) against an AMD object's arguments (offset, size):
    every field lies inside one argument, and every argument is filled end to end, by one field
    of its size (a pointer, a scalar) or by consecutive fields (a by-value struct, such as
    FlyDSL's per-tensor layout {i32 extents, i64 strides}). No byte is left to chance."""
    problems = []
    fields = sorted(spec)
    for off, size in args:
        inside = [f for f in fields if off <= f[0] < off + size]
        at = off
        for f_off, f_size in inside:
            if f_off != at:
                break
            at = f_off + f_size
        if at != off + size:
            problems.append(f"ELF argument ({off}, {size}) (offset, size) is not filled end to "
                            f"end by the launch spec's fields {inside}")
    for f_off, f_size in fields:
        if not any(off <= f_off and f_off + f_size <= off + size for off, size in args):
            problems.append(f"launch spec field ({f_off}, {f_size}) (offset, size) lies in no "
                            f"ELF argument {args}")
    return problems


def verify_archive(path: Path | str) -> tuple[Archive | None, list[str], list[str]]:
    """Returns (archive, problems, warnings); no problems means the archive is sound."""
    name = Path(path).name
    try:
        ar = read_archive(path)
    except ArchiveError as e:
        return None, [str(e)], []
    try:
        row = target(ar.arch)
    except UnknownTarget as e:
        return ar, [f"{name}: {e}"], []
    if ar.target != row.meta():
        return ar, [f"{name}: meta target {ar.target} differs from the targets table's "
                    f"{row.meta()} for {ar.arch}"], []
    problems, warnings = _check_index(ar), []
    steps_by_image: dict[int, list[dict]] = {}
    for k in ar.kernels:
        for s in k["steps"]:
            steps_by_image.setdefault(s["image"], []).append(s)
    for i in range(len(ar.index["images"])):
        problems += _check_image(ar, i, steps_by_image.get(i, []), warnings)
    return ar, [f"{name}: {p}" for p in problems], [f"{name}: {w}" for w in warnings]
