"""Repeatability: grade the solutions N times and print, per track and mode, the median and (max - min)/median of the graded figure and of the points; writes that table into docs/performance.md. On a GPU machine, from the repository root: `python3 benchmarks/repeatability.py --times 5 [--exercise 06,07]`.

Each grade is `python -m grader grade --impl solutions --json FILE` in a process of its own,
one after another, exactly as `make grade` grades; the figures come from those results.json
files (grader.tools.benchdoc reads them and writes the section). Without a GPU there is nothing to
time: it says so and exits 1. --dry-run prints the commands and writes nothing.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # grader.tools.benchdoc, when run as a script


def grade_command(json_path: Path, impl: str, exercise: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "grader", "grade", "--impl", impl, "--json", str(json_path)]
    return cmd + (["--exercise", exercise] if exercise else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--times", type=int, default=5, help="grades (default 5)")
    p.add_argument("--exercise", help="exercises by number, as `grade --exercise` takes them")
    p.add_argument("--impl", default="solutions", choices=["solutions", "starter"])
    p.add_argument("--doc", type=Path, default=None,
                   help="the document to write (default docs/performance.md)")
    p.add_argument("--keep", type=Path, default=None,
                   help="keep each grade's results.json and scorecard in this folder")
    p.add_argument("--section", default="repeatability",
                   help="the document's section to write (a run over some exercises only, e.g. "
                        "repeatability-07-12, keeps the other runs' sections)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = p.parse_args(argv)
    if a.times < 2:
        p.error("--times: at least 2 (a spread needs two grades)")
    if a.dry_run:
        for i in range(a.times):
            print("+", shlex.join(grade_command(Path(f"OUT/grade-{i + 1}.json"), a.impl,
                                                a.exercise)))
        return 0
    import torch
    if not torch.cuda.is_available():
        print("repeatability.py needs a GPU: there is none here, so nothing is timed "
              "(run it on a GPU machine).", file=sys.stderr)
        return 1
    from grader.tools.benchdoc import DOC, repeatability_markdown, write_section
    out = a.keep or Path(tempfile.mkdtemp(prefix="repeatability-"))
    out.mkdir(parents=True, exist_ok=True)
    commands = [grade_command(out / f"grade-{i + 1}.json", a.impl, a.exercise)
                for i in range(a.times)]
    runs = []
    for i, cmd in enumerate(commands):
        started = time.perf_counter()
        with open(out / f"grade-{i + 1}.txt", "w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT).returncode
        path = Path(cmd[cmd.index("--json") + 1])
        if rc != 0 or not path.exists():
            print(f"grade {i + 1} of {a.times} failed (exit {rc}): see {out}/grade-{i + 1}.txt",
                  file=sys.stderr)
            return 1
        runs.append(json.loads(path.read_text()))
        print(f"grade {i + 1} of {a.times}: {time.perf_counter() - started:.0f} s", flush=True)
    table = repeatability_markdown(runs)
    print(table)
    shown = ["python3", "benchmarks/repeatability.py", "--times", str(a.times)]
    shown += (["--exercise", a.exercise] if a.exercise else [])
    shown += (["--impl", a.impl] if a.impl != "solutions" else [])
    shown += (["--section", a.section] if a.section != "repeatability" else [])
    write_section(a.section, table, device=torch.cuda.get_device_name(),
                  command=shlex.join(shown), doc=a.doc or DOC)
    print(f"wrote the {a.section} section of {a.doc or DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
