#!/usr/bin/env bash
# Prepared in the forty-fourth session, for an H200: the committed tree's bench and the same tree
# with the arch-wide entries named in $PICKS switched to another of their timed candidates
# (default picks_s2048.json: the bf16 head-dim-128 backward key without a mask at S2048 class 128
# to `det0_tma1_dqq1_early1`), each benched twice in one call, in the
# order committed, picks, picks, committed, so that a drift of the machine falls on both sides.
# Why that key: its tuner timed it at B12 x 8 KV heads (96 pairs) and put the early kernel 3.7 %
# behind, while at the public row's own 128 pairs run176 (H200, cycles) put it 1.8 % ahead and the
# H100 moved that row 0.988x -> 1.015x with it (runs 182-184). Each bench is issue 15's reading:
# `attnpack bench` bf16 forward and forward + backward over both shape sets.
# PICKS=.carry/picks_h200.json adds the two causal class-64 keys of B4 H16 S4096 and B2 H16 S8192
# switched to `det0_tma1_early1`, 4.5 % and 4.2 % ahead of the served kernel there by cycles on an
# H200 (run176) while the tuner's milliseconds read a tie at S4096 and 0.7 % behind at S8192.
#   usage (device, repo root): [PICKS=.carry/picks_h200.json] ATTNPACK_COMMIT=<sha> OUT=$OUT \
#          bash .carry/runFP.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
sha=${ATTNPACK_COMMIT:-unknown}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$gpu"
[[ "$gpu" == *H200* ]] || { echo "not an H200: nothing done"; exit 0; }
. build_tools/bench_env.sh "$OUT/logs"
mkdir -p /tmp/bundle-committed /tmp/bundle-picks
cp build-gpu/bundle/*.apk /tmp/bundle-committed/
python3 .carry/apply_picks.py "${PICKS:-.carry/picks_s2048.json}" aot/tuning_db/sm_90.jsonl || exit 1
python3 -m attnpack.cli build --arch sm_90 -j "$(nproc)" -o /tmp/bundle-picks > "$OUT/logs/picks_build.log" 2>&1 \
  && python3 -m attnpack.cli verify /tmp/bundle-picks/*.apk >> "$OUT/logs/picks_build.log" 2>&1 \
  || { echo "picks bundle failed"; tail -n 5 "$OUT/logs/picks_build.log"; exit 1; }
git checkout -q aot/tuning_db/sm_90.jsonl
echo "bundles at $SECONDS s"
for side in committed picks picks committed; do
  # results.json names the tree: <sha> for the committed side, <sha>picks for the other
  n=1; [ -d "$OUT/$side-1" ] && n=2
  ATTNPACK_BUNDLE_DIR=/tmp/bundle-$side ATTNPACK_COMMIT=$sha${side#committed} \
    timeout 120 python3 -m attnpack.cli bench --ops fwd,fwdbwd --dtype bf16 --no-cold --no-dynamic \
    --no-plots --out "/tmp/bench-$side-$n" > "$OUT/bench-$side-$n.txt" 2>&1
  echo "$side-$n rc $? at $SECONDS s"; mkdir -p "$OUT/$side-$n"
  cp /tmp/bench-$side-$n/results.json "$OUT/$side-$n/" 2>/dev/null
  grep -A 7 "^## Summary" "/tmp/bench-$side-$n/report.md" | grep fwdbwd
done
for n in 1 2; do
  python3 -m attnpack.cli bench --compare "$OUT/committed-$n/results.json" "$OUT/picks-$n/results.json" \
    >> "$OUT/compare.txt" 2>&1; grep "^| shapes" "$OUT/compare.txt" | tail -n 3
done
# The device tool returns 8 files: the four results.json and the build logs go in one archive.
tar -C "$OUT" -czf "$OUT/results.tgz" committed-1 committed-2 picks-1 picks-2 logs \
  && rm -rf "$OUT"/committed-? "$OUT"/picks-? "$OUT/logs"
timeout $((585 - SECONDS)) python3 -m pytest -q -p no:cacheprovider tests/gpu/test_torch_sdpa.py \
  > "$OUT/test_torch_sdpa.txt" 2>&1
echo "test_torch_sdpa rc $? at $SECONDS s"; tail -n 1 "$OUT/test_torch_sdpa.txt"
