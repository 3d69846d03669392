#!/usr/bin/env bash
# Twenty-fifth session, after run111 kept the persistent dK/dV kernels (bwd_persistent.patch,
# now committed): `attnpack tune` of the 11 bf16 backward keys of keys_bwd_persistent.json (the
# bench rows where run111 had a persistent kernel within 1.5 % of the old best or ahead of it:
# the GQA-8 model rows, the S512 and S1024 rows), merged at 1 % (build_tools/tune_merge.sh),
# then this tree's bundle with the merged database and `attnpack bench` of both ops over both
# shape sets. The merged database comes back as $OUT/sm_90_merged.txt.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT PYTHONUNBUFFERED=1
bash build_tools/tune_merge.sh bwd_persistent .carry/keys_bwd_persistent.json 400 440
echo "tune and merge done at $SECONDS s"
. build_tools/bench_env.sh
timeout $((588 - SECONDS)) python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold \
  --no-dynamic --no-plots --out /tmp/bench > "$OUT/bench.txt" 2>&1
echo "bench rc $? at $SECONDS s"; grep -A 8 "^## Summary" /tmp/bench/report.md | head -12
cp /tmp/bench/results.json /tmp/bench/report.md "$OUT/" 2>/dev/null
