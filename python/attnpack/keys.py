"""The one spelling of an SDPA key and of a kernel name.

A functional key is what a kernel is compiled for: dtype, head dim, causal. A tuning key adds
the buckets a measurement holds for (GQA class, Sq and Sk buckets, streams class;
attnpack.tune.buckets).
A kernel name is `<family>/<op>/<functional tag>/<config tag>`. Everything that builds or
parses one of these calls this module; the C++ runtime mirrors `key_text` (archive.cpp) and a
CPU test holds the two equal.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

DTYPES = ("fp16", "bf16")
OPS = ("fwd", "bwd")
FUNCTIONAL_FIELDS = ("dtype", "head_dim", "causal")
TUNE_FIELDS = ("op",) + FUNCTIONAL_FIELDS + ("gqa", "sq", "sk", "streams")

_TAG = re.compile(r"^(?P<dtype>[a-z0-9]+)-d(?P<head_dim>[0-9]+)-(?P<mask>causal|full)$")


def mask_word(causal: bool) -> str:
    return "causal" if causal else "full"


@dataclass(frozen=True)
class FunctionalKey:
    dtype: str
    head_dim: int
    causal: bool

    @property
    def tag(self) -> str:
        """`bf16-d128-causal`: the third part of a kernel name."""
        return f"{self.dtype}-d{self.head_dim}-{mask_word(self.causal)}"

    @property
    def text(self) -> str:
        """`bf16 d128 causal`: how messages and explain spell it."""
        return f"{self.dtype} d{self.head_dim} {mask_word(self.causal)}"

    def as_dict(self) -> dict[str, Any]:
        return {"causal": self.causal, "dtype": self.dtype, "head_dim": self.head_dim}

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> "FunctionalKey":
        """From any map holding dtype, head_dim and causal (an index record, a db entry)."""
        return cls(fields["dtype"], int(fields["head_dim"]), bool(fields["causal"]))

    @classmethod
    def parse_tag(cls, tag: str) -> "FunctionalKey":
        m = _TAG.match(tag)
        if m is None:
            raise ValueError(f"'{tag}' is not a functional key tag like 'bf16-d128-causal'")
        return cls(m["dtype"], int(m["head_dim"]), m["mask"] == "causal")


class KernelName(NamedTuple):
    family: str
    op: str
    key: FunctionalKey
    config: str

    def __str__(self) -> str:
        return f"{self.family}/{self.op}/{self.key.tag}/{self.config}"

    @classmethod
    def parse(cls, name: str) -> "KernelName":
        parts = name.split("/")
        if len(parts) != 4 or not all(parts):
            raise ValueError(f"'{name}' is not a kernel name <family>/<op>/<key tag>/<config>")
        return cls(parts[0], parts[1], FunctionalKey.parse_tag(parts[2]), parts[3])


def config_tag(config: Mapping[str, Any]) -> str:
    """`M64_N128_stages2`: knobs in declared order, each name followed by its value."""
    return "_".join(f"{k}{v}" for k, v in config.items())


class TuneKey(NamedTuple):
    """A tuning-database key: op + functional key + buckets. Sorting follows the fields."""
    op: str
    dtype: str
    head_dim: int
    causal: bool
    gqa: int
    sq: int
    sk: int
    streams: int

    @property
    def functional(self) -> FunctionalKey:
        return FunctionalKey(self.dtype, self.head_dim, self.causal)

    @property
    def text(self) -> str:
        """`fwd bf16 d128 causal gqa4 sq1024 sk1024 streams128`; archive.cpp's key_text spells
        the start."""
        return (f"{self.op} {self.functional.text} gqa{self.gqa} sq{self.sq} sk{self.sk} "
                f"streams{self.streams}")

    def as_dict(self) -> dict[str, Any]:
        return dict(self._asdict())

    @classmethod
    def of(cls, fields: Mapping[str, Any]) -> "TuneKey":
        return cls(*(fields[f] for f in TUNE_FIELDS))
