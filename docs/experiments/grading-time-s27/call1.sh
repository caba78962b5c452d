#!/bin/bash
# session 27, call 1: 03 with a light kernels file: the old 03 (HEAD's) and the new graded
# alternately (their timing side by side), then 03's tests on the GPU (solution, starter, the five
# known-bads, NaN in each output), then the new one under compute-sanitizer memcheck
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt
lscpu | grep "Model name" >> $L/gpu.txt; date -u | tee -a $L/gpu.txt
for i in 1 2; do
  s=$(date +%s); timeout 150 python3 -m grader grade --submission .whl/old03 --exercise 03 --time-report --json $L/old_$i.json > $L/old_$i.txt 2>&1; echo "old $i: $(( $(date +%s) - s )) s"
  s=$(date +%s); timeout 150 python3 -m grader grade --impl solutions --exercise 03 --time-report --json $L/new_$i.json > $L/new_$i.txt 2>&1; echo "new $i: $(( $(date +%s) - s )) s"
done
s=$(date +%s); timeout 200 python3 -m pytest -q -n 6 tests/test_exercises.py tests/test_wrong.py -k 03_bias_relu > $L/pytest03.txt 2>&1; echo "pytest 03: $(( $(date +%s) - s )) s"; tail -3 $L/pytest03.txt
s=$(date +%s); timeout 150 python3 -m pytest -q tests/test_nan.py -k "cpu" > $L/nan.txt 2>&1; echo "nan: $(( $(date +%s) - s )) s"; tail -3 $L/nan.txt
s=$(date +%s); timeout 120 python3 -m grader grade --impl solutions --exercise 03 --sanitize memcheck > $L/memcheck.txt 2>&1; echo "memcheck: $(( $(date +%s) - s )) s"; tail -12 $L/memcheck.txt
grep -h -A12 "^ #" $L/old_1.txt $L/new_1.txt | head -30
date -u
tar -C $OUT -czf $OUT/logs.tgz logs; rm -rf $L
