"""Zygotes, from the grade process's side: start the two zygotes (grader.run.zygote), wait until
they have imported, hand out a Forker for judges, stop them.

The watch loop keeps one pair for its whole life; a grade of several tracks on a machine without
a GPU starts one pair for the grade (grader.run.grade). Each judge the judge zygote forks gets a
channel to the submission zygote, through which it forks its submission's process.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from grader.common.forking import MODULES, Forker, ZygoteError, pair, recv, send
from grader.common.paths import ROOT
from grader.run.launch import judge_env


class Zygote:
    """One zygote process, from its parent's side: start it, wait until it has imported, stop it."""

    def __init__(self, role: str, env: dict, log: Path, peer: socket.socket | None = None,
                 preload=()):
        self.role = role
        self.control, theirs = pair()
        fds = [theirs.fileno()] + ([peer.fileno()] if peer is not None else [])
        cmd = [sys.executable, "-m", "grader.run.zygote", "--role", role, "--control",
               str(theirs.fileno())] + (["--peer", str(peer.fileno())] if peer is not None else [])
        cmd += [f"--preload={m}" for m in preload]  # more modules (the tests)
        with open(log, "ab") as out:
            # a session of its own: the terminal's Ctrl-C reaches the watch loop, which then
            # stops every process itself (a zygote dying first would look like a crash)
            self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                         stdout=out,
                                         stderr=subprocess.STDOUT, pass_fds=fds,
                                         start_new_session=True)
        theirs.close()
        self.log = log
        self.seconds = None

    def ready(self, timeout: float = 300) -> float:
        """Wait for its imports; the seconds they took. ZygoteError if it refused or died."""
        try:
            msg, _ = recv(self.control, timeout=timeout)
        except TimeoutError:
            msg = {"refused": f"not ready after {timeout:.0f} s"}
        if msg is None or "refused" in msg:
            reason = (msg or {}).get("refused") or "it exited while importing"
            self.stop()
            tail = self.log.read_text(errors="replace").strip().splitlines()[-5:]
            raise ZygoteError(f"the {self.role} zygote: {reason}" +
                              ("" if msg else "\n  " + "\n  ".join(tail)))
        self.seconds = msg["seconds"]
        return self.seconds

    def forker(self) -> Forker:
        return Forker(self.control, MODULES[self.role])

    def request(self, msg: dict) -> None:
        try:
            send(self.control, msg)
        except OSError:
            pass

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Close its control channel (it kills its children and exits), then make sure."""
        try:
            self.control.close()
        except OSError:
            pass
        if self.seconds is None:  # still importing: nothing forked yet, nothing to wait for
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_zygotes(settings, gpu: bool, folder: Path) -> list:
    """A judge zygote and a submission zygote, both imported and ready: set
    `grader.run.launch.FORKER = zygotes[0].forker()` and every judge (and, through it, its
    submission's process) is forked instead of started. Their environment is what a judge
    starts with (grader.run.launch.start_judge) and, a judge's being what its submission's process
    inherits, that process's too, which asks for Triton's interpreter before importing triton
    where there is no GPU. Raises ZygoteError (neither left running) where one refused to
    serve or died."""
    env = judge_env(settings)
    sub_env = dict(env, **({} if gpu else {"TRITON_INTERPRET": "1"}))
    judge_end, sub_end = pair()
    zygotes = []
    try:  # both import at once; each kept as soon as it runs (a Ctrl-C meanwhile stops it)
        zygotes.append(Zygote("judge", env, folder / "zygote-judge.log", judge_end))
        zygotes.append(Zygote("submission", sub_env, folder / "zygote-submission.log", sub_end))
        for z in zygotes:
            z.ready()
    except ZygoteError:
        for z in zygotes:
            z.stop()
        raise
    finally:
        judge_end.close()
        sub_end.close()
    return zygotes


@contextmanager
def zygote_forker(settings, gpu: bool, folder: Path, say=None):
    """The forker of two zygotes started for the body (start_zygotes) and stopped after it; None
    where one refused to serve (`say` is told): each process then starts afresh, with the same
    verdicts."""
    try:
        zygotes = start_zygotes(settings, gpu, folder)
    except ZygoteError as e:
        if say is not None:
            say(f"grade: {e}; every process starts afresh instead")
        yield None
        return
    try:
        yield zygotes[0].forker()
    finally:
        for z in zygotes:
            z.stop()
