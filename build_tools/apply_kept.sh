#!/usr/bin/env bash
# On a GPU machine, after build_tools/patch_ab.sh weighed patches there: apply to this tree each
# patch whose A/B kept it (/tmp/ab_state_NAME reads NAME), so a later call on the same machine
# tunes or benches the kept kernels; say what was applied.
#   usage: build_tools/apply_kept.sh NAME=PATCH [NAME=PATCH ...]     (from any folder)
cd "$(dirname "$0")/.."
for pair in "$@"; do
  name=${pair%%=*} file=${pair#*=}
  state=$(cat "/tmp/ab_state_$name" 2>/dev/null || echo "not weighed here")
  if [ "$state" != "$name" ]; then
    echo "$name: $state, not applied"
  elif patch -p1 -R -f -s --dry-run < "$file" >/dev/null 2>&1; then
    echo "$name: kept, already applied"
  else
    patch -p1 -s < "$file" && echo "$name: kept, applied" || echo "$name: kept, $file does not apply"
  fi
done
