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

--slurm grades each exercise through the cluster instead: one `python -m grader batch CLASS
--out OUT --exercise NN --slurm --tasks K` (a job array of K tasks, one GPU each), timed from
the submission to the array's end; on the cluster SLURM_CONF names, or, where it is unset, on a
one-node cluster of this machine's own, its GPUs as gres (benchmarks/slurm_cluster.py: the
Debian packages' daemons, or the files of --bundle unpacked here).
"""
from __future__ import annotations

import argparse
import csv
import os
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


def slurm_command(folder: Path, out: Path, exercise: str, tasks: int, gpus: int = 1) -> list[str]:
    # a grade is several processes (a judge and a submission's per track): 4 CPUs where the
    # node has them
    return batch_command(folder, out, exercise) + [
        "--slurm", "--tasks", str(tasks), "--gpus-per-task", str(gpus),
        "--cpus-per-task", str(min(4, os.cpu_count() or 1))]


def grade_through_slurm(env: dict, folder: Path, out: Path, exercise: str, tasks: int,
                        gpus: int, log: Path) -> int:
    """Submit the array (tasks of `gpus` GPUs each), wait for its end, merge (--collect); the
    exit code."""
    from slurm_cluster import wait
    with open(log, "w") as f:
        p = subprocess.run(slurm_command(folder, out, exercise, tasks, gpus), cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        f.write(p.stdout)
        if p.returncode != 0 or "submitted job array " not in p.stdout:
            return p.returncode or 1
        wait(env, p.stdout.split("submitted job array ")[1].split(":")[0])
        for task_log in sorted(out.glob(".grader/slurm/*/task-*.out")):
            f.write(f"--- {task_log.name}\n{task_log.read_text()}")
        c = subprocess.run([sys.executable, "-m", "grader", "batch", "--collect", str(out)],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        f.write(c.stdout)
        failed = sum(t.read_text().count("] FAILED in ")
                     for t in out.glob(".grader/slurm/*/task-*.out"))
        return c.returncode or (1 if failed else 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--students", type=int, default=20)
    p.add_argument("--exercise", default="01,05", help="exercises by number: 01,05")
    p.add_argument("--shards", type=int, default=1,
                   help="disjoint folders graded one by one (with --slurm: the array's tasks)")
    p.add_argument("--slurm", action="store_true", help="grade through sbatch (see above)")
    p.add_argument("--keep", type=Path, help="keep the class, OUT folders and summaries here")
    p.add_argument("--doc", action="store_true", help="write the table into docs/performance.md")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    exercises = [e.strip() for e in a.exercise.split(",") if e.strip()]
    work = a.keep or Path(tempfile.mkdtemp(prefix="class-grading-"))
    if a.dry_run:
        for ex in exercises:
            if a.slurm:
                print("+", shlex.join(slurm_command(Path("CLASS"), Path(f"OUT/{ex}"), ex,
                                                    a.shards)))
                continue
            for k in range(a.shards):
                print("+", shlex.join(batch_command(Path(f"CLASS/shard-{k}"),
                                                    Path(f"OUT/{ex}/shard-{k}"), ex)))
        return 0
    if a.slurm:
        import contextlib
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from slurm_cluster import Cluster, missing
        import signal  # a SIGTERM (a timeout, scancel) still stops the cluster's daemons
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        with contextlib.ExitStack() as stack:
            env = dict(os.environ)
            if "SLURM_CONF" not in env:
                if missing():
                    sys.exit(f"class_grading.py --slurm: no SLURM_CONF and no Slurm here "
                             f"({', '.join(missing())} missing)")
                import torch
                one = Cluster(work / "cluster", gpus=torch.cuda.device_count(), partition="gpu")
                env = stack.enter_context(one).env
                print(f"a one-node cluster: {torch.cuda.device_count()} GPU(s) as gres, "
                      f"SLURM_CONF={env['SLURM_CONF']}", flush=True)
            return _grade_class(a, exercises, work, argv, env)
    return _grade_class(a, exercises, work, argv, None)


def _grade_class(a, exercises, work: Path, argv, slurm_env: dict | None) -> int:
    import torch
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU (CPU checks)"
    work.mkdir(parents=True, exist_ok=True)
    handed = make_class(work / "class", a.students, exercises)
    names = sorted(handed)
    shards = [names[k::a.shards] for k in range(a.shards)]
    for k, part in enumerate(shards if slurm_env is None else []):
        # shard folders: links to the students' trees (a Slurm array shards the class itself)
        (work / f"shard-{k}").mkdir(exist_ok=True)
        for who in part:
            link = work / f"shard-{k}" / who
            if not link.exists():
                link.symlink_to(work / "class" / who, target_is_directory=True)
    rows = []
    for ex in exercises:
        t0 = time.monotonic()
        rcs = []
        if slurm_env is not None:
            outs = [work / "out" / ex]
            # a machine without a GPU: CPU checks, tasks asking for none
            rcs.append(grade_through_slurm(slurm_env, work / "class", outs[0], ex, a.shards,
                                           1 if torch.cuda.is_available() else 0,
                                           work / f"slurm-{ex}.log"))
        else:
            outs = [work / "out" / ex / f"shard-{k}" for k in range(a.shards)]
            for k, out in enumerate(outs):
                with open(work / f"batch-{ex}-{k}.log", "w") as f:
                    rcs.append(subprocess.run(batch_command(work / f"shard-{k}", out, ex),
                                              cwd=ROOT, stdout=f,
                                              stderr=subprocess.STDOUT).returncode)
        wall = time.monotonic() - t0
        points, maxp, graded = {}, {}, 0
        for out in outs:
            summary = out / "summary.csv"
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
    how = ("through Slurm: one job array per exercise, one GPU per task (`--slurm --tasks "
           f"{a.shards}`), timed from sbatch to the array's end" if slurm_env is not None else
           "through `batch`, the shards one after another")
    table = "\n".join([
        f"{a.students} students, {device}, one submission at a time per GPU, {how}; the class: "
        "solutions, known-bad submissions every fifth student, starters every tenth.", "",
        "| exercise | submissions | shards | graded | full marks | wall s | s per submission "
        "| batch |", "|---|---|---|---|---|---|---|---|", *rows])
    print(table)
    if a.doc:
        sys.path.insert(0, str(ROOT))
        from grader.tools.benchdoc import write_section
        write_section("class-grading", table + "\n", device=device,
                      command="python3 benchmarks/class_grading.py " + shlex.join(argv or
                                                                                  sys.argv[1:]))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
