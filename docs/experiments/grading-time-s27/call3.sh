#!/bin/bash
# session 27, call 3 (the final tree, cdca64c): the whole scorecard fresh and run again, every
# judge's log kept (a second look at a report that lacked kernels shows there)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" >> $L/gpu.txt; date -u | tee -a $L/gpu.txt
mkdir -p $L/k1 $L/k2
GRADER_SETTINGS="{\"keep_logs\": \"$L/k1\"}" ROWS="grade" timeout 230 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $L/grading_time.txt
cp $OUT/gt/grade.txt $L/ 2>/dev/null
GRADER_SETTINGS="{\"keep_logs\": \"$L/k2\"}" ROWS="again" timeout 130 bash benchmarks/grading_time.sh $OUT/gt2 2>&1 | tee -a $L/grading_time.txt
cp $OUT/gt2/again.txt $L/ 2>/dev/null
grep -E "^ [0-9]+ |^total" $L/again.txt
echo "second looks:"; grep -rl "observed again\|TAMPERING" $L/k1 $L/k2 | head; grep -rh "observed again" $L/k1 $L/k2 | head -5
date -u
tar -C $OUT -czf $OUT/logs.tgz logs; rm -rf $L $OUT/gt $OUT/gt2
