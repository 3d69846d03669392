"""attnpack on two GPUs: per-device kernel loading, F.sdpa on the second GPU, two threads on two
GPUs at once, and DistributedDataParallel over NCCL. Skipped with fewer than 2 GPUs.

Every result is compared with PyTorch's own answer: outputs and gradients within the parity
bound of test_torch_sdpa.py (2x the native backend's error against fp32 math, floored at one
ulp), and attnpack's answers on the two GPUs bitwise equal to each other (same kernels, same
inputs, deterministic backward). Multicast stays off, as the machines here require:
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs 2 GPUs", allow_module_level=True)

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attnpack.torch as attnpack_torch  # noqa: E402
from attnpack import runtime as rt  # noqa: E402
# `extension` is test_torch_sdpa's module fixture (autouse): it loads or builds the extension,
# checks the bundle and enables attnpack for the module.
from test_torch_sdpa import (ULP, counted, extension, fwd_bwd, make, native,  # noqa: E402,F401
                             reference)

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NO_MULTICAST)


@pytest.fixture(autouse=True)
def device_zero_current():
    torch.cuda.set_device(0)
    yield
    torch.cuda.set_device(0)


def assert_matches_pytorch(mine, q, k, v, do, causal):
    """Within the parity bound of PyTorch's flash answer on the same GPU, against fp32 math
    (computed on GPU 0, where test_torch_sdpa's reference lives)."""
    gqa = q.shape[1] != k.shape[1]
    with native(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        theirs = fwd_bwd(q, k, v, do, is_causal=causal, enable_gqa=gqa)
    ref = reference(*(t.to("cuda:0") for t in (q, k, v, do)), causal)
    for name, a, n, r in zip(("out", "dq", "dk", "dv"), mine, theirs, ref):
        assert a.device == q.device and n.device == q.device, name
        err = (a.to("cuda:0").float() - r).abs().max().item()
        their_err = (n.to("cuda:0").float() - r).abs().max().item()
        bound = max(2 * their_err, ULP[q.dtype] * r.abs().max().item() + 1e-5)
        assert err <= bound, f"{name} on {q.device}: error {err:.3g} > {bound:.3g}"


def test_runtime_loads_each_kernel_once_per_device_and_launches_on_the_tensors_device():
    q0, k0, v0 = (torch.randn(2, 8, 1000, 64, device="cuda:0", dtype=torch.bfloat16)
                  for _ in range(3))
    q1, k1, v1 = (t.to("cuda:1") for t in (q0, k0, v0))
    with rt.Bundle() as bundle:  # $ATTNPACK_BUNDLE_DIR, for this GPU's arch
        o0, lse0 = rt.forward(bundle, q0, k0, v0, causal=True)
        assert bundle.stats()["modules_loaded"] == 1
        o1, lse1 = rt.forward(bundle, q1, k1, v1, causal=True)  # cuda:0 stays current
        assert torch.cuda.current_device() == 0
        assert bundle.stats()["modules_loaded"] == 2  # the same image, loaded into GPU 1 too
        rt.forward(bundle, q0, k0, v0, causal=True)
        rt.forward(bundle, q1, k1, v1, causal=True)
        assert bundle.stats()["modules_loaded"] == 2
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
    assert o1.device == torch.device("cuda:1")
    assert torch.equal(o0, o1.to("cuda:0")) and torch.equal(lse0, lse1.to("cuda:0"))


def test_sdpa_with_tensors_on_the_second_gpu_only():
    q, k, v, do = (t.to("cuda:1") for t in make(2, 16, 4, 1000, 1000, 128, torch.bfloat16))
    with counted() as stats:
        mine = fwd_bwd(q, k, v, do, is_causal=True, enable_gqa=True)
    assert torch.cuda.current_device() == 0
    assert stats["fallbacks"] == {}, stats
    assert list(stats["devices"]) == ["cuda:1"], stats
    assert sum(stats["devices"]["cuda:1"]["calls"].values()) == 2  # forward and backward
    assert attnpack_torch.bundle_info("cuda:1")["ok"]
    assert_matches_pytorch(mine, q, k, v, do, causal=True)
    on0 = fwd_bwd(*(t.to("cuda:0") for t in (q, k, v, do)), is_causal=True, enable_gqa=True)
    for a, b in zip(on0, mine):
        assert torch.equal(a, b.to("cuda:0"))


def test_two_threads_drive_two_gpus_at_once():
    inputs = {d: [t.to(f"cuda:{d}") for t in make(2, 8, 8, 1024, 1024, 64, torch.bfloat16, seed=d)]
              for d in (0, 1)}
    alone = {d: fwd_bwd(*inputs[d], is_causal=False) for d in (0, 1)}
    barrier, results, errors = threading.Barrier(2), {}, []

    def drive(d):
        try:
            torch.cuda.set_device(d)
            barrier.wait()
            results[d] = [fwd_bwd(*inputs[d], is_causal=False) for _ in range(20)]
            torch.cuda.synchronize(d)
        except Exception as e:  # reported below
            errors.append(e)

    with counted() as stats:
        threads = [threading.Thread(target=drive, args=(d,)) for d in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert stats["fallbacks"] == {}, stats
    assert sorted(stats["devices"]) == ["cuda:0", "cuda:1"]
    for d in (0, 1):
        assert sum(stats["devices"][f"cuda:{d}"]["calls"].values()) == 40  # 20 fwd + 20 bwd
        for outs in results[d]:
            for a, b in zip(outs, alone[d]):
                assert torch.equal(a, b)
        assert_matches_pytorch(alone[d], *inputs[d], causal=False)


DDP_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
    import attnpack.torch as T

    class Attention(nn.Module):
        def __init__(self, dim=256, heads=4):
            super().__init__()
            self.heads, self.qkv, self.out = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

        def forward(self, x):
            B, S, _ = x.shape
            q, k, v = self.qkv(x).view(B, S, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(B, S, -1))

    def train(rank, on):
        (T.enable if on else T.disable)()
        torch.manual_seed(0)
        model = Attention().cuda().to(torch.bfloat16)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator(device="cuda").manual_seed(100 + rank)
        losses = []
        for _ in range(3):
            x = torch.randn(4, 512, 256, device="cuda", dtype=torch.bfloat16, generator=g)
            loss = ddp(x).float().pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().float() for p in model.parameters()]

    def worker(rank, out):
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=2)
        native_losses, native_params = train(rank, False)
        T.reset_stats()
        losses, params = train(rank, True)
        stats = T.stats()
        diffs = [(a - b).abs().max().item() for a, b in zip(params, native_params)]
        # after DDP's all-reduce every rank must hold the same parameters
        gathered = [torch.zeros_like(params[0]) for _ in range(2)]
        dist.all_gather(gathered, params[0])
        same = torch.equal(gathered[0], gathered[1])
        dist.destroy_process_group()
        with open(os.path.join(out, f"{rank}.json"), "w") as f:
            json.dump({"losses": losses, "native_losses": native_losses, "param_diff": max(diffs),
                       "ranks_agree": same, "devices": stats["devices"],
                       "fallbacks": stats["fallbacks"]}, f)

    if __name__ == "__main__":
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
        torch.multiprocessing.spawn(worker, args=(sys.argv[1],), nprocs=2)
""")


def test_distributed_data_parallel_over_two_gpus(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, **NO_MULTICAST, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "29517"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"{rank}.json").read_text())
        assert r["fallbacks"] == {}, r
        assert list(r["devices"]) == [f"cuda:{rank}"], r  # each rank's calls on its own GPU
        assert sum(r["devices"][f"cuda:{rank}"]["calls"].values()) == 6  # 3 steps x fwd + bwd
        assert r["ranks_agree"], r
        for mine, theirs in zip(r["losses"], r["native_losses"]):
            assert abs(mine - theirs) <= 2e-2 * abs(theirs), r
        assert r["param_diff"] <= 1e-2, r
