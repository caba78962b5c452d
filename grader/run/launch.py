"""Launch: start the grader's two kinds of process, and nothing else (no torch imported here).

- `start_submission`: the submission's process (grader.submission) for one track, connected to
  the caller by a socket pair. The judge calls it first thing, so that process's Python start
  and torch import (2-4 s) run while the judge imports its own torch and pytest.
- `start_judge` / `wait_judge`: a judge (grader.judge) for one phase of one track, in a session
  of its own (a time limit kills it and everything it started), its output in a log file.

Both pass the grade's Settings on (grader.common.settings), and compile in-process (below). Where
`FORKER` is set (the watch loop, grader.tools.watch), both are forked from a zygote that has imported
torch and the rest already (grader.run.zygote) instead of started.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader.common.paths import INDUCTOR, ROOT
from grader.common.settings import Settings, current

SCRATCH_IN = None  # where a judge makes its submission's scratch folder: inside the judge's own
#                   temporary folder (its --scratch-in), which the grade process removes when
#                   the judge has ended, whatever way it ended (None: the system's temporary folder)
FORKER = None  # grader.run.zygote.Forker: fork processes from a pre-imported zygote (the watch loop:
#                in its process, the judges; in a judge it forked, that judge's submission's)


TMPDIR_MAX = 44  # bytes of a temporary folder's path that a grade's processes can work in


def short_tempdir() -> None:
    """torch_shm_manager (the seam's shared tensors) binds a Unix socket at
    $TMPDIR/torch-shm-dir-XXXXXX/manager.sock, and a Unix socket's path holds 107 bytes at
    most; a submission's TMPDIR is its scratch folder, 29 bytes deeper (grader-XXXXXXXX/
    grader-submission-XXXXXXXX). A longer TMPDIR (seen: pytest's under xdist, 75 bytes) made
    every check fail with "torch_shm_manager ...: Invalid argument": this process and its
    children then use /tmp instead."""
    if len(tempfile.gettempdir()) > TMPDIR_MAX and os.path.isdir("/tmp"):
        os.environ["TMPDIR"] = tempfile.tempdir = "/tmp"


def child_env(settings: Settings | None = None) -> dict:
    """The environment of a grader process: this one's, the settings, the repository on the
    path, unbuffered output, and compiling in-process. By default the first torch.compile of a
    process starts Inductor's pool of compile workers (a sidecar that imports torch, and one
    worker per core, up to 32); a grade runs a dozen such processes at once, so a pool each is
    hundreds of processes on 16 cores, slowing everything around them. What the grader compiles
    is small (a baseline's few kernels, an op under test): one thread does it. A value set by the
    user stands."""
    env = dict(os.environ)
    env.update((settings or current()).env())
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


@dataclass
class SubmissionProcess:
    proc: subprocess.Popen
    conn: object          # multiprocessing.connection.Connection, the judge's end
    scratch: str          # its working folder (the only place it may write, with its caches)
    log_path: Path        # its stdout and stderr
    key: tuple            # what it was started for: (tree, exercise id, track, protected paths)


def key(tree: Path, exercise_id: str, track: str, protect=()) -> tuple:
    return (str(Path(tree).resolve()), exercise_id, track, tuple(str(p) for p in protect))


def start_submission(tree: Path, exercise_id: str, track: str, protect=(),
                     prefix=None) -> SubmissionProcess:
    """Start `python -m grader.submission` for one track; `prefix` is a command to run it under
    (compute-sanitizer)."""
    tree = Path(tree).resolve()
    scratch = tempfile.mkdtemp(prefix="grader-submission-", dir=SCRATCH_IN)
    log_path = Path(scratch) / "submission.log"
    ours, theirs = socket.socketpair()
    from multiprocessing.connection import Connection
    conn = Connection(ours.detach())
    fd = theirs.detach()
    cmd = [sys.executable, "-m", "grader.submission", "--fd", str(fd), "--tree", str(tree),
           "--exercise", exercise_id, "--track", track, "--scratch", scratch]
    for p in [ROOT, *protect]:
        cmd += ["--protect", str(p)]
    with open(log_path, "wb") as log:
        if FORKER is not None and not prefix and FORKER.handles(cmd):
            proc = FORKER.start(cmd, cwd=scratch, env=child_env(), stdout=log, pass_fds=(fd,))
        else:
            proc = subprocess.Popen(list(prefix or []) + cmd, cwd=scratch, env=child_env(),
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, pass_fds=(fd,))
    os.close(fd)
    return SubmissionProcess(proc, conn, scratch, log_path, key(tree, exercise_id, track, protect))


@dataclass
class JudgeProcess:
    proc: subprocess.Popen
    log: Path
    out: object           # the open log file
    label: str            # "02_scale [cuda]"
    phase: str
    events: Path


def start_judge(tree: Path, exercise, track, phase: str, events: Path, settings: Settings,
                gate: Path | None = None) -> JudgeProcess:
    """Start one judge phase (grader.judge). With `gate`, the judge gets ready (its submission's
    process started and the track loaded) and then waits until that file exists before it
    measures anything: grader.run.grade prepares the next track's timing while one runs alone."""
    log = events.with_suffix(".log")
    cmd = [sys.executable, "-m", "grader.judge", "--tree", str(tree), "--exercise", exercise.id,
           "--track", track.name, "--events", str(events), "--phase", phase,
           "--scratch-in", str(events.parent)]
    if gate is not None:
        cmd += ["--gate", str(gate)]
    env = child_env(settings)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # the judge's torch.compile caches (the baselines) in the grader's cache, beside the marker
    # that says they are warm (grader.judge.baselines.warm_marker); a submission's are its own
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR))
    if phase == "checks" and settings.check_threads:
        # the checks of several tracks at once: each process (judge and submission) gets its
        # share of the cores for torch's CPU ops, instead of one thread per core each (8 tracks
        # x 2 processes x 16 OpenMP threads: a load of 25 on 16 cores)
        env.setdefault("OMP_NUM_THREADS", str(settings.check_threads))
    out = open(log, "wb")
    if FORKER is not None and FORKER.handles(cmd):
        proc = FORKER.start(cmd, cwd=ROOT, env=env, stdout=out, new_session=True)
    else:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    return JudgeProcess(proc, log, out, f"{exercise.id} [{track.name}]", phase, events)


def wait_judge(j: JudgeProcess, timeout_s: float, settings: Settings, progress=None,
               sources=()) -> tuple:
    """Wait for a judge under its time limit (counted from now); return (exit code, the limit if
    it hit it, its output). `progress` (grader.run.progress.Progress) follows its event log."""
    timed_out = None
    if progress is not None:
        progress.begin(j.label, j.events, j.phase, sources)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                j.proc.wait(timeout=min(left, 0.5) if progress is not None else left)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    timed_out = timeout_s
                    break
                if progress is not None:
                    progress.tick(j.label)
    finally:
        if progress is not None:
            progress.end(j.label)
    kill_judge(j)
    if settings.keep_logs:  # a folder: keep each judge's full log and events
        keep = Path(settings.keep_logs)
        keep.mkdir(parents=True, exist_ok=True)
        name = j.label.replace(" [", "-").rstrip("]") + f"-{j.phase}"
        shutil.copy(j.log, keep / f"{name}.log")
        if j.events.exists():
            shutil.copy(j.events, keep / f"{name}.jsonl")
    return j.proc.returncode, timed_out, j.log.read_text(errors="replace")


def kill_judge(j: JudgeProcess) -> None:
    """The judge and whatever it left running (its submission's process)."""
    try:
        os.killpg(j.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    j.proc.wait()
    j.out.close()
