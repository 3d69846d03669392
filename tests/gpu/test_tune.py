"""attnpack tune on the GPU: a small key set completes, and a deliberately wrong kernel in the
candidate set is rejected by the correctness gate, recorded, and never selected."""
import os
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

ROOT = Path(__file__).resolve().parents[2]
WRONG = Path(__file__).parent / "fixtures" / "kernels" / "wrongattn"


def test_wrong_kernel_is_rejected_and_the_rest_is_tuned(tmp_path):
    from attnpack.builder import BuildRequest, build_archives
    from attnpack.tune.db import load_db
    from attnpack.tune.runner import natural_key, tune

    arch = "sm_90" if torch.version.hip is None else None
    if arch is None:
        pytest.skip("the wrong fixture family is declared for sm_90 only")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(ROOT / "aot" / "kernels" / "triton_attn", kernels / "triton_attn")
    os.symlink(WRONG, kernels / "wrongattn")
    req = BuildRequest(archs=(arch,), out_dir=tmp_path / "out", kernels_root=kernels,
                       all_variants=True, ops=("fwd",), dtypes=("bf16",), head_dims=(64,),
                       tuning_db_dir=tmp_path, jobs=os.cpu_count() or 1)
    (archive,) = build_archives(req)
    key = natural_key("fwd", "bf16", 64, False, 1, 1024, 1024)
    out = tmp_path / "sm_90.jsonl"
    db = tune(archive, [key], out, log=print)
    entry = db.entries[key]
    wrong = "wrongattn/fwd/bf16-d64-full/M64_N64_warps4_stages3"
    assert [r["kernel"] for r in entry["rejected"]] == [wrong]
    assert entry["family"] == "triton" and entry["kernel"] != wrong
    assert wrong not in entry["candidates"]  # rejected candidates are never timed
    assert entry["error"] < 1e-2 and entry["time_us"] > 0
    assert entry["native"]["time_us"] > 0
    # a key of the open streams class is timed at 512 (batch, KV head) pairs too, by turns, and
    # chosen by its score over both shapes
    second = entry["second_shape"]
    assert second["shape"]["B"] * second["shape"]["Hkv"] == 512
    assert set(second["candidates"]) == set(entry["candidates"])
    assert entry["scores"][entry["kernel"]] == min(entry["scores"].values())
    # resumable: a second run finds the key measured and keeps it as it is
    again = tune(archive, [key], out, log=print)
    assert again.entries[key] == load_db(out).entries[key] == entry
