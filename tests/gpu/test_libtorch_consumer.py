"""The C++-only consumer (examples/libtorch_consumer) on a GPU: a libtorch program, no Python,
that enables attnpack through its C entry points and runs at::scaled_dot_product_attention
forward and backward. It must be served by the bundle (attnpack_torch_stats: one flash forward
and one flash backward per case, no fallback), and its results must be within the parity bound
of PyTorch's own kernels against fp32 math. Skipped without CUDA.

The program is built from the extension's build tree (`cmake --install` into a temporary
prefix, then find_package(attnpack_torch)); a CUDA libtorch whose find_package(Torch) refuses
this machine's CUDA toolkit is linked directly instead (CONSUMER_FIND_TORCH=OFF).
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import attnpack.torch as attnpack_torch  # noqa: E402
from attnpack.torch import _build, _extension  # noqa: E402


@pytest.fixture(scope="module")
def consumer(tmp_path_factory):
    library = _extension.library_path()
    if not library.is_file():
        pytest.fail(f"{library} is not built (build_tools/run_gpu_tests.sh builds it)")
    work = tmp_path_factory.mktemp("libtorch_consumer")
    try:
        return _build.build_consumer(library, work, find_package=True)
    except subprocess.CalledProcessError as first:
        try:
            return _build.build_consumer(library, work, find_package=False)
        except subprocess.CalledProcessError as e:
            pytest.fail(f"find_package(Torch): {first.stderr[-2000:]}\ndirect: {' '.join(e.cmd)} "
                        f"failed:\n{e.stdout[-4000:]}\n{e.stderr[-4000:]}")


def test_served_by_the_bundle_forward_and_backward(consumer):
    bundle = attnpack_torch.bundle_info()  # the archive the Python side uses for this GPU
    assert bundle["ok"], bundle
    folder = os.path.dirname(bundle["bundle"]["path"])
    done = subprocess.run([str(consumer), folder], capture_output=True, text=True, timeout=600)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    cases = [line for line in done.stdout.splitlines() if line.startswith("case ")]
    stats = [json.loads(line.split("stats: ", 1)[1]) for line in done.stdout.splitlines()
             if line.strip().startswith("stats: ")]
    assert len(cases) == len(stats) == 2
    for case, s in zip(cases, stats):
        assert (s["ops"]["flash_fwd"]["served"], s["ops"]["flash_bwd"]["served"]) == (1, 1), (case, s)
        assert s["fallbacks"] == {}, (case, s)
        kernels = sorted(s["calls"])
        assert len(kernels) == 2 and any("/fwd/" in k for k in kernels) and \
            any("/bwd/" in k for k in kernels), kernels
        # the kernels explain() predicts for the same call
        dtype = "bf16" if case.startswith("case bf16") else "fp16"
        shape = (2, 8, 8, 256, 256, 128) if dtype == "bf16" else (1, 8, 2, 200, 200, 64)
        causal = "causal" in case
        for op in ("fwd", "bwd"):
            predicted = attnpack_torch.explain(shape, dtype, causal, op)["kernel"]
            assert predicted in kernels, (op, predicted, kernels)
    assert done.stdout.rstrip().endswith("result: ok")
