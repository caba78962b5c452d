#!/bin/bash
# session 26, call 3: the tree with QUICK in 2 judges, the host time's sleep sized to its calls,
# 06 [triton] and 11 in 2 judges, 10 in 3: a fresh and a repeated scorecard (every judge's log
# kept), then 13's full grade and QUICK, twice each
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L/keep_fresh $L/keep_again
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" >> $L/gpu.txt; git log --oneline -1 >> $L/gpu.txt; date -u
(vmstat -n 1 > $L/vmstat.txt 2>&1 &)
GRADER_SETTINGS="{\"keep_logs\": \"$L/keep_fresh\"}" ROWS="grade" timeout 260 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $L/grading_time.txt
cp $OUT/gt/grade.txt $L/ 2>/dev/null
GRADER_SETTINGS="{\"keep_logs\": \"$L/keep_again\"}" ROWS="again" timeout 150 bash benchmarks/grading_time.sh $OUT/gt2 2>&1 | tee -a $L/grading_time.txt
cp $OUT/gt2/again.txt $L/ 2>/dev/null
for i in 1 2; do
  ROWS="ex13full ex13quick" timeout 100 bash benchmarks/grading_time.sh $OUT/gt3 2>&1 | tee -a $L/grading_time.txt
  cp $OUT/gt3/ex13quick.txt $L/ex13quick$i.txt; cp $OUT/gt3/ex13full.txt $L/ex13full$i.txt
done
pkill vmstat
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
rm -rf $OUT/gt $OUT/gt2 $OUT/gt3 $L
