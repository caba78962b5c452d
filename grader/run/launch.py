"""Launch: start a judge (grader.judge) for one phase of one track, wait for it, end it.

A judge runs in a session of its own (its time limit kills it and everything it started: its
submission's process), with the grade's Settings (grader.common.processes.child_env), its output
in a log file beside its event log. Given a `forker` (grader.common.forking: the watch loop's
zygotes, or a grade's on a machine without a GPU) it is forked from a zygote that has imported
torch and the rest already, instead of started. Nothing here reads the judge's events: they are
followed by grader.run.follow and read whole by grader.run.results.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from grader.common.paths import INDUCTOR, ROOT
from grader.common.machine import landlock_available
from grader.common.processes import child_env, no_bytecode_in_trees
from grader.common.settings import Settings


@dataclass
class JudgeProcess:
    proc: subprocess.Popen
    log: Path
    out: object           # the open log file
    label: str            # "02_scale [cuda]"
    phase: str
    events: Path
    kept: str             # its name among kept logs (Settings.keep_logs): one per share


def judge_env(settings: Settings) -> dict:
    """The environment a judge starts with, and a zygote that forks judges (grader.run.zygotes):
    the grade's settings, no bytecode written into the trees, and the judge's torch.compile
    caches (the baselines) in the grader's cache, beside the marker that says they are warm
    (grader.common.paths.warm_marker); a submission's are its own."""
    env = no_bytecode_in_trees(child_env(settings), landlock_available())
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR))
    return env


def start_judge(tree: Path, exercise, track, phase: str, events: Path, settings: Settings,
                gate: Path | None = None, forker=None, warm: Path | None = None) -> JudgeProcess:
    """Start one judge phase. With `gate`, the judge gets ready (its submission's process
    started and the track loaded) and then waits until that file exists before it measures
    anything: grader.run.grade prepares the next track's timing while one runs alone (`warm`:
    while that file exists, no track is timing, and the judge warms up on the GPU). Its
    submission's scratch folder is made in the folder of its event log, which the caller removes
    when the judge has ended, whatever way it ended."""
    log = events.with_suffix(".log")
    cmd = [sys.executable, "-m", "grader.judge", "--tree", str(tree), "--exercise", exercise.id,
           "--track", track.name, "--events", str(events), "--phase", phase,
           "--scratch-in", str(events.parent)]
    if gate is not None:
        cmd += ["--gate", str(gate)] + (["--warm", str(warm)] if warm is not None else [])
    env = judge_env(settings)
    if phase == "checks" and settings.check_threads:
        # the checks of several tracks at once: each process (judge and submission) gets its
        # share of the cores for torch's CPU ops, instead of one thread per core each (8 tracks
        # x 2 processes x 16 OpenMP threads: a load of 25 on 16 cores)
        env.setdefault("OMP_NUM_THREADS", str(settings.check_threads))
    out = open(log, "wb")
    if forker is not None and forker.handles(cmd):
        proc = forker.start(cmd, cwd=ROOT, env=env, stdout=out, new_session=True)
    else:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    share = f"-share{settings.shard[0]}" if phase == "checks" and settings.shard else ""
    return JudgeProcess(proc, log, out, f"{exercise.id} [{track.name}]", phase, events,
                        f"{exercise.id}-{track.name}-{phase}{share}")


def wait_judge(j: JudgeProcess, timeout_s: float, keep_logs: str | None = None) -> tuple:
    """Wait for a judge under its time limit (counted from now), end it and what it left
    running; return (exit code, the limit if it hit it, its output). `keep_logs`: a folder to
    keep its log and events in."""
    timed_out = None
    try:
        j.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = timeout_s
    kill_judge(j)
    if keep_logs:
        keep = Path(keep_logs)
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(j.log, keep / f"{j.kept}.log")
        if j.events.exists():
            shutil.copy(j.events, keep / f"{j.kept}.jsonl")
    return j.proc.returncode, timed_out, j.log.read_text(errors="replace")


def kill_judge(j: JudgeProcess) -> None:
    """The judge and whatever it left running (its submission's process)."""
    try:
        os.killpg(j.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    j.proc.wait()
    j.out.close()
