#!/usr/bin/env bash
# Session 20, call 2: main + measure.Drawn (uncommitted working tree) on a fresh H200 machine:
# 13 full and QUICK three times (kept processes), 13's benchmark with its peers, then GPU tests.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; nproc; git log --oneline -1 2>/dev/null; } > $L/env.txt 2>&1
t0=$(date +%s); mark() { echo "$1 done $(( $(date +%s) - t0 )) s" >> $L/env.txt; }
for r in 1 2 3; do
  WARM=900 ROWS="ex13full ex13quick" GRADER_SETTINGS="{\"keep_logs\": \"$L/k$r\"}" timeout 150 bash benchmarks/grading_time.sh $L/gt-q$r > $L/q$r.md 2>&1; mark q$r
done
python3 -m grader.run.keeper --stop > /dev/null 2>&1
tar czf $OUT/logs.tgz -C $OUT logs
timeout 150 python3 benchmarks/flash_attention.py --final --base > $L/bench.txt 2>&1; mark bench
tar czf $OUT/logs.tgz -C $OUT logs
rem=$(( 570 - ($(date +%s) - t0) ))
timeout $rem python3 -m pytest -m gpu -q -p no:cacheprovider -n 3 -rA tests/test_alone.py tests/test_ex13_flash_attention.py tests/test_benchmark.py "tests/test_wrong.py" -k "not test_wrong or 01_vector_add or 13_flash" > $L/gpu.txt 2>&1; echo "gpu tests rc=$? (limit $rem s)" >> $L/env.txt; mark gpu
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; grep -h "^| [eQ]" $L/q*.md; grep -rh "warmed up" $L/k*/ 2>/dev/null | head -12
grep "^|" $L/bench.txt; grep -c PASSED $L/gpu.txt; grep -E "FAILED|ERROR|passed|failed" $L/gpu.txt | tail -8
