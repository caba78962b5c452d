#!/usr/bin/env bash
# Session 22, call 3: the 128-key dQ experiment (.whl/s22/dq128/gpu.py), then clocks and power
# under sustained forward+backward, the solution against cuDNN (.whl/s22/power.py).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version,power.limit --format=csv; } > $L/env.txt 2>&1
timeout -k 5 120 python3 .whl/s22/power.py > $L/power.txt 2>&1; echo "power rc $?" >> $L/env.txt
OUT=$L timeout -k 5 300 python3 .whl/s22/dq128/gpu.py > $L/dq128.txt 2>&1; echo "dq128 rc $?" >> $L/env.txt
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt $L/power.txt; tail -60 $L/dq128.txt
