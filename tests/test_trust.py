"""The trust machinery itself: the sandbox, the signal fence, the snapshot fallback, and honest
kernels never accused. (See README, "What the grader trusts".)

The cheats a grader must survive are known-bad submissions, declared beside their exercise
(`exercises/NN_name/wrong/*.toml`, graded by tests/test_wrong.py): delegation, patched checks
and evidence, forged results, writes into the repository, signals out of the sandbox, output
caching, deferred writes, NaN, low precision, races. What is here is not a submission: a unit of
the sandbox, of the snapshot, and submissions that must pass.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import signal_fence
from grader.common.discover import discover
from grader.common.paths import ROOT
from grader.run.grade import grade_track

EX = {e.number: e for e in discover()}


def _failed(r) -> dict:
    return {c.name: c.message for c in r.checks if c.outcome == "failed"}


@pytest.mark.parametrize("mode", ["auto", "seccomp"])
def test_a_submission_cannot_signal_outside_its_sandbox(tmp_path, mode):
    """Landlock's signal scope (ABI 6+), or the seccomp filter where the kernel is older (forced
    here by signals = seccomp): the sandboxed process cannot kill a process started before it,
    alone or as a group; its own signals (to itself, to its threads) still arrive."""
    state = signal_fence(mode)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    try:
        code = subprocess.run([sys.executable, "-c", (
            "import os, signal, sys, threading\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\n"
            "from grader.submission.sandbox import close_filesystem\n"
            f"print(close_filesystem([Path({str(tmp_path)!r})], signals={mode!r}))\n"
            "got = []\n"
            "signal.signal(signal.SIGUSR1, lambda *a: got.append(threading.get_ident()))\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "t = threading.Thread(target=lambda: [None for _ in range(10**6)])\n"
            "t.start(); signal.pthread_kill(t.ident, signal.SIGUSR1); t.join()\n"
            "if len(got) != 2:\n"
            "    sys.exit(4)\n"
            "for attack in (lambda: os.kill({0}, signal.SIGKILL),\n"
            "               lambda: os.killpg({0}, signal.SIGKILL)):\n"
            "    try:\n"
            "        attack()\n"
            "    except PermissionError:\n"
            "        continue\n"
            "    sys.exit(5)\n"
            "sys.exit(3)\n").format(victim.pid)], capture_output=True, text=True, timeout=60)
        assert code.returncode == 3, code.stdout + code.stderr
        assert state in code.stdout, code.stdout
        assert victim.poll() is None
    finally:
        victim.kill()


@pytest.mark.parametrize("tree", ["review_fixtures/public", "public_kernels"])
def test_public_kernels_are_not_accused(tree, configure):
    """Correct public kernels as 06 submissions, with only the exercise's glue: a Liger-style
    RMSNorm written from its documented algorithm, and Liger-Kernel's own (where the package is
    installed). Their values pass, nothing is flagged for review, no delegation is alleged; what
    their design does not offer (registration with the dispatcher, rows past Liger's 64K
    columns) is not selected here."""
    if tree == "public_kernels":
        pytest.importorskip("liger_kernel", reason="Liger-Kernel is not installed here")
    configure(select="forward_matches or backward_matches", examples="fixed")
    ex = EX["06"]
    r = grade_track(ROOT / "tests" / tree, ex, ex.tracks["triton"])
    assert not r.review and not r.tampering, (r.review, r.tampering)
    assert not _failed(r), _failed(r)
    assert any(c.name == "your kernels do the work" and c.outcome == "passed" for c in r.checks)


def test_without_landlock_the_snapshot_undoes_every_change(tmp_path):
    """The fallback where a kernel has no Landlock: every file under the roots is kept, and a
    change, a deletion or a new file is undone and named (outside the skipped caches)."""
    from grader.run.snapshot import Snapshot
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("b")
    (tmp_path / "cache").mkdir()
    snap = Snapshot.take([tmp_path], skip={str(tmp_path / "cache")})
    (tmp_path / "a.py").write_text("changed")
    (tmp_path / "sub" / "b.py").unlink()
    (tmp_path / "new.py").write_text("new")
    (tmp_path / "cache" / "built.so").write_text("a build output")
    changed = snap.restore()
    assert sorted(Path(c).name for c in changed) == ["a.py", "b.py", "new.py"], changed
    assert (tmp_path / "a.py").read_text() == "a" and (tmp_path / "sub" / "b.py").read_text() == "b"
    assert not (tmp_path / "new.py").exists() and (tmp_path / "cache" / "built.so").exists()


def test_the_sandbox_is_on(configure):
    """Landlock makes the repository read-only to the submission where the kernel has it; the
    hash check stands behind it everywhere."""
    configure(examples="fixed")
    ex = EX["01"]
    r = grade_track(ROOT / "solutions", ex, ex.tracks["triton"])
    state = r.build.get("sandbox", "")
    try:
        import landlock
        landlock.landlock_abi_version()
    except Exception:
        pytest.skip(f"no Landlock on this machine: {state}")
    assert state.startswith("Landlock ABI"), state
    assert not r.tampering and not _failed(r), _failed(r)
    assert any(c.name == "your kernels do the work" and c.outcome == "passed" for c in r.checks)
