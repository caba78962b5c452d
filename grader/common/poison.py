"""Poison: fresh allocations come back NaN-filled in every process that runs a check (the judge's
and the submission's), so an element a kernel forgets to write reads NaN and fails.
"""
from __future__ import annotations

import torch


def poison_fresh_memory(on: bool = True) -> None:
    """Fresh allocations (torch.empty, at::empty) come back NaN-filled (INT_MAX for integers),
    so an element a kernel forgets to write cannot pass by luck; off for timing (the fill is a
    full extra write pass). This is torch.use_deterministic_algorithms(on, warn_only=True)
    without its one other effect, Inductor's `deterministic` setting: setting that imports
    torch._inductor (and dynamo), ~2 s at the start of every judge and submission process,
    for a setting only compiled code would read. warn_only: ops without a deterministic
    variant still run."""
    torch._C._set_deterministic_algorithms(on, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = on
