"""Progress: what each track is doing while the learner waits (building which files, check n of
m, timing), read from the worker's event log as it grows.

On a terminal: one line, rewritten in place twice a second. Elsewhere (CI, Gradescope, a pipe):
a plain line when a track moves to its next stage, never a stream of counters.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path


class _Track:
    def __init__(self, label: str, events: Path, phase: str, sources: tuple):
        self.label, self.events, self.phase, self.sources = label, events, phase, sources
        self.start = time.monotonic()
        self.offset = 0
        self.built = None       # seconds, once the build event came
        self.total = None       # checks collected
        self.done = 0           # checks reported
        self.stage = ""         # last stage announced (plain mode)

    def read(self) -> None:
        try:
            with open(self.events) as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind("\n") + 1]  # a line still being written waits
        self.offset += len(complete)
        for line in complete.splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = e.get("event")
            if kind == "build":
                self.built = e.get("seconds") or 0.0
            elif kind == "collected":
                self.total = len(e.get("tests", []))
            elif kind == "result":
                self.done += 1

    def status(self, plain: bool = False) -> tuple[str, str]:
        """(stage, text): the stage changes rarely, the text every tick; `plain`: the text for a
        line printed once per stage (no running clock)."""
        clock = "" if plain else f" {time.monotonic() - self.start:.0f} s"
        if self.phase != "checks":
            return "timing", f"{self.label} timing{clock}"
        aot = self.sources and os.environ.get("GRADER_BUILD", "").strip().lower() == "aot"
        if self.built is None:
            what = ("loading the library built ahead of time" if aot
                    else f"building {', '.join(self.sources)}" if self.sources
                    else "starting the submission's process")
            return "building", f"{self.label} {what}{clock}"
        if self.total is None:
            return "collecting", f"{self.label} collecting checks"
        if plain:
            done = ("loaded (built ahead of time)" if aot else f"built ({self.built:.0f} s)"
                    if self.sources else "imported")
            return "checking", f"{self.label} {done}; {self.total} checks"
        return "checking", f"{self.label} check {min(self.done + 1, self.total)}/{self.total}{clock}"


class Progress:
    """Shared by the tracks of one `grade` (they may run side by side)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.tracks: dict[str, _Track] = {}
        self.lock = threading.Lock()
        self.width = 0

    def begin(self, label: str, events: Path, phase: str, sources=()) -> None:
        with self.lock:
            self.tracks[label] = _Track(label, events, phase, tuple(sources))

    def tick(self, label: str) -> None:
        with self.lock:
            t = self.tracks.get(label)
            if t is None:
                return
            t.read()
            stage, text = t.status(plain=not self.tty)
            if self.tty:
                self._draw()
            elif stage != t.stage and stage != "collecting":
                t.stage = stage
                print(text, file=self.stream, flush=True)

    def loaded(self, label: str) -> bool:
        """Has the track's checks worker reported its build (the track is loaded, or failed)?"""
        with self.lock:
            t = self.tracks.get(label)
            return t is not None and t.phase == "checks" and t.built is not None

    def end(self, label: str) -> None:
        with self.lock:
            self.tracks.pop(label, None)
            if self.tty:
                self._draw()

    def print(self, text: str) -> None:
        """A line of the grade's own output: above the progress line, which is drawn again."""
        with self.lock:
            self._clear()
            print(text, file=sys.stdout, flush=True)
            if self.tty:
                self._draw()

    def _clear(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def _draw(self) -> None:
        line = " · ".join(t.status()[1] for t in self.tracks.values())[:160]
        if not line:
            self._clear()
            return
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)
