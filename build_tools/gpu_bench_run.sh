#!/usr/bin/env bash
# After build_tools/run_gpu_tests.sh has built build-gpu/ on this GPU machine: the runtime and
# F.sdpa overhead benchmarks and `attnpack bench`, with the environment run_gpu_tests.sh sets.
#   usage: build_tools/gpu_bench_run.sh LOGDIR [attnpack bench options...]
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS=$1; shift
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:/tmp/attnpack-site${PYTHONPATH:+:$PYTHONPATH}
export ATTNPACK_TORCH_LIB=$PWD/build-gpu/torch/libattnpack_torch.so
export ATTNPACK_BUNDLE_DIR=$PWD/build-gpu/bundle
export ATTNPACK_RUNTIME_LIB=$PWD/build-gpu/runtime/libattnpack.so
mkdir -p "$LOGS"
PY=$PY build_tools/runtime_overhead_runs.sh "$LOGS" > /dev/null || echo "runtime_overhead: a run failed ($LOGS/runtime_overhead.json)"
$PY bench/torch_overhead.py > "$LOGS/torch_overhead.txt" 2>&1
$PY -m attnpack.cli bench --out "$LOGS/bench" "$@" > "$LOGS/bench.txt" 2> "$LOGS/bench.err"
echo "attnpack bench exit $?"
tail -n 30 "$LOGS/bench.txt"
