#!/usr/bin/env bash
# Grading time: wall seconds of `make grade IMPL=solutions` (every exercise), cold (build and compile caches removed) then warm. On a GPU machine, from the repository root: `bash benchmarks/grading_time.sh [OUT_DIR]`.
#
# Prints a markdown table (benchmarks/run.sh puts it into docs/performance.md); each run's
# scorecard and results.json are kept in OUT_DIR (default: a temporary folder, removed).
# DRY_RUN=1 prints the commands instead.
set -u
OUT=${1:-}
[ -d exercises ] || { echo "grading_time.sh: run it from the repository root" >&2; exit 2; }
if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/grading-time-XXXXXX"); trap 'rm -rf "$OUT"' EXIT; fi
mkdir -p "$OUT"
echo "| make grade IMPL=solutions | wall s | total |"
echo "|---|---|---|"
for run in cold warm; do
  cmd=(make grade IMPL=solutions RESULTS="$OUT/$run.json")
  if [ -n "${DRY_RUN:-}" ]; then
    [ $run = cold ] && echo "| (cold first: rm -rf .cache) | | |"
    echo "| $run | + ${cmd[*]} | |"
    continue
  fi
  [ $run = cold ] && rm -rf .cache  # the builds, the compiled baselines, Inductor's cache
  t0=$(date +%s)
  "${cmd[@]}" > "$OUT/$run.txt" 2>&1
  rc=$?
  total=$(grep -E "^total:" "$OUT/$run.txt" | head -1 | sed 's/^total: *//')
  echo "| $run | $(( $(date +%s) - t0 )) | ${total:-?}$([ $rc = 0 ] || echo " (exit $rc)") |"
done
