#!/usr/bin/env bash
# The learner's edit loop: wall seconds from a one-line kernel edit to the scorecard. On a GPU machine, from the repository root: `bash benchmarks/edit_loop.sh [EXERCISE [TRACK [KERNEL_FILE]]]` (default 02 cuda scale_kernels.cu).
#
# A copy of the solution's track in a fresh folder (its build cache cold), graded as a learner
# grades it: `python -m grader grade --exercise NN --submission TREE`, `make exercise-NN`, and the
# warm loop `python -m grader watch` (what `make watch-NN` runs). Rows: cold (nothing built),
# warm (nothing changed), a one-line edit checks only, a one-line edit with QUICK=1 timing (its
# baseline cache filled by one untimed run first), a one-line edit with full timing; then the
# watch loop's first grade and three one-line edits, each timed from the edit to its result
# (checks only; on a GPU also with QUICK=1's timing). The edit appends a comment line: ninja
# rebuilds and relinks exactly as for a real one-line change. Prints a markdown table
# (benchmarks/run.sh puts it into docs/performance.md). Without a GPU the timed rows are
# `make exercise-NN` (no timing there) instead. DRY_RUN=1 prints the commands instead;
# KEEP=DIR keeps the watch loops' output there (watch-last.log: the last one's, also when a
# timeout stops this script); ROWS=watch runs only the watch loop's checks-only
# rows; EDIT_AFTER=TEXT edits inside the kernel (above). A Triton track on the CPU:
# `PY=.venv/bin/python bash benchmarks/edit_loop.sh 01 triton vector_add.py`.
set -u
EX=${1:-02}
TRACK=${2:-cuda}
KERNEL=${3:-scale_kernels.cu}
PY=${PY:-python3}
folder=$(ls -d exercises/${EX}_* 2>/dev/null | head -1)
[ -n "$folder" ] || { echo "edit_loop.sh: no exercise $EX (run it from the repository root)" >&2; exit 2; }
name=$(basename "$folder")
[ -f "solutions/$name/$TRACK/$KERNEL" ] || { echo "edit_loop.sh: no solutions/$name/$TRACK/$KERNEL" >&2; exit 2; }
tree=$(mktemp -d "${TMPDIR:-/tmp}/edit-loop-XXXXXX")
WATCH_PID=
at_exit() {  # a timeout's TERM too: the running watch loop stopped, its log kept (KEEP)
  [ -n "$WATCH_PID" ] && kill -INT "$WATCH_PID" 2>/dev/null && wait "$WATCH_PID" 2>/dev/null
  if [ -n "${KEEP:-}" ] && [ -f "$tree/watch.log" ]; then
    mkdir -p "$KEEP" && cp "$tree/watch.log" "$KEEP/watch-last.log"
  fi
  rm -rf "$tree"
}
trap at_exit EXIT
trap 'exit 143' TERM
mkdir -p "$tree/$name"
cp -r "solutions/$name/$TRACK" "$tree/$name/"
if [ -n "${DRY_RUN:-}" ]; then
  gpu="(dry run)"
else
  gpu=$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')")
fi

echo "$name [$TRACK], one-line edits of $KERNEL; $gpu; $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo
echo "| row | wall s | build | points |"
echo "|---|---|---|---|"
card() {  # card LOG: the build column and the total of the last scorecard in LOG
  local last=$(awk '/^Scorecard for/ {buf = ""} {buf = buf $0 "\n"} END {printf "%s", buf}' "$1")
  built=$(echo "$last" | grep -E "^ *$EX " | grep -oE "built [0-9]+s|cached [0-9]+s|built|imported|loaded|build failed" | head -1)
  pts=$(echo "$last" | grep -E "^total:" | head -1 | sed 's/^total: *//')
}
row() {  # row LABEL COMMAND...: grade once, one table row (wall time, the build column, the total)
  local label=$1; shift
  if [ -n "${DRY_RUN:-}" ]; then echo "| $label | + $* | | |"; return; fi
  local t0=$(date +%s%N)
  "$@" > "$tree/last.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  card "$tree/last.log"
  printf "| %s | %d.%d | %s | %s%s |\n" "$label" $((ms / 1000)) $((ms % 1000 / 100)) "${built:-?}" \
    "${pts:-?}" "$([ $rc = 0 ] || echo " (exit $rc)")"
}
edit() {  # a comment line in the kernel file's language: at its end, or (EDIT_AFTER=TEXT) on
  # the line after the first line holding TEXT, indented as it: inside a Triton kernel a
  # comment changes the kernel's source, so Triton compiles it again as for a real change
  local mark="//"; case $KERNEL in *.py) mark="#" ;; esac
  local line="$mark edit_loop.sh: a one-line change $(date +%s%N)" file="$tree/$name/$TRACK/$KERNEL"
  if [ -n "${EDIT_AFTER:-}" ]; then
    EDIT_LINE="$line" EDIT_AFTER="$EDIT_AFTER" $PY - "$file" <<'PY'
import os, sys
path, after, line = sys.argv[1], os.environ["EDIT_AFTER"], os.environ["EDIT_LINE"]
lines = open(path).read().split("\n")
k = next(i for i, l in enumerate(lines) if after in l)
indent = lines[k + 1][:len(lines[k + 1]) - len(lines[k + 1].lstrip())]
lines.insert(k + 1, indent + line)
open(path, "w").write("\n".join(lines))
PY
  else
    echo "$line" >> "$file"
  fi
}
lines() { grep -c "$2" "$1" 2>/dev/null; }
await() {  # await LOG PATTERN N PID SECONDS: until LOG has N lines matching PATTERN (1: PID died, or time)
  local deadline=$(( $(date +%s) + $5 ))
  while [ "$(lines "$1" "$2")" -lt "$3" ]; do
    kill -0 "$4" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}
watch_rows() {  # watch_rows LABEL [FLAGS]: the watch loop, its first grade and 3 one-line edits
  local label=$1; shift
  local cmd=($PY -m grader watch --exercise "$EX" --submission "$tree" "$@")
  if [ -n "${DRY_RUN:-}" ]; then echo "| $label: first grade, then 3 one-line edits | + ${cmd[*]} | | |"; return; fi
  local log=$tree/watch.log k t0 ms
  "${cmd[@]}" > "$log" 2>&1 &
  local pid=$!
  WATCH_PID=$pid
  if await "$log" "^watch: the first grade took" 1 $pid 300; then
    card "$log"
    printf "| %s: first grade (%s) | %s | %s | %s |\n" "$label" \
      "$(grep -oE "[0-9.]+ s of it making the processes ready" "$log" | head -1)" \
      "$(grep -oE "first grade took [0-9.]+" "$log" | grep -oE "[0-9.]+$")" "${built:-?}" "${pts:-?}"
    for k in 1 2 3; do
      t0=$(date +%s%N)
      edit
      await "$log" "from your save to this result" $k $pid 120 || { echo "| $label: one-line edit $k | (no result in 120 s: $(tail -1 "$log")) | | |"; break; }
      ms=$(( ($(date +%s%N) - t0) / 1000000 ))
      card "$log"
      printf "| %s: one-line edit %d, edit to result | %d.%d | %s | %s |\n" "$label" $k \
        $((ms / 1000)) $((ms % 1000 / 100)) "${built:-?}" "${pts:-?}"
    done
  else
    echo "| $label | (no first grade: $(tail -1 "$log")) | | |"
  fi
  grep -q "afresh instead" "$log" && echo "| $label: no zygote, $(grep -m1 -oE "the [a-z]+ zygote: .*" "$log") | | | |"
  kill -INT $pid 2>/dev/null
  WATCH_PID=
  wait $pid || echo "| $label | (the watch loop failed: exit $?; $(tail -1 "$log")) | | |"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$log" "$KEEP/watch${1:+$1}.log"; fi
}

grade=($PY -m grader grade --exercise "$EX" --submission "$tree")
if [ "${ROWS:-all}" = watch ]; then  # the watch loop's rows alone (benchmarks/grading_time.sh)
  watch_rows "watch, checks only"
  exit 0
fi
row "cold, checks only" "${grade[@]}" --no-bench
row "warm, checks only" "${grade[@]}" --no-bench
edit
row "one-line edit, checks only" "${grade[@]}" --no-bench
if [ "$gpu" = "no GPU" ]; then
  edit
  row "one-line edit, make exercise-$EX" make "exercise-$EX" SUBMISSION="$tree"
else
  [ -n "${DRY_RUN:-}" ] || make "exercise-$EX" SUBMISSION="$tree" QUICK=1 > /dev/null 2>&1  # fills QUICK's baseline cache
  edit
  row "one-line edit, QUICK=1 with timing" make "exercise-$EX" SUBMISSION="$tree" QUICK=1
  edit
  row "one-line edit, full timing" make "exercise-$EX" SUBMISSION="$tree"
fi
watch_rows "watch, checks only"
if [ "$gpu" != "no GPU" ]; then
  watch_rows "watch QUICK=1, with timing" --quick
fi
