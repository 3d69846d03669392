#!/usr/bin/env bash
# Prepared in the fortieth session: the first call of the next session with a device, on either
# GPU (say which), items 19 and 17 in one call so that one machine start serves both:
# runFI.sh (the preprocess as a persistent grid of P programs, about 1-2 min, no build) into
# $OUT/share.txt, then runFG.sh (patch_ab of bwd_pre32.patch) with the call's time left. The
# second call, on the same GPU model, is runFH.sh (with PATCH set if $OUT/verdict.txt reads
# pre32).
#   usage (device, repo root): ATTNPACK_COMMIT=<sha> OUT=$OUT bash .carry/runFJ.sh > $OUT/run.log 2>&1
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} OUT
OUT=$OUT bash .carry/runFI.sh > "$OUT/share.txt" 2>&1
echo "runFI done at $SECONDS s"; cat "$OUT/share.txt"
BUDGET_S=$((585 - SECONDS)) bash .carry/runFG.sh
echo "runFG done at $SECONDS s"
