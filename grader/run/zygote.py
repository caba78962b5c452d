"""Zygote: a process that has imported what a judge, or a submission's process, imports (torch,
triton, numpy, hypothesis, pytest, the grader's modules) and has never initialised CUDA, and that
forks a fresh judge or submission's process per request. The watch loop (grader.tools.watch) keeps one
of each (its parent's side: grader.run.zygotes), so a regrade pays no import (3-4 s of torch and friends per process here, more on the
GPU hosts).

    python -m grader.run.zygote --role judge|submission --control FD [--peer FD]

A forked child is the process that `python -m grader.judge ...` (or grader.submission) would
be: the requester's environment, working folder, output file and descriptors, a session (a
judge) or process group (a submission's process) of its own, and the module run as __main__.
So everything that process does after its start happens in the child as it does today: the
judge's phases; the submission's sandbox (Landlock, signal scope, the audit hook, the watched
functions of grader.submission), all before the submission is imported. What differs is only
what was imported before: never the submission (the zygote has never seen it), and never CUDA.
A fork after CUDA's initialisation is not valid, so preloading (grader.run.preload) trips on
any CUDA query (the import that made it is named and the zygote refuses to serve) and, after
it, the zygote checks that the CUDA driver was not initialised.

Channels are Unix SOCK_SEQPACKET pairs made by the parent; there is no listening socket, so no
other process (a sandboxed submission included) can reach a zygote:
- control, from the grade process: `fork` (a judge), `adopt` (an early rebuild the watch loop
  started, passed on as `--early-report`: grader.submission.build), `killall` (a regrade
  cancelled). Its end closing ends the zygote and its children.
- peer, from the judge zygote to the submission zygote: a `channel` per judge it forks, through
  which that judge forks its submission's process (its `--fork-via FD`, grader.judge.spawn).
Each forked child has a status channel of its own: its pid, then its exit code. The requester
closing it (or dying) kills the child's process group.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.util
import os
import runpy
import select
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy
import torch

from grader.common import settings
from grader.common.forking import MODULES, ZygoteError, pair, recv, send
from grader.run.preload import cuda_initialised, preload, triton_key_once
import gc

class _Child:
    """A forked child: its pid (the leader of its own process group) and its status channel."""
    __slots__ = ("pid", "status")

    def __init__(self, pid, status):
        self.pid, self.status = pid, status


# what each channel may ask: the watch loop everything; the judge zygote (peer) a channel per
# judge; a judge (its channel) the fork of its submission's process
ALLOWED = {"control": {"fork", "adopt", "killall"}, "peer": {"channel"}, "channel": {"fork"}}


class Server:
    def __init__(self, role: str, control: socket.socket, peer: socket.socket | None):
        self.role, self.control, self.peer = role, control, peer
        self.channels: list[socket.socket] = []   # the judges' channels (submission zygote)
        self.children: dict[int, _Child] = {}
        self.adopt: dict[tuple, str] = {}          # (tree, exercise, track) -> early report
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *a: None)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
        try:
            while True:
                # the judge zygote's peer is its own to ask (the answers are read where asked)
                peer = [self.peer] if self.peer is not None and self.role == "submission" else []
                watched = [self.control, self.wake_r] + peer + self.channels + \
                          [c.status for c in self.children.values()]
                ready, _, _ = select.select(watched, [], [])
                for r in ready:
                    if r is self.wake_r:
                        os.read(self.wake_r, 512)
                    elif r is self.control:
                        if not self._request(r, "control"):
                            return  # the watch loop is gone: so are we, and our children
                    elif r is self.peer:
                        if not self._request(r, "peer"):
                            self.peer.close()
                            self.peer = None
                    elif r in self.channels:
                        if not self._request(r, "channel"):
                            self.channels.remove(r)
                            r.close()
                    else:
                        self._status(r)
                self._reap()
        finally:
            self._kill_all()

    def _request(self, sock, source: str) -> bool:
        try:
            msg, fds = recv(sock)
        except (OSError, ValueError):
            return False
        if msg is None:
            return False
        op = msg.get("op") if msg.get("op") in ALLOWED[source] else None
        if op == "fork" and len(fds) >= 2:
            self._fork(msg, fds)
            return True
        if op == "channel" and fds:
            self.channels.append(socket.socket(fileno=fds.pop(0)))
            send(sock, {"ok": True})
        elif op == "adopt":
            self.adopt[tuple(msg["key"])] = msg["report"]
        elif op == "killall":
            for c in list(self.children.values()):
                self._signal(c, signal.SIGKILL)
        for fd in fds:
            os.close(fd)
        return True

    def _status(self, sock) -> None:
        child = next((c for c in self.children.values() if c.status is sock), None)
        if child is None:
            return
        try:
            msg, fds = recv(sock)
        except OSError:
            msg, fds = None, []
        for fd in fds:
            os.close(fd)
        if msg is None:  # the requester let go of it (or died): the child goes too (reaped
            #              below, unannounced)
            self._signal(child, signal.SIGKILL)
            sock.close()
            self.children.pop(child.pid)
        elif msg.get("op") == "signal":
            self._signal(child, int(msg["sig"]))

    def _signal(self, child: _Child, sig: int) -> None:
        """The child's whole process group (what it started, as a judge's session is killed)."""
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(child.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            try:
                send(child.status, {"exit": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass
            child.status.close()

    def _kill_all(self) -> None:
        for c in list(self.children.values()):
            self._signal(c, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.01)

    # the fork ---------------------------------------------------------------------------------

    def _fork(self, msg: dict, fds: list[int]) -> None:
        status = socket.socket(fileno=fds[0])
        stdout, passed = fds[1], fds[2:]
        argv = msg["argv"]
        channel = None
        try:
            if self.role == "judge":  # its submission's process is forked through this channel
                channel, theirs = pair()
                try:
                    send(self.peer, {"op": "channel"}, [theirs.fileno()])
                    reply, _ = recv(self.peer, timeout=30)
                finally:
                    theirs.close()
                if reply is None:
                    raise ZygoteError("the submission zygote went away")
            early = self.adopt.pop(_key(argv), None) if self.role == "submission" else None
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except Exception as e:
            send(status, {"error": f"{type(e).__name__}: {e}"})
            status.close()
            for fd in [stdout, *passed]:
                os.close(fd)
            if channel is not None:
                channel.close()
            return
        if pid == 0:
            code = 1
            try:
                self._become(msg, argv, status, stdout, passed, channel, early)
                code = _run(MODULES[self.role], argv)
            finally:
                os._exit(code)
        os.close(stdout)
        for fd in passed:
            os.close(fd)
        if channel is not None:
            channel.close()
        self.children[pid] = _Child(pid, status)
        send(status, {"pid": pid})

    def _become(self, msg, argv, status, stdout, passed, channel, early) -> None:
        """In the child: drop the zygote's channels and signal handling, take the requester's
        descriptors, folder, environment and session, as a started process has them."""
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in [self.control, self.peer, status, *self.channels,
                  *(c.status for c in self.children.values())]:
            if s is not None:
                s.close()
        os.close(self.wake_r)
        os.close(self.wake_w)
        if msg.get("session"):
            os.setsid()  # a judge: a time limit kills its session (grader.run.launch.kill_judge)
        else:
            os.setpgid(0, 0)  # a submission's process: killed with what it started
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stdout, 2)
        for fd in {null, stdout}:
            os.close(fd)
        for fd in passed:  # inheritable, as Popen's pass_fds leaves them
            os.set_inheritable(fd, True)
        # the command line names a passed descriptor by its number in the requester: here it
        # has the number it arrived with (taking the old number could close one a preloaded
        # library holds)
        numbers = dict(zip(map(str, msg.get("pass_fds", [])), map(str, passed)))
        argv[:] = [numbers.get(a, a) if i and argv[i - 1] == "--fd" else a
                   for i, a in enumerate(argv)]
        if sys.path and sys.path[0] == os.getcwd():  # `python -m` puts its folder first
            sys.path[0] = str(Path(msg["cwd"]).resolve())
        os.chdir(msg["cwd"])
        os.environ.clear()
        os.environ.update(msg["env"])
        settings.current.cache_clear()  # the request's settings, not the zygote's
        _threads(msg["env"])
        try:  # numpy's global generator: fresh per process, as a started process has it
            numpy.random.seed()
        except ImportError:
            pass
        # told on the command line, as a started process would be told: a judge, the channel
        # it forks its submission's process through (grader.judge.spawn); a submission's
        # process, the early rebuild the watch loop started for it (grader.submission.build)
        if channel is not None:
            argv += ["--fork-via", str(channel.detach())]
        if early is not None:
            argv += ["--early-report", early]


def _threads(env: dict) -> None:
    """torch's CPU threads as the environment asks (OMP_NUM_THREADS is read once, when torch
    loaded its OpenMP, in the zygote): a checking process gets its share of the cores."""
    n = env.get("OMP_NUM_THREADS")
    if n and n.isdigit() and int(n) > 0:
        torch.set_num_threads(int(n))


def _key(argv: list[str]) -> tuple:
    """A submission's (tree, exercise, track), from its command line."""
    get = lambda flag: argv[argv.index(flag) + 1] if flag in argv else None
    tree = get("--tree")
    return (str(Path(tree).resolve()) if tree else None, get("--exercise"), get("--track"))


def _run(module: str, argv: list[str]) -> int:
    """`python -m module argv...` in this process; its exit code."""
    code = 0
    try:
        spec = importlib.util.find_spec(module)
        sys.argv = [spec.origin, *argv]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()  # what a started process runs at its exit
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return code


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.run.zygote")
    p.add_argument("--role", choices=sorted(MODULES), required=True)
    p.add_argument("--control", type=int, required=True)
    p.add_argument("--peer", type=int)
    p.add_argument("--preload", action="append", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    control = socket.socket(fileno=args.control)
    peer = socket.socket(fileno=args.peer) if args.peer is not None else None
    start = time.perf_counter()
    try:
        skipped = preload(args.role, args.preload)
        why = cuda_initialised()
        if why is not None:
            raise ZygoteError(why)
        if threading.active_count() > 1:  # a Python thread would be lost in every fork
            raise ZygoteError(f"{threading.active_count() - 1} Python thread(s) running after "
                              f"the imports")
    except ZygoteError as e:
        send(control, {"refused": str(e)})
        return 3
    for s in skipped:
        print(f"zygote {args.role}: not preloaded: {s}", flush=True)
    if args.role == "submission":
        triton_key_once()
    # what the imports made is never collected: a child's full collections (pytest makes a few
    # as it ends) skip it, instead of writing to every page of it (copy-on-write: ~0.5 s here)
    gc.collect()
    gc.freeze()
    send(control, {"ready": True, "seconds": round(time.perf_counter() - start, 2)})
    Server(args.role, control, peer).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
