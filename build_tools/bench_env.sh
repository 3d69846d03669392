# Sourced by build_tools/bench_tree.sh and device-run scripts (docs/device-runs/*/scripts/): on a
# GPU machine, build this tree's runtime, PyTorch extension and default bundle for the local GPU
# (build_tools/run_gpu_tests.sh with no test file, its logs in LOG_DIR, default
# /tmp/bench-tree-logs), print the build's status, and export what `attnpack bench` and the
# bench/ scripts need: PYTHONPATH, ATTNPACK_BUNDLE_DIR, ATTNPACK_TORCH_LIB, ATTNPACK_RUNTIME_LIB.
#   . build_tools/bench_env.sh [LOG_DIR]      from the repository root
_log=${1:-/tmp/bench-tree-logs}
mkdir -p "$_log"
export PYTHONUNBUFFERED=1
FILES=" " OUT=$_log timeout 150 bash build_tools/run_gpu_tests.sh > "$_log/summary.txt" 2>&1
echo "build rc $? at $SECONDS s"; tail -n 2 "$_log/summary.txt"
export PYTHONPATH=/tmp/attnpack-site:$PWD/python ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle \
  ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so \
  ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
unset _log
