"""Follow: the judges' event logs, read as they grow, and handed to whoever subscribed.

One `Follower` per grade (or watch loop) tails the logs of the judges running now, a few times
a second, and publishes every event with the judge's label and phase to its subscribers: the
live display (grader.run.progress) and the orchestrator, which starts a track's timing judge once
its checks have loaded the build (grader.run.grade). It also publishes the grade process's own
notices, `Began` and `Exited` (grader.common.events), as judges start and end. Subscribers are
called from the follower's thread, in order; one that raises is dropped, never the grade.
"""
from __future__ import annotations

import threading
from pathlib import Path

from grader.common import events as ev

TICK_S = 0.2  # how often the logs are read: a stage appears on the display within this


class Follower:
    def __init__(self):
        self.subscribers: list = []   # fn(label, phase, event)
        self.logs: dict[tuple[str, str], ev.Tail] = {}  # (label, phase) -> its log
        self.lock = threading.Lock()
        self.reading = threading.Lock()  # one reader of the logs at a time: events in order
        self.wake = threading.Event()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="grader-follow", daemon=True)
        self.thread.start()

    def subscribe(self, fn) -> None:
        with self.lock:
            self.subscribers.append(fn)

    def begin(self, label: str, phase: str, events: Path, sources=()) -> None:
        """A judge started: follow its log."""
        with self.lock:
            self.logs[(label, phase)] = ev.Tail(events)
        self._publish(label, phase, ev.Began(label=label, phase=phase, sources=tuple(sources)))

    def end(self, label: str, phase: str) -> None:
        """A judge ended: what its log says last, then its end."""
        with self.reading:
            with self.lock:
                tail = self.logs.pop((label, phase), None)
            if tail is not None:
                for e in tail.new():
                    self._publish(label, phase, e)
        self._publish(label, phase, ev.Exited(label=label))

    def close(self) -> None:
        self.closed = True
        self.wake.set()
        self.thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _publish(self, label: str, phase: str, event: ev.Event) -> None:
        with self.lock:
            subscribers = list(self.subscribers)
        for fn in subscribers:
            try:
                fn(label, phase, event)
            except Exception:  # a display that fails must not take the grade down
                with self.lock:
                    if fn in self.subscribers:
                        self.subscribers.remove(fn)

    def _run(self) -> None:
        while not self.closed:
            with self.reading:
                with self.lock:
                    logs = list(self.logs.items())
                for (label, phase), tail in logs:
                    for e in tail.new():
                        self._publish(label, phase, e)
            self.wake.wait(TICK_S)
