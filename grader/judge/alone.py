"""Alone: did another process run kernels on the GPU while a figure was timed?

Kernels of two processes do not run side by side on one GPU (no MPS here): the GPU switches
between them, and a timed kernel takes longer by the other's share. The grade times one track at
a time, but other processes of the submission are alive then: timing judges started ahead wait
at their gates with their track loaded (grader.run.tracks.Ahead). A track's code that left a
long kernel running (no thread needed: one launch on a stream of its own, at its warm-up call)
would slow whatever is timed meanwhile, the exercise's baselines included, and its own speedup
would grow with theirs.

So each timed stretch (a track's timing in one mode, an exercise's baselines in one mode) is
checked against the driver's own count of who ran on the GPU: NVML's per-process utilization
samples, read here, in the judge's process (nothing a submission runs can change them; TRUST.md,
"the driver's per-process accounting read from outside"). A stretch during which a process other
than this judge and its submission's ran kernels is timed again once that process has been quiet
for QUIET_S (waiting at most QUIET_WAIT_S each time), TRIES times in all. One that never ran
alone keeps its figure and says so (`shared`: pid -> the highest SM utilization seen): the
grade gives it no credit, so another process's work can only cost a figure, never earn one.
Where NVML cannot say (no GPU, no pynvml, a driver without per-process samples) the stretch is
not checked, and nothing is claimed about it.
"""
from __future__ import annotations

import time

import torch

TRIES = 3           # timings of one stretch at most, when another process shares the GPU
QUIET_S = 0.5       # another process counts as done when its samples show no kernel this long
QUIET_WAIT_S = 10.0  # the longest wait for that, each time
# after a stretch that ends with its timed work: the driver's sample covering that end may come
# this much later (a track's timing ends with its float64 validation, longer than that)
SETTLE_S = 0.2
ALONE_UNCHECKED = ("not checked: whether another process ran kernels on the GPU during the "
                   "timing (NVML's per-process samples are not readable here: the nvidia-ml-py "
                   "package, or a driver that keeps them)")


def now_us() -> int:
    """The clock of NVML's sample timestamps: microseconds of the CPU's wall clock."""
    return int(time.time() * 1e6)


class Watch:
    """NVML for this process's current GPU (`nvml`, `handle`; the kept-memory check reads its
    per-process memory through it too: grader.judge.proxy): who other than `own` ran kernels
    since a moment, from its per-process utilization samples."""

    def __init__(self, own, nvml=None):
        self.own = {int(p) for p in own}
        self.nvml, self.handle = nvml, None
        try:
            if self.nvml is None:
                import pynvml  # optional: without it nothing is checked, and the figure says so
                self.nvml = pynvml
            self.nvml.nvmlInit()
            self.handle = _handle(self.nvml)
        except Exception:
            self.handle = None

    @property
    def able(self) -> bool:
        return self.handle is not None

    def others(self, since_us: int) -> dict[int, int] | None:
        """pid -> the highest SM utilization (%) in its samples after `since_us`, for every
        process but `own` whose samples show a kernel; None where NVML cannot say."""
        if self.handle is None:
            return None
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, since_us)
        except self.nvml.NVMLError as e:
            # no sample after `since_us` (nothing ran): NVML's "not found"
            if getattr(e, "value", None) == getattr(self.nvml, "NVML_ERROR_NOT_FOUND", 6):
                return {}
            return None
        seen: dict[int, int] = {}
        for s in samples:
            if s.pid not in self.own and s.timeStamp > since_us and s.smUtil > 0:
                seen[s.pid] = max(seen.get(s.pid, 0), int(s.smUtil))
        return seen

    def wait_quiet(self, quiet_s: float = QUIET_S, limit_s: float = QUIET_WAIT_S,
                   poll_s: float = 0.05) -> None:
        """Until no other process's samples show a kernel for `quiet_s`, or `limit_s` passed."""
        until = time.monotonic() + limit_s
        quiet_since = now_us()
        while time.monotonic() < until:
            time.sleep(poll_s)
            if self.others(quiet_since):
                quiet_since = now_us()
            elif now_us() - quiet_since >= quiet_s * 1e6:
                return


def _handle(nvml):
    """NVML's handle of torch's current device, by its UUID (CUDA_VISIBLE_DEVICES may number the
    devices otherwise than NVML does)."""
    device = torch.cuda.current_device()
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


def alone(run, watch: Watch, *, settle_s: float = 0.0, tries: int = TRIES,
          trace=lambda what: None):
    """run() (a timed stretch), again while another process ran kernels during it.
    Returns (its last result, shared): shared is {} when the last stretch ran alone, pid ->
    SM utilization where it never did, None where NVML cannot say."""
    if not watch.able:
        return run(), None
    shared: dict[int, int] | None = {}
    for attempt in range(tries):
        since = now_us()
        result = run()
        time.sleep(settle_s)
        shared = watch.others(since)
        if not shared:
            return result, shared
        trace(f"another process ran kernels meanwhile ({_pids(shared)}): waiting until it is "
              f"quiet, then timing again ({attempt + 1} of {tries})")
        watch.wait_quiet()
    return result, shared


def _pids(shared: dict[int, int]) -> str:
    return ", ".join(f"pid {p} at {u}% SM" for p, u in sorted(shared.items()))


def shared_problem(what: str, shared: dict[int, int]) -> str:
    """The performance problem of a figure that never ran alone."""
    return (f"{what} never had the GPU alone: another process ran kernels during each of "
            f"{TRIES} timings ({_pids(shared)}, the driver's per-process samples), so no "
            f"figure of it can be trusted; not credited (a track's process that leaves a "
            f"kernel running past its call does this; so does another program on this GPU)")
