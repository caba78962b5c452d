#!/bin/bash
# session 26, call 1: where a scorecard's seconds go on this tree (HEAD): fresh and again with
# every judge's log kept ([timing] traces), CPU and GPU use sampled each second; then 13 full/quick
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L/keep_fresh $L/keep_again
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" >> $L/gpu.txt; date -u
(vmstat -n 1 > $L/vmstat.txt 2>&1 &)
(nvidia-smi dmon -s u -d 1 > $L/dmon.txt 2>&1 &)
GRADER_SETTINGS="{\"keep_logs\": \"$L/keep_fresh\"}" ROWS="grade" timeout 260 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $L/grading_time.txt
cp $OUT/gt/grade.txt $L/ 2>/dev/null
echo "=== again $(date -u)" >> $L/vmstat.txt
GRADER_SETTINGS="{\"keep_logs\": \"$L/keep_again\"}" ROWS="again" timeout 150 bash benchmarks/grading_time.sh $OUT/gt2 2>&1 | tee -a $L/grading_time.txt
cp $OUT/gt2/again.txt $L/ 2>/dev/null
echo "=== ex13 $(date -u)" >> $L/vmstat.txt
ROWS="ex13full ex13quick" timeout 100 bash benchmarks/grading_time.sh $OUT/gt3 2>&1 | tee -a $L/grading_time.txt
pkill vmstat; pkill -f "nvidia-smi dmon"
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
rm -rf $OUT/gt $OUT/gt2 $OUT/gt3 $L
