#!/usr/bin/env bash
# Build times: the seconds each source file of a CUDA track takes to compile, with the flags of the grader's build, on this machine (a GPU one or the CPU one, which builds for sm_90). From the repository root: `bash benchmarks/build_times.sh [RUNS] TREE:EXERCISE:TRACK...`.
#
# For example: bash benchmarks/build_times.sh 3 solutions:03:cuda starter:03:cuda /tmp/old:03:cuda
# TREE is solutions, starter or a folder shaped like starter/ (graded with --submission). The
# track is graded once (--no-bench) so that its build.ninja exists; then each compile command
# (`ninja -t commands`) runs RUNS times (default 3), writing its object to a temporary folder.
# Prints a markdown table: min / median / max wall seconds per file (benchmarks/run.sh-style,
# for docs/performance.md).
set -u
RUNS=3
[[ ${1:-} =~ ^[0-9]+$ ]] && { RUNS=$1; shift; }
[ -d exercises ] || { echo "build_times.sh: run it from the repository root" >&2; exit 2; }
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
NINJA=$($PY -c "from grader.submission.ninja import ninja_tool; print(ninja_tool() or '')")
[ -n "$NINJA" ] || { echo "build_times.sh: no ninja found" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/build-times-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "| tree | file | runs | min s | median s | max s |"
echo "|---|---|---|---|---|---|"
for spec in "$@"; do
  IFS=: read -r tree ex track <<< "$spec"
  case $tree in
    solutions|starter) src=(--impl "$tree"); root=$tree ;;
    *) src=(--submission "$tree"); root=$tree ;;
  esac
  $PY -m grader grade "${src[@]}" --exercise "$ex" --no-bench > "$work/grade.log" 2>&1
  dir=$($PY - "$root" "$ex" "$track" <<'PYEOF'
import sys
from pathlib import Path
from grader.common.discover import discover
from grader.common.paths import ROOT, build_dir
root, ex, track = sys.argv[1:]
tree = Path(root) if Path(root).is_absolute() else ROOT / root
exercise = next(e for e in discover() if e.id.startswith(ex.zfill(2)))
print(build_dir(tree, exercise.id, track))
PYEOF
)
  [ -f "$dir/build.ninja" ] || { echo "build_times.sh: $spec: no build.ninja (see its grade: $(tail -3 "$work/grade.log"))" >&2; continue; }
  target=$(sed -n 's/^default //p' "$dir/build.ninja")
  (cd "$dir" && "$NINJA" -t commands "$target") | grep -E " -c " | while read -r cmd; do
    file=$(grep -oE ' -c [^ ]+' <<< "$cmd" | awk '{print $2}')
    obj="$work/$(basename "$file").o"
    cmd=$(sed -E "s# -o [^ ]+# -o $obj#; s# -MF [^ ]+# -MF $obj.d#" <<< "$cmd")
    for _ in $(seq "$RUNS"); do
      s=$(date +%s%N); (cd "$dir" && eval "$cmd" > /dev/null 2>&1) || echo "build_times.sh: $file failed" >&2
      echo $(( ($(date +%s%N) - s) / 1000000 ))
    done | sort -n | awk -v t="$tree" -v f="$(basename "$file")" -v n="$RUNS" \
      '{v[NR] = $1} END {printf "| %s | %s | %d | %.1f | %.1f | %.1f |\n", t, f, n, v[1] / 1000, v[int((NR + 1) / 2)] / 1000, v[NR] / 1000}'
  done
done
