"""Class grading: a class of N submissions of some exercises graded through `python -m grader batch`, with its wall time and the time per submission. On a GPU machine, from the repository root: `python3 benchmarks/class_grading.py --students 20 --exercise 01,05 [--shards 4]`.

The class is made from what the repository holds, so every run grades the same class:
- most students hand in the solution (a correct submission, graded in full);
- every fifth hands in one of the exercise's known-bad submissions (exercises/NN/wrong/*.toml:
  the solution with a few text edits), in turn;
- every tenth hands in the starter (each track "not implemented yet").
Each exercise is graded by one `python -m grader batch CLASS --out OUT --exercise NN`, or, with
--shards K, by K such batches over K disjoint folders of the class, one after another: the
shards a Slurm array (`--slurm --tasks K`) would run side by side, one per GPU. A batch grades
one submission at a time per GPU, as it does for a class (timing two at once on one GPU would
make each slower). Prints a markdown table; --doc writes it into docs/performance.md
(section class-grading). --dry-run prints the commands and grades nothing.
"""
from __future__ import annotations

import argparse
import csv
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _folder(exercise: str) -> Path:
    found = sorted((ROOT / "exercises").glob(f"{exercise}_*"))
    if not found:
        sys.exit(f"class_grading.py: no exercise {exercise}")
    return found[0]


def _known_bad(folder: Path) -> list[dict]:
    """The exercise's known-bad submissions that a class can hand in on this machine."""
    import torch
    gpu = torch.cuda.is_available()
    out = []
    for f in sorted((folder / "wrong").glob("*.toml")):
        spec = tomllib.loads(f.read_text())
        if spec.get("gpu") and not gpu:
            continue
        out.append(dict(spec, name=f.stem))
    return out


def _copy_track(src: Path, dst: Path, edits: dict | None = None) -> None:
    shutil.copytree(src, dst)
    for name, pairs in (edits or {}).items():
        text = (dst / name).read_text()
        for old, new in pairs:
            text = text.replace(old, new, 1)
        (dst / name).write_text(text)


def make_class(into: Path, students: int, exercises: list[str]) -> dict[str, str]:
    """`into/student-NN/<exercise>/<track>/...` for each student; returns what each handed in."""
    handed = {}
    for i in range(students):
        who = f"student-{i + 1:02d}"
        kinds = []
        for ex in exercises:
            folder = _folder(ex)
            bad = _known_bad(folder)
            dst = into / who / folder.name
            if i % 10 == 9:
                shutil.copytree(ROOT / "starter" / folder.name, dst)
                kinds.append(f"{ex}: starter")
            elif i % 5 == 4 and bad:
                spec = bad[(i // 5) % len(bad)]
                # the other tracks as solved, the known-bad one edited
                for track in sorted(p.name for p in (ROOT / "solutions" / folder.name).iterdir()
                                    if p.is_dir()):
                    _copy_track(ROOT / "solutions" / folder.name / track, dst / track,
                                spec["edits"] if track == spec["track"] else None)
                kinds.append(f"{ex}: {spec['track']} {spec['name']}")
            else:
                shutil.copytree(ROOT / "solutions" / folder.name, dst)
                kinds.append(f"{ex}: solution")
        handed[who] = "; ".join(kinds)
    return handed


def batch_command(folder: Path, out: Path, exercise: str) -> list[str]:
    return [sys.executable, "-m", "grader", "batch", str(folder), "--out", str(out),
            "--exercise", exercise]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--students", type=int, default=20)
    p.add_argument("--exercise", default="01,05", help="exercises by number: 01,05")
    p.add_argument("--shards", type=int, default=1, help="disjoint folders graded one by one")
    p.add_argument("--keep", type=Path, help="keep the class, OUT folders and summaries here")
    p.add_argument("--doc", action="store_true", help="write the table into docs/performance.md")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    exercises = [e.strip() for e in a.exercise.split(",") if e.strip()]
    work = a.keep or Path(tempfile.mkdtemp(prefix="class-grading-"))
    if a.dry_run:
        for ex in exercises:
            for k in range(a.shards):
                print("+", shlex.join(batch_command(Path(f"CLASS/shard-{k}"),
                                                    Path(f"OUT/{ex}/shard-{k}"), ex)))
        return 0
    import torch
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU (CPU checks)"
    work.mkdir(parents=True, exist_ok=True)
    handed = make_class(work / "class", a.students, exercises)
    names = sorted(handed)
    shards = [names[k::a.shards] for k in range(a.shards)]
    for k, part in enumerate(shards):  # shard folders: links to the students' trees
        (work / f"shard-{k}").mkdir(exist_ok=True)
        for who in part:
            link = work / f"shard-{k}" / who
            if not link.exists():
                link.symlink_to(work / "class" / who, target_is_directory=True)
    rows = []
    for ex in exercises:
        t0 = time.monotonic()
        rcs = []
        for k in range(a.shards):
            out = work / "out" / ex / f"shard-{k}"
            log = work / f"batch-{ex}-{k}.log"
            with open(log, "w") as f:
                rcs.append(subprocess.run(batch_command(work / f"shard-{k}", out, ex), cwd=ROOT,
                                          stdout=f, stderr=subprocess.STDOUT).returncode)
        wall = time.monotonic() - t0
        points, maxp, graded = {}, {}, 0
        for k in range(a.shards):
            summary = work / "out" / ex / f"shard-{k}" / "summary.csv"
            if not summary.exists():
                continue
            for row in csv.DictReader(summary.open()):
                points[row["submission"]] = points.get(row["submission"], 0.0) + float(
                    row["points"] or 0)
                maxp[row["submission"]] = maxp.get(row["submission"], 0.0) + float(
                    row["max_points"] or 0)
        graded = len(points)
        full = sum(1 for s in points if maxp[s] and points[s] >= maxp[s] - 1e-9)
        rows.append(f"| {_folder(ex).name} | {a.students} | {a.shards} | {graded} | {full} | "
                    f"{wall:.0f} | {wall / max(1, a.students):.1f} | "
                    f"{'ok' if not any(rcs) else 'exit ' + ','.join(map(str, rcs))} |")
    table = "\n".join([
        f"{a.students} students, {device}, one submission at a time per GPU; the class: "
        "solutions, known-bad submissions every fifth student, starters every tenth.", "",
        "| exercise | submissions | shards | graded | full marks | wall s | s per submission "
        "| batch |", "|---|---|---|---|---|---|---|---|", *rows])
    print(table)
    if a.doc:
        sys.path.insert(0, str(ROOT))
        from grader.benchdoc import write_section
        write_section("class-grading", table + "\n", device=device,
                      command="python3 benchmarks/class_grading.py " + shlex.join(argv or
                                                                                  sys.argv[1:]))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
