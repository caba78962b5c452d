"""Processes: what every process the grader starts has in common, and how one ended.

`child_env` is the environment of a judge, a submission's process or a zygote (the grade's
Settings, the repository on the path); `short_tempdir` keeps temporary folders short enough for
the Unix sockets made in them; `describe_exit` and `crash_excerpt` say how a process ended, for
the learner, from its exit status and its log. Standard library only.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import signal
import sys
import tempfile
from pathlib import Path

from grader.common.paths import PYCACHE, ROOT
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


NICE = 10  # a checking process's niceness beside builds: a nice-0 process gets ~9x its CPU share


def step_aside() -> None:
    """Where the grade asks it (Settings.niced: the checks of several tracks, some of which
    build), this process runs at a lower priority than the builds: a judge from its start, a
    submission's process once its own build is done (its compiler runs at the priority it was
    started with). A build is one long chain of single-threaded compiles that holds up every
    check of its track; the checks' own work (Triton's compiles, float64 references) is spread
    over many processes. In a fresh grade on the GPU host, 12 [cutlass]'s build took 62 s alone
    and 78-84 s beside the other tracks' checks, and the checks of every other track were done
    12 s before its own (2026-11-30, docs/performance.md, "Grading time"). Timing and warming
    judges never step aside: they measure."""
    global _stepped
    if current().niced and not _stepped:
        _stepped = True
        try:
            os.nice(NICE)
        except OSError:  # not allowed here: the same priority as before
            pass


_stepped = False  # once per process


# the largest pure-Python imports of every grader process (torch._dynamo brings sympy)
PACKAGES = ("torch", "sympy")


@functools.cache
def packages_without_bytecode() -> bool:
    """Were the installed packages installed without their bytecode (uv's default, an image
    built with PYTHONDONTWRITEBYTECODE)? Then every process compiles every module it imports
    from source, and on the GPU hosts a zygote's imports took 8.5-10.6 s, of which sympy's 1.8 s
    against 0.26 s here where the bytecode is there (2026-11-30, docs/performance.md, "Grading
    time"). Asks where the packages are without importing them."""
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not (spec.origin or "").endswith(".py"):
            continue
        source = Path(spec.origin)
        if not (source.parent / "__pycache__" /
                f"{source.stem}.{sys.implementation.cache_tag}.pyc").exists():
            return True
    return False


def no_bytecode_in_trees(env: dict, sandboxed: bool) -> dict:
    """`env` for a judge or a zygote, which import the exercises' files and the grader's: no
    __pycache__ left in the repository or a learner's tree. Where the packages have no bytecode
    of their own and the submission cannot write the grader's cache (`sandboxed`: Landlock),
    the bytecode of everything imported is kept there instead (PYTHONPYCACHEPREFIX), so that a
    process imports torch and sympy from bytecode after the first grade. The submission's
    process still writes none (grader.submission: it may read it). A prefix the user set
    stands."""
    if "PYTHONPYCACHEPREFIX" not in env and sandboxed and packages_without_bytecode():
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    if env.get("PYTHONPYCACHEPREFIX") == str(PYCACHE):
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
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
