"""The wire between the judge and the submission's process: data and shared tensors only."""
import os
import pickle
import socket
from multiprocessing.connection import Connection

import pytest
import torch

from grader.common import seam


def pair():
    a, b = socket.socketpair()
    return Connection(a.detach()), Connection(b.detach())


def test_tensors_cross_with_their_strides_and_offsets():
    ours, theirs = pair()
    base = torch.randn(6, 8)
    views = [base[:, ::2], base[1:], base.t(), torch.empty(0, 3), torch.tensor(2.5)]
    seam.send(theirs, {"outs": tuple(seam.transfer_copy(v) for v in views), "note": "hi"})
    got = seam.recv_untrusted(ours)["outs"]
    for v, g in zip(views, got):
        assert g.shape == v.shape and g.stride() == v.stride() and torch.equal(g, v)
    assert got[1].storage_offset() == views[1].storage_offset()


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_message_that_would_run_code_is_refused():
    ours, theirs = pair()
    theirs.send_bytes(pickle.dumps({"ok": True, "x": Evil()}))
    with pytest.raises(seam.UnsafeMessage, match="system"):
        seam.recv_untrusted(ours)


def test_the_runner_reads_the_judge_plainly():
    ours, theirs = pair()
    seam.send(ours, {"op": "call", "args": [torch.ones(3), None, "relu"]})
    msg = seam.recv_trusted(theirs)
    assert msg["op"] == "call" and torch.equal(msg["args"][0], torch.ones(3))


def test_a_tracks_own_library_style_kernels_are_recognized_mangled_or_not():
    """CUTLASS kernels reach the profiler with their mangled names; a track that declares them
    its own (own_kernels) is not accused of delegation, one that does not is."""
    from types import SimpleNamespace
    from grader.common.trust import delegation
    ex = SimpleNamespace(allow=())
    mangled = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cuteE"
    observed = {"ops": [], "kernels": [[mangled, 7, False, True]], "stream": 7, "gpu": True,
                "work": True}
    own = SimpleNamespace(allow=(), own_kernels=("cutlass::device_kernel",))
    assert delegation(observed, ex, own, what="matmul_act()") is None
    other = SimpleNamespace(allow=(), own_kernels=())
    assert "library kernel" in delegation(observed, ex, other, what="matmul_act()")


def test_no_gpu_trace_under_the_sanitizer_is_not_an_accusation():
    """compute-sanitizer holds the tracing interface: the profiler then records no kernel at all,
    not even the grader's marker (stream None). Under SANITIZE that is missing evidence, not a
    learner who launched nothing (seen on an H200, 2026-11-22: every check of a correct 04 failed
    with "launched no kernel of its own"); anywhere else the rule stands. PyTorch ops stay judged."""
    from types import SimpleNamespace
    from grader.common.trust import delegation
    ex = SimpleNamespace(allow=())
    track = SimpleNamespace(allow=(), own_kernels=(), sources=("k.cu",))
    blind = {"ops": [], "kernels": [], "stream": None, "gpu": True, "work": True}
    assert "no kernel of its own" in delegation(blind, ex, track, what="reduce_sum()")
    assert delegation(blind, ex, track, what="reduce_sum()", sanitized=True) is None
    aten = dict(blind, ops=["aten::sum"])
    assert "aten::sum" in delegation(aten, ex, track, what="reduce_sum()", sanitized=True)


def test_transfer_copy_keeps_the_bytes_around_a_view():
    """A view into a bigger buffer reaches the runner with the buffer's bytes around it: a
    kernel that reads past the view's last row reads what it would read in the judge."""
    from grader.common.seam import transfer_copy
    big = torch.full((4, 10), 1000.0)
    big[:, :3] = torch.arange(12.0).view(4, 3)
    view = big[:, :3]
    c = transfer_copy(view)
    assert c.stride() == view.stride() and torch.equal(c, view)
    assert torch.equal(c.as_strided((40,), (1,), 0), big.reshape(-1))  # past the last row too


@pytest.mark.parametrize("data", [b"{\"ok\": true}passed!!", pickle.dumps({"a": 1})[:-3], b""])
def test_bytes_that_are_not_a_message_are_unsafe_not_a_crash(data):
    """Garbage on the socket (not a pickle, a truncated one) is said as a forged message."""
    with pytest.raises(seam.UnsafeMessage, match="do not read as a message"):
        seam.loads_untrusted(data)
