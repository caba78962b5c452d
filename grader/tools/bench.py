"""Bench: `make bench`, the side-by-side sweep of every track of a tree against the baselines.

Each exercise runs in a judge of its own (phase `sweep`: grader.judge.sweep) under the
exercise's time limit (grader.run.launch), like grading: a hung kernel costs that exercise, not
the run. Every track is timed in its own submission
process (grader.submission) on inputs the judge makes; the graded case is measured `repeats` times
(the repeatability of the medians, shown), the first with the validated batch of grader.judge.measure.
Then each [[benchmark.extra]] case the same way (a second entry point, or the op inside a
compiled model). The parent writes bench.json, bench.png and the "bench" section of
performance.md (grader.tools.benchdoc) after each exercise, so a cut-off run keeps what it measured;
exercises not benched in this run keep the rows an earlier run wrote into the same folder (each
with its own device, date and commit).
"""
from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import torch

from grader.common import events as ev
from grader.common.processes import describe_exit
from grader.common.settings import current
from grader.run.launch import start_judge, wait_judge
from grader.tools.benchdoc import (
    bench_markdown,
    bench_plot,
    commit,
    now,
    write_bench_section,
)

REPEATS = 2  # the graded case, timed this many times per run (make bench REPEATS=5)


def bench_command(exercises, tree: Path, out_dir: Path, timeout_s: float | None = None,
                  repeats: int = REPEATS) -> int:
    """Each exercise's sweep in a judge of its own, under its time limit (the exercise's, or
    `timeout_s`); then the reports."""
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
            code, timed_out, log = wait_judge(judge, timeout_s or ex.timeout_s,
                                              settings.keep_logs)
            found = [e.result for e in ev.read(events) if isinstance(e, ev.Bench)]
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
