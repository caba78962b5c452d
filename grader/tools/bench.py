"""Bench: `make bench`, the side-by-side sweep of every track of a tree against the baselines.

Each exercise runs in a judge of its own under the exercise's time limit (grader.run.launch), like
grading: a hung kernel costs that exercise, not the run. Every track is timed in its own submission
process (grader.submission) on inputs the judge makes; the graded case is measured `repeats` times
(the repeatability of the medians, shown), the first with the validated batch of grader.judge.measure.
Then each [[benchmark.extra]] case the same way (a second entry point, or the op inside a
compiled model). The parent writes bench.json, bench.png and the "bench" section of
performance.md (grader.tools.benchdoc) after each exercise, so a cut-off run keeps what it measured;
exercises not benched in this run keep the rows an earlier run wrote into the same folder (each
with its own device, date and commit).
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from grader.judge.baselines import baseline_fns, time_baselines
from grader.tools.benchdoc import bench_markdown, bench_plot, write_bench_section
from grader.tools.benchdoc import commit, now
from grader.run.launch import start_judge, wait_judge
from grader.judge.measure import figures_for, time_submission
from grader.common.paths import CEILINGS
from grader.judge.plugin import check_limit
from grader.judge.proxy import Session, SubmissionDied
from grader.judge.reference import load_reference
from grader.run.results import describe_exit, read_events
from grader.common.settings import current
from grader.common.timing import measure_ceilings

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


def bench_exercise(tree: Path, exercise, record, repeats: int = REPEATS) -> None:
    """In the judge: the sweep, the graded case and the extra cases, for every track of
    `tree`."""
    import torch
    b = exercise.benchmark
    ceilings = measure_ceilings(CEILINGS)
    ref = load_reference(exercise)
    sessions, errors = {}, {}
    for track in exercise.tracks.values():
        s = Session(tree, exercise, track, timeout_s=check_limit(exercise))
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
    record(event="bench", result={
        "exercise": exercise.id, "ceiling": b.ceiling, "ceiling_value": ceilings[b.ceiling],
        "ceilings": ceilings, "dtype": b.dtype, "graded_case": b.case, "sweep": sweep,
        "graded": graded, "extras": extras, "load_errors": errors})


def bench_command(exercises, tree: Path, out_dir: Path, timeout_s: float | None = None,
                  repeats: int = REPEATS) -> int:
    """Each exercise's sweep in a judge of its own, under its time limit (the exercise's, or
    `timeout_s`); then the reports."""
    import tempfile
    import torch
    if not torch.cuda.is_available():
        print("make bench needs a GPU: there is none here (nothing to time).")
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = current().replace(bench_repeats=repeats)
    results = []
    md = ""
    for ex in exercises:
        if ex.benchmark is None:
            continue
        print(f"benchmarking {ex.id} ...", flush=True)
        started = time.perf_counter()
        track = next(iter(ex.tracks.values()))
        with tempfile.TemporaryDirectory(prefix="grader-bench-", ignore_cleanup_errors=True) as tmp:
            events = Path(tmp) / "bench.jsonl"
            judge = start_judge(tree, ex, track, "sweep", events, settings)
            code, timed_out, log = wait_judge(judge, timeout_s or ex.timeout_s, settings)
            found = [e["result"] for e in read_events(events) if e.get("event") == "bench"]
        if found:
            results.append(found[0])
        else:
            why = describe_exit(code, timed_out, log) or "no result"
            results.append({"exercise": ex.id, "error": f"the benchmark judge failed: {why}"})
        results[-1]["measured"] = _meta(tree)
        results[-1]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"benchmarked {ex.id} in {results[-1]['seconds']:.0f} s", flush=True)
        md = write_bench(out_dir, tree, results)  # after each exercise: a cut-off run keeps some
    print(md)
    print(f"wrote {out_dir}/bench.json, performance.md, bench.png")
    return 0


def _meta(tree: Path) -> dict:
    import shlex
    import sys
    import torch
    return {"device": torch.cuda.get_device_name(), "torch": str(torch.__version__),
            "triton": __import__("triton").__version__, "date": now(), "commit": commit(),
            "command": shlex.join(["python", "-m", "grader", *sys.argv[1:]]),
            "tree": str(tree.name)}


def merged(previous: dict | None, results: list) -> list:
    """This run's exercises, and the earlier run's others (in exercise order): `make bench
    EXERCISE=04` updates 04's rows and keeps the rest, each with the device and date it was
    measured on."""
    fresh = {r["exercise"] for r in results}
    kept = []
    for r in (previous or {}).get("exercises", []):
        if r.get("exercise") in fresh:
            continue
        r.setdefault("measured", (previous or {}).get("meta"))  # files from before this field
        kept.append(r)
    return sorted(kept + list(results), key=lambda r: r["exercise"])


def write_bench(out_dir: Path, tree: Path, results: list) -> str:
    """bench.json (this run's rows merged into the earlier ones), the plot, and the "bench"
    section of out_dir/performance.md; returns that section's tables."""
    path = out_dir / "bench.json"
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        previous = None
    data = {"meta": _meta(tree), "exercises": merged(previous, results)}
    path.write_text(json.dumps(data, indent=2) + "\n")
    bench_plot(data, out_dir / "bench.png")
    write_bench_section(out_dir / "performance.md", data, plot="bench.png")
    return bench_markdown(data)
