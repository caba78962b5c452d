"""Cases: the inputs of a timed case, made by the judge from the exercise's reference.py.

Every timed call gets fresh random values from a seed the submission cannot know in advance
(`fresh_seed`); a forward+backward step gets a random incoming gradient (`dy_for`).
"""
from __future__ import annotations

import os

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from grader.common.seam import tensors_in


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def make_inputs(exercise, ref, case, seed):
    dtype = getattr(torch, exercise.benchmark.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(getattr(ref, exercise.benchmark.inputs)(case, dtype, "cuda", gen))


def nbytes(v) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_in(v) if isinstance(t, torch.Tensor))


_FIRST_OUTPUT: dict = {}  # (reference, the arguments' shapes and dtypes) -> (shape, dtype)


def dy_for(ref, args, exercise):
    """An incoming gradient for forward+backward: random, shaped like the first output. The
    output's shape comes from the reference run on fake tensors (no memory, no time: 13's
    reference at its benchmark case would hold an S x S matrix per head), once per shapes of
    the arguments (a timing asks ~26 times at one case); a reference that cannot run on them
    runs for real, each time."""
    key = (ref, tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor)
                          else repr(a) for a in args))
    try:
        if key not in _FIRST_OUTPUT:
            with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
                out = ref.reference(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                                      for a in args])
            first = out[0] if isinstance(out, (tuple, list)) else out
            _FIRST_OUTPUT[key] = (tuple(first.shape), first.dtype)
        shape, dtype = _FIRST_OUTPUT[key]
        return torch.randn(shape, dtype=dtype, device=args[0].device)
    except Exception:  # e.g. a reference that reads values (.item()) to decide a shape
        with torch.no_grad():
            out = ref.reference(*args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        return torch.randn_like(first)


def warm_fake_tensors() -> None:
    """FakeTensorMode's first use (dy_for's) imports torch._dynamo and sets up the meta kernels:
    1.4-2 s here, ~6 s on the GPU host, where it landed inside a timing's window. The same import
    serves Liger-Kernel's ops (they import torch._dynamo: 10 s of a peer's first call) and a
    torch.compile'd baseline. CPU only: a judge waiting at its gate does it."""
    import torch._dynamo  # noqa: F401 (the import is the point)
    with FakeTensorMode() as mode:
        (mode.from_tensor(torch.empty(4)) * 2).sum()

