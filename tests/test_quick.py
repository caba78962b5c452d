"""The baselines' figures are kept on this machine (.cache/baselines/, keyed by the GPU, its
driver, torch, Triton, the exercise's case and reference.py) and reused by a later grade once a
short re-timing on fresh inputs confirms each (QUICK=1 takes them as they are); a grade's own
measurement is shared by its tracks (the run's cache)."""
import shutil

import pytest
import torch

from grader.common.discover import SpecError, discover, load_exercise
from grader.common.settings import Settings
from grader.judge import baselines

EX = discover(only="01")[0]


def test_kept_figures_are_reused_only_when_a_new_look_confirms_them(monkeypatch, tmp_path):
    timed, looks, reps = [], [], []

    def time_baselines(exercise, ref, case, mode, fns, graded=True):
        timed.append(sorted(fns))
        return {n: {"ms": 1.0} for n in fns}
    monkeypatch.setattr(baselines, "time_baselines", time_baselines)
    monkeypatch.setattr(baselines, "make_inputs", lambda *a: (torch.ones(1),))
    monkeypatch.setattr(baselines, "make_step", lambda fn, *a: fn)
    monkeypatch.setattr(baselines, "time_step",
                        lambda run, rep_ms: reps.append(rep_ms) or {"ms": looks.pop(0)})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "baselines")
    monkeypatch.setattr(baselines, "current", lambda: Settings())
    fns = {"eager": lambda: None, "sdpa": lambda: None, "compile": lambda: None}

    first = baselines.baseline_times(EX, None, "forward", fns)
    assert timed == [["compile", "eager", "sdpa"]] and all("kept" not in t for t in first.values())
    looks[:] = [1.02, 1.3, 1.2]  # eager's new look agrees, sdpa's does not, nor does its longer
    again = baselines.baseline_times(EX, None, "forward", fns)  # one: sdpa timed again, and
    assert timed[-1] == ["compile", "sdpa"]  # compile with it (not re-timed: it stands with them)
    assert reps == [20, 20, 200] and not looks
    assert again["eager"]["kept"] == first["eager"]["measured"]
    assert again["eager"]["relooked_ms"] == 1.02 and "kept" not in again["sdpa"]
    looks[:] = [1.0, 1.08, 1.03]  # sdpa's short look misses, its longer one agrees: kept
    reps.clear()
    again = baselines.baseline_times(EX, None, "forward", fns)
    assert len(timed) == 2 and reps == [20, 20, 200] and not looks
    assert again["sdpa"]["relooked_ms"] == 1.03 and again["compile"]["with"] == ["eager", "sdpa"]
    looks[:] = [0.99, 1.01]  # both agree at once: compile stands with them, nothing timed
    third = baselines.baseline_times(EX, None, "forward", fns)
    assert len(timed) == 2 and third["compile"]["with"] == ["eager", "sdpa"] and not looks

    monkeypatch.setattr(baselines, "current", lambda: Settings(quick=True))
    quick = baselines.baseline_times(EX, None, "forward", fns)
    assert len(timed) == 2 and not looks  # neither timed nor re-timed
    assert all(t["kept"] for t in quick.values())

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Other GPU")
    monkeypatch.setattr(baselines, "current", lambda: Settings())
    baselines.baseline_times(EX, None, "forward", fns)
    assert timed[-1] == ["compile", "eager", "sdpa"]  # another GPU: nothing kept applies


def test_a_grade_shares_its_measurement_among_its_tracks(monkeypatch, tmp_path):
    timed = []
    monkeypatch.setattr(baselines, "time_baselines",
                        lambda *a, **k: timed.append(1) or {"eager": {"ms": 2.0}})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "kept")
    monkeypatch.setattr(baselines, "current", lambda: Settings(run_cache=str(tmp_path / "run")))
    fns = {"eager": lambda: None}
    a = baselines.baseline_times(EX, None, "forward", fns)
    b = baselines.baseline_times(EX, None, "forward", fns)
    assert a == b and len(timed) == 1


def test_a_baseline_that_compiles_itself_is_kept_like_compile(monkeypatch, tmp_path):
    """05's compiled_composite runs torch.compile inside reference.py: declared `compiled`, a kept
    figure of it stands with the re-timed others instead of being re-timed (a compile in the
    timing's process, 15 s on the GPU host, for a 20 ms look)."""
    ex05 = discover(only="05")[0]
    assert ex05.benchmark.compiles("compiled_composite") and not ex05.benchmark.compiles("liger")
    called = []
    monkeypatch.setattr(baselines, "time_baselines",
                        lambda e, r, c, m, fns, graded=True: {n: {"ms": 1.0} for n in fns})
    monkeypatch.setattr(baselines, "make_inputs", lambda *a: (torch.ones(1),))
    monkeypatch.setattr(baselines, "make_step", lambda fn, *a: fn)
    monkeypatch.setattr(baselines, "time_step", lambda run, rep_ms: called.append(run()) or
                        {"ms": 1.0})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "baselines")
    monkeypatch.setattr(baselines, "current", lambda: Settings())
    fns = {n: (lambda n=n: n) for n in ("eager", "compile", "compiled_composite", "liger")}
    baselines.baseline_times(ex05, None, "forward", fns)
    again = baselines.baseline_times(ex05, None, "forward", fns)
    assert sorted(called) == ["eager", "liger"]  # re-timed; the compiled two stand with them
    assert again["compiled_composite"]["with"] == ["eager", "liger"]


def test_a_long_step_stands_with_the_shorter_ones(monkeypatch, tmp_path):
    """A kept figure of LONG_STEP_MS or more (13's eager: 73 and 184 ms a step) is not looked
    at again where a shorter baseline is: it stands with it, as a compiled one does, and is
    timed again when that one misses. With no shorter baseline it is looked at itself."""
    called, figures = [], {"eager": 184.0, "sdpa": 4.5}
    monkeypatch.setattr(baselines, "time_baselines", lambda e, r, c, m, fns, graded=True:
                        called.append(sorted(fns)) or {n: {"ms": figures[n]} for n in fns})
    monkeypatch.setattr(baselines, "make_inputs", lambda *a: (torch.ones(1),))
    monkeypatch.setattr(baselines, "make_step", lambda fn, *a: fn)
    looks = {}
    monkeypatch.setattr(baselines, "time_step", lambda run, rep_ms: called.append(run()) or
                        {"ms": looks.get(run(), figures[run()])})
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Test GPU")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "baselines")
    monkeypatch.setattr(baselines, "current", lambda: Settings())
    fns = {n: (lambda n=n: n) for n in figures}
    baselines.baseline_times(EX, None, "forward", fns)
    called.clear()
    again = baselines.baseline_times(EX, None, "forward", fns)
    assert called == ["sdpa"] and again["eager"]["with"] == ["sdpa"]
    looks["sdpa"] = 6.0  # the machine changed under them: both timed again
    called.clear()
    baselines.baseline_times(EX, None, "forward", fns)
    assert called == ["sdpa", "sdpa", ["eager", "sdpa"]]
    only = {"eager": fns["eager"]}  # nothing shorter: looked at itself
    monkeypatch.setattr(baselines, "BASELINES", tmp_path / "other")
    baselines.baseline_times(EX, None, "forward", only)
    called.clear()
    assert "relooked_ms" in baselines.baseline_times(EX, None, "forward", only)["eager"]
    assert called == ["eager"]


def test_compiled_names_a_baseline(tmp_path):
    """`compiled` in [benchmark] must name one of the baselines or peers."""
    folder = tmp_path / "05_softmax"
    shutil.copytree(EX.dir.parent / "05_softmax", folder)
    toml = folder / "exercise.toml"
    toml.write_text(toml.read_text().replace('compiled = ["compiled_composite"]',
                                             'compiled = ["compiled_compost"]'))
    with pytest.raises(SpecError, match="compiled_compost"):
        load_exercise(folder)
