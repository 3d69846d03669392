"""Shape sets: bench/shapes.json (public) and bench/model_shapes.json (open models' attention).

A shape file is {"about": "...", "shapes": [{batch, heads_q, heads_kv, seqlen_q, seqlen_k,
head_dim, causal, dtype}, ...]}; a shape may also carry a "name" (the model shapes name the
model they stand for) and "ops", the only ops it is timed for (decode rows: ["fwd"], since
nobody trains on one query). No torch here: the report generator reads shapes on a CPU machine.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from attnpack.keys import TuneKey
from attnpack.tune.db import problem_key
from attnpack.tune.runner import flops, natural_key, timing_shape

REQUIRED = ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "causal", "dtype")
DTYPES = ("bf16", "fp16")
OPS = ("fwd", "bwd", "fwdbwd")
BENCH_DIR = Path(__file__).resolve().parents[3] / "bench"
DEFAULT_SHAPE_FILES = (BENCH_DIR / "shapes.json", BENCH_DIR / "model_shapes.json")


class ShapeFileError(ValueError):
    """A shape file that cannot be used; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class Shape:
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool
    dtype: str
    name: str = ""
    ops: tuple[str, ...] = ()        # empty: every op asked for

    @property
    def label(self) -> str:
        """The row's name: the file's "name" if it has one, else the dimensions."""
        return self.name or dims_label(self)

    @property
    def gqa(self) -> bool:
        return self.heads_q != self.heads_kv

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in REQUIRED}

    def with_dtype(self, dtype: str) -> "Shape":
        return Shape(**{**self.as_dict(), "dtype": dtype, "name": self.name, "ops": self.ops})

    def wanted_ops(self, ops) -> list[str]:
        return [op for op in ops if not self.ops or op in self.ops]


def dims_label(s) -> str:
    """'B4 H32/8 S4096 d128 causal' (Sq x Sk when they differ)."""
    gqa = f"/{s.heads_kv}" if s.heads_kv != s.heads_q else ""
    seq = f"S{s.seqlen_q}" + ("" if s.seqlen_q == s.seqlen_k else f"x{s.seqlen_k}")
    return f"B{s.batch} H{s.heads_q}{gqa} {seq} d{s.head_dim} {'causal' if s.causal else 'full'}"


def shape_flops(shape: Shape, op: str) -> float:
    """FLOPs of one call: the tuner's count (visible pairs under causal; bwd 2.5x fwd);
    fwdbwd is a forward plus a backward."""
    dims = (shape.batch, shape.heads_q, shape.seqlen_q, shape.seqlen_k, shape.head_dim, shape.causal)
    if op == "fwdbwd":
        return flops("fwd", *dims) + flops("bwd", *dims)
    if op not in ("fwd", "bwd"):
        raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")
    return flops(op, *dims)


def shape_from_dict(entry, where: str) -> Shape:
    """One shape entry, checked; `where` ("file: shapes[3]") prefixes every error."""
    if not isinstance(entry, dict):
        raise ShapeFileError(f"{where}: expected an object with {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise ShapeFileError(f"{where}: missing {', '.join(missing)}; every shape needs "
                             f"{', '.join(REQUIRED)}")
    for k in REQUIRED[:6]:
        if not isinstance(entry[k], int) or isinstance(entry[k], bool) or entry[k] < 1:
            raise ShapeFileError(f"{where}: {k} is {entry[k]!r}; it must be a positive integer")
    if not isinstance(entry["causal"], bool):
        raise ShapeFileError(f"{where}: causal is {entry['causal']!r}; write true or false")
    if entry["dtype"] not in DTYPES:
        raise ShapeFileError(f"{where}: dtype {entry['dtype']!r}; one of {', '.join(DTYPES)}")
    if entry["heads_q"] % entry["heads_kv"]:
        raise ShapeFileError(f"{where}: heads_q {entry['heads_q']} is not a multiple of heads_kv "
                             f"{entry['heads_kv']} (grouped-query heads must divide evenly)")
    name = entry.get("name", "")
    if not isinstance(name, str):
        raise ShapeFileError(f"{where}: name {name!r} must be a string")
    ops = entry.get("ops", [])
    if not isinstance(ops, list) or not ops and "ops" in entry or any(op not in OPS for op in ops):
        raise ShapeFileError(f"{where}: ops {ops!r}; a non-empty list of {', '.join(OPS)}, "
                             "or leave it out for every op")
    unknown = sorted(set(entry) - set(REQUIRED) - {"name", "ops"})
    if unknown:
        raise ShapeFileError(f"{where}: unknown key {unknown[0]!r}; a shape has "
                             f"{', '.join(REQUIRED)}, and optionally name and ops")
    return Shape(**{k: entry[k] for k in REQUIRED}, name=name, ops=tuple(ops))


def load_shape_file(path: Path) -> list[Shape]:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ShapeFileError(f"{path}: no such shape file (the default sets live in the source "
                             "tree's bench/ folder; pass --shapes FILE)") from None
    except json.JSONDecodeError as e:
        raise ShapeFileError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list):
        raise ShapeFileError(f'{path}: expected {{"about": ..., "shapes": [...]}} '
                             "as in bench/shapes.json")
    shapes = [shape_from_dict(e, f"{path}: shapes[{i}]") for i, e in enumerate(doc["shapes"])]
    names = [s.label for s in shapes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ShapeFileError(f"{path}: two shapes share the row name {dupes[0]!r}; give them "
                             "distinct \"name\"s")
    return shapes


def set_name(path: Path) -> str:
    """The shape set a row belongs to: the file's stem ("shapes", "model_shapes")."""
    return Path(path).stem


def plan_rows(shape_files, dtypes=None, max_rows: int | None = None,
              only: str | None = None) -> list[tuple[str, Shape]]:
    """(set, shape) per measured shape, in file order: each shape at each of `dtypes` (default:
    the shape's own), the first `max_rows` shapes of each file, those whose row name contains
    `only` (case-insensitive)."""
    planned = []
    stems = [set_name(p) for p in shape_files]
    if len(set(stems)) != len(stems):
        raise ShapeFileError(f"shape files {', '.join(map(str, shape_files))}: two share the "
                             "stem that names their set; rename one")
    for path in shape_files:
        shapes = load_shape_file(path)
        if only:
            shapes = [s for s in shapes if only.lower() in s.label.lower()]
        if max_rows is not None:
            shapes = shapes[:max_rows]
        for shape in shapes:
            for dtype in (dtypes or (shape.dtype,)):
                planned.append((set_name(path), shape.with_dtype(dtype)))
    return planned


def row_keys(shapes, other_class_only: bool = False) -> list[TuneKey]:
    """The tuning keys the rows of `shapes` are served by, each in its row's streams class, in
    row order without repeats: a forward + backward row needs its forward and its backward key,
    a row with `ops` those ops' keys. With `other_class_only`, only the prefill keys whose
    row's class is not the one the key is tuned in by default (runner.natural_key): those
    rows are served by a nearer class's entry until the key is tuned in theirs
    (`attnpack tune --keys` with these, runner.class_bound_batch). A row whose class cannot be
    timed (the grid or memory caps keep the class's bound batch out of it: long sequences at
    head dim 256) gets its key in the class it is tuned in by default."""
    keys = []
    for shape in shapes:
        for op in shape.wanted_ops(("fwd", "bwd")):
            key = problem_key(op, shape.dtype, shape.head_dim, shape.causal, shape.batch,
                              shape.heads_q, shape.heads_kv, shape.seqlen_q, shape.seqlen_k)
            natural = natural_key(*key[:-1])
            if key.sq > 16 and key.streams != natural.streams:
                try:
                    timing_shape(key)
                except ValueError:
                    key = natural
            if other_class_only and (key.sq <= 16 or key.streams == natural.streams):
                continue
            if key not in keys:
                keys.append(key)
    return keys
