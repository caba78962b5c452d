#!/usr/bin/env bash
# Next session, first call (prepared 2026-11-30): wip-38-d64's Gluon backward (D 64 and 128)
# checked and timed, the grade of 13 on its tree, and 13's benchmark. From /work/main, carry
# [".whl"]; refresh first: git -C /work/wt64 archive wip-38-d64 -o /work/main/.whl/wt64.tar
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
L=$OUT/logs; mkdir -p $L; T0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - T0) )); }
rm -rf /tmp/wt64 && mkdir -p /tmp/wt64 && tar -xf .whl/wt64.tar -C /tmp/wt64
export PYTHONPATH=/tmp/site:/tmp/wt64 PYTHONUNBUFFERED=1
WT=/tmp/wt64 timeout -k 10 240 python3 .whl/s19/bwd_check.py > $L/bwd_check.txt 2>&1
echo "bwd_check rc=$? at $(( $(date +%s) - T0 )) s" >> $L/stages.txt; tar -C $OUT -czf $OUT/logs.tgz logs
# the D 64 Gluon forward experiment (never run; its own watchdog at 235 s)
(PYTHONPATH=/tmp/site:$PWD timeout -k 10 $(( $(left) - 200 )) python3 .whl/g38d/gpu.py) > $L/g38d.txt 2>&1
echo "g38d rc=$? at $(( $(date +%s) - T0 )) s" >> $L/stages.txt; tar -C $OUT -czf $OUT/logs.tgz logs
(cd /tmp/wt64 && timeout -k 10 $(( $(left) - 90 )) python3 -m grader grade --exercise 13 --impl solutions) > $L/grade13.txt 2>&1
echo "grade13 rc=$? at $(( $(date +%s) - T0 )) s" >> $L/stages.txt; tar -C $OUT -czf $OUT/logs.tgz logs
(cd /tmp/wt64 && timeout -k 10 $(left) python3 benchmarks/flash_attention.py --final) > $L/bench.txt 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s" >> $L/stages.txt; tar -C $OUT -czf $OUT/logs.tgz logs
cat $L/stages.txt; grep -E "FAIL|ms  |ALL PASS|NOT ALL" $L/bwd_check.txt | tail -40; tail -25 $L/g38d.txt; grep -E "total:|13 +flash" $L/grade13.txt; grep "^|" $L/bench.txt
