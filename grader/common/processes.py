"""Processes: what every process the grader starts has in common, and how one ended.

`child_env` is the environment of a judge, a submission's process or a zygote (the grade's
Settings, the repository on the path); `short_tempdir` keeps temporary folders short enough for
the Unix sockets made in them; `describe_exit` and `crash_excerpt` say how a process ended, for
the learner, from its exit status and its log. Standard library only.
"""
from __future__ import annotations

import os
import signal
import tempfile

from grader.common.paths import ROOT
from grader.common.settings import Settings, current

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


def describe_exit(returncode: int | None, timed_out: float | None, log: str) -> str:
    if timed_out is not None:
        return f"timed out: the track did not finish within its {timed_out:.0f} s limit"
    if "+ Timeout +" in log:
        return "timed out: a check ran past its time limit (an infinite loop or a hung kernel?)"
    if returncode is None or returncode == 0:
        return ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort",
                "SIGKILL": "killed (out of memory?)", "SIGFPE": "a floating-point exception",
                "SIGBUS": "a bus error"}.get(name, name)
        return f"crashed: {what} ({name})"
    return f"the process exited early with code {returncode}"


def crash_excerpt(log: str, limit: int = 30) -> str:
    """What a learner needs from a dead judge's output: the fatal error and the innermost
    frames of the thread that died (faulthandler prints them), else the log's last lines."""
    lines = log.splitlines()
    fatal = next((i for i, l in enumerate(lines) if l.startswith(("Fatal Python error", "+++"))), None)
    if fatal is None:
        return "\n".join(lines[-limit:])
    current = next((i for i in range(fatal, len(lines)) if lines[i].startswith("Current thread")),
                   fatal + 1)
    block = [lines[fatal]]
    for l in lines[current:]:
        if l.startswith("Extension modules") or (len(block) > 2 and not l.strip()):
            break
        if "pluggy" not in l and "_pytest" not in l:  # pytest's plumbing tells nothing
            block.append(l)
    return "\n".join(block[:limit])
