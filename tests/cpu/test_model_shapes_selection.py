"""Every row of `bench/model_shapes.json` is served from the tuning database: in the default sm_90
archive (build/bundle, from `build_tools/setup.sh`), the runtime's explain names a tuned or
nearest-tuned kernel for the row's forward, and for its backward where the row has one, never
the untuned per-functional default (issue 16's acceptance). Checked with the recording driver,
on a machine without a GPU."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attnpack import runtime as rt

REPO = Path(__file__).resolve().parents[2]
ROWS = json.loads((REPO / "bench" / "model_shapes.json").read_text())["shapes"]


def _ops(row: dict) -> list[str]:
    """bench's rule: rows with "ops" run only those (decode: forward only), others fwd and bwd."""
    return ["bwd" if op == "fwdbwd" else op for op in row.get("ops", ["fwd", "fwdbwd"])]


@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_every_model_row_is_served_by_a_tuned_or_nearest_tuned_kernel(sm90_default_bundle, row):
    for op in _ops(row):
        problem = rt.make_problem(op, row["dtype"], B=row["batch"], Hq=row["heads_q"],
                                  Hkv=row["heads_kv"], Sq=row["seqlen_q"], Sk=row["seqlen_k"],
                                  D=row["head_dim"], causal=row["causal"])
        text = sm90_default_bundle.explain(problem)
        served = re.search(r"^served by: (.*)$", text, re.M)
        assert served and served.group(1) in ("tuned entry", "nearest tuned entry"), (op, text)
