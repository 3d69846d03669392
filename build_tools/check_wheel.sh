#!/usr/bin/env bash
# CI: attnpack as a pip-installed PyTorch library. After build_tools/setup.sh:
#   1. builds the wheel with this checkout's venv (pip wheel --no-build-isolation: the PEP 517
#      backend, scikit-build-core, runs the top-level CMake project against the venv's torch and
#      triton; the archives come from the compile cache setup.sh warmed, nothing recompiles);
#   2. installs it into a fresh venv that has only the same torch (pip install torch==<version>)
#      and the wheel's own dependencies;
#   3. checks there, outside the checkout and with no ATTNPACK_* variable: the import, the
#      enable()/disable() round trip (on a machine without CUDA, enable() registers the overrides
#      and changes nothing else; docs/torch.md), `attnpack locate`, `inspect` and `verify` of the
#      packaged archives and `attnpack explain --arch sm_90` against the packaged sm_90 archive.
# Environment: PY (default .venv/bin/python), WORK (default build/wheel-check),
# ATTNPACK_TARGET_ARCHS (default: the README's three).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PY:-.venv/bin/python}
WORK=${WORK:-build/wheel-check}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
rm -rf "$WORK/dist" "$WORK/venv" "$WORK/run"

echo "== wheel"
start=$(date +%s)
if ! $PY -m pip wheel -v --no-build-isolation --no-deps -w "$WORK/dist" . > "$WORK/wheel.log" 2>&1; then
  tail -60 "$WORK/wheel.log"; echo "pip wheel failed (log: $WORK/wheel.log)"; exit 1
fi
WHEEL=$(ls "$WORK"/dist/attnpack-*.whl)
echo "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB) in $(( $(date +%s) - start )) s"
# the archives' line from the builder: "N compiled, M from cache" (a warm cache compiles nothing)
grep -E "compiled, [0-9]+ from cache" "$WORK/wheel.log" || echo "archives up to date (not rebuilt)"
$PY - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = sorted(n for n in names if n.startswith("attnpack/lib/") and not n.startswith("attnpack/lib/cmake"))
print("\n".join("  " + n for n in libs))
for needed in ("attnpack/lib/libattnpack.so", "attnpack/lib/libattnpack_torch.so",
               "attnpack/include/attnpack/torch.h", "attnpack/lib/cmake/attnpack_torch/attnpack_torchConfig.cmake",
               "attnpack/__main__.py", "attnpack/_locate.py"):
    assert needed in names, f"{needed} is not in the wheel"
assert not [n for n in names if "/csrc/" in n], "the extension's sources are in the wheel"
PY

echo "== a fresh venv with the same torch"
TORCH_VERSION=$($PY -c 'import torch; print(torch.__version__.split("+")[0])')
python3 -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
$VPY -m pip install -q --upgrade pip >/dev/null
$VPY -m pip install -q "torch==$TORCH_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
$VPY -m pip install -q "$WHEEL" 2>&1 | grep -v '^WARNING: Location' || true
$VPY -c 'import attnpack' || { echo "the wheel did not install"; exit 1; }

echo "== checks, outside the checkout, no ATTNPACK_* variable"
mkdir -p "$WORK/run"
cd "$WORK/run"
for var in $(env | grep -o '^ATTNPACK_[A-Z_]*' || true); do unset "$var"; done
unset PYTHONPATH
$VPY - "$REPO" <<'PY'
import sys
from pathlib import Path
import torch
import attnpack, attnpack.torch as T
package = Path(attnpack.__file__).resolve().parent
assert Path(sys.prefix).resolve() in package.parents, f"attnpack imported from outside the venv: {package}"
assert (Path(sys.argv[1]) / "python" / "attnpack") != package
print("attnpack", attnpack.__version__, "from", package, "with torch", torch.__version__)
ops = ["aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward",
       "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_efficient_attention_backward"]
has_cuda_kernel = lambda: [torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA") for op in ops]
before = (has_cuda_kernel(), list(torch._C._get_sdp_priority_order()))
q = torch.randn(1, 2, 8, 16)
cpu_answer = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
T.enable()
assert T.is_enabled() and all(has_cuda_kernel())
extension = T._extension.loaded()
assert extension.path.parent == package / "lib", extension.path
assert T.bundle_directory() == str(package / "lib" / "attnpack"), T.bundle_directory()
# F.sdpa on the CPU is untouched (on a machine without CUDA, that is every call)
assert torch.equal(torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True), cpu_answer)
assert T.stats()["calls"] == {} and T.stats()["fallbacks"] == {}
T.disable()
assert not T.is_enabled() and (has_cuda_kernel(), list(torch._C._get_sdp_priority_order())) == before
print("enable()/disable(): round trip ok;", "extension", extension.path.name, "built with torch",
      extension.built_with)
PY
ATTNPACK=$WORK/venv/bin/attnpack
$VPY -m attnpack locate
ARCHIVES=$($VPY -m attnpack locate --json | $VPY -c 'import json, sys; print(" ".join(json.load(sys.stdin)["archives"]))')
[ -n "$ARCHIVES" ] || { echo "no packaged archive"; exit 1; }
for apk in $ARCHIVES; do
  case "$apk" in "$WORK/venv/"*) ;; *) echo "archive $apk is not the installed one"; exit 1 ;; esac
  $ATTNPACK inspect "$apk" --json | $VPY -c 'import json, sys; d = json.load(sys.stdin); assert d["kernels"], d
print("inspect:", d["file"], d["arch"], d["kernels"] if isinstance(d["kernels"], int) else len(d["kernels"]), "kernels")'
done
$ATTNPACK verify $ARCHIVES | grep -v '^warn'
if echo "$ARCHIVES" | grep -q -- '-sm_90.apk'; then
  $ATTNPACK explain --shape 2,8,8,1024,1024,64 --dtype bf16 --causal --arch sm_90
  $ATTNPACK explain --shape 2,8,8,1024,1024,64 --dtype bf16 --causal --op bwd --arch sm_90 --json \
    | $VPY -c 'import json, sys; r = json.load(sys.stdin); assert r["served"], r; print("backward:", r["kernel"])'
fi
echo "wheel check ok"
