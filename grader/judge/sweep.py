"""Sweep: `make bench` for one exercise, in the judge (phase `sweep`): every track of a tree
timed along the exercise's sweep of sizes, at the graded case `repeats` times (the first with
the validated batch of grader.judge.measure), and at each [[benchmark.extra]] case, against the
baselines. The result is one `Bench` event; grader.tools.bench writes the documents.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from grader.common import events as ev
from grader.common.paths import CEILINGS
from grader.common.reference import load_reference
from grader.common.settings import current
from grader.judge.baselines import baseline_fns, time_baselines
from grader.judge.ceilings import measure_ceilings
from grader.judge.measure import figures_for, time_submission
from grader.judge.proxy import Session, SubmissionDied
from grader.judge.spawn import Spawner

REPEATS = 2  # the graded case, timed this many times per run (make bench REPEATS=5)


class _View:
    """reference.py as an extra case sees it: `reference` is the extra's function, and with
    `wrap` every function a baseline names runs inside reference.<wrap>(fn)."""

    def __init__(self, ref, extra):
        self._ref = ref
        wrap = getattr(ref, extra.wrap) if extra.wrap else (lambda fn: fn)
        self.reference = wrap(getattr(ref, extra.reference))
        for name in extra.baselines:
            name = name.partition(":")[2] if name.startswith("compile:") else name
            if name not in ("eager", "compile") and hasattr(ref, name):
                setattr(self, name, wrap(getattr(ref, name)))
        setattr(self, extra.inputs, getattr(ref, extra.inputs))
        setattr(self, extra.model, getattr(ref, extra.model))


def extra_view(exercise, ref, extra):
    """(exercise, reference) for timing one [[benchmark.extra]] case with the graded case's code:
    the benchmark's fields replaced by the extra's, no sweep, no thresholds."""
    b = dataclasses.replace(
        exercise.benchmark, call=extra.call, inputs=extra.inputs, model=extra.model,
        ceiling=extra.ceiling, dtype=extra.dtype, case=extra.case, sweep=(), modes=extra.modes,
        grad_args=extra.grad_args, baselines=extra.baselines, peers=(), thresholds=(),
        extras=(), wrap=extra.wrap)
    return dataclasses.replace(exercise, benchmark=b), _View(ref, extra)


def bench_exercise(tree: Path, exercise, record, repeats: int = REPEATS,
                   spawner: Spawner = Spawner()) -> None:
    """The sweep, the graded case and the extra cases, for every track of `tree`."""
    b = exercise.benchmark
    ceilings = measure_ceilings(CEILINGS)
    ref = load_reference(exercise)
    sessions, errors = {}, {}
    for track in exercise.tracks.values():
        s = Session(tree, exercise, track, timeout_s=current().check_limit(exercise),
                    spawner=spawner)
        try:
            loaded = s.request("load", timeout_s=exercise.timeout_s)
        except SubmissionDied as e:
            loaded = {"message": e.reason}
        if loaded.get("built"):
            sessions[track.name] = s
        else:
            errors[track.name] = (loaded.get("message") or "did not load").splitlines()[0]
            s.close()

    def measure(ex, r, fns, case, validated):
        torch._dynamo.reset()  # each case compiles afresh
        eb = ex.benchmark
        out = {"case": case, "figures": {}, "checks": {}}
        for mode in eb.modes:
            model = getattr(r, eb.model)(case, getattr(torch, eb.dtype), mode)
            row = {"model": model, "impls": {}, "baselines": {}}
            for name, s in sessions.items():
                try:
                    t = time_submission(s, ex, r, case, mode, batch=validated)
                    out["checks"][name] = out["checks"].get(name) or t.pop("problem", None)
                    row["impls"][name] = figures_for(ex, model, t, ceilings)
                except (Exception, SubmissionDied) as e:  # reported; the other tracks go on
                    row["impls"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            # host time beside every timed case of the graded size (not along the sweep)
            for name, t in time_baselines(ex, r, case, mode, fns, graded=case == eb.case).items():
                if "ms" in t:
                    t["rate"] = figures_for(ex, model, t, ceilings)["rate"]
                row["baselines"][name] = t
            out["figures"][mode] = row
        return out

    fns = baseline_fns(exercise, ref)
    sweep = [measure(exercise, ref, fns, case, False) for case in (list(b.sweep) or [b.case])]
    # the graded case `repeats` times: the first with the validated batch (this call's outputs
    # checked against float64), the others timing only (the spread of the medians)
    graded = [measure(exercise, ref, fns, b.case, i == 0) for i in range(max(1, repeats))]
    extras = []
    for extra in b.extras:
        ex2, ref2 = extra_view(exercise, ref, extra)
        fns2 = baseline_fns(ex2, ref2)
        extras.append({"name": extra.name, "call": extra.call, "wrap": extra.wrap,
                       "ceiling": extra.ceiling, "ceiling_value": ceilings[extra.ceiling],
                       "dtype": extra.dtype, "case": extra.case,
                       "graded": [measure(ex2, ref2, fns2, extra.case, i == 0)
                                  for i in range(max(1, repeats))]})
    for s in sessions.values():
        s.close()
    record(ev.Bench(result={
        "exercise": exercise.id, "ceiling": b.ceiling, "ceiling_value": ceilings[b.ceiling],
        "ceilings": ceilings, "dtype": b.dtype, "graded_case": b.case, "sweep": sweep,
        "graded": graded, "extras": extras, "load_errors": errors}))
