"""Launches: the launch records' side in the submission's process (the extension itself:
grader/submission/launches.cpp, built by the judge; the judge's side: grader.judge.launches).

`open_launches`, called by the process's main after the server is made and before any submission
code runs:
1. loads the extension from the path the judge sent (the judge's cache: this process cannot
   write there) and hands it the records' socket, which it moves out of Python's sight;
2. with no GPU, says "unavailable: no GPU" (the judge then accuses nothing);
3. runs one profiler session first, as the server runs them: torch's profiler (Kineto) sets
   itself up in its first session and, in torch <= 2.11, keeps CUPTI's one callback subscriber
   from then on (a subscriber taken before that leaves the profiler blind to the GPU for good);
4. has the extension subscribe to CUPTI's launch callbacks (taking the subscriber over from the
   profiler where it must: grader/submission/launches.cpp says how);
5. self-tests: in a profiler session, one window around the server's marker kernel must show the
   marker to both the extension and the profiler. Then, and only then, the records are ready;
   otherwise CUPTI is given back and the records say why they are unavailable.
The server opens a window per observed call (`window()`, inside its profiler session). Whatever
this file decides is decided before any submission code runs; what that code may do to it
afterwards (call the extension, close its socket) shows in the records the judge reads.
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import sys

import torch
from torch.autograd import DeviceType


class Launches:
    """The records as the server uses them: `window()` around each observed call."""

    def __init__(self, module=None, status: str = "off"):
        self.module, self.status = module, status

    def window(self):
        return self._window() if self.module is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def _window(self):
        self.module.begin()
        try:
            yield
        finally:
            self.module.end()


OFF = Launches()


def open_launches(preamble: dict, fd: int | None, server) -> Launches:
    """The records for this process (see the module's docstring); `server`: its marker kernel,
    its profiler, and whether there is a GPU. Never raises: what went wrong is the status."""
    if fd is None:
        return _say(Launches(None, "unavailable: " + str(preamble.get("off", "no records"))))
    try:
        module = _load(preamble["so"])
    except Exception as e:  # (ImportError, OSError: a missing or broken build)
        os.close(fd)
        return _say(Launches(None, f"unavailable: the extension did not load: {e}"))
    try:
        module.start(fd)  # takes the socket over (moved, the number closed) or leaves it
    except Exception as e:
        return _say(Launches(None, f"unavailable: the extension did not start: {e}"))
    try:
        return _say(_set_up(module, server))
    except Exception as e:  # said to the judge too: the records are then unavailable
        with contextlib.suppress(RuntimeError):
            module.confirm(False, f"the set-up failed: {type(e).__name__}: {e}")
        return _say(Launches(None, f"unavailable: the set-up failed: {e}"))


def _set_up(module, server) -> Launches:
    if not server.gpu:
        module.confirm(False, "no GPU here")
        return Launches(None, "unavailable: no GPU here")
    # Kineto tears CUPTI down after each session where TEARDOWN_CUPTI=1, the records' subscriber
    # with it: never in this process (changed later, by submission code, it shows as records
    # that stopped)
    os.environ["TEARDOWN_CUPTI"] = "0"
    before = _kernels_seen(server, None)[1]
    if not before:
        why = "the profiler sees no kernel in this process, even without the records"
        module.confirm(False, why)
        return Launches(None, "unavailable: " + why)
    # a profiling tool injected into this process (Nsight) owns CUPTI: never taken from it
    takeover = not os.environ.get("CUDA_INJECTION64_PATH")
    try:
        mode = module.attach(takeover)
    except RuntimeError as e:
        module.confirm(False, f"CUPTI: {e}")
        return Launches(None, f"unavailable: CUPTI: {e}")
    recorded, seen = _kernels_seen(server, module)
    if recorded == 1 and seen >= 1:
        module.confirm(True, mode)
        return Launches(module, f"ready: {mode}")
    why = (f"the self-test failed after the extension {mode}: it recorded {recorded} launch(es) "
           f"of the marker kernel, the profiler saw {seen} kernel(s)")
    with contextlib.suppress(RuntimeError):
        module.release()
    why += f"; CUPTI given back, the profiler sees {_kernels_seen(server, None)[1]} kernel(s)"
    module.confirm(False, why)
    return Launches(None, "unavailable: " + why)


def _kernels_seen(server, module) -> tuple[int, int]:
    """(launches the extension recorded, kernels the profiler saw) in one profiler session, as
    the server opens them, around the server's marker kernel."""
    with server._profile(use_cpu=True, use_device="cuda", use_kineto=True,
                         experimental_config=server._all_threads) as prof:
        if module is not None:
            module.begin()
        try:
            server._marker.zero_()
            torch.cuda.synchronize()
        finally:
            recorded = module.end() if module is not None else 0
    seen = [e for e in prof.function_events if e.device_type == DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset", "grader::", "aten::"))]
    return recorded, len(seen)


def _load(path: str):
    """The extension, from the judge's build; not registered in sys.modules (nothing imports
    it by name)."""
    loader = importlib.machinery.ExtensionFileLoader("_grader_launches", path)
    spec = importlib.util.spec_from_file_location("_grader_launches", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _say(launches: Launches) -> Launches:
    print(f"launch records: {launches.status}", file=sys.stderr, flush=True)
    return launches
