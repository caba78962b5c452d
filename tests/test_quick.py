"""QUICK=1 (Settings.quick): the baselines' times come from .cache/baselines/ after the first run
on a GPU, keyed by GPU, torch, exercise, case, mode and reference.py; without QUICK they are
always measured."""
import torch

from grader.judge import baselines
from grader.common.discover import discover
from grader.common.settings import Settings

EX = discover(only="01")[0]


def test_baselines_cached_only_under_quick(monkeypatch, tmp_path):
    calls = []

    def timed(exercise, ref, case, mode, fns, graded=True):
        calls.append(mode)
        return {"eager": {"ms": 1.0 + len(calls)}}
    monkeypatch.setattr(baselines, "time_baselines", timed)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "baselines")
    fns = {"eager": object()}

    monkeypatch.setattr(baselines, "current", lambda: Settings())
    assert baselines.baseline_times(EX, None, "forward", fns) == {"eager": {"ms": 2.0}}
    assert not (tmp_path / "baselines").exists()  # nothing kept outside QUICK

    monkeypatch.setattr(baselines, "current", lambda: Settings(quick=True))
    first = baselines.baseline_times(EX, None, "forward", fns)
    again = baselines.baseline_times(EX, None, "forward", fns)
    assert first == {"eager": {"ms": 3.0}} and again == {"eager": {"ms": 3.0, "cached": True}}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Other GPU")
    assert baselines.baseline_times(EX, None, "forward", fns) == {"eager": {"ms": 4.0}}
    assert len(calls) == 3
