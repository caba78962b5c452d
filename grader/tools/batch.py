"""Batch: grade a class.

    python -m grader batch SUBMISSIONS_DIR --out DIR [--exercise 01] [--no-bench] [--force]
                           [--visibility KIND=WHEN] [--slurm ...]
    python -m grader batch --collect DIR

SUBMISSIONS_DIR holds one entry per learner: a folder shaped like `starter/` (e.g.
`alice/01_vector_add/triton/vector_add.py`) or a `.zip` of one (unpacked to a temporary folder;
a zip whose tree sits inside one top folder is fine). Each is graded by `python -m grader grade`
in a process of its own, exactly as the learner's `make grade` would be (the same sandboxed
submission processes, the same time limits), writing

    DIR/<name>/results.json   Gradescope's format (with extra_data: one line per track)
    DIR/<name>/junit.xml      one testcase per check
    DIR/<name>/output.txt     the scorecard and feedback, as the learner would read it
    DIR/summary.csv           one row per submission and track: points, max_points, the flags
                              tampering, delegation ("your kernels do the work" failed),
                              needs_review, host_bound (a timing flagged host-bound) and crashed,
                              the checks failed and not run, the GPU time, and the error: the
                              real reason a track was not graded whole
    DIR/index.html            the class dashboard (grader.tools.dashboard)

A submission whose results.json exists is skipped (so a run that stopped resumes where it was),
unless --force. Submissions are graded side by side, one worker per GPU, each worker seeing only
its GPU (CUDA_VISIBLE_DEVICES); on a machine without a GPU, one worker, grading what runs on a
CPU (Triton tracks on the interpreter, CUDA tracks built with their CPU paths checked). More
workers than GPUs (--workers) share them, for the checks alone (--no-bench): a figure timed beside
another submission's kernels earns nothing. With
--slurm the same per-submission grading runs in the array tasks of one Slurm job (grader.tools.slurm);
--collect writes summary.csv and index.html from what DIR holds now.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grader.common.discover import discover
from grader.common.machine import landlock_available
from grader.common.paths import ROOT, tree_caches
from grader.common.settings import from_environment
from grader.run.gradescope import VISIBILITY
from grader.tools.summary import (
    collect,
    find_submissions,
    tree_root,
    unpack,
    write_manifest,
)


def gpu_slots(workers: int = 0) -> list[str | None]:
    """One worker per GPU, each told to see only its own (CUDA_VISIBLE_DEVICES); one worker
    (None: the environment as it is) without a GPU."""
    import torch  # only to grade (not for --collect, nor in a Slurm task's shard)
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        return [None] * max(1, workers or 1)
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    ids = visible[:n] if len(visible) >= n else [str(i) for i in range(n)]
    if workers:  # more workers than GPUs share them round-robin
        ids = [ids[i % len(ids)] for i in range(workers)]
    return ids


def _timeout(exercises, bench: bool) -> float:
    """A whole submission's limit: every track's own limit (twice with timing), plus slack."""
    per = sum(ex.timeout_s * len(ex.tracks) for ex in exercises)
    return per * (2 if bench else 1) + 300


def grade_submission(name: str, path: Path, out: Path, *, exercise=None, bench=True, build=None,
                     visibility=(), slot: str | None = None, jobs: int = 1,
                     exercises=None, yardstick: str | None = None) -> tuple[bool, float, str]:
    """Grade one submission into out/<name>/ with `python -m grader grade` in a process of its
    own: (graded, seconds, a note for the log). results.json appears last, and whole.
    `yardstick`: a folder of baseline figures shared by every submission graded on this GPU
    (grader.judge.baselines.baseline_times: measured by the first, by a judge)."""
    exercises = exercises if exercises is not None else discover(only=exercise)
    dest = out / name
    dest.mkdir(parents=True, exist_ok=True)
    final, failed = dest / "results.json", dest / "results.json.failed"
    for f in (final, failed, dest / "error.txt"):
        f.unlink(missing_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grader-batch-") as tmp:
        try:
            if path.is_dir():
                tree = tree_root(path.resolve())
            else:
                unpack(path, Path(tmp))
                tree = tree_root(Path(tmp))
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            (dest / "error.txt").write_text(f"could not read {path.name}: {e}\n")
            return False, time.perf_counter() - start, f"could not read {path.name}: {e}"
        cmd = [sys.executable, "-m", "grader", "grade", "--submission", str(tree),
               "--json", str(final), "--junit", str(dest / "junit.xml"), "--jobs", str(jobs)]
        if exercise:
            cmd += ["--exercise", exercise]
        if not bench:
            cmd.append("--no-bench")
        if build:
            cmd += ["--build", build]
        for v in visibility or ():
            cmd += ["--visibility", v]
        env = dict(os.environ)
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        if yardstick:
            env.update(from_environment().replace(run_cache=yardstick).env())
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        limit = _timeout(exercises, bench)
        with open(dest / "output.txt", "w") as log:
            try:
                proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=limit)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = None
        if path.is_file():  # the build and runner caches of a temporary tree: no reuse
            for folder in tree_caches(tree):
                shutil.rmtree(folder, ignore_errors=True)
    seconds = time.perf_counter() - start
    # the grade writes results.json whole (renamed into place) as its last report; one that
    # then failed is moved aside, so that a results.json always means "graded" (a resumed batch
    # skips exactly those) and output.txt names the file the learner gets
    if code == 0 and final.is_file():
        results = json.loads(final.read_text())
        return True, seconds, f"{results.get('score', 0):g} points"
    if final.is_file():
        os.replace(final, failed)
    why = (f"stopped after {limit:.0f} s" if code is None else f"exit code {code}")
    tail = (dest / "output.txt").read_text(errors="replace")[-3000:]
    (dest / "error.txt").write_text(f"grading failed ({why}); the end of output.txt:\n{tail}")
    return False, seconds, f"grading failed ({why}); see {dest / 'error.txt'}"


class Batch:
    def __init__(self, folder: Path, out: Path, *, exercise=None, bench=True, force=False,
                 workers=0, build=None, visibility=(), log=print):
        self.folder, self.out = folder, out
        self.exercise, self.bench, self.force, self.build = exercise, bench, force, build
        self.visibility = list(visibility or ())
        self.exercises = discover(only=exercise)
        self.slots = gpu_slots(workers)
        shared = len(self.slots) - len(set(self.slots))
        if bench and self.slots[0] is not None and shared:
            # a figure timed while another process runs kernels earns nothing (the timed-alone
            # check, grader.judge.alone): the batch would refuse its own students' figures
            raise SystemExit(
                f"grader: batch: --workers {len(self.slots)} grades {len(self.slots)} "
                f"submissions at once on {len(set(self.slots))} GPU(s), and a figure timed "
                "while another process runs kernels earns nothing: give at most one worker per "
                "GPU, or --no-bench for the checks alone")
        self.sandboxed = landlock_available()
        if not self.sandboxed:
            # without Landlock a submission's write into the repository is found by hash after
            # the fact: with two graded at once, it could be pinned on the wrong one
            self.slots = self.slots[:1]
        self.log = log

    def todo(self) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
        """(every submission, those to grade: without a results.json, or all with --force)."""
        subs = find_submissions(self.folder)
        return subs, [(n, p) for n, p in subs
                      if self.force or not (self.out / n / "results.json").is_file()]

    def run(self) -> dict:
        start = time.perf_counter()
        subs, todo = self.todo()
        write_manifest(self.out, subs)
        skipped = len(subs) - len(todo)
        where = ", ".join(f"GPU {s}" for s in self.slots) if self.slots[0] is not None else \
            "no GPU: CPU checks only"
        if not self.sandboxed:
            where += "; no Landlock here, so one submission at a time"
        self.log(f"{len(subs)} submission(s) in {self.folder}: {len(todo)} to grade, {skipped} "
                 f"already graded (--force grades them again); {len(self.slots)} worker(s) "
                 f"({where})")
        failed = self.grade(todo)
        rows = collect(self.out, log=None)
        wall = time.perf_counter() - start
        with_error = sorted({r["submission"] for r in rows if r["error"]})
        self.log(f"summary: {self.out / 'summary.csv'} ({len(rows)} row(s)), dashboard: "
                 f"{self.out / 'index.html'}; {len(todo)} graded, {skipped} skipped, "
                 f"{len(failed)} failed to grade, {len(with_error)} with an error (the error "
                 f"column says why); wall time {wall:.0f} s")
        return {"graded": len(todo) - len(failed), "skipped": skipped, "failed": failed,
                "rows": rows, "seconds": wall}

    def grade(self, todo: list[tuple[str, Path]]) -> list[str]:
        """Grade `todo` side by side, one worker thread per slot (its GPU for good); the names
        that could not be graded."""
        if not todo:
            return []
        free = list(self.slots)
        lock = threading.Lock()
        mine = threading.local()

        def claim():  # each worker thread keeps one slot: one GPU never graded twice at once
            with lock:
                mine.slot = free.pop()

        jobs = max(1, (os.cpu_count() or 2) // 4 // len(self.slots))
        # One yardstick per GPU for the whole batch: the baselines (PyTorch's code, not the
        # learner's) are compiled and timed once, by the first submission's judge, and every
        # other submission on that GPU is compared with the same figures, so two students'
        # points never differ by the baselines' noise, and a grade skips ~10-20 s of compiling
        # and timing them. Kept for this batch only: another day may be another GPU or torch.
        sticks = tempfile.TemporaryDirectory(prefix="grader-yardstick-")

        def one(name, path):
            try:
                return mine.slot, *grade_submission(
                    name, path, self.out, exercise=self.exercise, bench=self.bench,
                    build=self.build, visibility=self.visibility, slot=mine.slot, jobs=jobs,
                    exercises=self.exercises,
                    yardstick=str(Path(sticks.name) / f"gpu-{mine.slot}")
                    if self.sandboxed and mine.slot is not None else None)
            except Exception as e:  # this submission only: the others go on
                return mine.slot, False, 0.0, f"{type(e).__name__}: {e}"

        failed = []
        with ThreadPoolExecutor(len(self.slots), initializer=claim) as pool:
            futures = {pool.submit(one, n, p): n for n, p in todo}
            for done in as_completed(futures):
                name = futures[done]
                slot, ok, seconds, note = done.result()
                if not ok:
                    failed.append(name)
                self.log(f"[{name}] {'graded' if ok else 'FAILED'} in {seconds:.0f} s"
                         f"{' on GPU ' + slot if slot is not None else ''}: {note}")
        sticks.cleanup()
        return failed


def add_arguments(batch) -> None:
    """`python -m grader batch`'s options (grader.__main__; --slurm goes to grader.tools.slurm)."""
    batch.add_argument("submissions", nargs="?", help="a folder of submissions: trees shaped "
                                                      "like starter/, or .zip files of one")
    batch.add_argument("--out", help="per submission results.json, junit.xml and output.txt; "
                                     "summary.csv and index.html")
    batch.add_argument("--exercise", help="one exercise, by number (01) or folder name")
    batch.add_argument("--no-bench", action="store_true", help="skip the performance step")
    batch.add_argument("--force", action="store_true",
                       help="grade again submissions that already have a results.json")
    batch.add_argument("--workers", type=int, default=0,
                       help="submissions graded at once (default: one per GPU; one without)")
    batch.add_argument("--build", choices=["jit", "aot"], default=None,
                       help="passed on to each submission's grade")
    batch.add_argument("--visibility", **VISIBILITY)
    batch.add_argument("--slurm", action="store_true",
                       help="submit one Slurm job array (sbatch) grading shards of the class")
    batch.add_argument("--partition", help="with --slurm: sbatch --partition")
    batch.add_argument("--gpus-per-task", type=int, default=1,
                       help="with --slurm: GPUs per array task (default 1; 0: CPU checks only)")
    batch.add_argument("--cpus-per-task", type=int, default=4,
                       help="with --slurm: CPUs per array task (default 4: a grade runs a "
                            "judge and a submission's process per track, and float64 checks)")
    batch.add_argument("--max-parallel", type=int, default=0,
                       help="with --slurm: array tasks running at once (sbatch --array=0-K%%N)")
    batch.add_argument("--tasks", type=int, default=0,
                       help="with --slurm: array tasks (shards; default one per submission, at "
                            "most 256)")
    batch.add_argument("--collect", metavar="OUT",
                       help="merge OUT's per-submission results into summary.csv and index.html "
                            "(also while Slurm tasks still run)")


def _folders(args) -> tuple[Path, Path]:
    """The submissions folder and the output folder of a batch command (checked)."""
    if not args.submissions or not args.out:
        sys.exit("grader: batch: give SUBMISSIONS_DIR and --out DIR (or --collect DIR)")
    folder = Path(args.submissions)
    if not folder.is_dir():
        sys.exit(f"grader: batch {args.submissions}: no such folder")
    out = Path(args.out).resolve()
    if out.is_relative_to(folder.resolve()):
        sys.exit("grader: batch: --out must not be inside the submissions folder")
    return folder, out


def batch_command(args) -> int:
    if args.collect:
        out = Path(args.collect).resolve()
        if not out.is_dir():
            sys.exit(f"grader: batch --collect {args.collect}: no such folder")
        collect(out, log=lambda m: print(m, flush=True))
        return 0
    folder, out = _folders(args)
    res = Batch(folder, out, exercise=args.exercise, bench=not args.no_bench, force=args.force,
                workers=args.workers, build=args.build, visibility=args.visibility,
                log=lambda m: print(m, flush=True)).run()
    return 1 if res["failed"] else 0
