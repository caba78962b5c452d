"""Zygote: a process that has imported what a judge, or a submission's process, imports (torch,
triton, numpy, hypothesis, pytest, the grader's modules) and has never initialised CUDA, and that
forks a fresh judge or submission's process per request. The watch loop (grader.tools.watch) keeps one
of each, so a regrade pays no import (3-4 s of torch and friends per process here, more on the
GPU hosts).

    python -m grader.run.zygote --role judge|submission --control FD [--peer FD]

A forked child is the process that `python -m grader.judge ...` (or grader.submission) would
be: the requester's environment, working folder, output file and descriptors, a session (a
judge) or process group (a submission's process) of its own, and the module run as __main__.
So everything that process does after its start happens in the child as it does today: the
judge's phases; the submission's sandbox (Landlock, signal scope, the audit hook, the watched
functions of grader.submission), all before the submission is imported. What differs is only
what was imported before: never the submission (the zygote has never seen it), and never CUDA.
A fork after CUDA's initialisation is not valid, so preloading trips on any CUDA query (the
import that made it is named and the zygote refuses to serve) and, after it, the zygote checks
that the CUDA driver was not initialised.

Channels are Unix SOCK_SEQPACKET pairs made by the parent; there is no listening socket, so no
other process (a sandboxed submission included) can reach a zygote:
- control, from the watch loop: `fork` (a judge), `adopt` (an early rebuild the loop started,
  grader.submission.build), `killall` (a regrade cancelled). Its end closing ends the zygote and its children.
- peer, from the judge zygote to the submission zygote: a `channel` per judge it forks, through
  which that judge forks its submission's process (grader.run.launch.FORKER in the judge).
Each forked child has a status channel of its own: its pid, then its exit code. The requester
closing it (or dying) kills the child's process group.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from grader.common.paths import INDUCTOR, ROOT

MODULES = {"judge": "grader.judge", "submission": "grader.submission"}

# What each process imports before it does anything that depends on its request. Nothing here may
# query CUDA at import (grader.judge.plugin does: HAS_GPU; it is imported by pytest in the child).
PRELOAD = {
    "judge": ["torch", "numpy", "pytest", "pytest_timeout", "_hypothesis_pytestplugin",
              "hypothesis", "grader.common.discover", "grader.run.launch", "grader.run.results",
              "grader.judge.review", "grader.judge.proxy", "grader.judge.check", "grader.judge.cases", "grader.judge.testing",
              "grader.judge.strategies", "grader.judge.reference", "grader.judge.baselines", "grader.judge.measure",
              "grader.common.timing", "grader.common.trust", "grader.common.seam", "grader.common.settings"],
    "submission": ["torch", "numpy", "triton", "triton.language", "grader.submission.build",
                   "grader.submission.build_errors", "grader.common.discover", "grader.submission.evidence", "grader.common.pyfile",
                   "grader.submission.sandbox", "grader.common.settings", "grader.common.timing", "grader.common.trust",
                   "grader.common.seam", "grader.submission.loader", "grader.submission.interp",
                   "torch.autograd.profiler", "multiprocessing.connection", "landlock"],
}
MAX_MESSAGE = 1 << 20  # a request: the environment as JSON (a few KiB), well under this
MAX_FDS = 8


class ZygoteError(RuntimeError):
    """A zygote could not start (it refused: CUDA was touched while importing) or went away."""


# --- both sides: one message per packet --------------------------------------------------------

def pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def _send(sock: socket.socket, msg: dict, fds=()) -> None:
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def _recv(sock: socket.socket, timeout: float | None = None) -> tuple[dict | None, list[int]]:
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
        msg, _ = _recv(status, timeout=60)
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
            msg, _ = _recv(self.status)
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
                    _send(self.status, {"op": "signal", "sig": int(sig)})
                except OSError:
                    pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Forker:
    """Starts `python -m MODULE ...` commands by asking a zygote to fork them: what
    grader.run.launch uses instead of subprocess.Popen when `grader.run.launch.FORKER` is set."""

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
                _send(self.channel, request, [theirs.fileno(), stdout.fileno(), *pass_fds])
        except (OSError, ZygoteError) as e:
            mine.close()
            raise e if isinstance(e, ZygoteError) else \
                ZygoteError(f"the zygote went away ({e})") from None
        finally:
            theirs.close()
        return Forked(mine, cmd)


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
            msg, _ = _recv(self.control, timeout=timeout)
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
            _send(self.control, msg)
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
    from grader.run.launch import child_env
    env = child_env(settings)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(INDUCTOR))
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


# --- the zygote's side --------------------------------------------------------------------------

_TRIPPED: list[str] = []  # every tripwire that fired (a module may swallow the exception)


def _trip(what: str):
    def tripped(*a, **k):
        _TRIPPED.append(what)
        raise ZygoteError(f"CUDA was queried ({what}) while preloading")
    return tripped


def preload(role: str, extra=()) -> list[str]:
    """Import the role's modules with every way torch has to reach the CUDA driver replaced by a
    tripwire: a module that queries CUDA at import raises here, naming itself, instead of
    initialising the driver. The imports that failed otherwise are returned (the child imports
    them itself, as a started process would)."""
    import torch
    names = ("_cuda_getDeviceCount", "_cuda_init", "_cuda_getDevice", "_cuda_setDevice")
    saved = {n: getattr(torch._C, n) for n in names if hasattr(torch._C, n)}
    nvml = os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    skipped = []
    try:
        for n in saved:
            setattr(torch._C, n, _trip(f"torch._C.{n}"))
        saved_lazy = torch.cuda._lazy_init
        torch.cuda._lazy_init = _trip("torch.cuda._lazy_init")
        try:
            for name in PRELOAD[role] + list(extra):
                try:
                    importlib.import_module(name)
                except ZygoteError as e:
                    raise ZygoteError(f"{e}: importing {name}") from None
                except Exception as e:  # not installed here: the child will say so, as ever
                    skipped.append(f"{name} ({type(e).__name__}: {e})")
                if _TRIPPED:  # the module caught it, and may keep a wrong answer: refuse too
                    raise ZygoteError(f"CUDA was queried ({_TRIPPED[0]}) while preloading: "
                                      f"importing {name}")
        finally:
            torch.cuda._lazy_init = saved_lazy
    finally:
        for n, fn in saved.items():
            setattr(torch._C, n, fn)
        if nvml is not None:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml
    return skipped


def cuda_initialised() -> str | None:
    """Why this process may not fork (the CUDA driver initialised, a CUDA context), or None."""
    import torch
    if torch.cuda.is_initialized():
        return "torch initialised CUDA"
    libs = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
            if "/libcuda.so" in line}
    for lib in libs:  # loaded is not initialised: cuCtxGetCurrent answers 3 before cuInit
        import ctypes
        ctx = ctypes.c_void_p()
        rc = ctypes.CDLL(lib).cuCtxGetCurrent(ctypes.byref(ctx))
        if rc != 3:  # CUDA_ERROR_NOT_INITIALIZED
            return f"the CUDA driver was initialised ({lib}: cuCtxGetCurrent returned {rc})"
    return None


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
            msg, fds = _recv(sock)
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
            _send(sock, {"ok": True})
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
            msg, fds = _recv(sock)
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
                _send(child.status, {"exit": os.waitstatus_to_exitcode(status)})
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
                    _send(self.peer, {"op": "channel"}, [theirs.fileno()])
                    reply, _ = _recv(self.peer, timeout=30)
                finally:
                    theirs.close()
                if reply is None:
                    raise ZygoteError("the submission zygote went away")
            early = self.adopt.pop(_key(argv), None) if self.role == "submission" else None
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
        except Exception as e:
            _send(status, {"error": f"{type(e).__name__}: {e}"})
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
        _send(status, {"pid": pid})

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
        from grader.common import settings
        settings.current.cache_clear()  # the request's settings, not the zygote's
        _threads(msg["env"])
        try:  # numpy's global generator: fresh per process, as a started process has it
            import numpy
            numpy.random.seed()
        except ImportError:
            pass
        if channel is not None:
            from grader.run import launch
            launch.FORKER = Forker(channel, MODULES["submission"])
        if early is not None:
            from grader.submission.build import adopt_early_rebuild
            adopt_early_rebuild(Path(early))


def _threads(env: dict) -> None:
    """torch's CPU threads as the environment asks (OMP_NUM_THREADS is read once, when torch
    loaded its OpenMP, in the zygote): a checking process gets its share of the cores."""
    n = env.get("OMP_NUM_THREADS")
    if n and n.isdigit() and int(n) > 0:
        import torch
        torch.set_num_threads(int(n))


def _key(argv: list[str]) -> tuple:
    """A submission's (tree, exercise, track), from its command line."""
    get = lambda flag: argv[argv.index(flag) + 1] if flag in argv else None
    tree = get("--tree")
    return (str(Path(tree).resolve()) if tree else None, get("--exercise"), get("--track"))


def _run(module: str, argv: list[str]) -> int:
    """`python -m module argv...` in this process; its exit code."""
    import runpy
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
        _send(control, {"refused": str(e)})
        return 3
    for s in skipped:
        print(f"zygote {args.role}: not preloaded: {s}", flush=True)
    # what the imports made is never collected: a child's full collections (pytest makes a few
    # as it ends) skip it, instead of writing to every page of it (copy-on-write: ~0.5 s here)
    import gc
    gc.collect()
    gc.freeze()
    _send(control, {"ready": True, "seconds": round(time.perf_counter() - start, 2)})
    Server(args.role, control, peer).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
