#!/usr/bin/env bash
# Device call W (sixth session): A/B of the persistent Gluon forward's tile order (head-major ->
# longest-first in L2-sized head groups) and of the backward's qdo_free on named barriers
# (.carry/ab/bwd_qdo_free_nb.patch), kernel level; then tests/gpu/test_gluon_attn.py on the tree.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown}
L=/tmp/logs
. build_tools/runtime_env.sh $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/gpu.txt
rm -rf /tmp/ab_old /tmp/ab_qdo && mkdir /tmp/ab_old /tmp/ab_qdo
cp -r aot python /tmp/ab_old/ && cp .carry/ab/fwd_head.py /tmp/ab_old/aot/kernels/gluon_attn/fwd.py
cp -r aot python /tmp/ab_qdo/ && (cd /tmp/ab_qdo && patch -p1 < "$OLDPWD/.carry/ab/bwd_qdo_free_nb.patch") > $L/patch.log 2>&1
F="build --arch sm_90 --all --family gluon --op fwd --dtype bf16 -j 4"
W="build --arch sm_90 --all --family gluon --op bwd --dtype bf16 --head-dim 64 --head-dim 128 -j 4"
( cd /tmp/ab_old && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_old/python python3 -m attnpack.cli $F -o /tmp/f_old ) > $L/build_f_old.log 2>&1 &
( cd /tmp/ab_qdo && PYTHONPATH=/tmp/attnpack-site:/tmp/ab_qdo/python python3 -m attnpack.cli $W -o /tmp/b_qdo ) > $L/build_b_qdo.log 2>&1 &
python3 -m attnpack.cli $W -o /tmp/b_base > $L/build_b_base.log 2>&1 &
python3 -m attnpack.cli $F -o /tmp/f_new > $L/build_f_new.log 2>&1
wait; tail -n1 $L/build_*.log; echo "builds done at $SECONDS s"
A=attnpack-0.1.0-sm_90.apk
timeout 150 python3 bench/kernel_ab.py --archive old=/tmp/f_old/$A --archive new=/tmp/f_new/$A \
  --kernel-filter persistent1 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $L/ab_fwd.json > $L/ab_fwd.txt 2>&1
echo "ab fwd rc $? at $SECONDS s"; cut -c1-150 $L/ab_fwd.txt
timeout 170 python3 bench/kernel_ab.py --op bwd --archive base=/tmp/b_base/$A --archive qdo=/tmp/b_qdo/$A \
  --kernel-filter det0 --shapes bench/shapes.json --shapes bench/model_shapes.json \
  --json $L/ab_bwd.json > $L/ab_bwd.txt 2>&1
echo "ab bwd rc $? at $SECONDS s"; cut -c1-150 $L/ab_bwd.txt
tar czf $OUT/logsW.tgz -C /tmp logs
timeout $((560 - SECONDS)) python3 -m pytest tests/gpu/test_gluon_attn.py -q -x -p no:cacheprovider > $L/test_gluon_attn.log 2>&1
echo "test rc $? at $SECONDS s"; tail -n 3 $L/test_gluon_attn.log
tar czf $OUT/logsW.tgz -C /tmp logs
