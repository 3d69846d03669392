"""After the README's two set-up commands, the README's Python example and `attnpack explain`
work with no environment variable: the package finds libattnpack, the PyTorch extension and the
archives in build/ of its checkout by itself (attnpack/_locate.py). Each check runs in a fresh
process outside the checkout, with every ATTNPACK_* variable removed. (The installed wheel is
checked the same way by build_tools/check_wheel.sh.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnpack import _locate

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"


@pytest.fixture(scope="module")
def clean_env():
    needed = [BUILD / "runtime" / _locate.RUNTIME_LIBRARY, BUILD / "torch" / _locate.TORCH_LIBRARY]
    if not all(p.is_file() for p in needed) or not list((BUILD / "bundle").glob("attnpack-*.apk")):
        pytest.skip("build/ is not set up (bash build_tools/setup.sh)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPACK_")}
    env["PYTHONPATH"] = str(REPO / "python")  # what the editable install maps `attnpack` to
    return env


def run(args, env, tmp_path):
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_python_example_up_to_enable(clean_env, tmp_path):
    code = textwrap.dedent("""
        import json, torch
        import attnpack.torch                    # registers "ATTNPACK"; changes nothing yet
        attnpack.torch.enable()                  # F.sdpa fwd+bwd now run on the bundle where it can
        ext = attnpack.torch._extension.loaded()
        print(json.dumps({"enabled": attnpack.torch.is_enabled(), "extension": str(ext.path),
                          "bundle_dir": attnpack.torch.bundle_directory(),
                          "stats": attnpack.torch.stats()}))
        attnpack.torch.disable()
        assert not attnpack.torch.is_enabled()
    """)
    result = json.loads(run(["-c", code], clean_env, tmp_path).splitlines()[-1])
    assert result["enabled"] is True
    assert result["extension"] == str(BUILD / "torch" / _locate.TORCH_LIBRARY)
    assert result["bundle_dir"] == str(BUILD / "bundle")


def test_locate_finds_the_checkouts_build(clean_env, tmp_path):
    found = json.loads(run(["-m", "attnpack", "locate", "--json"], clean_env, tmp_path))
    assert found["runtime"] == str(BUILD / "runtime" / _locate.RUNTIME_LIBRARY)
    assert found["torch_extension"] == str(BUILD / "torch" / _locate.TORCH_LIBRARY)
    assert found["archives"] == [str(p) for p in sorted((BUILD / "bundle").glob("attnpack-*.apk"))]


def test_explain_against_the_built_archive(clean_env, tmp_path):
    archives = sorted((BUILD / "bundle").glob("attnpack-*.apk"))
    archive = next((p for p in archives if p.name.endswith("-sm_90.apk")), None)
    if archive is None:
        pytest.skip("no sm_90 archive in build/bundle")
    out = run(["-m", "attnpack", "explain", "--shape", "2,8,8,1024,1024,64", "--dtype", "bf16",
               "--causal", "--archive", str(archive), "--arch", "sm_90", "--json"], clean_env, tmp_path)
    result = json.loads(out)
    assert result["served"] and result["bundle"]["path"] == str(archive), result
    # --arch alone picks the same archive out of build/bundle
    same = json.loads(run(["-m", "attnpack", "explain", "--shape", "2,8,8,1024,1024,64", "--dtype",
                           "bf16", "--causal", "--arch", "sm_90", "--json"], clean_env, tmp_path))
    assert (same["kernel"], same["bundle"]["path"]) == (result["kernel"], str(archive))
