#!/bin/bash
# session 25, call 4: the solution with the one-pass D 64 backward: checks, the grade of 13, the benchmark
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $OUT/logs/gpu.txt
date -u
timeout 100 python3 .whl/s24/solcheck.py 2>&1 | tee $OUT/logs/solcheck.txt
date -u
timeout 150 python3 -m grader grade --impl solutions --exercise 13 --time-report --json $OUT/logs/grade13.json 2>&1 | tee $OUT/logs/grade13.txt
date -u
OUT=$OUT/logs timeout 300 python3 benchmarks/flash_attention.py --final --base --before .whl/s24/fa_before.py --out $OUT/logs 2>&1 | tee $OUT/logs/bench.txt
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
