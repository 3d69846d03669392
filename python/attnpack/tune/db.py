"""The tuning database: `aot/tuning_db/<arch>.jsonl`, the reviewable source of truth.

Line 1 is the header `{"arch", "provenance": {gpu, driver, torch, triton, date, status}}`;
every other line is one entry, a JSON object with sorted keys, and the lines are sorted by key,
so a re-tune shows up as a readable line diff. The builder compiles the entries into the
archive's index (`tuning`), which is all the runtime reads.

An entry's key is (op, dtype, head_dim, causal, gqa, sq, sk, streams) with gqa, sq, sk and
streams (the class of B·Hkv) bucketed by `attnpack.tune.buckets`; an entry written before the
streams class gets the class of its timing shape when loaded. Its value: the selected `family`
and `kernel` (which names the config), the measured `time_us` and `tflops`, the best native
PyTorch backend for the same shape (`native: {backend, time_us}`), the exact shape it was timed
at (`shape`), every surviving candidate's time (`candidates`), and the candidates that were
`rejected` for being wrong, with their errors. A prefill key of the lowest or the highest
streams class is timed at its class's bound too (`second_shape`: that `shape`, its `candidates`
and `native`; `class_top` in entries written before the twenty-sixth session, when only the
lowest class had one, is read as it) and its winner is the lowest of `scores`, each
candidate's geometric mean over both shapes of its time over the fastest there
(attnpack.tune.runner.timing_shapes); where `scores` exist they
rank the candidates below as times do elsewhere. `deterministic` says whether the winner's
family declares it deterministic; when it does not, `deterministic_kernel` names the fastest
deterministic candidate (what serves under torch.use_deterministic_algorithms(True)), if one
survived. `held`, where present, is a reason written by hand for keeping the entry's kernel
against re-tunes (a contract the tuner's timing does not see, such as exact results at extreme
values): `db merge` keeps such an entry's kernel whatever a later database measured. `gpu`,
where present, names the GPU the entry was timed on (the header's `gpu` where absent);
`db merge` refuses to mix GPUs unless asked (merge_dbs).

One GPU model's own entries live beside it, in `aot/tuning_db/<arch>/<gpu_file_name>.jsonl`
(load_gpu_dbs): a database of this same format, every entry timed on the GPU its header names,
whose entries serve that GPU model first (an H100 and an H200 are both sm_90 and do not rank the
kernels alike). The builder compiles them into the archive's `tuning.by_gpu`; on a device of
that name the runtime takes the problem's exact key there before the arch-wide rule
(select_on_gpu; docs/tuning.md, "Entries for one GPU model").
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from attnpack.keys import TUNE_FIELDS as KEY_FIELDS
from attnpack.keys import TuneKey
from attnpack.tune.buckets import (GQA_BOUNDS, SEQLEN_BOUNDS, STREAM_BOUNDS, gqa_class,
                                   seqlen_bucket, streams_class)

Key = TuneKey


class DbError(ValueError):
    pass


def entry_key(entry: dict) -> Key:
    return TuneKey.of(entry)


def problem_key(op: str, dtype: str, head_dim: int, causal: bool, b: int, hq: int, hkv: int,
                sq: int, sk: int) -> Key:
    return TuneKey(op, dtype, head_dim, bool(causal), gqa_class(hq, hkv), seqlen_bucket(sq),
                   seqlen_bucket(sk), streams_class(b, hkv))


@dataclass
class TuningDb:
    arch: str
    provenance: dict
    entries: dict[Key, dict] = field(default_factory=dict)
    path: Path | None = None

    def lookup(self, op, dtype, head_dim, causal, b, hq, hkv, sq, sk) -> dict | None:
        """The entry of the problem's own bucketed key, if there is one."""
        return self.entries.get(problem_key(op, dtype, head_dim, causal, b, hq, hkv, sq, sk))

    def select(self, op, dtype, head_dim, causal, b, hq, hkv, sq, sk) -> tuple[dict | None, str]:
        """(entry, rule) the runtime serves the problem by: its own entry ("tuned"), else the
        nearest entry of its functional key ("nearest"), else none ("default": the archive's
        per-functional default serves it)."""
        key = problem_key(op, dtype, head_dim, causal, b, hq, hkv, sq, sk)
        if key in self.entries:
            return self.entries[key], "tuned"
        near = nearest_entry(key, self.entries)
        return (near, "nearest") if near is not None else (None, "default")

    def put(self, entry: dict) -> None:
        # `streams` may be left out: _upgraded gives it the class the entry was measured in
        missing = [f for f in KEY_FIELDS + ("family", "kernel")
                   if f not in entry and f != "streams"]
        if missing:
            raise DbError(f"entry lacks {missing}: {entry}")
        entry = _upgraded(entry)
        self.entries[entry_key(entry)] = entry

    def compiled(self, by_gpu: dict[str, "TuningDb"] | None = None) -> dict:
        """What the archive index carries (docs/ARCHIVE.md, `tuning`), with the entries of
        each GPU model of `by_gpu` (its name -> its database, load_gpu_dbs) under `by_gpu`."""
        out = {"buckets": {"seqlen": list(SEQLEN_BOUNDS), "gqa": list(GQA_BOUNDS),
                           "streams": list(STREAM_BOUNDS)},
               "provenance": self.provenance, "entries": self.compiled_entries()}
        if by_gpu:
            out["by_gpu"] = [{"gpu": gpu, "provenance": db.provenance,
                              "entries": db.compiled_entries()}
                             for gpu, db in sorted(by_gpu.items())]
        return out

    def compiled_entries(self) -> list[dict]:
        return [{**{f: e[f] for f in KEY_FIELDS}, "kernel": e["kernel"],
                 **({"deterministic_kernel": e["deterministic_kernel"]}
                    if e.get("deterministic_kernel") else {})}
                for _, e in sorted(self.entries.items())]


def record_determinism(entry: dict, is_deterministic: Callable[[str], bool]) -> dict:
    """The entry with its `deterministic` (its winner's declaration) and, for a winner that is
    not deterministic, `deterministic_kernel`: the fastest deterministic one among its timed
    `candidates` (by `scores` where the entry has them), if any. `is_deterministic(kernel name)`
    is the family's declaration."""
    entry = {k: v for k, v in entry.items() if k != "deterministic_kernel"}
    entry["deterministic"] = bool(is_deterministic(entry["kernel"]))
    if not entry["deterministic"]:
        times = {n: t for n, t in _ranking(entry).items() if is_deterministic(n)}
        if times:
            entry["deterministic_kernel"] = min(sorted(times), key=times.get)
    return entry


def entry_gpu(entry: dict, db: TuningDb) -> str | None:
    """The GPU an entry was timed on: its own `gpu` (the tuner writes it since the thirty-fourth
    session), else its database's header's; None for an untuned database's seeds."""
    if entry.get("gpu"):
        return entry["gpu"]
    if db.provenance.get("status") == "untuned":
        return None
    return db.provenance.get("gpu")


def gpu_file_name(gpu: str) -> str:
    """The file a GPU model's own entries live in, under aot/tuning_db/<arch>/: its name
    lower-cased, each run of other characters than letters and digits one hyphen
    ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3.jsonl")."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") + ".jsonl"


def load_gpu_dbs(folder: Path | str, arch: str) -> dict[str, TuningDb]:
    """The GPU models' own databases of `arch`: `<folder>/<arch>/*.jsonl`, by GPU name (the
    header's `gpu`). Each must be of `arch`, timed on one GPU model (no `mixed:` header, no
    entry timed on another) and named after it (gpu_file_name); DbError says which file breaks
    which rule and how to mend it."""
    out: dict[str, TuningDb] = {}
    for path in sorted((Path(folder) / arch).glob("*.jsonl")):
        db = load_db(path)
        gpu = db.provenance.get("gpu") or ""
        if db.arch != arch:
            raise DbError(f"{path}: header says arch {db.arch!r}, its folder says {arch!r}")
        if db.provenance.get("status") == "untuned" or not gpu or gpu.startswith("mixed: "):
            raise DbError(f"{path}: a GPU model's entries need a header naming the one GPU they "
                          f"were timed on (its gpu is {gpu!r}); tune into this file on that GPU "
                          "with `attnpack tune -o`")
        other = sorted({e["gpu"] for e in db.entries.values() if e.get("gpu")} - {gpu})
        if other:
            raise DbError(f"{path}: serves {gpu}, but holds entries timed on {', '.join(other)}; "
                          "move them to their own GPU's file")
        if path.name != gpu_file_name(gpu):
            raise DbError(f"{path}: serves {gpu}, whose file is {gpu_file_name(gpu)}; rename it")
        out[gpu] = db
    return out


def select_on_gpu(db: TuningDb, gpu_db: TuningDb | None, op, dtype, head_dim, causal, b, hq,
                  hkv, sq, sk) -> tuple[dict | None, str]:
    """(entry, rule) as the runtime serves the problem on a GPU model with its own entries
    (`gpu_db`, or None): the exact key there ("tuned for <gpu>"), else db.select's rule. A GPU
    model's entries are never another key's nearest entry."""
    if gpu_db is not None:
        entry = gpu_db.lookup(op, dtype, head_dim, causal, b, hq, hkv, sq, sk)
        if entry is not None:
            return entry, f"tuned for {gpu_db.provenance['gpu']}"
    return db.select(op, dtype, head_dim, causal, b, hq, hkv, sq, sk)


def prune_against(db: TuningDb, base: TuningDb,
                  min_gain: float = 1.0) -> tuple[TuningDb, list[tuple[Key, str]]]:
    """A GPU model's own entries (`db`) less those that would not change what its GPU gets
    over the arch-wide database `base`: an entry whose kernel is the one `base` serves its key
    by (its own entry, else the nearest), or, with `min_gain` > 1, whose winner beat that
    kernel, timed among the entry's own candidates on that GPU, by less than min_gain. An entry
    whose arch-wide kernel was not timed in its run is kept (nothing says it ties). Returns the
    kept database and (key, reason) for each dropped entry."""
    kept = TuningDb(db.arch, dict(db.provenance), path=db.path)
    dropped = []
    for key, entry in sorted(db.entries.items()):
        served = base.entries.get(key) or nearest_entry(key, base.entries)
        if served is not None and served["kernel"] == entry["kernel"]:
            dropped.append((key, "the arch-wide entry's kernel"))
        elif served is not None and _within(served["kernel"], entry, min_gain):
            dropped.append((key, f"within {min_gain}x of the arch-wide {served['kernel']}"))
        else:
            kept.entries[key] = entry
    return kept, dropped


def merge_dbs(dbs: list[TuningDb], min_gain: float = 1.0,
              mixed_gpus: bool = False) -> tuple[TuningDb, list[Key]]:
    """One database from several of one arch: a later database's entry replaces an earlier
    one's for the same key. The provenance is the last database's; its `status` stays `tuned`
    only if every kept entry came from a tuned database, else it reads `partly tuned`.

    Entries timed on different GPUs of the arch (an H100 and an H200 are both sm_90, and do not
    always rank the kernels alike) are refused unless `mixed_gpus`; then every kept entry
    records its GPU (`gpu`), and the header's `gpu` counts them ("mixed: A (n), B (m)").

    With `min_gain` > 1 a later entry replaces an earlier one only if its kernel beat the
    earlier entry's kernel, timed among its own candidates in the same run, by that factor: a
    re-tune does not swap a kernel for one that merely tied it at the key's timing shape (which
    may lose at the other shapes the key serves). An entry `held` by hand is not subject to
    that rule: a later held entry replaces the earlier one, and an earlier held entry keeps its
    kernel against a later one that is not held (a later entry with the same kernel replaces
    it and inherits the reason). Also returns the keys whose earlier kernel was kept."""
    if not dbs:
        raise DbError("nothing to merge")
    arch = dbs[0].arch
    merged = TuningDb(arch, dict(dbs[-1].provenance))
    held = []
    gpus: dict[str, str] = {}  # GPU -> the first database timed on it
    for db in dbs:
        if db.arch != arch:
            raise DbError(f"{db.path}: arch {db.arch}, the first database's is {arch}")
        for entry in db.entries.values():
            gpu = entry_gpu(entry, db)
            if gpu is not None:
                gpus.setdefault(gpu, str(db.path or "a database"))
    if len(gpus) > 1 and not mixed_gpus:
        named = "; ".join(f"{where}: {gpu}" for gpu, where in gpus.items())
        raise DbError(f"entries timed on different GPUs ({named}); merge databases tuned on "
                      "one GPU model, or pass --mixed-gpus to keep both (each entry then "
                      "records its GPU)")
    source: dict[Key, TuningDb] = {}  # the database each kept entry came from
    for db in dbs:
        for key, entry in db.entries.items():
            gpu = entry_gpu(entry, db)
            if len(gpus) > 1 and gpu and not entry.get("gpu"):
                entry = {**entry, "gpu": gpu}
            old = merged.entries.get(key)
            if old is not None and not entry.get("held"):  # (a held entry replaces any)
                if old.get("held") and entry["kernel"] == old["kernel"]:
                    entry = {**entry, "held": old["held"]}
                elif old.get("held") or _within(old["kernel"], entry, min_gain):
                    held.append(key)
                    continue
            merged.entries[key] = entry
            source[key] = db
    statuses = {source[key].provenance.get("status") for key in merged.entries}
    merged.provenance["status"] = "tuned" if statuses == {"tuned"} else "partly tuned"
    counts: dict[str, int] = {}
    for entry in merged.entries.values():
        if entry.get("gpu"):
            counts[entry["gpu"]] = counts.get(entry["gpu"], 0) + 1
    if len(counts) > 1:
        merged.provenance["gpu"] = "mixed: " + ", ".join(
            f"{gpu} ({n})" for gpu, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    elif counts:
        merged.provenance["gpu"] = next(iter(counts))
    return merged, held


def _ranking(entry: dict) -> dict[str, float]:
    """What ranks an entry's candidates, lower better: their `scores` over the two timing
    shapes of a lowest-class prefill key, else their times at its one timing shape."""
    return entry.get("scores") or entry.get("candidates") or {}


def _within(kernel: str, entry: dict, min_gain: float) -> bool:
    """Whether `entry`'s winner beat `kernel`, timed in the same run, by less than min_gain."""
    ranks = _ranking(entry)
    timed, best = ranks.get(kernel), ranks.get(entry["kernel"])
    return (min_gain > 1.0 and kernel != entry["kernel"] and timed is not None
            and best is not None and timed < best * min_gain)


def nearest_entry(key: Key, entries: dict[Key, dict]) -> dict | None:
    """The entry of `key`'s functional key nearest to it, for a bucketed key with no entry of
    its own. Distance: the number of bucket steps between the two keys, summed over GQA class,
    Sq and Sk (positions in GQA_BOUNDS and SEQLEN_BOUNDS); ties go to the smaller streams
    distance (positions in STREAM_BOUNDS), then to the smaller GQA distance, then to the
    smallest (gqa, sq, sk, streams). The streams class only breaks ties (buckets.py says why).
    runtime/src/select.cpp implements the same rule (and a CPU test compares the two over
    random shapes)."""
    g, s, c = GQA_BOUNDS.index, SEQLEN_BOUNDS.index, STREAM_BOUNDS.index
    same = sorted((k for k in entries if k.functional == key.functional and k.op == key.op),
                  key=lambda k: (k.gqa, k.sq, k.sk, k.streams))
    best = min(same, default=None, key=lambda k: (
        abs(g(k.gqa) - g(key.gqa)) + abs(s(k.sq) - s(key.sq)) + abs(s(k.sk) - s(key.sk)),
        abs(c(k.streams) - c(key.streams)), abs(g(k.gqa) - g(key.gqa))))
    return None if best is None else entries[best]


def load_db(path: Path | str) -> TuningDb:
    path = Path(path)
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError as e:
        raise DbError(f"{path}: cannot be read ({e.strerror})") from None
    if not lines:
        raise DbError(f"{path}: empty; line 1 must be the header with arch and provenance")
    try:
        header = json.loads(lines[0])
        db = TuningDb(header["arch"], header.get("provenance", {}), path=path)
        for n, line in enumerate(lines[1:], start=2):
            entry = _upgraded(json.loads(line))  # put() does too; the key is needed here
            if entry_key(entry) in db.entries:
                raise DbError(f"{path}:{n}: duplicate key {entry_key(entry).text}")
            db.put(entry)
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DbError(f"{path}: malformed ({e}); regenerate it with `attnpack tune`") from None
    return db


def _upgraded(entry: dict) -> dict:
    """An entry as written today: `class_top` (written before the twenty-sixth session) read as
    `second_shape`, and the streams class added (_with_streams)."""
    if "class_top" in entry:
        entry = {**{k: v for k, v in entry.items() if k != "class_top"},
                 "second_shape": entry["class_top"]}
    return _with_streams(entry)


def _with_streams(entry: dict) -> dict:
    """An entry written before the streams class gets the class it was measured in: its timing
    shape's B·Hkv, or for an entry with no shape (a seeded one) the class its key is tuned in."""
    if "streams" in entry:
        return entry
    shape = entry.get("shape")
    if shape:
        return {**entry, "streams": streams_class(shape["B"], shape["Hkv"])}
    from attnpack.tune.runner import natural_key
    fields = {f: entry[f] for f in KEY_FIELDS if f != "streams"}
    return {**entry, "streams": natural_key(**fields).streams}


def dump_db(db: TuningDb) -> str:
    lines = [json.dumps({"arch": db.arch, "provenance": db.provenance}, sort_keys=True)]
    lines += [json.dumps(e, sort_keys=True) for _, e in sorted(db.entries.items())]
    return "\n".join(lines) + "\n"


def save_db(db: TuningDb, path: Path | str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dump_db(db))
    tmp.replace(path)


def diff_dbs(old: TuningDb, new: TuningDb) -> list[dict]:
    """Every key whose kernel or family changed, appeared or vanished, with times and ratio. Two
    entries timed on different GPUs (entry_gpu) get no ratio: their times are not comparable,
    and the row names both GPUs."""
    rows = []
    for key in sorted(set(old.entries) | set(new.entries)):
        a, b = old.entries.get(key), new.entries.get(key)
        if a and b and a["kernel"] == b["kernel"] and a["family"] == b["family"]:
            continue
        change = "added" if a is None else "removed" if b is None else (
            "family" if a["family"] != b["family"] else "kernel")
        ta, tb = (a or {}).get("time_us"), (b or {}).get("time_us")
        gpus = (a and entry_gpu(a, old), b and entry_gpu(b, new))
        other_gpu = all(gpus) and gpus[0] != gpus[1]
        row = {"key": key.text, "change": change,
               "old": a and a["kernel"], "new": b and b["kernel"],
               "old_us": ta, "new_us": tb,
               "speedup": round(ta / tb, 3) if ta and tb and not other_gpu else None}
        if other_gpu:
            row["gpus"] = list(gpus)
        rows.append(row)
    return rows


def render_diff(rows: list[dict]) -> str:
    if not rows:
        return "no kernel or family changes\n"
    out = []
    for r in rows:
        times = (f"{r['old_us'] if r['old_us'] is not None else '-'} us -> "
                 f"{r['new_us'] if r['new_us'] is not None else '-'} us")
        ratio = f" ({r['speedup']:.2f}x)" if r["speedup"] else ""
        if r.get("gpus"):
            ratio = f" (timed on {r['gpus'][0]} -> {r['gpus'][1]}: no ratio)"
        out.append(f"{r['change']:7} {r['key']}\n"
                   f"        {r['old'] or '-'}\n     -> {r['new'] or '-'}\n"
                   f"        {times}{ratio}")
    return "\n".join(out) + f"\n{len(rows)} key(s) changed\n"


def render_show(db: TuningDb) -> str:
    p = db.provenance
    out = [f"tuning db for {db.arch}: {len(db.entries)} entries, status {p.get('status', '?')}, "
           f"{p.get('gpu', '?')} driver {p.get('driver', '?')}, torch {p.get('torch', '?')}, "
           f"triton {p.get('triton', '?')}, {p.get('date', '?')}",
           f"{'op':4} {'dtype':5} {'hd':>4} {'causal':6} {'gqa':>3} {'sq':>6} {'sk':>6} "
           f"{'str':>3} {'family':8} {'us':>9} {'TFLOP/s':>8} {'native':>14} {'vs native':>9} "
           f"{'det':3}  kernel"]
    for key, e in sorted(db.entries.items()):
        op, dtype, hd, causal, gqa, sq, sk, streams = key
        native = e.get("native") or {}
        ratio = (f"{native['time_us'] / e['time_us']:.2f}x"
                 if native.get("time_us") and e.get("time_us") else "-")
        t = f"{e['time_us']:.1f}" if e.get("time_us") else "-"
        tf = f"{e['tflops']:.0f}" if e.get("tflops") else "-"
        nat = f"{native.get('backend', '-')} {native.get('time_us', 0):.0f}" if native else "-"
        det = {True: "yes", False: "NO"}.get(e.get("deterministic"), "?")
        out.append(f"{op:4} {dtype:5} {hd:>4} {str(causal):6} {gqa:>3} {sq:>6} {sk:>6} "
                   f"{streams:>3} {e['family']:8} {t:>9} {tf:>8} {nat:>14} {ratio:>9} {det:3}  "
                   f"{e['kernel']}")
        if e.get("deterministic_kernel"):
            alt = e["deterministic_kernel"]
            alt_us = (e.get("candidates") or {}).get(alt)
            out.append(f"{'':>87}deterministic: {alt}" + (f" ({alt_us:.1f} us)" if alt_us else ""))
        if e.get("second_shape") and e.get("scores"):
            out.append(f"{'':>87}" + _second_shape_line(e))
        if e.get("held"):
            out.append(f"{'':>87}held by hand: {e['held']}")
        if p.get("gpu", "").startswith("mixed: ") and e.get("gpu"):
            out.append(f"{'':>87}timed on {e['gpu']}")
    nondet = sum(1 for e in db.entries.values() if e.get("deterministic") is False)
    out.append(f"{nondet} of {len(db.entries)} winners are not deterministic (det NO); under "
               "torch.use_deterministic_algorithms(True) their deterministic kernel serves")
    return "\n".join(out) + "\n"


def _second_shape_line(entry: dict) -> str:
    """`db show`'s line under an entry timed at two shapes (attnpack.tune.runner.timing_shapes):
    its winner's time at the second one, PyTorch's there, and the score that chose it."""
    second = entry["second_shape"]
    us = (second.get("candidates") or {}).get(entry["kernel"])
    native = second.get("native") or {}
    return (f"also timed at B={second['shape']['B']}" + (f": {us:.1f} us" if us else "")
            + (f", native {native['backend']} {native['time_us']:.0f}" if native else "")
            + f"; chosen by score {entry['scores'][entry['kernel']]:.3f} over both shapes")


def render_summary(db: TuningDb) -> str:
    """A markdown table per (op, dtype, head dim, causal): keys, how many the Gluon family won
    (of them not deterministic), and the winners' speed against the native baseline of their
    own tuning run (native time / winner time: above 1 is faster), geomean, min, max, and
    how many keys reach 1.0x. docs/tuning.md quotes it."""
    groups: dict[tuple, list[dict]] = {}
    for key, e in db.entries.items():
        groups.setdefault(key[:4], []).append(e)
    out = ["| op | dtype | hd | causal | keys | gluon wins (not deterministic) | vs native geomean "
           "| min | max | keys ≥ 1.0x |", "|---|---|---|---|---|---|---|---|---|---|"]
    for op, dtype, hd, causal in sorted(groups, key=lambda k: (k[0] != "fwd", k[1] != "bf16",
                                                               k[2], k[3])):
        entries = groups[(op, dtype, hd, causal)]
        ratios = [e["native"]["time_us"] / e["time_us"] for e in entries
                  if (e.get("native") or {}).get("time_us") and e.get("time_us")]
        gluon = [e for e in entries if e["family"] == "gluon"]
        nondet = sum(1 for e in gluon if e.get("deterministic") is False)
        speed = "- | - | - | -"
        if ratios:
            geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            speed = (f"{geomean:.2f} | {min(ratios):.2f} | {max(ratios):.2f} | "
                     f"{sum(r >= 1.0 for r in ratios)}")
        out.append(f"| {op} | {dtype} | {hd} | {'yes' if causal else 'no'} | {len(entries)} | "
                   f"{len(gluon)} ({nondet}) | {speed} |")
    return "\n".join(out) + "\n"


def seed_untuned(arch: str, keys, families: dict) -> TuningDb:
    """A database for a GPU nobody has measured: each key gets the kernel that serves it before
    tuning, by the builder's own rule (`attnpack.family.default_variants`: the lowest-priority
    family that declares the functional key and serves the bucket), and the provenance says
    `untuned`.
    `attnpack tune` on the real GPU replaces it entry by entry."""
    from attnpack.family import default_variants
    db = TuningDb(arch, {"status": "untuned", "gpu": "none (not measured)",
                         "note": "per-functional family defaults; re-run attnpack tune on the GPU"})
    for key in keys:
        variant = default_variants(arch, families, tune_key=key).get((key.op, key.functional))
        if variant is not None:
            db.put({**key.as_dict(), "family": variant.family, "kernel": variant.name})
    return db
