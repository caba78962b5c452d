#!/usr/bin/env bash
# The CPU loop: wall seconds of a learner's one-shot commands on a machine without a GPU (Triton's interpreter; CUDA tracks built, their GPU checks not run). On the CPU machine, from the repository root, after the venv exists: `bash benchmarks/cpu_loop.sh [RUNS]` (default 3).
#
# Rows, each command run RUNS times (the wall seconds' min / median / max, and the CPU seconds,
# user + system, of the median run: what make and the processes it waited for used):
#   make grade in a fresh clone of HEAD (starter/ as shipped: every track "not started", nothing
#     built or run: grader.common.pristine), and the same again in that clone;
#   make grade in a fresh clone where 02's kernel file has one line added (a learner's first
#     edit: that track is built, with the bindings' precompiled header, and checked);
#   make exercise-05 IMPL=solutions (the Triton interpreter's longest exercise of the loop);
#   make exercise-01 IMPL=solutions.
# The clone shares this checkout's .venv (a symlink). The load average before and after is
# printed: other work on the machine slows these runs. Prints a markdown table
# (benchmarks/run.sh puts it into docs/performance.md). ROWS="ex05 ex01" runs only those rows
# (of fresh, again, begun, ex05, ex01). DRY_RUN=1 prints the commands instead.
set -u
RUNS=${1:-3}
ROWS=${ROWS:-fresh again begun ex05 ex01}
[ -d exercises ] || { echo "cpu_loop.sh: run it from the repository root" >&2; exit 2; }
ROOT=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/cpu-loop-XXXXXX")
trap 'rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }

want() { [[ " $ROWS " == *" $1 "* ]]; }

run() {  # run NAME DIR COMMAND...: one timed run; appends "wall cpu" to $work/NAME, or counts
  local name=$1 dir=$2; shift 2  # a run without a scorecard as failed (its output to stderr)
  local TIMEFORMAT='%R %U %S'
  local t
  t=$( { time (cd "$dir" && "$@" > "$work/$name.log" 2>&1) ; } 2>&1 ) || t="$t"
  if ! grep -q "^total:" "$work/$name.log"; then
    { echo "cpu_loop.sh: $name: no scorecard; the end of its output:"; tail -15 "$work/$name.log"; } >&2
    echo x >> "$work/$name.failed"
    return 1
  fi
  echo "$t" | awk '{printf "%.1f %.1f\n", $1, $2 + $3}' >> "$work/$name"
}

row() {  # row NAME LABEL TARGET: the table row of NAME's runs
  local n med failed
  want "$1" || return 0
  failed=$(cat "$work/$1.failed" 2>/dev/null | wc -l)
  [ "$failed" = 0 ] || set -- "$1" "$2 ($failed failed run(s) left out)" "$3"
  [ -s "$work/$1" ] || { printf "| %s | 0 | | | %s |\n" "$2" "$3"; return 0; }
  n=$(wc -l < "$work/$1")
  med=$(sort -n "$work/$1" | sed -n "$(( (n + 1) / 2 ))p")
  printf "| %s | %d | %s / %s / %s | %s | %s |\n" "$2" "$n" \
    "$(sort -n "$work/$1" | head -1 | cut -d' ' -f1)" "${med%% *}" \
    "$(sort -n "$work/$1" | tail -1 | cut -d' ' -f1)" "${med##* }" "$3"
}

fresh_clone() {  # a clone of HEAD as a learner has it, with this checkout's venv
  rm -rf "$work/clone"
  git -c advice.detachedHead=false clone -q --no-hardlinks "$ROOT" "$work/clone" || return 1
  if [ -d "$ROOT/.venv" ]; then
    ln -s "$ROOT/.venv" "$work/clone/.venv"
    # the clone's requirements.txt is newer than the venv's marker: make would reinstall
    [ -e "$ROOT/.venv/.installed" ] && touch -r "$ROOT/.venv/.installed" "$work/clone/requirements.txt"
  fi
}

if [ -n "${DRY_RUN:-}" ]; then
  echo "+ git clone $ROOT CLONE; ln -s $ROOT/.venv CLONE/.venv; (cd CLONE && make grade), twice"
  echo "+ the same clone afresh, a line added to starter/02_scale/cuda/scale_kernels.cu; make grade"
  echo "+ make exercise-05 IMPL=solutions"
  echo "+ make exercise-01 IMPL=solutions"
  echo "(each $RUNS times)"
  exit 0
fi

before=$(load)
if want fresh || want again; then
  for r in $(seq "$RUNS"); do
    fresh_clone || { echo "cpu_loop.sh: git clone failed" >&2; exit 1; }
    want fresh && run fresh "$work/clone" make grade
    want again && { want fresh || run warmup "$work/clone" make grade; } \
      && run again "$work/clone" make grade
    rm -rf "$work/clone"
  done
fi
if want begun; then
  for r in $(seq "$RUNS"); do
    fresh_clone || { echo "cpu_loop.sh: git clone failed" >&2; exit 1; }
    echo "// begun" >> "$work/clone/starter/02_scale/cuda/scale_kernels.cu"
    run begun "$work/clone" make grade
    rm -rf "$work/clone"
  done
fi
for r in $(seq "$RUNS"); do want ex05 && run ex05 "$ROOT" make exercise-05 IMPL=solutions; done
for r in $(seq "$RUNS"); do want ex01 && run ex01 "$ROOT" make exercise-01 IMPL=solutions; done
after=$(load)

echo "commit $(git rev-parse --short HEAD); $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//'); no GPU; load average $before before, $after after; $(date -u '+%F %H:%M UTC')"
echo
echo "| command | runs | wall s: min / median / max | CPU s (median run) | target |"
echo "|---|---|---|---|---|"
row fresh "\`make grade\`, a fresh clone (starter/ as shipped: nothing built)" "≤ 30 s"
row again "\`make grade\` again (starter/ as shipped)" ""
row begun "\`make grade\`, a fresh clone with 02's kernel begun (builds that track)" ""
row ex05 "\`make exercise-05 IMPL=solutions\`" "≤ 20 s"
row ex01 "\`make exercise-01 IMPL=solutions\`" "≤ 5 s"
