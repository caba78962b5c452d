"""Progress: what each track is doing while the learner waits (building which files, check n of
m, timing), as told by the judges' events (a subscriber of grader.run.follow).

On a terminal: a live display (rich), one line per running track, redrawn twice a second by
rich's own thread, with the grade's own lines printed above it. Elsewhere (CI, Gradescope, a
pipe): a plain line when a track moves to its next stage, never a stream of counters.
"""
from __future__ import annotations

import sys
import threading
import time

from rich.console import Console
from rich.live import Live
from rich.text import Text

from grader.common import events as ev


class _Track:
    def __init__(self, label: str, phase: str, sources: tuple, aot: bool):
        self.label, self.phase, self.sources, self.aot = label, phase, sources, aot
        self.start = time.monotonic()
        self.built = None       # seconds, once the build event came
        self.total = None       # checks collected
        self.done = 0           # checks reported
        self.judges = 1         # its judges running (a track checked in shares has several)
        self.ids: set = set()   # the checks its judges collected (grader::own_work in each)
        self.collected = [0, 1]  # judges that collected, of how many (events.Collected.share)
        self.stage = ""         # last stage announced (plain mode)

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
        if self.total is None or self.collected[0] < self.collected[1]:
            return "collecting", f"{self.label} collecting checks"
        if plain:
            done = ("loaded (built ahead of time)" if aot else f"built ({self.built:.0f} s)"
                    if self.sources else "imported")
            return "checking", f"{self.label} {done}; {self.total} checks"
        return "checking", f"{self.label} check {min(self.done + 1, self.total)}/{self.total}{clock}"


class Progress:
    """The display of one grade (its tracks may run side by side): subscribe `on_event`."""

    def __init__(self, stream=None, *, aot: bool = False):
        self.aot = aot  # --build aot: a track's library is loaded, not built
        self.tracks: dict[tuple, _Track] = {}
        self.lock = threading.Lock()
        self.console = Console(file=stream or sys.stdout, highlight=False)
        self.tty = self.console.is_terminal
        self.live = Live(console=self.console, transient=True, auto_refresh=True,
                         refresh_per_second=2, redirect_stdout=False,
                         get_renderable=self._render) if self.tty else None

    def on_event(self, label: str, phase: str, event: ev.Event) -> None:
        with self.lock:
            key = (label, phase)
            if isinstance(event, ev.Began):  # once per judge: a track's shares are one line
                if key in self.tracks:
                    self.tracks[key].judges += 1
                else:
                    self.tracks[key] = _Track(label, phase, event.sources, self.aot)
            t = self.tracks.get(key)
            if t is None:
                return
            if isinstance(event, ev.Build):
                t.built = event.seconds or 0.0
            elif isinstance(event, ev.Collected):
                t.ids.update(x["id"] for x in event.tests)
                t.total = len(t.ids)
                t.collected = [t.collected[0] + 1, (event.share or (0, 1))[1]]
            elif isinstance(event, ev.Result):
                t.done += 1
            elif isinstance(event, ev.Exited):
                t.judges -= 1
                if not t.judges:
                    del self.tracks[key]
            running = bool(self.tracks)
            stage, text = t.status(plain=True)
            if self.live is None and stage != t.stage and stage != "collecting" \
                    and not isinstance(event, ev.Exited):
                t.stage = stage
                self.console.print(text, markup=False, soft_wrap=True)
        # outside the lock: rich's own thread takes it to draw, and stop() waits for that thread
        if self.live is not None and running != self.live.is_started:
            self.live.start() if running else self.live.stop()

    def print(self, text: str) -> None:
        """A line of the grade's own output: above the live display, which stays below it."""
        with self.lock:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _render(self) -> Text:
        with self.lock:
            return Text("\n".join(t.status()[1] for t in self.tracks.values()))
