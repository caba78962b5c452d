#!/bin/bash
# session 25, call 5: the final tree (13's one-pass at D 64): a fresh and a repeated scorecard, then the attention benchmark
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $OUT/logs/gpu.txt
date -u
ROWS="grade again" timeout 330 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $OUT/logs/grading_time.txt
cp $OUT/gt/grade.txt $OUT/gt/again.txt $OUT/logs/ 2>/dev/null
date -u
OUT=$OUT/logs timeout 150 python3 benchmarks/flash_attention.py --final --base --before .whl/s24/fa_before.py --out $OUT/logs 2>&1 | tee $OUT/logs/bench.txt
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
rm -rf $OUT/gt
