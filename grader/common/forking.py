"""Forking: ask a zygote (grader.run.zygote) for a process, and hold it as subprocess.Popen
holds one. The requester's side of the protocol, and the protocol itself.

Channels are Unix SOCK_SEQPACKET pairs made by the parent; there is no listening socket, so no
other process (a sandboxed submission included) can reach a zygote. One JSON message per packet,
descriptors passed beside it. Two processes are requesters: the grade process (its judges, through
the judge zygote) and a judge forked by that zygote (its submission's process, through the
channel the zygote gave it: the judge's `--fork-via FD`). Standard library only.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time

MODULES = {"judge": "grader.judge", "submission": "grader.submission"}  # what each role runs
MAX_MESSAGE = 1 << 20  # a request: the environment as JSON (a few KiB), well under this
MAX_FDS = 8


class ZygoteError(RuntimeError):
    """A zygote could not start (it refused: CUDA was touched while importing) or went away."""


# --- both sides: one message per packet --------------------------------------------------------

def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send(sock: socket.socket, msg: dict, fds=()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv(sock: socket.socket, timeout: float | None = None) -> tuple[dict | None, list[int]]:
    """One message and the descriptors that came with it; (None, []) at the other end's close."""
    if timeout is not None and not select.select([sock], [], [], timeout)[0]:
        raise TimeoutError
    data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


# --- the requester's side -----------------------------------------------------------------------

class Forked:
    """A process a zygote forked, as subprocess.Popen shows one (pid, poll, wait, kill, returncode),
    its exit code read from its status channel."""

    def __init__(self, status: socket.socket, args):
        self.status, self.args = status, args
        self.returncode = None
        self.stdin = self.stdout = self.stderr = None
        self._lock = threading.Lock()
        msg, _ = recv(status, timeout=60)
        if msg is None or "pid" not in msg:
            status.close()
            raise ZygoteError((msg or {}).get("error") or "the zygote went away")
        self.pid = msg["pid"]

    def _read(self, timeout) -> None:
        if self.returncode is not None:
            return
        try:  # not under the lock: a kill from another thread must not wait for this
            if not select.select([self.status], [], [], timeout)[0]:
                return
        except (OSError, ValueError):  # closed meanwhile: read below says how it ended
            pass
        with self._lock:
            if self.returncode is not None:
                return
            msg, _ = recv(self.status)
            # no message: the zygote is gone, and its children were killed with it
            self.returncode = msg["exit"] if msg is not None else -signal.SIGKILL
            self.status.close()

    def poll(self):
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._read(left)
            if self.returncode is None and deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is None:
                try:
                    send(self.status, {"op": "signal", "sig": int(sig)})
                except OSError:
                    pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Forker:
    """Starts `python -m MODULE ...` commands by asking a zygote to fork them: what the grade
    process and a judge use instead of subprocess.Popen where a zygote serves them."""

    def __init__(self, channel: socket.socket, module: str):
        self.channel, self.module = channel, module
        self.lock = threading.Lock()
        self.cancelled = False

    def handles(self, cmd) -> bool:
        return len(cmd) >= 3 and cmd[1] == "-m" and cmd[2] == self.module

    def start(self, cmd, *, cwd, env: dict, stdout, pass_fds=(), new_session=False) -> Forked:
        if not self.handles(cmd):
            raise ValueError(f"this zygote forks {self.module}, not {cmd[:3]}")
        mine, theirs = pair()
        request = {"op": "fork", "argv": list(cmd[3:]), "cwd": str(cwd), "env": dict(env),
                   "session": bool(new_session), "pass_fds": list(pass_fds)}
        try:
            with self.lock:
                if self.cancelled:
                    raise ZygoteError("cancelled: a newer save is being graded")
                send(self.channel, request, [theirs.fileno(), stdout.fileno(), *pass_fds])
        except (OSError, ZygoteError) as e:
            mine.close()
            raise e if isinstance(e, ZygoteError) else \
                ZygoteError(f"the zygote went away ({e})") from None
        finally:
            theirs.close()
        return Forked(mine, cmd)
