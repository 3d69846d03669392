"""The real triton family through the builder: a small archive for sm_90 and gfx950 that
verifies, rebuilds byte-identically, and hits the compile cache on the rebuild."""
from attnpack.archive import read_archive
from attnpack.archive.verify import verify_archive
from attnpack.family import kernels_root
from conftest import build


def test_small_real_archive(tmp_path):
    first = build(tmp_path / "a", kernels_root(), tmp_path / "cache", families=("triton",),
                  dtypes=("fp16",), head_dims=(64,), tuning_db_dir=tmp_path)
    assert first.stats.cache_hits == 0 and first.stats.compiled > 0
    for path in first.paths:
        ar, problems, _ = verify_archive(path)
        assert problems == []
        # fwd and bwd, causal on and off: one default kernel per functional key
        assert sorted((k["op"], k["key"]["causal"]) for k in ar.kernels) == [
            ("bwd", False), ("bwd", True), ("fwd", False), ("fwd", True)]
        assert [s["name"] for s in ar.kernel(next(k["name"] for k in ar.kernels
                                                  if k["op"] == "bwd"))["steps"]] == [
            "bwd_preprocess", "bwd_dkdv", "bwd_dq"]
    second = build(tmp_path / "b", kernels_root(), tmp_path / "cache", families=("triton",),
                   dtypes=("fp16",), head_dims=(64,), tuning_db_dir=tmp_path)
    assert second.stats.compiled == 0 and second.stats.cache_hits == first.stats.compiled
    for a, b in zip(first.paths, second.paths):
        assert a.read_bytes() == b.read_bytes()
    assert read_archive(first.paths[0]).arch == "sm_90"
