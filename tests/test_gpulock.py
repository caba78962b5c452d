"""The GPU lock lets a grade's timings run side by side while each measurement has the GPU alone:
shared sections overlap, an exclusive one waits for them and shuts them out, and a waiting
measurement is not starved by shared work arriving after it (grader.judge.gpulock). Processes
here stand in for the judges: the lock is two flocked files, so it holds between processes."""
import json
import os
import subprocess
import sys
import time

from grader.common.paths import ROOT
from grader.common.settings import Settings
from grader.run import grade as grade_module

# one process: after START (a wall-clock time), wait WAIT s, then hold the lock (MODE) for
# HOLD s; prints when it got the lock and when it let go
HOLDER = """
import sys, time
from grader.judge import gpulock
mode, start, wait, hold = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
time.sleep(max(0.0, start + wait - time.time()))
with getattr(gpulock, mode)():
    got = time.time()
    time.sleep(hold)
    left = time.time()
print(got, left, flush=True)
"""


def _run(tmp_path, plan):
    """Start one process per (mode, wait, hold) at once; their (got, left) times, in order."""
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               **Settings(gpu_lock=str(tmp_path / "gpu.lock")).env())
    start = time.time() + 1.5  # every process imported and waiting by then
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, mode, str(start), str(w), str(h)],
                              env=env, stdout=subprocess.PIPE, text=True)
             for mode, w, h in plan]
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        out.append(tuple(float(x) for x in text.split()))
    return out


def test_shared_sections_overlap(tmp_path):
    (a_got, a_left), (b_got, b_left) = _run(tmp_path, [("shared", 0, 1.0), ("shared", 0.1, 1.0)])
    assert b_got < a_left and a_got < b_left  # held at the same time


def test_a_measurement_waits_for_shared_work_and_shuts_it_out(tmp_path):
    (r_got, r_left), (w_got, w_left), (s_got, s_left) = _run(
        tmp_path, [("shared", 0, 1.0), ("exclusive", 0.2, 0.8), ("shared", 0.5, 0.2)])
    assert w_got >= r_left  # waited for the shared work running when it asked
    # shared work that asked while the measurement waited (the turnstile) came after it
    assert s_got >= w_left


def test_measurements_take_turns(tmp_path):
    (a_got, a_left), (b_got, b_left) = _run(
        tmp_path, [("exclusive", 0, 0.6), ("exclusive", 0.1, 0.6)])
    assert b_got >= a_left


def test_nested_sections(tmp_path):
    """A measurement inside shared work gives the shared hold up and takes it back; shared
    inside a measurement is covered by it."""
    script = """
import fcntl, os, sys
from grader.judge import gpulock
def probe(mode):  # can another process take the lock in `mode` right now?
    code = f"import fcntl; f = open({sys.argv[1]!r}, 'a'); fcntl.flock(f, fcntl.{mode} | fcntl.LOCK_NB)"
    import subprocess
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
with gpulock.shared():
    assert probe("LOCK_SH") and not probe("LOCK_EX")
    with gpulock.exclusive():
        assert not probe("LOCK_SH")
        with gpulock.shared():
            assert not probe("LOCK_SH")
    assert probe("LOCK_SH") and not probe("LOCK_EX")
assert probe("LOCK_EX")
print("ok")
"""
    lock = str(tmp_path / "gpu.lock")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **Settings(gpu_lock=lock).env())
    r = subprocess.run([sys.executable, "-c", script, lock], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


def test_without_a_lock_the_sections_are_no_ops_and_the_timings_one_at_a_time():
    env = dict(os.environ, PYTHONPATH=str(ROOT), **Settings().env())
    code = ("from grader.judge import gpulock\n"
            "with gpulock.shared():\n    with gpulock.exclusive():\n        print('ok')")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.strip() == "ok", r.stderr
    assert grade_module._timing_jobs(Settings()) == 1


def test_timings_side_by_side_as_the_gpu_memory_allows(monkeypatch):
    lock = Settings(gpu_lock="/nonexistent/gpu.lock")
    for gib, jobs in ((139.8, 4), (79.6, 2), (40.0, 1), (0.0, 1)):
        monkeypatch.setattr(grade_module, "gpu_memory_gib", lambda gib=gib: gib)
        assert grade_module._timing_jobs(lock) == jobs, gib
    assert json.loads(lock.env()["GRADER_SETTINGS"])["gpu_lock"] == "/nonexistent/gpu.lock"
    assert grade_module._timing_jobs(lock.replace(timing_jobs=1)) == 1  # asked for
