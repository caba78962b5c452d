#!/usr/bin/env bash
# Session 23, call 1: determinism of each backward (issue 38), then the shards A/B (issue 35).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
( time timeout 120 python3 docs/experiments/backward-determinism/determinism.py ) > $L/determinism.txt 2>&1
cat $L/determinism.txt
ORDER=${ORDER:-A B} bash docs/experiments/shards-ab/call_shards.sh
