"""GPU lock: a grade's timing judges run side by side, and each holds the GPU alone only while
it measures.

A timing is mostly work that needs the GPU but not the GPU alone: staging input sets, writing
new values, the observed call, the float64 validation of every timed output, each call run
alone on new values (in 08's forward+backward, 2.3 s of 2.7 s; the measured replays 0.1 s, an
H200, 2026-11-29). That work takes the lock shared (`shared()`), and the measurements take it
exclusive (`exclusive()`): the submission's "time" request (its graph's replays, its host
time), the judge's own clock around a validated batch's replays, a baseline's timing. No other
GPU work of the grade runs while one of them holds it, so each figure is taken on a quiet GPU
as when the timings ran one after another.

A reader-writer lock over two `flock`ed files in the grade's temporary folder
(Settings.gpu_lock): the lock itself, and a turnstile that a waiting writer holds, so that
readers arriving after it wait behind it (a writer is never starved by a stream of readers).
Sections nest: shared inside exclusive is already covered; exclusive inside shared gives the
shared hold up for the measurement and takes it back after. Where the grade names no lock (a
judge run alone, `make bench`, the project's tests) both are no-ops, and the grade times one
track after another.

The submission's process can read the lock's path and take it, like any file it can read: a
submission that holds it only stalls its own grade (its timings wait, then time out), never
another's figure.
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager

from grader.common.settings import current

_state = threading.local()
waited = {"shared": 0.0, "exclusive": 0.0}  # seconds this process waited for the lock (trace)


def _files():
    """(lock fd, turnstile fd) for this process, opened once; None without a lock."""
    path = current().gpu_lock
    if not path:
        return None
    fds = getattr(_state, "fds", None)
    if fds is None:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        fds = _state.fds = (os.open(path, flags, 0o600), os.open(path + ".turnstile", flags, 0o600))
        _state.mode = None
    return fds


@contextmanager
def shared():
    """GPU work that does not measure: beside other such work, never beside a measurement."""
    fds = _files()
    if fds is None or _state.mode is not None:  # no lock, or already held (either way)
        yield
        return
    lock, turnstile = fds
    asked = time.perf_counter()
    fcntl.flock(turnstile, fcntl.LOCK_EX)  # behind a waiting writer, if any
    fcntl.flock(turnstile, fcntl.LOCK_UN)
    fcntl.flock(lock, fcntl.LOCK_SH)
    waited["shared"] += time.perf_counter() - asked
    _state.mode = "shared"
    try:
        yield
    finally:
        _state.mode = None
        fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def exclusive():
    """A measurement: the GPU alone, once the shared work running now has ended."""
    fds = _files()
    if fds is None or _state.mode == "exclusive":
        yield
        return
    lock, turnstile = fds
    was = _state.mode
    if was == "shared":  # flock would convert in place, not through the turnstile
        fcntl.flock(lock, fcntl.LOCK_UN)
    asked = time.perf_counter()
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited["exclusive"] += time.perf_counter() - asked
        _state.mode = "exclusive"
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            _state.mode = None
    finally:
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        if was == "shared":
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
            _state.mode = "shared"
