#!/bin/bash
# session 26, call 4: the final tree: a fresh and a repeated scorecard, the run again with all 16
# tracks' checks at once (--jobs 16) between two of the default (8 at once), then 13's full grade and QUICK
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" >> $L/gpu.txt; date -u
ROWS="grade" timeout 250 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $L/grading_time.txt
cp $OUT/gt/grade.txt $L/ 2>/dev/null
ROWS="again" timeout 130 bash benchmarks/grading_time.sh $OUT/gt2 2>&1 | tee -a $L/grading_time.txt
cp $OUT/gt2/again.txt $L/again1.txt
s=$(date +%s%N); timeout 130 python3 -m grader grade --impl solutions --keep 900 --time-report --jobs 16 > $L/again_jobs16.txt 2>&1
echo "| the same, run again, --jobs 16 | $(( ($(date +%s%N) - s) / 1000000 )) ms | | $(grep -E '^total:' $L/again_jobs16.txt) |" | tee -a $L/grading_time.txt
ROWS="again" timeout 130 bash benchmarks/grading_time.sh $OUT/gt2 2>&1 | tee -a $L/grading_time.txt
cp $OUT/gt2/again.txt $L/again2.txt
ROWS="ex13full ex13quick" timeout 60 bash benchmarks/grading_time.sh $OUT/gt3 2>&1 | tee -a $L/grading_time.txt
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
rm -rf $OUT/gt $OUT/gt2 $OUT/gt3 $L
