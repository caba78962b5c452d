#!/usr/bin/env bash
# Session 22, call 2: the whole scorecard fresh, then again (main 10f9b7d = 64428d3's tree), then
# Nsight Compute's reading of 13's kernels (Gluon's included) at both cases and of SDPA cuDNN's
# forward+backward at the leaderboard case.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; nproc; } > $L/env.txt 2>&1
t0=$(date +%s); mark() { echo "$1 done $(( $(date +%s) - t0 )) s" >> $L/env.txt; }
ROWS="grade" GRADER_SETTINGS="{\"keep_logs\": \"$L/kfresh\"}" timeout 270 bash benchmarks/grading_time.sh $L/gt-fresh > $L/fresh.md 2>&1; mark fresh
grep -rh "warmed up\|timing again" $L/kfresh > $L/fresh-warm.txt 2>/dev/null; rm -rf $L/kfresh
ROWS="again" timeout 140 bash benchmarks/grading_time.sh $L/gt-again > $L/again.md 2>&1; mark again
python3 -m grader.run.keeper --stop > /dev/null 2>&1
mkdir -p $L/ncu
timeout 200 python3 benchmarks/flash_attention_sweep.py --ncu "" --out $L/ncu --budget 180 > $L/ncu.txt 2>&1; mark ncu
timeout 120 python3 .whl/s22/cudnn_ncu.py $L/ncu > $L/cudnn_ncu.txt 2>&1; mark cudnn
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; cat $L/fresh.md | head -40; cat $L/fresh-warm.txt | head; cat $L/again.md | head -8; grep -v "^ncu: " $L/ncu.txt | tail -14; cat $L/cudnn_ncu.txt | tail -20
