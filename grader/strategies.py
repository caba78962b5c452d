"""Hypothesis strategies for the checks: awkward sizes, shapes, dtypes and input seeds.

Sizes mix the cases that break kernels (1, primes, non-powers-of-two, one past a block size)
with random ones. On the CPU (Triton's interpreter, a C++ fallback) they stay small: the
interpreter runs a 64x1000 kernel in ~0.1 s.
"""
from __future__ import annotations

import torch
from hypothesis import strategies as st

from grader.settings import current

AWKWARD = (1, 2, 3, 5, 7, 31, 127, 128, 129, 255, 257, 1000, 1023, 1024, 1025, 4095, 4097)
LARGE = (65537, 131071, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 7)

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16}


def _large_shapes(device: str) -> bool:
    """GPU-sized shapes, except with Settings.small (compute-sanitizer runs 10-100x slower)."""
    return device == "cuda" and not current().small


def lengths(device: str, *, small_max: int = 5000, large: bool = True):
    """1-D lengths: awkward ones always; large ones (> 1M) only on a GPU."""
    on_gpu = _large_shapes(device)
    fixed = AWKWARD + (LARGE if on_gpu and large else ())
    upper = 1 << 18 if on_gpu else small_max
    return st.one_of(st.sampled_from(fixed), st.integers(1, upper))


def matrices(device: str, *, max_rows: int | None = None, max_cols: int | None = None):
    """(M, N) with awkward row lengths; bounded so M*N stays cheap on the CPU."""
    on_gpu = _large_shapes(device)
    max_rows = max_rows or (4096 if on_gpu else 64)
    max_cols = max_cols or (16384 if on_gpu else 1100)
    cols = st.one_of(st.sampled_from([c for c in AWKWARD if c <= max_cols]),
                     st.integers(1, max_cols))
    rows = st.one_of(st.sampled_from([r for r in (1, 2, 3, 7, 33, 129) if r <= max_rows]),
                     st.integers(1, max_rows))
    return st.tuples(rows, cols)


def dtypes(names):
    return st.sampled_from([DTYPES[n] for n in names])


seeds = st.integers(0, 2**31 - 1)


def randn(shape, *, seed: int, dtype, device, scale: float = 1.0, offset: float = 0.0):
    """Fresh normal values from `seed` (drawn on the CPU so a seed means the same on any device)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset
    return t.to(device=device, dtype=dtype)


def draw_row_shape(data, device: str, *, max_rows_gpu: int = 1024):
    """[N], [M, N] or [B, S, N] with awkward row lengths (rows: the last dim), drawn from
    hypothesis' `data` with a label per choice so that a failure prints each. At most
    `max_rows_gpu` rows on a GPU: each example is compared in float64."""
    m, n = data.draw(matrices(device, max_rows=max_rows_gpu if device == "cuda" else None),
                     label="(rows, N)")
    kind = data.draw(st.sampled_from(["N", "MN", "BSN"]), label="layout")
    if kind == "N":
        return (n,)
    if kind == "MN":
        return (m, n)
    b = data.draw(st.integers(1, min(m, 4)), label="B")
    return (b, max(1, m // b), n)
