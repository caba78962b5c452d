"""Slurm: grade a class on a cluster, as one job array whose tasks each grade a shard.

    python -m grader batch SUBMISSIONS_DIR --out OUT --slurm [--partition P]
                           [--gpus-per-task 1] [--cpus-per-task 4] [--max-parallel N]
                           [--tasks K]
    python -m grader batch --collect OUT

`submit` splits the submissions still missing a results.json into K shards, writes them under
OUT/.grader/slurm/<job>/, and runs `sbatch --array=0-(K-1)[%N]` once. Each array task runs
`python -m grader.tools.slurm task DIR INDEX` on its node: the same per-submission `python -m grader
grade` processes as `batch` (grader.tools.batch.grade_submission), writing into OUT, which must be on
a filesystem the nodes share with the submitting host (as must this repository and
SUBMISSIONS_DIR). Each task merges summary.csv and index.html when it ends; `--collect` does it
at any time. Submitting again grades only what has no results.json yet. What sbatch says when
it refuses (an unknown partition, a GPU request the cluster has no gres for) is printed as it is.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.common.discover import discover
from grader.common.machine import landlock_available
from grader.common.paths import ROOT
from grader.tools.batch import _folders, _timeout, grade_submission
from grader.tools.summary import collect, find_submissions, read_tsv, write_manifest

MAX_TASKS = 256   # array tasks by default: one per submission up to this (a cluster's
#                   MaxArraySize is 1001 by default; fewer, longer tasks queue less)


def submit_command(args) -> int:
    """`python -m grader batch DIR --out OUT --slurm ...` (grader.__main__)."""
    folder, out = _folders(args)
    return submit(folder, out, exercise=args.exercise, bench=not args.no_bench,
                  force=args.force, build=args.build, visibility=args.visibility,
                  partition=args.partition, gpus_per_task=args.gpus_per_task,
                  cpus_per_task=args.cpus_per_task, max_parallel=args.max_parallel,
                  tasks=args.tasks)


def submit(folder: Path, out: Path, *, exercise=None, bench=True, force=False, build=None,
           visibility=(), partition=None, gpus_per_task=1, cpus_per_task=4, max_parallel=0,
           tasks=0,
           log=lambda m: print(m, flush=True)) -> int:
    subs = find_submissions(folder)
    todo = [(n, p.resolve()) for n, p in subs
            if force or not (out / n / "results.json").is_file()]
    out.mkdir(parents=True, exist_ok=True)
    write_manifest(out, subs)
    log(f"{len(subs)} submission(s) in {folder}: {len(todo)} to grade, {len(subs) - len(todo)} "
        f"already graded (--force grades them again)")
    if not todo:
        collect(out, log=log)
        return 0
    k = min(len(todo), tasks or MAX_TASKS)
    shards = [todo[i::k] for i in range(k)]
    job = out / ".grader" / "slurm" / time.strftime("%Y%m%d-%H%M%S")
    job.mkdir(parents=True, exist_ok=True)
    for i, shard in enumerate(shards):
        (job / f"shard-{i}.tsv").write_text("".join(f"{n}\t{p}\n" for n, p in shard))
    (job / "job.json").write_text(json.dumps({
        "out": str(out), "exercise": exercise, "bench": bench, "build": build,
        "visibility": list(visibility or ()), "force": force}, indent=1))
    script = job / "task.sh"
    script.write_text(
        "#!/bin/bash\n# written by `python -m grader batch --slurm`: array task N grades "
        "shard-N.tsv\n"
        f"cd {_q(ROOT)}\nexport PYTHONPATH={_q(ROOT)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"exec {_q(sys.executable)} -m grader.tools.slurm task {_q(job)} \"$SLURM_ARRAY_TASK_ID\"\n")
    script.chmod(0o755)
    if not landlock_available() and max_parallel != 1:
        # without Landlock each grade snapshots and restores the (shared) repository: two at
        # once could restore each other's snapshot, or blame one for the other's write
        log("no Landlock on this host: one array task at a time (--max-parallel 1)")
        max_parallel = 1
    per = _timeout(discover(only=exercise), bench)
    minutes = math.ceil(max(len(s) for s in shards) * per / 60) + 5
    cmd = ["sbatch", "--parsable", "--job-name=grader",
           f"--array=0-{k - 1}" + (f"%{max_parallel}" if max_parallel else ""),
           f"--output={job}/task-%a.out", f"--time={minutes}", "--ntasks=1",
           f"--cpus-per-task={cpus_per_task}"]
    if partition:
        cmd.append(f"--partition={partition}")
    if gpus_per_task:
        cmd.append(f"--gpus-per-task={gpus_per_task}")
    cmd.append(str(script))
    log("$ " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        log("sbatch is not installed here: run this on the cluster's login node")
        return 2
    if proc.stderr:
        log(proc.stderr.rstrip())  # the scheduler's own words, as they are
    if proc.returncode != 0:
        log(f"sbatch refused the job (exit code {proc.returncode}); nothing was submitted")
        return proc.returncode
    jobid = proc.stdout.strip().split(";")[0]
    (job / "jobid").write_text(jobid + "\n")
    log(f"submitted job array {jobid}: {k} task(s) of {len(shards[0])} submission(s) at most, "
        f"{minutes} min limit each; progress: squeue -j {jobid}; task logs: {job}/task-N.out; "
        f"the summary and dashboard so far: python -m grader batch --collect {out}")
    return 0


def _q(p) -> str:
    return shlex.quote(str(p))


def task(job: Path, index: int) -> int:
    """One array task: grade its shard into OUT (skipping what another task or run graded
    since), then merge summary.csv and index.html."""
    settings = json.loads((job / "job.json").read_text())
    out = Path(settings["out"])
    shard = read_tsv(job / f"shard-{index}.tsv")
    exercises = discover(only=settings["exercise"])
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK") or os.environ.get("SLURM_CPUS_ON_NODE")
               or os.cpu_count() or 2)
    failed = 0
    # the task's one GPU: its shard shares one baseline measurement (grader.tools.batch.Batch.grade)
    sticks = tempfile.TemporaryDirectory(prefix="grader-yardstick-")
    print(f"task {index} of job {os.environ.get('SLURM_ARRAY_JOB_ID', '?')} on "
          f"{os.uname().nodename} (CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): {len(shard)} submission(s)",
          flush=True)
    for name, path in shard:
        if not settings["force"] and (out / name / "results.json").is_file():
            print(f"[{name}] already graded", flush=True)
            continue
        try:
            ok, seconds, note = grade_submission(
                name, path, out, exercise=settings["exercise"], bench=settings["bench"],
                build=settings["build"], visibility=settings["visibility"], slot=None,
                jobs=max(1, cpus // 4), exercises=exercises,
                yardstick=sticks.name if landlock_available() else None)
        except Exception as e:  # this submission only: the shard goes on
            ok, seconds, note = False, 0.0, f"{type(e).__name__}: {e}"
        failed += not ok
        print(f"[{name}] {'graded' if ok else 'FAILED'} in {seconds:.0f} s: {note}", flush=True)
    sticks.cleanup()
    collect(out)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "task":
        sys.exit("usage: python -m grader.tools.slurm task JOB_DIR INDEX (run by sbatch)")
    sys.exit(task(Path(sys.argv[2]), int(sys.argv[3])))
