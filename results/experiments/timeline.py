"""Where a grade's seconds go: the timeline of every worker whose events GRADER_KEEP_LOGS kept.

    GRADER_KEEP_LOGS=/tmp/keep python -m grader grade --exercise 02 --no-bench
    python results/experiments/timeline.py /tmp/keep [--since EPOCH_SECONDS]

Every event a worker records carries its wall time (grader.results.Recorder); this prints, per
worker (one track's checks, timing, or a warm-up), the seconds from the first event to each
stage: the judge's process started ("process"), its torch imported ("worker"), the submission's
process loaded ("build"), a timing worker started ahead ready and let through its gate ("ready",
"gate"), pytest collected ("collected"), the first and last check, and the end ("done"), with
the slowest checks. --since: the moment the command started (date +%s.%N), to count the main
process's start too.
"""
import argparse
import json
from pathlib import Path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder", type=Path)
    p.add_argument("--since", type=float, default=None)
    a = p.parse_args()
    for path in sorted(a.folder.glob("*.jsonl")):
        events = []
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        stamped = [e for e in events if "t" in e]
        if not stamped:
            continue
        t0 = a.since if a.since is not None else min(
            [stamped[0]["t"]] + [e["began"] for e in stamped if "began" in e])
        marks = {}
        for e in stamped:
            kind = e.get("event")
            if kind in ("worker", "build", "collected", "checks", "performance", "done", "warm",
                        "ready", "gate"):
                marks.setdefault(kind, e["t"] - t0)
            if kind == "worker" and "began" in e:  # the process started (before its imports)
                marks.setdefault("process", e["began"] - t0)
            if kind == "start":
                marks.setdefault("first check", e["t"] - t0)
            if kind == "result":
                marks["last check"] = e["t"] - t0
        checks = sorted(((e.get("seconds") or 0.0, e["test"].split("::")[-1]) for e in stamped
                         if e.get("event") == "result"), reverse=True)
        line = ", ".join(f"{k} {v:.1f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1]))
        print(f"{path.stem}: {line} (s)")
        if checks:
            print(f"    {len(checks)} checks, {sum(c for c, _ in checks):.1f} s in them; slowest: "
                  + ", ".join(f"{n} {c:.1f}" for c, n in checks[:5]))


if __name__ == "__main__":
    main()
