#!/bin/bash
# session 25, call 1: issue 38's exp38c (one-pass five-matmul backward) on the GPU
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/logs/gpu.txt 2>&1
cat $OUT/logs/gpu.txt
date -u
timeout 540 python3 .whl/s24/exp38c/gpu.py --out $OUT/logs/exp38c.json 2>&1 | tee $OUT/logs/exp38c.txt
date -u
tar -C $OUT -czf $OUT/logs.tgz logs
