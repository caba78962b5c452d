#!/bin/bash
# exp38 on the GPU machine, from the repository root with $OUT set:  bash benchmarks/attention_fa4/run.sh
# (FlashAttention-4's polynomial exp2 and lazy rescaling as variants of exercise 13's forward;
# ~2-3 minutes: parallel compiles, checks against the solution, interleaved timing)
set -u
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; } 2>&1
python3 benchmarks/attention_fa4/bench.py --out "$OUT/exp38.json" 2>&1 | tee "$OUT/exp38.log"
