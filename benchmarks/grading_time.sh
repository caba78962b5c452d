#!/usr/bin/env bash
# Grading time: the wall seconds of a verdict, the rows of issue 35's targets, on this machine (a GPU one, or the CPU one). From the repository root: `bash benchmarks/grading_time.sh [OUT_DIR]`.
#
# On a GPU machine (fresh: .cache removed before each "fresh" row):
#   the whole scorecard (python -m grader grade --impl solutions, what `make grade IMPL=solutions`
#   runs), fresh then again; exercise 13's checks (--no-bench), fresh then again; QUICK=1
#   against the full grade of 13 (both with the timing); `make watch-13` (a one-line edit inside
#   a kernel: Triton compiles it again) and `make watch-02` (a one-line .cu edit), each from the
#   edit to its result (benchmarks/edit_loop.sh ROWS=watch).
# On a machine without a GPU: `make exercise-13 IMPL=solutions` and `make exercise-08`, QUICK=1
#   against them, and the starters' scorecard in a fresh clone (benchmarks/cpu_loop.sh's row).
# Prints a markdown table, then the fresh scorecard's time report (where its seconds went);
# benchmarks/run.sh puts it into docs/performance.md. Each run's output is kept in OUT_DIR
# (default: a temporary folder, removed). DRY_RUN=1 prints the commands instead.
set -u
OUT=${1:-}
PY=${PY:-python3}
[ -d exercises ] || { echo "grading_time.sh: run it from the repository root" >&2; exit 2; }
if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/grading-time-XXXXXX"); trap 'rm -rf "$OUT"' EXIT; fi
mkdir -p "$OUT"
# GPU_NAME=...: the GPU's rows whatever this machine has (DRY_RUN=1 on a CPU machine: the plan)
gpu=${GPU_NAME:-$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')" 2>/dev/null)}
export PYTHONUNBUFFERED=1

declare -A SECONDS_OF
# ROWS="grade again ...": only those rows (keys: grade again ex13 ex13again ex13full ex13quick
# watch13 watch02 on a GPU; ex13 ex13quick ex08 ex08quick clone on the CPU); default all
want() { [ -z "${ROWS:-}" ] || [[ " $ROWS " == *" $1 "* ]]; }
fresh_start() {  # no kept processes (--stop waits until they have ended), then no .cache
  $PY -m grader.run.keeper --stop > /dev/null 2>&1
  rm -rf .cache
  [ ! -e .cache ] || echo "grading_time.sh: .cache could not be removed: the row is not fresh" >&2
}
row() {  # row KEY LABEL TARGET [fresh] -- COMMAND...: one timed run, one table row
  local key=$1 label=$2 target=$3 fresh=$4; shift 5
  want "$key" || return 0
  if [ -n "${DRY_RUN:-}" ]; then
    echo "| $label | + $([ "$fresh" = fresh ] && echo "rm -rf .cache; ")$* | $target | |"; return
  fi
  # fresh: no kept processes (grader.run.keeper), no builds, Triton's or Inductor's caches,
  # baselines
  [ "$fresh" = fresh ] && fresh_start
  local t0=$(date +%s%N)
  "$@" > "$OUT/$key.txt" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  SECONDS_OF[$key]=$ms
  local total=$(grep -E "^total:" "$OUT/$key.txt" | head -1 | sed 's/^total: *//')
  printf "| %s | %d.%d | %s | %s%s |\n" "$label" $((ms / 1000)) $((ms % 1000 / 100)) "$target" \
    "${total:-?}" "$([ $rc = 0 ] || echo " (exit $rc)")"
}
ratio() {  # ratio A B LABEL TARGET: the row of A's seconds over B's
  [ -n "${DRY_RUN:-}" ] && { echo "| $3 | (ratio) | $4 | |"; return; }
  [ -n "${SECONDS_OF[$1]:-}" ] && [ -n "${SECONDS_OF[$2]:-}" ] || return
  echo "| $3 | $(awk "BEGIN {printf \"%.2fx\", ${SECONDS_OF[$1]} / ${SECONDS_OF[$2]}}") | $4 | |"
}
watch() {  # watch EX TRACK FILE [EDIT_AFTER]: the watch loop's rows (edit to result)
  want "watch$1" || return 0
  [ -n "${DRY_RUN:-}" ] && { echo "| make watch-$1: 3 one-line edits | + edit_loop.sh | | |"; return; }
  EDIT_AFTER=${4:-} ROWS=watch PY=$PY bash benchmarks/edit_loop.sh "$1" "$2" "$3" \
    | grep -E "^\| watch" | sed "s/^| watch, checks only/| make watch-$1 (checks only)/"
}

echo "| what | wall s | target | points |"
echo "|---|---|---|---|"
# what make runs: its processes kept ready for the next command (WARM=0: not; make's WARM)
grade=($PY -m grader grade --impl solutions --keep ${WARM:-900})
if [ -n "$gpu" ]; then
  row grade "make grade IMPL=solutions, 13 exercises, fresh machine" "<= 180" fresh -- \
    "${grade[@]}" --time-report --json "$OUT/grade.json"
  # its checks' seconds order a fresh machine's checks from now on (grader.run.order)
  if want grade; then
    ship=($PY -m grader.tools.benchdoc durations --device "$gpu"
          --command "rm -rf .cache; ${grade[*]} (benchmarks/grading_time.sh ROWS=grade)")
    if [ -n "${DRY_RUN:-}" ]; then echo "| (then) | + ${ship[*]} | | |"
    else "${ship[@]}" > /dev/null; fi
  fi
  row again "the same, run again" "<= 90" again -- "${grade[@]}" --time-report
  row ex13 "make exercise-13 IMPL=solutions, checks, fresh machine" "<= 60" fresh -- \
    "${grade[@]}" --exercise 13 --no-bench --time-report
  row ex13again "the same, run again" "<= 25" again -- "${grade[@]}" --exercise 13 --no-bench
  row ex13full "exercise 13 with the timing (for QUICK)" "" again -- "${grade[@]}" --exercise 13
  row ex13quick "QUICK=1, exercise 13 with the timing" "" again -- \
    "${grade[@]}" --exercise 13 --quick
  ratio ex13quick ex13full "QUICK=1 against the full grade, exercise 13" "<= 0.3x"
  watch 13 triton flash_attention.py "for start_n in range(lo, hi, BLOCK_N):"
  watch 02 cuda scale_kernels.cu
else
  # what `make exercise-NN IMPL=solutions [QUICK=1]` runs, with the time report, each row after
  # another command (untimed: 01's checks) has made the kept processes ready, as a learner's
  # second command finds them
  if [ -z "${DRY_RUN:-}" ] && [ "${WARM:-900}" != 0 ]; then
    "${grade[@]}" --exercise 01 --no-bench > "$OUT/warm-up.txt" 2>&1
  fi
  row ex13 "CPU: make exercise-13 IMPL=solutions" "<= 60" again -- \
    "${grade[@]}" --exercise 13 --time-report
  row ex13quick "CPU: the same with QUICK=1" "" again -- "${grade[@]}" --exercise 13 --quick
  ratio ex13quick ex13 "CPU: QUICK=1 against the full grade, exercise 13" "<= 0.3x"
  row ex08 "CPU: make exercise-08 IMPL=solutions" "<= 20" again -- \
    "${grade[@]}" --exercise 08 --time-report
  row ex08quick "CPU: the same with QUICK=1" "" again -- "${grade[@]}" --exercise 08 --quick
  ratio ex08quick ex08 "CPU: QUICK=1 against the full grade, exercise 08" "<= 0.3x"
  if [ -z "${DRY_RUN:-}" ] && want clone; then  # the starters' scorecard in a fresh clone,
    # after the venv, and one with a track begun (its first build: a learner's first edit)
    ROWS="fresh begun" bash benchmarks/cpu_loop.sh 1 | grep -E "fresh clone" \
      | awk -F'|' '{ if ($2 ~ /begun/) printf "| CPU: the same, 02 begun (a line added: its first build) | %s | | |\n", $4;
                     else printf "| CPU: the starters'"'"' scorecard, a fresh clone (after the venv) | %s | <= 30 | |\n", $4 }'
  fi
fi
if [ -z "${DRY_RUN:-}" ] && [ -f "$OUT/grade.txt" ]; then
  echo
  sed -n '/^Where the/,$p' "$OUT/grade.txt"
elif [ -z "${DRY_RUN:-}" ] && [ -f "$OUT/ex13.txt" ]; then
  echo
  sed -n '/^Where the/,$p' "$OUT/ex13.txt"
fi
