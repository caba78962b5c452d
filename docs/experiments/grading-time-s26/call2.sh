#!/bin/bash
# session 26, call 2: CUDA contexts made at once; 13's QUICK against its full grade, QUICK with 8/4/2/1 judges
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv,noheader | tee $L/gpu.txt; date -u
python3 .whl/s26/ctx.py 2>&1 | tee $L/ctx.txt
G="python3 -m grader grade --impl solutions --keep 900 --exercise 13"
t() { local s=$(date +%s%N); "$@" > $L/last.txt 2>&1; echo "$(( ($(date +%s%N) - s) / 1000000 )) ms: $*" | tee -a $L/runs.txt; }
t $G --no-bench   # fresh: compiles
t $G
cp $L/last.txt $L/full1.txt
t $G --time-report; cp $L/last.txt $L/full2.txt
for n in 8 4 2 1 8 4 2 1; do
  sed -i "s/^shards = [0-9]*/shards = $n/" exercises/13_flash_attention/exercise.toml
  echo "shards $n" >> $L/runs.txt
  t $G --quick --time-report; cp $L/last.txt $L/quick$n.txt
done
sed -i "s/^shards = [0-9]*/shards = 8/" exercises/13_flash_attention/exercise.toml
date -u
tar -C $OUT -czf $OUT/logs.tgz logs; rm -rf $L
