"""Cases: the inputs of a timed case, made by the judge from the exercise's reference.py.

Every timed call gets fresh random values from a seed the submission cannot know in advance
(`fresh_seed`); a forward+backward step gets a random incoming gradient (`dy_for`).
"""
from __future__ import annotations

import os

from grader.seam import tensors_in


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def make_inputs(exercise, ref, case, seed):
    import torch
    dtype = getattr(torch, exercise.benchmark.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(getattr(ref, exercise.benchmark.inputs)(case, dtype, "cuda", gen))


def nbytes(v) -> int:
    import torch
    return sum(t.numel() * t.element_size() for t in tensors_in(v) if isinstance(t, torch.Tensor))


def dy_for(ref, args, exercise):
    """An incoming gradient for forward+backward: random, shaped like the first output."""
    import torch
    with torch.no_grad():
        out = ref.reference(*args)
    first = out[0] if isinstance(out, (tuple, list)) else out
    return torch.randn_like(first)
