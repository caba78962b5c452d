#!/usr/bin/env bash
# Session 22, call 5: clocks and power under sustained forward+backward at both cases.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv; } 2>&1
timeout -k 5 100 python3 .whl/s22/power.py 4 32 4096 128 0 2>&1
timeout -k 5 100 python3 .whl/s22/power.py 1 16 16384 64 1 2>&1
