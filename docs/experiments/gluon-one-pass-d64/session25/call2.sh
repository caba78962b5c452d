#!/bin/bash
# session 25, call 2: exp38c part 2 (SPT + descending order), then a fresh/again scorecard pair
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader > $OUT/logs/gpu.txt 2>&1
cat $OUT/logs/gpu.txt; nproc; date -u
timeout 220 python3 .whl/s24/exp38c/gpu2.py --out $OUT/logs/exp38c2.json 2>&1 | tee $OUT/logs/exp38c2.txt
date -u
if [ -z "$SKIP35" ]; then
  ROWS="grade again" timeout 340 bash benchmarks/grading_time.sh $OUT/gt 2>&1 | tee $OUT/logs/grading_time.txt
  cp $OUT/gt/*.txt $OUT/logs/ 2>/dev/null
fi
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
rm -rf $OUT/gt
