#!/usr/bin/env bash
# The variant sweeps of one GPU round in one go, from the repository root of a GPU machine:
# the CUTLASS variants of 12 build in the background (CPU only) while the other sweeps time
# their kernels; then the CUTLASS variants are timed from those builds. Each sweep's log and
# table: $LOGS/<sweep>.txt and $LOGS/<sweep>/ (see gpu_round.sh); $LOGS/ALLDONE at the end.
#
#   bash results/experiments/sweeps.sh LOGS
set -u
LOGS=$1
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
if [ -d .whl ] && ! python3 -c "import landlock, liger_kernel, cutlass_library" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
TREES=.cache/ex12-trees
python3 results/experiments/12_cutlass_variants.py --build-only --trees $TREES --keep \
  --out "$LOGS/cutlass-build" > "$LOGS/cutlass-build.txt" 2>&1 &
builds=$!
bash results/experiments/gpu_round.sh "$LOGS" env py:10_variants.py py:04_variants.py \
  py:12_triton_variants.py
wait $builds
echo "== cutlass builds: rc=$? (see cutlass-build.txt)" >> "$LOGS/summary.txt"
bash results/experiments/gpu_round.sh "$LOGS" "py:12_cutlass_variants.py:--trees $TREES --keep"
touch "$LOGS/ALLDONE"
