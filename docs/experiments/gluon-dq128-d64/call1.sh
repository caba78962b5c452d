#!/usr/bin/env bash
# Session 22, call 1: QUICK against the full grade of 13, A/B on one machine, alternated:
# B = main b0c1f60 (answers.Drawing: the sets drawn in a thread while the submission makes its first
# calls), A = 64428d3's measure.py and answers.py (the drawing after them). First a cold full grade
# of 13 (a6481e5's Gluon producers' helper on a GPU for the first time).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; nproc; git log --oneline -1 2>/dev/null; } > $L/env.txt 2>&1
t0=$(date +%s); mark() { echo "$1 done $(( $(date +%s) - t0 )) s" >> $L/env.txt; }
mkdir -p /tmp/B /tmp/A; cp grader/judge/measure.py grader/judge/answers.py /tmp/B/
cp .whl/s22/measure-A.py /tmp/A/measure.py; cp .whl/s22/answers-A.py /tmp/A/answers.py
WARM=900 ROWS="ex13full" GRADER_SETTINGS="{\"keep_logs\": \"$L/kcold\"}" timeout 170 bash benchmarks/grading_time.sh $L/gt-cold > $L/cold.md 2>&1; mark cold
grep -h "warmed up" $L/kcold/13_flash_attention-triton-bench.log > $L/cold-warm.txt 2>/dev/null
for r in 1 2 3; do
  for v in A B; do
    cp /tmp/$v/measure.py /tmp/$v/answers.py grader/judge/
    WARM=900 ROWS="ex13full ex13quick" GRADER_SETTINGS="{\"keep_logs\": \"$L/k$v$r\"}" timeout 80 bash benchmarks/grading_time.sh $L/gt-$v$r > $L/$v$r.md 2>&1; mark $v$r
    head -12 $L/k$v$r/13_flash_attention-triton-bench.log > $L/$v$r-warm.txt 2>/dev/null
    rm -rf $L/k$v$r/*share*
  done
done
cp /tmp/B/measure.py /tmp/B/answers.py grader/judge/
python3 -m grader.run.keeper --stop > /dev/null 2>&1
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; cat $L/cold.md; cat $L/cold-warm.txt; for f in $L/A?.md $L/B?.md; do echo "$f"; grep -h "^| [eQ]" $f; cat ${f%.md}-warm.txt; done
