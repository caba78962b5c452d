"""A check that ran out of GPU memory runs once more after memory comes back (grader.judge.oom):
in a grade the checks of every track share the GPU, and a correct kernel's check failed that way
(an H200, 2026-11-30). Any other failure stands at once, and a second shortage is the check's
failure, with its own message."""
import builtins

import pytest
import torch

from grader.judge import oom

GIB = 1 << 30


class Item:
    """A pytest item's runtest, failing as told: an exception, or None (the check passes)."""
    nodeid = "exercises/02_scale/test_scale.py::test_more_than_2_31_elements[cuda]"

    def __init__(self, *outcomes):
        self.outcomes, self.calls = list(outcomes), 0

    def runtest(self):
        self.calls += 1
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome


def _retried(item, gpu=True):
    waited = []
    oom.retried_when_out_of_memory(item, gpu, wait=lambda asked: waited.append(asked) or 0.0)
    return waited


def _from_submission(text: str) -> AssertionError:
    """A check's failure whose cause is the submission's process's error (as the proxy raises
    it), the way 02's check wraps it."""
    try:
        raise RuntimeError(text)
    except RuntimeError as e:
        try:
            raise AssertionError("n = 2^31 + 7: the call failed") from e
        except AssertionError as wrapped:
            return wrapped


def test_a_check_that_ran_out_of_gpu_memory_runs_once_more():
    item = Item(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 "
                                       "has a total capacity of 139.80 GiB of which 9.75 GiB is "
                                       "free."), None)
    waited = _retried(item)
    item.runtest()  # passes: its second run's outcome is the check's
    assert item.calls == 2 and waited == [16 * GIB]

    item = Item(_from_submission("CUDA out of memory. Tried to allocate 512.00 MiB"), None)
    waited = _retried(item)
    item.runtest()
    assert item.calls == 2 and waited == [512 * (1 << 20)]

    group_of = getattr(builtins, "ExceptionGroup", None) or \
        pytest.importorskip("exceptiongroup").ExceptionGroup  # (Python 3.10: the backport)
    group = group_of("hypothesis found 2 distinct failures", [
        AssertionError("out[3] = 1.0, expected 2.0"), torch.OutOfMemoryError("CUDA out of memory")])
    item = Item(group, None)  # (a wrong answer among them fails the second run as ever)
    waited = _retried(item)
    item.runtest()
    assert item.calls == 2 and waited == [0.0]  # not said how much: 4 GiB more than now


def test_other_failures_and_a_second_shortage_stand():
    wrong = AssertionError("out[7] = nan, expected 1.5")
    item = Item(wrong)
    waited = _retried(item)
    with pytest.raises(AssertionError, match="expected 1.5"):
        item.runtest()
    assert item.calls == 1 and waited == []  # a wrong answer fails at once

    item = Item(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"),
                torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"))
    _retried(item)
    with pytest.raises(torch.OutOfMemoryError, match="80.00 GiB"):
        item.runtest()  # more than the GPU has: it fails as it failed
    assert item.calls == 2

    item = Item(torch.OutOfMemoryError("CUDA out of memory"), None)
    _retried(item, gpu=False)  # no GPU: nothing to wait for, nothing retried
    with pytest.raises(torch.OutOfMemoryError):
        item.runtest()
    assert item.calls == 1


def test_the_wait_ends_when_memory_is_back_or_at_its_limit(monkeypatch):
    free = iter([9, 12, 20, 40, 80])
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (next(free) * GIB, 140 * GIB))
    monkeypatch.setattr(oom.time, "sleep", lambda s: None)
    oom.wait_for_memory(16 * GIB)
    assert next(free) == 80  # stopped at 40 GiB free: twice the 16 asked
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (1 * GIB, 140 * GIB))
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(oom.time, "monotonic", lambda: next(clock))
    assert oom.wait_for_memory(16 * GIB, wait_s=30) >= 30  # never back: it gives up
