"""Bench: `make bench`, the side-by-side sweep of every track of a tree against the baselines.

Each exercise runs in a worker of its own under the exercise's time limit (grader.isolate), like
grading: a hung kernel costs that exercise, not the run. Every track is timed in its own runner
process (grader.runner) on inputs the judge makes; the graded case is measured twice (the
repeatability of the medians, shown) with the validated batch of grader.measure. The parent writes
bench.json, bench.md and bench.png (grader.report) after each exercise, so a cut-off run keeps
what it measured.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from grader.reference import load_reference


def bench_exercise(tree: Path, exercise, record) -> None:
    """In the worker: the sweep and the graded case, for every track of `tree`."""
    import torch
    from grader.build import CACHE
    from grader.measure import baseline_fns, figures_for, time_baselines, time_submission
    from grader.plugin import check_limit
    from grader.proxy import RunnerDied, Session
    from grader.timing import measure_ceilings
    b = exercise.benchmark
    ceilings = measure_ceilings(CACHE)
    ref = load_reference(exercise)
    sessions, errors = {}, {}
    for track in exercise.tracks.values():
        s = Session(tree, exercise, track, timeout_s=check_limit(exercise))
        try:
            loaded = s.request("load", timeout_s=exercise.timeout_s)
        except RunnerDied as e:
            loaded = {"message": e.reason}
        if loaded.get("built"):
            sessions[track.name] = s
        else:
            errors[track.name] = (loaded.get("message") or "did not load").splitlines()[0]
            s.close()
    fns = baseline_fns(exercise, ref)

    def measure(case, graded):
        torch._dynamo.reset()  # each case compiles afresh
        out = {"case": case, "figures": {}, "checks": {}}
        for mode in b.modes:
            model = getattr(ref, b.model)(case, getattr(torch, b.dtype), mode)
            row = {"model": model, "impls": {}, "baselines": {}}
            for name, s in sessions.items():
                try:
                    t = time_submission(s, exercise, ref, case, mode, batch=graded)
                    out["checks"][name] = out["checks"].get(name) or t.pop("problem", None)
                    row["impls"][name] = figures_for(exercise, model, t, ceilings)
                except (Exception, RunnerDied) as e:  # reported; the other tracks go on
                    row["impls"][name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
            for name, t in time_baselines(exercise, ref, case, mode, fns, graded=graded).items():
                if "ms" in t:
                    t["rate"] = figures_for(exercise, model, t, ceilings)["rate"]
                row["baselines"][name] = t
            out["figures"][mode] = row
        return out

    sweep = [measure(case, False) for case in (list(b.sweep) or [b.case])]
    graded = [measure(b.case, True) for _ in range(2)]
    for s in sessions.values():
        s.close()
    record(event="bench", result={
        "exercise": exercise.id, "ceiling": b.ceiling, "ceiling_value": ceilings[b.ceiling],
        "ceilings": ceilings, "dtype": b.dtype, "graded_case": b.case, "sweep": sweep,
        "graded": graded, "load_errors": errors})


def bench_command(exercises, tree: Path, out_dir: Path, timeout_s: float | None = None) -> int:
    """Each exercise's sweep in a worker of its own, under its time limit (the exercise's, or
    `timeout_s`); then the reports."""
    import tempfile
    import torch
    from grader.isolate import _worker
    from grader.results import describe_exit, read_events
    if not torch.cuda.is_available():
        print("make bench needs a GPU: there is none here (nothing to time).")
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    md = ""
    for ex in exercises:
        if ex.benchmark is None:
            continue
        print(f"benchmarking {ex.id} ...", flush=True)
        track = next(iter(ex.tracks.values()))
        with tempfile.TemporaryDirectory(prefix="grader-bench-") as tmp:
            events = Path(tmp) / "bench.jsonl"
            code, timed_out, log = _worker(tree, ex, track, "sweep", events,
                                           timeout_s or ex.timeout_s)
            found = [e["result"] for e in read_events(events) if e.get("event") == "bench"]
        if found:
            results.append(found[0])
        else:
            why = describe_exit(code, timed_out, log) or "no result"
            results.append({"exercise": ex.id, "error": f"the benchmark worker failed: {why}"})
        md = write_bench(out_dir, tree, results)  # after each exercise: a cut-off run keeps some
    print(md)
    print(f"wrote {out_dir}/bench.json, bench.md, bench.png")
    return 0


def write_bench(out_dir: Path, tree: Path, results: list) -> str:
    import torch
    from grader.report import bench_markdown, bench_plot
    meta = {"device": torch.cuda.get_device_name(), "torch": str(torch.__version__),
            "triton": __import__("triton").__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "tree": str(tree.name)}
    data = {"meta": meta, "exercises": results}
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2) + "\n")
    md = bench_markdown(data)
    (out_dir / "bench.md").write_text(md)
    bench_plot(data, out_dir / "bench.png")
    return md
