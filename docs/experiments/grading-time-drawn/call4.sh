#!/usr/bin/env bash
# Session 20, call 4: QUICK against the full grade of 13, A/B on one machine, alternated:
# B = the working tree (measure.Drawn: the timing's sets and answers drawn while warming up),
# A = the same with the drawing off (warm_up's `if not hasattr(ref, "matching"):` -> `if False:`,
# the behaviour before). Each variant has its own kept processes (the keeper's name hashes the grader).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; nproc; } > $L/env.txt 2>&1
t0=$(date +%s); mark() { echo "$1 done $(( $(date +%s) - t0 )) s" >> $L/env.txt; }
cp grader/judge/measure.py /tmp/measure-B.py
sed 's/        if not hasattr(ref, "matching"):/        if False:/' /tmp/measure-B.py > /tmp/measure-A.py
cmp -s /tmp/measure-A.py /tmp/measure-B.py && { echo "A == B" >> $L/env.txt; exit 1; }
WARM=900 ROWS="ex13full" timeout 150 bash benchmarks/grading_time.sh $L/gt-cold > $L/cold.md 2>&1; mark cold
for r in 1 2 3; do
  for v in A B; do
    cp /tmp/measure-$v.py grader/judge/measure.py
    WARM=900 ROWS="ex13full ex13quick" GRADER_SETTINGS="{\"keep_logs\": \"$L/k$v$r\"}" timeout 80 bash benchmarks/grading_time.sh $L/gt-$v$r > $L/$v$r.md 2>&1; mark $v$r
    grep -h "warmed up" $L/k$v$r/13_flash_attention-triton-bench.log > $L/$v$r-warm.txt 2>/dev/null
    rm -rf $L/k$v$r/*share*
  done
done
cp /tmp/measure-B.py grader/judge/measure.py
python3 -m grader.run.keeper --stop > /dev/null 2>&1
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; for f in $L/A?.md $L/B?.md; do echo "$f"; grep -h "^| [eQ]" $f; cat ${f%.md}-warm.txt; done
