"""The kept processes (grader.run.keeper): a grade asked to keep them leaves a keeper that the
next grade of this user forks its judges from, with the verdicts of processes started afresh; a
sandboxed submission cannot connect to it, another user is refused, and it ends when asked or
idle. Its name moves with the grader's sources."""
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import signal_fence
from grader.common.discover import discover
from grader.common.forking import pair, send
from grader.common.paths import ROOT
from grader.common.settings import from_environment
from grader.run import keeper
from grader.run.grade import Submission, grade

EX01 = discover(only="01")[0]


def verdicts(g):
    return [(r.track, [(c.name, c.outcome) for c in r.checks], round(s.total, 2))
            for _, r, s in g.rows]


def _gone(name: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conn = keeper._connect(name)
        if conn is None:
            return True
        conn.close()
        time.sleep(0.1)
    return False


@pytest.fixture
def name(monkeypatch):
    """A keeper name of this test's own (a developer's kept processes are left alone)."""
    own = f"grader-keeper-{os.getuid()}-test{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setattr(keeper, "keeper_name", lambda gpu: own)
    yield own
    conn = keeper._connect(own)
    if conn is not None:
        send(conn, {"op": "stop"})
        conn.close()
    assert _gone(own), "the keeper did not stop when asked"
    shutil.rmtree(keeper.KEEP / own, ignore_errors=True)


def test_a_kept_grade_serves_the_next_with_the_same_verdicts(monkeypatch, name):
    signal_fence("auto")  # (the keeper needs the scope that keeps the submission out)
    served = []
    real = keeper.kept_forker
    monkeypatch.setattr(keeper, "kept_forker", lambda *a: served.append(real(*a)) or served[-1])
    run = from_environment().replace(keep=120)
    first = grade(Submission(ROOT / "solutions", (EX01,), settings=run, bench=False))
    assert keeper._connect(name) is not None  # still serving after the grade
    second = grade(Submission(ROOT / "solutions", (EX01,), settings=run, bench=False))
    assert len(served) == 2 and all(f is not None for f in served)
    log = (keeper.KEEP / name / "keeper.log").read_text()
    assert log.count("keeper: serving") == 1, log  # one keeper, its zygotes imported once
    afresh = grade(Submission(ROOT / "solutions", (EX01,), settings=run.replace(keep=0),
                              bench=False))
    assert len(served) == 2  # keep = 0: not asked
    assert verdicts(first) == verdicts(second) == verdicts(afresh)
    assert all(s.total > 0 for _, _, s in first.rows), verdicts(first)
    assert keeper.stop_keepers(wait_s=60) >= 1
    # it waited for the keeper's end: its zygotes stopped (the log's last line comes after them)
    assert keeper._connect(name) is None
    log = keeper.KEEP / name / "keeper.log"
    assert "keeper: stopped: asked to stop" in log.read_text()


def test_a_sandboxed_process_cannot_reach_a_keeper(tmp_path):
    """Landlock's abstract socket scope, set with the signal scope: the submission's process
    cannot connect to a socket made outside its sandbox; the same connect outside it can."""
    state = signal_fence("auto")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    own = f"grader-keeper-{os.getuid()}-scope{os.getpid()}"
    listener.bind("\0" + own)
    listener.listen()
    probe = (f"import socket, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
             "from pathlib import Path\n"
             "from grader.submission.sandbox import close_filesystem\n"
             f"{{}}\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
             "try:\n"
             f"    s.connect('\\0{own}')\n"
             "except PermissionError:\n"
             "    sys.exit(3)\n"
             "sys.exit(0)\n")
    try:
        sandboxed = subprocess.run([sys.executable, "-c", probe.format(
            f"print(close_filesystem([Path({str(tmp_path)!r})]))")], capture_output=True,
            text=True, timeout=60)
        assert sandboxed.returncode == 3, sandboxed.stdout + sandboxed.stderr
        assert state in sandboxed.stdout
        assert "abstract sockets: Landlock scope" in sandboxed.stdout
        outside = subprocess.run([sys.executable, "-c", probe.format("")], capture_output=True,
                                 text=True, timeout=60)
        assert outside.returncode == 0, outside.stdout + outside.stderr
    finally:
        listener.close()


def test_the_keeper_relays_forks_of_its_user_only_and_ends_when_idle():
    """serve(): a fork request from a connection of this user reaches the judge zygote's
    channel with its descriptors; one from another user's process is never read; with no grade
    connected it returns after `idle` seconds."""
    if os.getuid() != 0:
        pytest.skip("another user's process needs root to make here")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    own = f"grader-keeper-{os.getuid()}-relay{os.getpid()}"
    listener.bind("\0" + own)
    listener.listen()
    judge, zygote_side = pair()
    result = []
    t = threading.Thread(target=lambda: result.append(keeper.serve(listener, judge, [], 1.0)))
    t.start()
    stranger = subprocess.run([sys.executable, "-c", (
        "import os, socket, json\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        f"s.connect('\\0{own}')\n"
        "try:\n"
        "    s.send(json.dumps({'op': 'fork', 'argv': ['stranger']}).encode())\n"
        "    print('closed' if s.recv(10) == b'' else 'answered')\n"
        "except OSError as e:\n"
        "    print('closed', e)\n")], capture_output=True, text=True, timeout=30)
    assert "closed" in stranger.stdout, stranger.stdout + stranger.stderr
    conn = keeper._connect(own)
    r, w = os.pipe()
    send(conn, {"op": "fork", "argv": ["mine"]}, [r])
    zygote_side.settimeout(10)
    data, fds, _, _ = socket.recv_fds(zygote_side, 1 << 16, 4)
    assert b'"mine"' in data and len(fds) == 1  # the stranger's request never came through
    for fd in (r, w, *fds):
        os.close(fd)
    conn.close()
    t.join(timeout=30)
    assert result == ["idle for 1 s"]
    listener.close()


def test_the_keepers_name_moves_with_the_graders_sources(monkeypatch, tmp_path):
    """Another grader (a pull, an edit of a module the zygotes import) is another keeper: the
    running one's preloaded modules would be stale."""
    (tmp_path / "grader").mkdir()
    source = tmp_path / "grader" / "x.py"
    source.write_text("A = 1\n")
    monkeypatch.setattr(keeper, "ROOT", tmp_path)
    before = keeper.keeper_name(False)
    assert keeper.keeper_name(False) == before and keeper.keeper_name(True) != before
    source.write_text("A = 2\n")
    assert keeper.keeper_name(False) != before
    assert before.startswith(f"grader-keeper-{os.getuid()}-")
