"""Isolate: grade each track in a worker process of its own, under a time limit.

A segfault, an illegal memory access, `os._exit`, an infinite loop or a hung kernel ends only
that worker; the parent rebuilds what happened from the worker's event log and the scorecard
goes on with the next track.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.discover import ROOT, Exercise, Track
from grader.results import TrackResult, from_events, read_events


def run_track(tree: Path, exercise: Exercise, track: Track, *, bench: bool = False,
              timeout_s: float | None = None) -> TrackResult:
    timeout_s = timeout_s or exercise.timeout_s
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events, log = Path(tmp) / "events.jsonl", Path(tmp) / "log.txt"
        cmd = [sys.executable, "-m", "grader.worker", "--tree", str(tree), "--exercise",
               exercise.id, "--track", track.name, "--events", str(events)]
        if bench:
            cmd.append("--bench")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
            "PYTHONUNBUFFERED": "1"}
        timed_out = None
        with open(log, "wb") as out:
            # a session of its own, so a timeout kills the worker and everything it started
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = timeout_s
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        keep = os.environ.get("GRADER_KEEP_LOGS")  # a folder: keep each worker's full log
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(log, Path(keep) / f"{exercise.id}-{track.name}.log")
        return from_events(read_events(events), exercise=exercise.id, track=track.name,
                           tree=str(tree), returncode=proc.returncode, timed_out=timed_out,
                           log=log.read_text(errors="replace"))
