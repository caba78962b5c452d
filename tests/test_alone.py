"""A figure is the timed work's alone: a stretch during which another process ran kernels on the
GPU (the driver's per-process samples, NVML) is timed again once that process is quiet, and one
that never ran alone earns nothing; where NVML cannot say, nothing is claimed (the scorecard says
it was not checked). NVML is faked here: the GPU run is in docs/performance.md."""
import types

import pytest
import torch

from grader.common.discover import discover
from grader.common.settings import Settings
from grader.judge import alone, baselines

EX = discover(only="01")[0]


class FakeNVML:
    """NVML's process-utilization call over a script of samples: each call of `run` (a timed
    stretch) adds the samples of `busy` (pid -> SM %) stamped inside the stretch."""

    class NVMLError(Exception):
        def __init__(self, value):
            self.value = value

    NVML_ERROR_NOT_FOUND = 6

    def __init__(self):
        self.samples, self.broken = [], False

    def nvmlInit(self):
        if self.broken:
            raise self.NVMLError(999)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return "gpu"

    def add(self, busy: dict):
        t = alone.now_us() + 1
        self.samples += [types.SimpleNamespace(pid=p, timeStamp=t, smUtil=u, memUtil=0)
                         for p, u in busy.items()]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        found = [s for s in self.samples if s.timeStamp > since]
        if not found:
            raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)
        return found


@pytest.fixture
def nvml(monkeypatch):
    monkeypatch.setattr(alone, "_handle", lambda nvml: "gpu")
    monkeypatch.setattr(alone, "QUIET_S", 0.05)
    monkeypatch.setattr(alone.time, "sleep", lambda s: None)
    return FakeNVML()


def stretches(nvml, busy_per_run):
    """A timed stretch that returns its number, with the other processes' samples of its turn."""
    runs = []

    def run():
        runs.append(len(runs) + 1)
        nvml.add({1: 100, **busy_per_run[len(runs) - 1]})  # pid 1: the timed process itself
        return runs[-1]
    return run, runs


def test_a_stretch_that_ran_alone_counts_once(nvml):
    run, runs = stretches(nvml, [{2: 0}])  # another process with a context, but no kernel
    assert alone.alone(run, alone.Watch({1}, nvml=nvml)) == (1, {})
    assert runs == [1]


def test_another_processs_kernels_make_the_stretch_run_again_once_it_is_quiet(nvml):
    run, runs = stretches(nvml, [{7: 100}, {}])
    waits = []
    watch = alone.Watch({1}, nvml=nvml)
    watch.wait_quiet = lambda: waits.append(1)
    assert alone.alone(run, watch) == (2, {})
    assert runs == [1, 2] and waits == [1]


def test_a_stretch_that_never_ran_alone_says_who_shared_the_gpu(nvml):
    run, runs = stretches(nvml, [{7: 100, 8: 3}] * alone.TRIES)
    watch = alone.Watch({1}, nvml=nvml)
    watch.wait_quiet = lambda: None
    result, shared = alone.alone(run, watch)
    assert result == alone.TRIES and shared == {7: 100, 8: 3}
    why = alone.shared_problem("the forward timing", shared)
    assert "pid 7 at 100% SM" in why and "pid 8 at 3% SM" in why and "not credited" in why


def test_waiting_for_quiet_ends_when_the_other_process_stops_or_at_the_limit(monkeypatch):
    nvml = FakeNVML()
    monkeypatch.setattr(alone, "_handle", lambda nvml: "gpu")
    watch = alone.Watch({1}, nvml=nvml)
    polls = []

    def busy_twice(since):
        polls.append(since)
        return {7: 100} if len(polls) <= 2 else {}
    watch.others = busy_twice
    watch.wait_quiet(quiet_s=0.02, limit_s=5, poll_s=0.005)
    assert len(polls) >= 3 and polls[-1] > polls[0]  # quiet counted from its last kernel
    watch.others = lambda since: polls.append(since) or {7: 100}
    polls.clear()
    watch.wait_quiet(quiet_s=0.02, limit_s=0.05, poll_s=0.005)  # never quiet: gives up
    assert polls


def test_where_nvml_cannot_say_nothing_is_claimed(nvml):
    nvml.broken = True
    run, runs = stretches(nvml, [{7: 100}])
    watch = alone.Watch({1}, nvml=nvml)
    assert not watch.able and alone.alone(run, watch) == (1, None) and runs == [1]
    assert "not checked" in alone.ALONE_UNCHECKED


def test_baselines_timed_beside_another_processs_kernels_are_neither_credited_nor_kept(
        nvml, monkeypatch, tmp_path):
    """The exercise's baselines, timed while another process ran kernels throughout: no figure
    (no speedup against them is credited; the reason is the baseline's error), none kept for a
    later grade; once the GPU is the judge's alone they are timed and kept as ever."""
    busy = {7: 100}
    timed = []

    def time_baselines(exercise, ref, case, mode, fns, graded=True):
        timed.append(1)
        nvml.add(busy)
        return {n: {"ms": 1.0} for n in fns}
    monkeypatch.setattr(baselines, "time_baselines", time_baselines)
    monkeypatch.setattr(baselines, "Watch", lambda own: alone.Watch(own, nvml=nvml))
    monkeypatch.setattr(alone.Watch, "wait_quiet", lambda self: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "kept")
    monkeypatch.setattr(baselines, "current", lambda: Settings(run_cache=str(tmp_path / "run")))
    fns = {"eager": lambda: None}
    shared = baselines.baseline_times(EX, None, "forward", fns)
    assert len(timed) == alone.TRIES and "ms" not in shared["eager"]
    assert "pid 7" in shared["eager"]["error"] and not (tmp_path / "kept").exists()
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("*.json"))
    busy.clear()
    fine = baselines.baseline_times(EX, None, "forward", fns)
    assert fine["eager"]["ms"] == 1.0 and len(timed) == alone.TRIES + 1
    assert any((tmp_path / "kept").rglob("*"))


SPIN = """
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", flush=True)
if sys.argv[1] == "spin":
    end = time.time() + float(sys.argv[2])
    while time.time() < end:
        a @ a
    torch.cuda.synchronize()
else:
    time.sleep(float(sys.argv[2]))
"""


@pytest.mark.gpu
@pytest.mark.timed
@pytest.mark.parametrize("other", ["idle", "spin"])
def test_the_driver_names_another_process_that_ran_kernels_during_a_timing(other):
    """On the GPU, NVML's samples as the check reads them: a process that holds a context but
    runs nothing is not named; one that runs matmuls throughout a timing is, by its pid, and the
    figure timed beside it is said to be shared (never credited)."""
    import os
    import subprocess
    import sys

    from grader.common.timing import time_step
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    child = subprocess.Popen([sys.executable, "-c", SPIN, other, "8"], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        watch = alone.Watch({os.getpid()})
        assert watch.able, "NVML's per-process samples are not readable on this GPU host"
        watch.wait_quiet = lambda: None  # the child runs throughout: every try sees it
        t, shared = alone.alone(lambda: time_step(lambda: x @ x, rep_ms=300), watch,
                                settle_s=alone.SETTLE_S)
    finally:
        child.kill()
        child.wait()
    assert t["ms"] > 0
    # Only the child is asserted on: under pytest-xdist the other workers' kernels share this GPU
    # too, and are rightly named beside it.
    if other == "idle":
        assert child.pid not in shared
    else:
        assert shared.get(child.pid, 0) > 0


@pytest.mark.parametrize("case", ["alone", "shared", "baselines shared", "no nvml"])
def test_the_timing_gives_no_credit_to_a_figure_that_never_ran_alone(monkeypatch, case):
    """grade_performance, its GPU work faked: a track's timing that another process shared every
    time, or baselines that were, make the performance problem (no credit, the pids named); one
    alone earns its figures; without NVML the scorecard says the check did not run."""
    from grader.common import events as ev
    from grader.judge import measure
    nvml = FakeNVML()
    nvml.broken = case == "no nvml"
    monkeypatch.setattr(alone, "_handle", lambda nvml: "gpu")
    monkeypatch.setattr(alone.Watch, "wait_quiet", lambda self: None)
    monkeypatch.setattr(measure, "Watch", lambda own: alone.Watch(own, nvml=nvml))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(measure, "measure_ceilings", lambda cache: {EX.benchmark.ceiling: 1000.0})

    def time_submission(session, exercise, ref, case_, mode, drawn=None):
        nvml.add({1: 100, **({9: 80} if case == "shared" else {})})  # 1: the judge itself
        return {"ms": 1.0, "p20": 1.0, "p80": 1.0, "host_ms": 0.01, "method": "graph"}
    monkeypatch.setattr(measure, "time_submission", time_submission)
    why = alone.shared_problem("the forward baselines' timing", {9: 80})
    monkeypatch.setattr(measure, "baseline_times", lambda *a: {"eager": (
        {"error": why, "shared": {9: 80}} if case == "baselines shared" else {"ms": 2.0})})
    monkeypatch.setattr(measure.os, "getpid", lambda: 1)
    ref = types.SimpleNamespace(**{EX.benchmark.model: lambda c, dtype, mode: {
        "bytes": 3e9, "flops": 1e9}})
    session = types.SimpleNamespace(proc=types.SimpleNamespace(pid=2))
    events = []
    measure.grade_performance(EX, next(iter(EX.tracks.values())), session, events.append,
                              prepared=(ref, {}))
    p = next(e for e in events if isinstance(e, ev.Performance))
    if case in ("alone", "no nvml"):
        assert p.problem is None and p.figures
        assert (alone.ALONE_UNCHECKED in p.warnings) == (case == "no nvml")
    else:
        assert "never had the GPU alone" in p.problem and "pid 9 at 80% SM" in p.problem
        assert any(w.startswith("no performance credit: ") for w in p.warnings)


def test_the_grade_names_the_process_that_shared_the_gpu_by_its_track():
    """A pid means nothing once the grade has ended: where it was the submission's process of a
    timing judge of this grade (its Ready event), the problem names that track."""
    from grader.common import events as ev
    from grader.run.grade import _named
    from grader.run.results import Phase
    why = alone.shared_problem("the forward timing", {4242: 100, 77: 5})
    timed = {("01_vector_add", "triton"): Phase((ev.Ready(pid=1), ev.Performance(problem=why)),
                                                0, False, ""),
             ("05_softmax", "triton"): Phase((ev.Ready(pid=4242), ev.Performance()), 0, False, "")}
    named = _named(timed)
    problem = next(e for e in named[("01_vector_add", "triton")].events
                   if isinstance(e, ev.Performance)).problem
    assert "pid 4242 (05_softmax [triton]'s process) at 100% SM" in problem
    assert "pid 77 at 5% SM" in problem  # not one of this grade's: as the driver said it
    assert named[("05_softmax", "triton")] == timed[("05_softmax", "triton")]
