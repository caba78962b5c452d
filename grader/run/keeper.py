"""Keeper: a grade's zygotes (grader.run.zygote) kept ready for the next command, so that
`make exercise-08 QUICK=1` after an edit pays no process's imports.

    python -m grader.run.keeper --name NAME --idle SECONDS [--gpu]   (started by kept_forker)

A grade asked to keep its processes warm (Settings.keep: `make grade` and `make exercise-NN`)
connects to the keeper of this repository, grader, Python and packages (`keeper_name` hashes
them: an edit of the grader or an upgrade of torch names another), or starts one and waits for
its zygotes' imports. The grade's judges are then forked as a grade of several tracks forks them
from zygotes of its own (grader.run.grade._forking), so every process is the one it would have
been: the judge's phases, the submission's sandbox, all after the fork. The keeper exits after
SECONDS without a grade connected (its zygotes with it), when a zygote dies, or when asked
(`make stop`).

Who can reach it. It listens on an abstract Unix socket (no file to find or to write):
- a process of another user is refused (SO_PEERCRED) and its connection closed;
- a submission's process cannot connect at all: its Landlock domain is scoped against abstract
  sockets made outside it (ABI 6, grader.submission.sandbox), and connect() fails with EPERM.
So only where that scope is on (Landlock ABI 6, the signal setting `auto`): elsewhere a grade
starts its processes as ever. The keeper itself imports no torch, runs no check and no
submission: it hands fork requests to the judge zygote, which forks the judge as asked.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from grader.common.forking import MODULES, Forker, ZygoteError, recv, send
from grader.common.machine import landlock_abi
from grader.common.paths import CACHE, ROOT
from grader.common.processes import child_env
from grader.common.settings import from_environment
from grader.run.zygotes import start_zygotes

KEEP = CACHE / "keeper"  # each keeper's log and its zygotes' logs
READY_S = 300            # the longest a grade waits for a keeper's zygotes to import
NAME_TAKEN = 4           # a keeper's exit code: another holds the name (it serves instead)
# what the zygotes' imports read from the environment: another value is another keeper
_ENV = ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE", "CUDA_VISIBLE_DEVICES",
        "TRITON_INTERPRET", "GRADER_CACHE", "LD_LIBRARY_PATH", "PATH")


def allowed(settings) -> bool:
    """May this grade use a keeper: asked to, and a submission's process cannot reach one. On a
    GPU host too: there a grade without one started its own zygotes, 2.4-3.0 s before its first
    judge, in every `make exercise-13 QUICK=1` (an H200, docs/performance.md, "Grading time",
    the session of 2026-11-30 08:40 UTC, which measured both on one machine)."""
    return settings.keep > 0 and settings.signals == "auto" and landlock_abi() >= 6


def keeper_name(gpu: bool) -> str:
    """The abstract socket's name: this user, repository, Python, the grader's files (what the
    zygotes imported, and any data they read) and packages."""
    h = hashlib.sha256()
    for part in (str(ROOT), str(CACHE), sys.executable, str(gpu),
                 *(os.environ.get(k, "") for k in _ENV)):
        h.update(part.encode() + b"\0")
    for path in sorted((ROOT / "grader").rglob("*")):  # its modules and the data they read
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    for package in ("torch", "triton", "numpy", "pytest", "hypothesis", "landlock"):
        spec = importlib.util.find_spec(package)  # found, not imported
        if spec is not None and spec.origin:
            st = os.stat(spec.origin)
            h.update(f"{package} {spec.origin} {st.st_mtime_ns} {st.st_size}".encode())
    return f"grader-keeper-{os.getuid()}-{h.hexdigest()[:24]}"


def _connect(name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        return None
    return sock


def kept_forker(settings, gpu: bool, say) -> Forker | None:
    """A forker of judges through this repository's keeper, started here if none serves (this
    grade then waits for its imports, as for zygotes of its own); None if none can serve."""
    name = keeper_name(gpu)
    conn = _connect(name)
    if conn is not None:
        return Forker(conn, MODULES["judge"])
    folder = KEEP / name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "grader.run.keeper", "--name", name,
           "--idle", str(int(settings.keep))] + (["--gpu"] if gpu else [])
    with open(folder / "keeper.log", "ab") as log:
        # a session of its own: it outlives this command, and a Ctrl-C here does not reach it
        proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(settings.replace(keep_logs=None)),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        conn = _connect(name)  # refused until its zygotes have imported and it listens
        if conn is not None:
            say(f"grade: processes kept ready for the next {int(settings.keep)} s "
                f"(grader.run.keeper; make stop ends them)")
            return Forker(conn, MODULES["judge"])
        code = proc.poll()
        if code is not None and code != NAME_TAKEN:  # (taken: another keeper is importing)
            tail = (folder / "keeper.log").read_text(errors="replace").strip().splitlines()
            say(f"grade: no kept processes ({' / '.join(tail[-2:]) or f'exit {code}'}); "
                f"this grade starts its own")
            return None
        time.sleep(0.05)
    say(f"grade: the kept processes were not ready after {READY_S} s; this grade starts its own")
    return None


STOP_WAIT_S = 30.0  # how long `--stop` waits for the keepers it asked to end


def stop_keepers(wait_s: float = 0.0) -> int:
    """Ask every keeper of this user to stop (`make stop`); how many were asked. `wait_s`: wait
    (at most that long) until each has exited. A keeper closes its socket first and then stops
    its zygotes, which still write to .cache as they end: `make clean`'s rm, or a benchmark's
    fresh row, right after the ask met a .cache being written ("Directory not empty")."""
    asked, pids = 0, []
    prefix = f"grader-keeper-{os.getuid()}-"
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return 0
    for name in {f.split()[-1][1:] for f in lines if f.split()[-1].startswith("@" + prefix)}:
        conn = _connect(name)
        if conn is not None:
            pids.append(_peer(conn)[0])
            send(conn, {"op": "stop"})
            conn.close()
            asked += 1
    deadline = time.monotonic() + wait_s
    while (pids := [p for p in pids if _running(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return asked


def _running(pid: int) -> bool:
    """Not exited (a zombie, not yet reaped by a parent that is this process, has exited)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# --- the keeper process ------------------------------------------------------------------------

def _peer(conn: socket.socket) -> tuple[int, int]:
    """The (pid, uid) of the process at the other end (SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def serve(listener: socket.socket, judge: socket.socket, others: list, idle: float) -> str:
    """Relay each connected grade's fork requests to the judge zygote's control channel until
    `idle` seconds pass with no grade connected, a zygote dies, or a grade asks to stop. The
    forked judge's pid and exit go to the grade over the status channel it passed along."""
    conns: list[socket.socket] = []
    last = time.monotonic()
    while True:
        wait = None if conns else idle - (time.monotonic() - last)
        if wait is not None and wait <= 0:
            return f"idle for {idle:.0f} s"
        ready = select.select([listener, judge, *others, *conns], [], [], wait)[0]
        for r in ready:
            if r is listener:
                conn, _ = listener.accept()
                if _peer(conn)[1] != os.getuid():
                    conn.close()  # another user's process: never served
                else:
                    conns.append(conn)
            elif r is judge or r in others:  # a zygote's control only reads at its end
                return "a zygote exited"
            else:
                try:
                    msg, fds = recv(r)
                except (OSError, ValueError):
                    msg, fds = None, []
                if msg is None:  # that grade is done (its children end with their channels)
                    conns.remove(r)
                    r.close()
                    last = time.monotonic()
                    continue
                if msg.get("op") == "fork":
                    try:
                        send(judge, msg, fds)
                    except OSError:
                        return "the judge zygote went away"
                for fd in fds:
                    os.close(fd)
                if msg.get("op") == "stop":
                    return "asked to stop"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.run.keeper")
    p.add_argument("--stop", action="store_true",
                   help="ask this user's keepers to stop, and wait until they have")
    p.add_argument("--name")
    p.add_argument("--idle", type=float, default=900)
    p.add_argument("--gpu", action="store_true")
    args = p.parse_args(argv)
    if args.stop:
        print(f"keeper: {stop_keepers(STOP_WAIT_S)} kept set(s) of processes stopped")
        return 0
    if not args.name:
        p.error("--name is required (a grade starts the keeper: kept_forker)")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind("\0" + args.name)  # the name, claimed before the imports
    except OSError:
        print(f"keeper: {args.name} is served already", flush=True)
        return NAME_TAKEN
    try:
        zygotes = start_zygotes(from_environment(), args.gpu, KEEP / args.name)
    except ZygoteError as e:
        print(f"keeper: {e}", flush=True)
        return 3
    listener.listen(16)  # connections are refused until now: the zygotes are ready
    print(f"keeper: serving {args.name} (imports {zygotes[0].seconds} s / "
          f"{zygotes[1].seconds} s)", flush=True)
    try:
        why = serve(listener, zygotes[0].control, [zygotes[1].control], args.idle)
    finally:
        listener.close()
        for z in zygotes:
            z.stop()
    print(f"keeper: stopped: {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
