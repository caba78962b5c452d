"""Hypothesis strategies for the checks: awkward sizes, shapes, dtypes and input seeds.

Sizes mix the cases that break kernels (1, primes, non-powers-of-two, one past a block size)
with random ones. On the CPU (Triton's interpreter, a C++ fallback) they stay small: the
interpreter runs a 64x1000 kernel in ~0.1 s.
"""
from __future__ import annotations

import functools
import math

import torch
from hypothesis import assume, settings as hypothesis_settings, strategies as st

from grader.common.settings import current

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


def in_this_share(key, classes) -> bool:
    """Does this judge draw examples of the class `key` (one of `classes`, a list the same in
    every judge)? A track whose checks run in n judges at once (grader.run.grade: `shards`) gives
    each judge every n-th class of a property check's examples, so that each compiles the Triton
    specializations of its own classes only, not most of all of them (exercise 13: its backward's
    three kernels per dtype, D and causal). Use it as `assume(in_this_share(key, CLASSES))`: the
    draws stay those of the whole track, so a failure's REPRO blob replays in one judge."""
    index, count = current().shard or (0, 1)
    return classes.index(key) % count == index


# The checks that compile the op's kernels afresh through its registered op (no TMA descriptors
# there): 13's opcheck took 24-28 s and its torch.compile check 16-19 s on an H200, the longest
# checks of its shares (2026-11-29)
HEAVY = ("test_opcheck", "test_torch_compile")
HEAVY_WORK = 4  # ... each about 4 of its other checks (2-9 s each there, with their compiles)


def is_property(item) -> bool:
    """A hypothesis check (its examples are drawn; split among judges by example, not dealt)."""
    return hasattr(getattr(item, "obj", None), "hypothesis")


def share_of(items, index: int, count: int) -> list:
    """This judge's share of a track's checks, the i-th of n (grader.run.grade runs a long
    track's checks in n judges at once): every property check, its examples split (by class
    where the check says its classes, in_this_share; else the profile's
    max_examples / n each, drawn afresh in each process), and its part of the other checks:
    the HEAVY ones first, each to the last judge with the least work so far (a HEAVY check
    counts as HEAVY_WORK of the others; the first judges hold the classes of a check split by
    fewer classes than judges). So each judge compiles about its share of the Triton
    specializations, not each of them most of all, and a heavy check runs beside few others.
    Every judge deals the same way, so each check runs in exactly one. A share does not wait
    for the others' forward verdict: the merge of the shares (grader.run.results.Phase.merged)
    says of its backward checks what one judge would have, where another share's forward
    failed."""
    others = [i for i in items if not is_property(i)]
    work, mine = [0] * count, set()
    for item in sorted(others, key=lambda i: not i.name.startswith(HEAVY)):  # stable: in order
        k = min(range(count - 1, -1, -1), key=lambda j: work[j])  # the last of the least busy
        work[k] += HEAVY_WORK if item.name.startswith(HEAVY) else 1
        if k == index:
            mine.add(id(item))
    return [i for i in items if is_property(i) or id(i) in mine]


def split_by_declared_class(items, whole: int) -> list:
    """In a share of a track's checks: where the exercise's checks module declares the classes
    of a property check's examples by its given arguments (`SHARE_BY = {check name: (key
    function of its keyword arguments, classes)}`), this judge keeps only the examples of its
    share of the classes (in_this_share), as if the check began with that `assume`. The check's
    own source stays as it is: hypothesis draws the fixed examples of the project's tests from
    it, and a known-bad caught by them stays caught. The draws stay those of the whole track,
    so a failure's REPRO blob replays in one judge.

    Each class keeps its part of the `whole` track's examples, however many judges there are:
    a judge draws `whole` times its classes' fraction (6 classes in 12 judges: 5 examples in
    each of six, not 3). Returns the checks this judge has no class of (more judges than
    classes): they are the other judges' to run."""
    none = []
    for item in items:
        test = getattr(item, "obj", None)
        declared = getattr(getattr(item, "module", None), "SHARE_BY", {}).get(
            getattr(test, "__name__", None))
        if declared is None or not hasattr(test, "hypothesis"):
            continue
        key, classes = declared
        mine = sum(in_this_share(c, classes) for c in classes)
        if not mine:
            none.append(item)
            continue
        if getattr(test.hypothesis.inner_test, "split_by_class", False):
            continue
        inner = test.hypothesis.inner_test

        @functools.wraps(inner)  # the same digest: a derandomized run draws the same examples
        def split(*args, _inner=inner, _key=key, _classes=classes, **kwargs):
            assume(in_this_share(_key(**kwargs), _classes))
            return _inner(*args, **kwargs)
        split.split_by_class = True
        test.hypothesis.inner_test = split
        test._hypothesis_internal_use_settings = hypothesis_settings(
            test._hypothesis_internal_use_settings,
            max_examples=-(-whole * mine // len(classes)))
    return none


def generator(device, seed: int) -> torch.Generator:
    """The random generator of `device`, seeded: the checks' values are drawn where they are
    used. On a GPU by its own generator (Philox), so a seed means the same values on that GPU
    model (PyTorch spreads the draws over the GPU's SMs), and on the CPU by the CPU's. Drawn on
    the CPU for a GPU, a check's inputs cost a core 0.4-0.6 s per 16-23M elements (float64, one
    thread: the 2-core CPU machine), and 03's awkward shapes took 13-16 s of a run again's checks
    on an H200, mostly drawing them."""
    return torch.Generator(device=device).manual_seed(seed)


def randn(shape, *, seed: int, dtype, device, scale: float = 1.0, offset: float = 0.0):
    """Fresh normal values from `seed`, drawn on `device` (`generator`)."""
    t = torch.randn(shape, generator=generator(device, seed), dtype=torch.float64, device=device)
    return (t * scale + offset).to(dtype)


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


# --- layouts: every tensor argument, in turn, as a strided and as a misaligned view ----------------

VIEW_KINDS = ("strided", "offset")


def as_view(t: torch.Tensor, kind: str, *, seed: int = 0) -> torch.Tensor:
    """`t`'s values in a view of a bigger buffer: "strided" (every other element of the last
    dimension, for 2-D and up also a gap between rows) or "offset" (dense, starting one element
    into its storage: not 16-byte aligned). The rest of the buffer holds other finite random
    values, so a kernel that reads it gets wrong numbers, not NaN."""
    if t.numel() == 0 or t.dim() == 0:
        return t
    shape = tuple(t.shape)
    if kind == "strided":
        big = shape[:-1] + (2 * shape[-1],)
        base = randn(big, seed=seed + 7919, dtype=t.dtype, device=t.device)
        view = base[..., ::2]
    elif kind == "offset":
        base = randn(t.numel() + 1, seed=seed + 7919, dtype=t.dtype, device=t.device)
        view = base[1:].view(shape)
    else:
        raise ValueError(f"unknown view kind {kind!r}")
    with torch.no_grad():
        view.copy_(t)
    return view.requires_grad_(t.requires_grad) if t.is_leaf else view


def each_view(args, names, *, seed: int = 0):
    """(argument name, kind, args) for every tensor argument in turn, as each kind of view, the
    other arguments unchanged: the shared layout check of every exercise."""
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or a.numel() < 2:
            continue
        for kind in VIEW_KINDS:
            out = list(args)
            out[i] = as_view(a, kind, seed=seed + i)
            yield names[i], kind, tuple(out)


def layouts(n_args: int):
    """A hypothesis strategy: None (all dense) or (argument index, view kind)."""
    return st.one_of(st.none(), st.tuples(st.integers(0, n_args - 1), st.sampled_from(VIEW_KINDS)))


def with_layout(args, layout, *, seed: int = 0):
    """`args` with the drawn layout applied (see `layouts`)."""
    if layout is None:
        return tuple(args)
    i, kind = layout
    out = list(args)
    if isinstance(out[i], torch.Tensor):
        out[i] = as_view(out[i], kind, seed=seed)
    return tuple(out)


# --- values past a 16-bit type's range: where a bf16 op that goes through fp16 overflows -------

FP16_MAX = torch.finfo(torch.float16).max  # 65504: bf16 goes on to 3.4e38, as float32 does
BEYOND_FP16 = (7e4, 3e5)  # magnitudes past FP16_MAX, bf16 numbers like any others


def exp_limit(dtype) -> float:
    """The largest x whose exp is finite in `dtype`, log(its largest number): 11.09 for fp16,
    88.72 for bf16 and float32. A score past it overflows an exp taken in that type (softmax
    subtracts the row's max first, so its exponents stay <= 0)."""
    return math.log(torch.finfo(dtype).max)


def past_fp16(shape, *, seed: int, device, dtype=torch.bfloat16, lo: float = BEYOND_FP16[0],
              hi: float = BEYOND_FP16[1]) -> torch.Tensor:
    """bf16 values whose magnitudes are uniform in [lo, hi] (past fp16's 65504 by default),
    random signs, from `seed` (drawn on `device`, as `randn`)."""
    if not lo > FP16_MAX:
        raise ValueError(f"lo={lo} is not past fp16's largest number {FP16_MAX}")
    g = generator(device, seed)
    mag = torch.empty(shape, dtype=torch.float64, device=device).uniform_(lo, hi, generator=g)
    sign = torch.randint(0, 2, shape, generator=g, device=device).to(torch.float64) * 2 - 1
    return (mag * sign).to(dtype)


def extremes(t: torch.Tensor, *, seed: int, beyond_fp16: bool = True) -> torch.Tensor:
    """`t` with a few elements replaced by what real data holds besides normal values: signed
    zeros, and for bf16 magnitudes past fp16's range (BEYOND_FP16, where a bf16 kernel that
    goes through fp16 overflows). Returns a new tensor."""
    if t.numel() == 0 or not t.is_floating_point():
        return t
    flat = t.detach().reshape(-1).clone()
    g = generator(flat.device, seed)  # drawn there, as `randn`
    k = max(1, flat.numel() // 16)
    idx = torch.randperm(flat.numel(), generator=g, device=flat.device)[:k]
    special = torch.tensor([0.0, -0.0], dtype=torch.float64, device=flat.device)
    if t.dtype == torch.bfloat16 and beyond_fp16:
        big = torch.empty(4, dtype=torch.float64, device=flat.device).uniform_(*BEYOND_FP16,
                                                                               generator=g)
        special = torch.cat([special, big, -big])
    picks = special[torch.randint(len(special), (k,), generator=g, device=flat.device)]
    flat[idx] = picks.to(flat.dtype)
    return flat.view(t.shape)
