"""Progress: what each track is doing while the learner waits (building which files, check n of
m, timing), read from the worker's event log as it grows.

On a terminal: a live display (rich), one line per running track, redrawn twice a second, with
the grade's own lines printed above it. Elsewhere (CI, Gradescope, a pipe): a plain line when a
track moves to its next stage, never a stream of counters.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


class _Track:
    def __init__(self, label: str, events: Path, phase: str, sources: tuple, aot: bool):
        self.aot = aot
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
        aot = self.sources and self.aot
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
    """Shared by the tracks of one grade (they may run side by side)."""

    def __init__(self, stream=None, *, aot: bool = False):
        from rich.console import Console
        from rich.live import Live
        self.console = Console(file=stream or sys.stdout, highlight=False)
        self.tty = self.console.is_terminal
        self.live = Live(console=self.console, transient=True, auto_refresh=False,
                         redirect_stdout=False) if self.tty else None
        self.aot = aot  # --build aot: a track's library is loaded, not built
        self.tracks: dict[str, _Track] = {}
        self.lock = threading.Lock()

    def begin(self, label: str, events: Path, phase: str, sources=()) -> None:
        with self.lock:
            self.tracks[label] = _Track(label, events, phase, tuple(sources), self.aot)
            if self.live is not None and not self.live.is_started:
                self.live.start()

    def tick(self, label: str) -> None:
        with self.lock:
            t = self.tracks.get(label)
            if t is None:
                return
            t.read()
            stage, text = t.status(plain=not self.tty)
            if self.live is not None:
                self._draw()
            elif stage != t.stage and stage != "collecting":
                t.stage = stage
                self.console.print(text, markup=False, soft_wrap=True)

    def loaded(self, label: str) -> bool:
        """Has the track's checks judge reported its build (the track is loaded, or failed)?"""
        with self.lock:
            t = self.tracks.get(label)
            return t is not None and t.phase == "checks" and t.built is not None

    def end(self, label: str) -> None:
        with self.lock:
            self.tracks.pop(label, None)
            if self.live is not None:
                self._draw()
                if not self.tracks and self.live.is_started:
                    self.live.stop()

    def print(self, text: str) -> None:
        """A line of the grade's own output: above the live display, which stays below it."""
        with self.lock:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _draw(self) -> None:
        from rich.text import Text
        self.live.update(Text("\n".join(t.status()[1] for t in self.tracks.values())),
                         refresh=True)
