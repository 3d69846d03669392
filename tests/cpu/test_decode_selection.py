"""Decode in the default sm_90 archive (build/bundle, from `build_tools/setup.sh`): a one-token
query against a long cache takes the triton family's decode kernel, which the committed
database selects for the Sq bucket 16, and launches one program per (batch, KV head), or per
(key chunk, batch, KV head) and a merge for the split-KV kernel; one row
more than the decode kernel serves (Sq = 17) never reaches it. Checked with the recording
driver: what the runtime would launch, on a machine without a GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from attnpack import runtime as rt
from attnpack.tune.db import load_db

REPO = Path(__file__).resolve().parents[2]
DB = REPO / "aot" / "tuning_db" / "sm_90.jsonl"


@pytest.mark.parametrize("B,Hq,Hkv,Sk,D", [(8, 64, 8, 32768, 128), (64, 32, 8, 1024, 128),
                                           (16, 16, 8, 8192, 256), (64, 32, 8, 4096, 64)])
def test_a_decode_step_launches_one_program_per_kv_head(sm90_default_bundle, B, Hq, Hkv, Sk, D):
    problem = rt.make_problem("fwd", "bf16", B=B, Hq=Hq, Hkv=Hkv, Sq=1, Sk=Sk, D=D,
                              pointers={"q": 0x100000, "k": 0x200000, "v": 0x300000,
                                        "o": 0x400000, "lse": 0x500000})
    entry, rule = load_db(DB).select("fwd", "bf16", D, False, B, Hq, Hkv, 1, Sk)
    assert rule in ("tuned", "nearest") and "/decode1_" in entry["kernel"], entry
    kernel = sm90_default_bundle.select(problem)
    assert kernel.name == entry["kernel"]
    workspace_size = sm90_default_bundle.workspace_size(problem)
    sm90_default_bundle.forward(problem, workspace=0x7000000, workspace_size=workspace_size)
    launches = sm90_default_bundle.recorded_launches()["launches"]
    tma = "_tma" if "/decode1_tma1_" in kernel.name else ""  # K/V by tensor descriptors
    if "_split" not in kernel.name:
        assert [(x["symbol"], x["grid"]) for x in launches] == [
            (f"attn_fwd_decode{tma}", [B * Hkv, 1, 1])]
        return
    # split-KV: one program per (key chunk, batch, KV head), then one per query row
    chunk = int(kernel.name.split("_split")[1].split("_")[0])
    assert [(x["symbol"], x["grid"]) for x in launches] == [
        (f"attn_fwd_decode_split{tma}", [-(-Sk // chunk), B * Hkv, 1]),
        ("attn_fwd_decode_combine", [1, B * Hq, 1])]
    assert workspace_size == \
        -(-B * Hq * -(-Sk // chunk) * D * 4 // 256) * 256 + B * Hq * -(-Sk // chunk) * 4


def test_seventeen_query_rows_take_a_prefill_kernel(sm90_default_bundle):
    problem = rt.make_problem("fwd", "bf16", B=8, Hq=64, Hkv=8, Sq=17, Sk=32768, D=128)
    assert "/decode1_" not in sm90_default_bundle.select(problem).name
