"""Spawn: start the submission's process (grader.runner) without importing torch here.

The judge (grader.worker) calls `start_runner` first thing, so the runner's Python start and
torch import (2-4 s) run while the judge imports its own torch and pytest, instead of after
them. grader.proxy.Session adopts a process started this way when it was started for the same
tree, exercise, track and protected paths; otherwise it starts one itself.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.discover import ROOT


@dataclass
class Started:
    proc: subprocess.Popen
    conn: object          # multiprocessing.connection.Connection, the judge's end
    scratch: str          # the runner's working folder (the only place it may write, with caches)
    log_path: Path        # its stdout and stderr
    key: tuple            # what it was started for: (tree, exercise id, track, protected paths)


def compile_in_process(env: dict) -> dict:
    """`env` for a grader process (judge or submission) that may torch.compile, compiling in
    that process. By default the first compile of a process starts Inductor's pool of compile
    workers (torch._dynamo.backends.inductor -> maybe_warm_pool: a sidecar process that imports
    torch, and one worker per core, up to 32). A grade runs a dozen such processes at once
    (checks, warm-ups, timings, and the timing workers started ahead): a pool each is hundreds
    of processes on 16 cores, slowing the imports and the checks around them. What the grader
    compiles is small (a baseline's few kernels, an op under test): one thread does it. A value
    set by the user stands."""
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def key(tree: Path, exercise_id: str, track: str, protect=()) -> tuple:
    return (str(Path(tree).resolve()), exercise_id, track, tuple(str(p) for p in protect))


def start_runner(tree: Path, exercise_id: str, track: str, protect=(), prefix=None) -> Started:
    """Start `python -m grader.runner` for one track, connected by a socket pair; `prefix` is a
    command to run it under (compute-sanitizer)."""
    tree = Path(tree).resolve()
    scratch = tempfile.mkdtemp(prefix="grader-runner-")
    log_path = Path(scratch) / "runner.log"
    ours, theirs = socket.socketpair()
    from multiprocessing.connection import Connection
    conn = Connection(ours.detach())
    fd = theirs.detach()
    cmd = [sys.executable, "-m", "grader.runner", "--fd", str(fd), "--tree", str(tree),
           "--exercise", exercise_id, "--track", track, "--scratch", scratch]
    for p in [ROOT, *protect]:
        cmd += ["--protect", str(p)]
    cmd = list(prefix or []) + cmd
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_EVENTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "")
                                                        .split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    compile_in_process(env)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=scratch, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, pass_fds=(fd,))
    os.close(fd)
    return Started(proc, conn, scratch, log_path, key(tree, exercise_id, track, protect))
