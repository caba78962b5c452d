"""Spawn: the judge starts its submission's process (grader.submission) for one track,
connected to it by a socket pair, its only channel.

The judge starts it first thing, before importing torch, so that process's Python start and
torch import (2-4 s) run while the judge imports its own (grader.judge). Its scratch folder (the
only place it may write, with its caches) is made inside the judge's own temporary folder, which
the grade process removes when the judge has ended, whatever way it ended. Where the judge was
forked by a zygote, the submission's process is forked too, through the channel the zygote gave
the judge (`--fork-via FD`, grader.run.zygote).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from grader.common.forking import MODULES, Forker
from grader.common.paths import ROOT
from grader.common.preamble import send_preamble
from grader.common.processes import child_env
from grader.judge.launches import Records, open_records


@dataclass
class SubmissionProcess:
    proc: subprocess.Popen
    conn: Connection      # the judge's end of the socket
    scratch: str          # its working folder (the only place it may write, with its caches)
    log_path: Path        # its stdout and stderr
    key: tuple            # what it was started for: (tree, exercise id, track, protected paths)
    records: Records | None = None  # its launch records (grader.judge.launches)


def key(tree: Path, exercise_id: str, track: str, protect=()) -> tuple:
    return (str(Path(tree).resolve()), exercise_id, track, tuple(str(p) for p in protect))


@dataclass(frozen=True)
class Spawner:
    """How this judge starts submission processes: where their scratch folders go (None: the
    system's temporary folder), and the zygote channel to fork them through (None: started)."""
    scratch_in: str | None = None
    forker: Forker | None = None

    @classmethod
    def from_args(cls, scratch_in, fork_via: int | None) -> "Spawner":
        forker = (Forker(socket.socket(fileno=fork_via), MODULES["submission"])
                  if fork_via is not None else None)
        return cls(str(scratch_in) if scratch_in else None, forker)

    def start(self, tree: Path, exercise_id: str, track: str, protect=(),
              prefix=None) -> SubmissionProcess:
        """Start `python -m grader.submission` for one track; `prefix` is a command to run it
        under (compute-sanitizer: never forked)."""
        tree = Path(tree).resolve()
        scratch = tempfile.mkdtemp(prefix="grader-submission-", dir=self.scratch_in)
        log_path = Path(scratch) / "submission.log"
        ours, theirs = socket.socketpair()
        # the launch records' socket, passed on the socket's first message (a zygote renumbers
        # passed descriptors); none under compute-sanitizer, which holds CUPTI itself
        records, their_records, preamble = open_records(
            "compute-sanitizer holds CUPTI" if prefix else None)
        send_preamble(ours, preamble, their_records)
        if their_records is not None:
            os.close(their_records)  # in flight now: the process receives its own copy
        conn = Connection(ours.detach())
        fd = theirs.detach()
        cmd = [sys.executable, "-m", "grader.submission", "--fd", str(fd), "--tree", str(tree),
               "--exercise", exercise_id, "--track", track, "--scratch", scratch]
        for p in [ROOT, *protect]:
            cmd += ["--protect", str(p)]
        with open(log_path, "wb") as log:
            if self.forker is not None and not prefix and self.forker.handles(cmd):
                proc = self.forker.start(cmd, cwd=scratch, env=child_env(), stdout=log,
                                         pass_fds=(fd,))
            else:
                proc = subprocess.Popen(list(prefix or []) + cmd, cwd=scratch, env=child_env(),
                                        stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, pass_fds=(fd,))
        os.close(fd)
        return SubmissionProcess(proc, conn, scratch, log_path,
                                 key(tree, exercise_id, track, protect), records)
