"""Out of memory: a check that ran out of GPU memory runs once more, once memory has come back.

In a grade, the checks of every track share one GPU, and their large tensors come and go. A
check that asked for its memory while another track held some failed a correct kernel: 02's
past-2^31 check, in its judge, with 9.75 GiB free beside the other tracks (an H200, 2026-11-30,
docs/performance.md, "Grading time"). So a check that fails by running out of GPU memory, in the
judge or in the submission's process (its error's text), waits for free memory (at most
WAIT_S) and runs again; that second run's outcome is the check's. A submission that asks for more
than the GPU has fails the second run as it failed the first, with the same message.
"""
from __future__ import annotations

import gc
import re
import time

import torch

WAIT_S = 30.0     # the longest a check waits for memory to come back before its second run
MARGIN = 2.0      # the second run waits for this many times the allocation that failed
_ASKED = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB)")


def out_of_memory(e: BaseException) -> float | None:
    """The bytes an allocation that ran out of GPU memory asked for (0.0 when not said), or None
    if `e`, its cause or its context is no such failure."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        group = getattr(e, "exceptions", None)  # an exception group: hypothesis' several
        if isinstance(group, (tuple, list)):    # distinct failures
            found = [a for a in map(out_of_memory, group) if a is not None]
            return max(found) if found else None
        text = str(e)
        if isinstance(e, torch.OutOfMemoryError) or "CUDA out of memory" in text:
            m = _ASKED.search(text)
            return float(m.group(1)) * (1 << (30 if m.group(2) == "GiB" else 20)) if m else 0.0
        e = e.__cause__ or e.__context__
    return None


def wait_for_memory(asked: float, wait_s: float = WAIT_S) -> float:
    """Give back this process's cached blocks, then wait until MARGIN times `asked` (or, when
    not said, 4 GiB more than now) is free, or `wait_s` has passed; the seconds waited."""
    gc.collect()
    torch.cuda.empty_cache()
    began = time.monotonic()
    free = torch.cuda.mem_get_info()[0]
    want = MARGIN * asked if asked else free + (4 << 30)
    while free < want and time.monotonic() - began < wait_s:
        time.sleep(0.5)
        free = torch.cuda.mem_get_info()[0]
    return time.monotonic() - began


def retried_when_out_of_memory(item, gpu: bool, wait=wait_for_memory) -> None:
    """Make the pytest item's run go once more after a failure by running out of GPU memory."""
    if not gpu:
        return
    run = item.runtest

    def runtest():
        try:
            return run()
        except Exception as e:
            asked = out_of_memory(e)
            if asked is None:
                raise
        waited = wait(asked)
        print(f"{item.nodeid}: ran out of GPU memory (asked {asked / (1 << 30):.2f} GiB); "
              f"run again after {waited:.1f} s", flush=True)
        return run()
    item.runtest = runtest
