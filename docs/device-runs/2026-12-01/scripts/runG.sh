#!/usr/bin/env bash
# Device call G (third session): (1) the fp16 backward keys re-tuned with the Gluon candidates
# (an --all fp16 archive, forwards included: the tuner runs a forward for each backward);
# (2) the A/B of the Gluon forward's softmax (row max subtracted before scaling, now, against
# the fused scaled form of before issue 18), tuned now / fused / now again on the same keys.
cd "$(dirname "$0")/.."
export ATTNPACK_COMMIT=${ATTNPACK_COMMIT:-unknown} PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/attnpack-site .whl/*.whl
export PYTHONPATH=/tmp/attnpack-site:$PWD/python
MSG=$(python3 -c "import importlib.util as u, pathlib; print(pathlib.Path(u.find_spec('msgpack_cxx').origin).parent / 'include')")
{ cmake -S . -B build-tune -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNPACK_TARGET_ARCHS=sm_90 \
    -DATTNPACK_MSGPACK_INCLUDE_DIR=$MSG -DATTNPACK_BUILD_BUNDLE=OFF && cmake --build build-tune --target attnpack; } > $L/cmake.log 2>&1
export ATTNPACK_RUNTIME_LIB=$PWD/build-tune/runtime/libattnpack.so
rm -rf /tmp/ab && mkdir /tmp/ab && cp -r aot python /tmp/ab/ && rm /tmp/ab/aot/tuning_db/*.jsonl && python3 .carry/ab_patch.py /tmp/ab > $L/ab_patch.log 2>&1
( cd /tmp/ab && PYTHONPATH=/tmp/attnpack-site:/tmp/ab/python python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 --head-dim 128 -o /tmp/t_ab -j 5 ) > $L/build_ab.log 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --op fwd --dtype bf16 --head-dim 128 -o /tmp/t_now -j 5 > $L/build_now.log 2>&1 &
python3 -m attnpack.cli build --arch sm_90 --all --family gluon --family triton --dtype fp16 --head-dim 64 --head-dim 128 -o /tmp/t_bwd -j 8 > $L/build_bwd.log 2>&1
wait
tail -n1 $L/build_*.log
T="python3 -m attnpack.cli tune --arch sm_90"
$T --archive /tmp/t_now/attnpack-*-sm_90.apk -o $OUT/ab_now.jsonl --keys .carry/keys_ab.json --minutes 1 > $L/tune_ab_now.log 2>&1
(cd /tmp/ab && PYTHONPATH=/tmp/attnpack-site:/tmp/ab/python $T --archive /tmp/t_ab/attnpack-*-sm_90.apk -o $OUT/ab_fma.jsonl --keys $OLDPWD/.carry/keys_ab.json --minutes 1) > $L/tune_ab_fma.log 2>&1
$T --archive /tmp/t_now/attnpack-*-sm_90.apk -o $OUT/ab_now2.jsonl --keys .carry/keys_ab.json --minutes 1 > $L/tune_ab_now2.log 2>&1
grep -h "^fwd" $L/tune_ab_*.log | cut -c1-160
tar czf $OUT/logsG.tgz -C /tmp logs
$T --archive /tmp/t_bwd/attnpack-*-sm_90.apk -o $OUT/bwd_fp16.jsonl --keys .carry/keys_bwd_fp16.json --minutes $(python3 -c "print(max(0.5, (540 - $SECONDS) / 60))") > $L/tune_bwd_fp16.log 2>&1
grep -c "^bwd" $L/tune_bwd_fp16.log; grep "^bwd" $L/tune_bwd_fp16.log | tail -3 | cut -c1-200
tar czf $OUT/logsG.tgz -C /tmp logs
