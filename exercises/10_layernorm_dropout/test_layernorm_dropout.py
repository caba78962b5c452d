"""Checks for exercise 10 (layernorm_dropout). Run through the grader: `make exercise-10`.

No reference can know which elements a submission drops (that is its own generator's choice),
so every check reads the mask off the output: a dropped element is exactly 0, a kept one is
layernorm(x) / (1 - p), which is 0 only where it rounds to 0 (then the op runs again to tell:
_mask). Values and gradients are then held to the float64 reference *for that mask*
(reference.with_mask), and the mask itself is held to what a counter-based generator promises:
a function of (seed, element index) only, the same in the forward and the backward, and random
(kept fraction, no row or column repeating another).
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import (expected_grads, kept_per_call, new_contents_same_shapes,
                            on_interpreter, rstd_scale, sum_tol, value_and_grads)

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-5
PS = [0.0, 0.1, 0.25, 0.5, 0.9]
# How far a count may stray from its binomial mean before we call the generator broken: 6
# standard deviations, which a sound generator exceeds with probability ~2e-9 per check.
SIGMAS = 6.0


def _inputs(shape, seed, dtype, device, scale=1.0, offset=0.0):
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale, offset=offset)
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device=device, scale=0.5, offset=1.0)
    b = randn(shape[-1], seed=seed + 2, dtype=dtype, device=device, scale=0.5)
    dy = randn(shape, seed=seed + 3, dtype=dtype, device=device)
    return x, w, b, dy


def _scale(p):
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def _tol(exercise, dtype, p):
    """The dtype's tolerance, its atol grown by 1/(1-p): outputs are that much larger."""
    tol = dict(exercise.tolerance[str(dtype).removeprefix("torch.")])
    tol["atol"] *= max(1.0, _scale(p))
    return tol


def _binomial_ok(count, n, q, what, fix):
    """count ~ Binomial(n, q): within SIGMAS standard deviations of n*q, else a Mismatch."""
    sd = math.sqrt(n * q * (1 - q))
    check.within(abs(count - n * q), SIGMAS * sd + 1,
                 what=f"{what}: {count} of {n} ({count / n:.5f}), expected {q:.5f}; off by",
                 why=f"{SIGMAS:g} standard deviations of a binomial count (+1): a sound "
                     f"generator lands outside with probability ~2e-9. {fix}")


def _check_mask_fraction(keep, p, /, **ctx):
    """The kept fraction of a mask of any size, held to the binomial bound (exact for p = 0)."""
    n = keep.numel()
    kept = int(keep.sum())
    if p == 0.0 and kept != n:
        raise Mismatch(f"p = 0 must drop nothing, but {n - kept} of {n} outputs are exactly 0 "
                       f"({check._context(ctx)}): keep an element when u >= p (u in [0, 1))")
    _binomial_ok(kept, n, 1 - p, f"kept fraction with p={p} ({check._context(ctx)})",
                 "Keep an element when u >= p, with u uniform in [0, 1) (tl.rand), and drop it "
                 "by writing exactly 0.")


# A kept value an honest kernel can round to exactly 0 is under ~1e-6: fp16's smallest step is
# 6e-8, and float32's x_hat * w + b cancels to 0 only within its rounding. Zeros of y whose
# kept value is under UNSURE (float64) may be such; the op runs again to tell (_mask).
UNSURE = 1e-4


def _mask(impl, ref, y, x, w, b, p, seed):
    """The mask y shows: kept where y != 0. A kept element whose value rounds to 0 looks
    dropped (an H200 grade saw 1 of 681034 fp16 outputs exactly 0 at p = 0, where nothing is
    dropped). Where a zero of y has a kept value under UNSURE, the op runs again with b + 1: the
    same seed, so the same mask, and those elements' kept values about 1/(1 - p). Kept is then
    what is nonzero in either output (a value near -1 in the first is not near 0 in the
    second)."""
    keep = y != 0
    kept = ref.layernorm(x.double(), w.double(), b.double(), EPS)
    if bool((~keep & (kept.abs() < UNSURE)).any()):
        with torch.no_grad():
            again = impl.layernorm_dropout(x, w, (b.double() + 1).to(b.dtype), p, seed, EPS)
        keep = keep | (again != 0)
    return keep


def _forward_checked(impl, ref, exercise, x, w, b, p, seed, /, **ctx):
    """y from the submission, held to with_mask for the mask y shows; returns (y, keep)."""
    ctx = {"p": p, "rng_seed": seed, **ctx}
    y = call_checked(impl.layernorm_dropout, x, w, b, p, seed, EPS,
                     names=("x", "w", "b", "p", "seed", "eps"))
    if not isinstance(y, torch.Tensor):
        raise Mismatch(f"layernorm_dropout must return a tensor, got {type(y).__name__}")
    keep = _mask(impl, ref, y, x, w, b, p, seed)
    want = ref.with_mask(x.double(), w.double(), b.double(), keep, p, EPS)
    check.assert_close(y, want, tol=_tol(exercise, x.dtype, p), dtype=x.dtype,
                       what="y where kept (layernorm(x) / (1 - p))", atol_scale=_y_scale(x), **ctx)
    return y, keep


def _y_scale(x):
    """y = (x - mean) * rstd * w + b: the rounding of x - mean (about u * |x|) is multiplied by
    rstd, up to 1/sqrt(eps) ~ 316 on a row whose values are nearly equal (a row of 2 elements,
    on an H200 2026-11-26: a correct float32 y off by 1.25e-5 against an atol of 1e-5). So y's
    atol scales with max(1, rstd) of its row, as dx's does (grader.judge.testing.rstd_scale)."""
    return rstd_scale(x, EPS, centered=True)


def _grads_checked(impl, ref, exercise, x, w, b, p, seed, dy, /, **ctx):
    """(y, dx, dw, db) from the submission, held to the float64 gradients for y's mask."""
    ctx = {"p": p, "rng_seed": seed, **ctx}
    (y,), got = value_and_grads(impl.layernorm_dropout, x, w, b, p, seed, EPS, wrt=(0, 1, 2),
                                dy=dy)
    keep = _mask(impl, ref, y.detach(), x, w, b, p, seed)
    (want_y,), want = expected_grads(
        lambda xx, ww, bb: ref.with_mask(xx, ww, bb, keep, p, EPS), x, w, b, wrt=(0, 1, 2),
        dy=dy)
    tol = _tol(exercise, x.dtype, p)
    rows = max(1, x.numel() // x.shape[-1])
    check.assert_close(y, want_y, tol=tol, dtype=x.dtype, what="y", atol_scale=_y_scale(x), **ctx)
    names = ("dx", "dw (the sum over rows of g * xhat, g = dy * keep / (1 - p))",
             "db (the sum over rows of g = dy * keep / (1 - p))")
    # dx = rstd * (bracket of O(|g|) terms): the bracket's rounding is covered by atol, but rstd
    # multiplies it, and rstd is 1/sqrt(eps) ~ 316 on a row of one element or of equal values
    # (where exact dx is 0): dx's atol scales with max(1, the largest rstd) (07 derives the same)
    rstd = float((x.detach().double().var(-1, unbiased=False) + EPS).rsqrt().max().clamp_min(1))
    tols = (dict(tol, atol=tol["atol"] * rstd), sum_tol(tol, rows, x.dtype),
            sum_tol(tol, rows, x.dtype))
    for g, e, t, name in zip(got, want, tols, names):
        try:
            check.assert_close(g, e, tol=t, dtype=x.dtype, what=name, **ctx)
        except Mismatch as err:
            raise Mismatch(f"{err}\n  The expectation uses the mask the forward's output shows: "
                           f"if only the gradients differ, the backward draws another mask "
                           f"(another seed or counter) or forgets the 1/(1-p)") from None
    return y, keep, got


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, p=st.sampled_from(PS),
       rng=st.integers(0, 2**31 - 1))
def test_forward_matches_reference(impl, ref, exercise, device, data, dtype, seed, p, rng):
    shape = draw_row_shape(data, device)
    x, w, b, _ = _inputs(shape, seed, dtype, device)
    _, keep = _forward_checked(impl, ref, exercise, x, w, b, p, rng, shape=shape, seed=seed)
    _check_mask_fraction(keep, p, shape=shape, seed=seed, rng_seed=rng)


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, p=st.sampled_from(PS),
       rng=st.integers(0, 2**31 - 1))
def test_backward_matches_reference(impl, ref, exercise, device, data, dtype, seed, p, rng):
    shape = draw_row_shape(data, device)
    x, w, b, dy = _inputs(shape, seed, dtype, device)
    _grads_checked(impl, ref, exercise, x, w, b, p, rng, dy, shape=shape, seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_p_zero_is_layernorm(impl, ref, exercise, device, dtype):
    """p = 0 keeps everything: y is LayerNorm itself, gradients included."""
    shape = (7, 300)
    x, w, b, dy = _inputs(shape, 3, dtype, device)
    y, keep, _ = _grads_checked(impl, ref, exercise, x, w, b, 0.0, 5, dy, shape=shape)
    _check_mask_fraction(keep, 0.0, shape=shape)
    check.assert_close(y, ref.layernorm(x.double(), w.double(), b.double(), EPS),
                       atol_scale=_y_scale(x),
                       tol=exercise.tolerance[str(dtype).removeprefix("torch.")], dtype=dtype,
                       what="y with p = 0 (plain LayerNorm)", shape=shape)


@pytest.mark.backward
def test_p_one_drops_everything(impl, device):
    """p = 1 drops everything (as F.dropout does): y = 0 and every gradient 0, never NaN."""
    x, w, b, dy = _inputs((5, 64), 4, torch.float32, device)
    (y,), grads = value_and_grads(impl.layernorm_dropout, x, w, b, 1.0, 9, EPS, wrt=(0, 1, 2),
                                  dy=dy)
    for name, t in (("y", y),) + tuple(zip(("dx", "dw", "db"), grads)):
        if not bool((t == 0).all()):
            raise Mismatch(f"p = 1: {name} must be all 0, got {int((t != 0).sum())} nonzero "
                           f"(or NaN) elements: the scale 1/(1-p) is infinite there, use 0")


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_longer_than_a_block(impl, ref, exercise, device, dtype):
    """Rows of 16K-128K elements: the mask keeps its rule across column blocks."""
    cases = [(3, 20001)] if device == "cpu" else [(37, 16385), (9, 65537), (5, 131075)]
    for i, shape in enumerate(cases):
        x, w, b, dy = _inputs(shape, 100 + i, dtype, device)
        _, keep, _ = _grads_checked(impl, ref, exercise, x, w, b, 0.25, 77, dy, shape=shape)
        _check_mask_fraction(keep, 0.25, shape=shape)


@pytest.mark.backward
def test_dw_db_over_many_rows(impl, ref, exercise, device):
    """dw, db over many rows, summed in float32 (per-program partials), never in bf16.

    With dy > 0 every term of db is positive, so db grows like M (~400 here): a bf16 running
    sum stops growing once its spacing (2^-7 of it) exceeds a term, far off the bound.
    """
    shape = (256, 24) if device == "cpu" else (16384, 256)
    x, w, b, _ = _inputs(shape, 51, torch.bfloat16, device)
    dy = randn(shape, seed=52, dtype=torch.float64, device=device).abs().add(1.0).to(torch.bfloat16)
    _grads_checked(impl, ref, exercise, x, w, b, 0.1, 3, dy, shape=shape, dy="1 + |randn|")


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (3, 7), (2, 2, 5)], ids=str)
def test_gradcheck(impl, device, shape):
    """torch.autograd.gradcheck in float64 with a fixed seed: the op is then a deterministic
    function of x, w and b, and the math must run in float64 too."""
    x, w, b, _ = _inputs(shape, 7, torch.float64, device)
    args = tuple(t.requires_grad_() for t in (x, w, b))
    gradcheck_checked(lambda a, c, d: impl.layernorm_dropout(a, c, d, 0.3, 2024, EPS), args,
                      names=("x", "w", "b"), eps=1e-6, atol=1e-5, rtol=1e-4,
                      hint="the backward applies the forward's mask (the same seed, the same "
                           "element index) and its 1 / (1 - p) scale to dy first, then the "
                           "layer norm's backward")


# --- the mask: a function of (seed, element index), the same in the backward --------------------

def test_same_seed_same_mask_other_seed_other_mask(impl, device):
    x, w, b, _ = _inputs((32, 1000), 8, torch.float32, device)
    p = 0.5
    y1 = impl.layernorm_dropout(x, w, b, p, 1234, EPS)
    y2 = impl.layernorm_dropout(x, w, b, p, 1234, EPS)
    if not torch.equal(y1, y2):
        differ = int((y1 != y2).sum())
        raise Mismatch(f"two calls with the same seed gave different outputs ({differ} of "
                       f"{y1.numel()} elements): the mask must be a function of (seed, element "
                       f"index) alone, e.g. tl.rand(seed, row * N + col); never PyTorch's global "
                       f"generator, a clock, or a counter kept between calls")
    y3 = impl.layernorm_dropout(x, w, b, p, 1235, EPS)
    differ = int(((y1 != 0) != (y3 != 0)).sum())
    # two independent masks disagree on each element with probability 2 p (1 - p)
    _binomial_ok(differ, y1.numel(), 2 * p * (1 - p),
                 "elements whose keep/drop differs between seeds 1234 and 1235",
                 "Another seed must give an independent mask: pass the seed to tl.rand (not a "
                 "constant), and do not derive the counter from the seed.")


def test_mask_depends_only_on_seed_and_index(impl, exercise, device):
    """The first rows of x, alone, get the same mask as in a call on all of x (the grid, the
    number of programs and the block sizes change; element (r, c) does not), and so does x
    viewed as [B, S, N]."""
    m, n = (66, 300) if device == "cpu" else (4098, 1000)
    x, w, b, _ = _inputs((m, n), 9, torch.float32, device)
    full = impl.layernorm_dropout(x, w, b, 0.5, 4321, EPS)
    for rows in (1, 3, 64):
        part = impl.layernorm_dropout(x[:rows].clone(), w, b, 0.5, 4321, EPS)
        same = (part != 0) == (full[:rows] != 0)
        if not bool(same.all()):
            raise Mismatch(f"x[:{rows}] alone and the first {rows} rows of a call on x ({m} "
                           f"rows) got different masks ({int((~same).sum())} of {same.numel()} "
                           f"elements differ): the random number of element (row, col) must "
                           f"come from (seed, row, col) only, e.g. tl.rand(seed, row * N + col); "
                           f"never from the program id, the grid size or a block size chosen "
                           f"from M")
        check.assert_close(part, full[:rows].double(), tol=exercise.tolerance["float32"],
                           dtype=torch.float32, what=f"y of x[:{rows}] vs rows of y of x")
    three = impl.layernorm_dropout(x.view(3, m // 3, n), w, b, 0.5, 4321, EPS)
    if not torch.equal(three != 0, full.view(3, m // 3, n) != 0):
        raise Mismatch("x viewed as [B, S, N] got another mask than x as [M, N]: the counter "
                       "is the element's index in the [M, N] view, row * N + col")


@pytest.mark.backward
def test_backward_regenerates_the_same_mask(impl, device):
    """One row: db = dy * keep / (1 - p) exactly, so db is 0 exactly where y was dropped, and
    dy / (1 - p) where kept: the backward drew the forward's mask."""
    n, p = 1000, 0.5
    x, w, b, dy = _inputs((1, n), 10, torch.float32, device)
    (y,), (_, _, db) = value_and_grads(impl.layernorm_dropout, x, w, b, p, 99, EPS,
                                       wrt=(0, 1, 2), dy=dy)
    dropped = (y[0] == 0)
    grad_dropped = (db == 0)
    if not torch.equal(dropped, grad_dropped):
        wrong = int((dropped != grad_dropped).sum())
        raise Mismatch(f"the backward used another mask than the forward: in {wrong} of {n} "
                       f"columns, db (= dy * keep / (1-p) for one row) is 0 where y was kept or "
                       f"nonzero where y was dropped. Regenerate the mask in the backward from "
                       f"the same seed and the same counters (row * N + col) as the forward")
    check.assert_close(db, torch.where(dropped, 0.0, dy[0].double() * 2.0), tol={"atol": 1e-6,
                       "rtol": 1e-6}, dtype=torch.float32, what="db for one row (dy / (1-p) where "
                       "kept)")


def test_mask_statistics(impl, device):
    """Over 2^20 elements (p = 0.1, the benchmark's): the kept fraction, and no row, column or
    neighbour repeating another's numbers.

    Counts of independent Bernoulli(q) events with q = 1 - p are binomial:
      kept elements                      ~ Bin(M N, q)
      kept per column c                  ~ Bin(M, q)   (sum of squared z-scores ~ chi^2, N dof)
      rows 2i and 2i+1 agree at column c ~ Bin(M/2 * N, q^2 + (1-q)^2), and so do columns
                                           2j and 2j+1 (disjoint pairs: independent)
    A generator reused for every row (counter = col) makes every column all-kept or all-dropped
    and every vertical pair agree; one reused for every column (counter = row) does the same
    sideways.
    """
    m, n, p = 256, 4096, 0.1   # 2^20 elements: ~7 s on the interpreter
    q = 1 - p
    x, w, b, _ = _inputs((m, n), 12, torch.float32, device)
    y = impl.layernorm_dropout(x, w, b, p, 2718, EPS)
    keep = (y != 0).cpu()
    # the structure first (a shared row also skews the total, with a less telling message)
    per_col = keep.sum(0).double()
    chi2 = float(((per_col - m * q) ** 2 / (m * q * (1 - q))).sum())
    check.within(abs(chi2 - n), SIGMAS * math.sqrt(2 * n),
                 what=f"the kept counts of the {n} columns: chi^2 = {chi2:.0f} for {n} degrees "
                      f"of freedom, off {n} by",
                 why=f"{SIGMAS:g} standard deviations of chi^2: they spread too much, the rows "
                     f"share random numbers. The counter must include the row: "
                     f"tl.rand(seed, row * N + col)")
    agree = q * q + (1 - q) * (1 - q)
    vertical = int((keep[0::2] == keep[1::2]).sum())
    _binomial_ok(vertical, (m // 2) * n, agree, "vertical neighbours (rows 2i, 2i+1) with the "
                 "same keep/drop", "Each row must draw its own numbers: the counter is "
                 "row * N + col, not col.")
    horizontal = int((keep[:, 0::2] == keep[:, 1::2]).sum())
    _binomial_ok(horizontal, m * (n // 2), agree, "horizontal neighbours (columns 2j, 2j+1) "
                 "with the same keep/drop", "Each element must draw its own number: the counter "
                 "is row * N + col, not row (and not col // 2).")
    _check_mask_fraction(keep, p, shape=(m, n))


def test_kept_values_are_rescaled(impl, ref, device):
    """Kept values are layernorm(x) / (1 - p): the expectation of y is then layernorm(x)."""
    p = 0.5
    x, w, b, _ = _inputs((16, 200), 13, torch.float32, device)
    y = impl.layernorm_dropout(x, w, b, p, 5, EPS).double()
    z = ref.layernorm(x.double(), w.double(), b.double(), EPS)
    keep = y != 0
    ratio = (y[keep] / z[keep]).median().item()  # torch's median of values with a NaN: NaN
    check.within(abs(ratio - 2.0), 1e-4,
                 what=f"kept values are {ratio:.4g} x layernorm(x), expected 1/(1-p) = 2 "
                      f"(p = 0.5); off by",
                 why="multiply the kept values by 1/(1-p) so the expectation of y is "
                     "layernorm(x) (inverted dropout)")


# --- the LayerNorm part: numerics -------------------------------------------------------------

@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_constant_rows(impl, ref, exercise, device, dtype):
    """A constant row has variance 0: rstd = 1/sqrt(eps), y = b (kept) or 0, finite gradients.

    The bound for those rows, derived. In exact math x - mean is 0 there; in float32 the mean
    of N equal values c is c only up to the rounding of N - 1 additions (in any order) and of a
    division (Triton's default fp32 division may be off by 2 ulp): |mean - c| <= d = (N + 2) u |c|,
    u = 2^-24. Then x - mean = delta (|delta| <= d, computed exactly), the variance is delta^2
    (<< eps) and x-hat = delta * rstd with rstd ~ 1/sqrt(eps) ~ 316: up to h = d / sqrt(eps)
    (2.2e-3 for c = 3, N = 37), where the float64 reference has exactly 0. Hence, in those rows:
      y  = b * scale + x-hat * w * scale:            atol + h * max|w| * scale
      dx = rstd * (wg - mean(wg) - x-hat * mean(x-hat * wg)), every rounding of the bracket
           times rstd, plus rstd * h^2 * max|wg| (the x-hat term) and as much again (rstd is
           1/sqrt(delta^2 + eps), relatively h^2 / 2 off):    (atol + 2 h^2 max|wg|) * rstd
      dw = sum over rows of g * x-hat: each constant row adds up to h * max|g|
    The other rows keep the usual tolerance. An implementation that subtracts a pivot (the
    row's first element) before summing gets delta = 0 and y = b exactly.
    """
    shape = (6, 37)
    constant = [1, 4]
    others = [r for r in range(shape[0]) if r not in constant]
    x, w, b, dy = _inputs(shape, 14, dtype, device)
    x[1] = 3.0
    x[4] = -0.5
    p, rng = 0.25, 8
    (y,), got = value_and_grads(impl.layernorm_dropout, x, w, b, p, rng, EPS, wrt=(0, 1, 2),
                                dy=dy)
    for name, t in (("y", y),) + tuple(zip(("dx", "dw", "db"), got)):
        if not bool(torch.isfinite(t).all()):
            raise Mismatch(f"{name} has NaN or inf for constant rows (variance 0): add eps "
                           f"before the square root, rstd = 1 / sqrt(var + eps)")
    keep = y != 0
    (want_y,), want = expected_grads(
        lambda xx, ww, bb: ref.with_mask(xx, ww, bb, keep, p, EPS), x, w, b, wrt=(0, 1, 2),
        dy=dy)
    ctx = {"p": p, "rng_seed": rng, "shape": shape}
    tol = _tol(exercise, dtype, p)
    n = shape[-1]
    scale = _scale(p)
    rstd = EPS ** -0.5
    d = (n + 2) * 2.0 ** -24 * float(x[constant].double().abs().max())
    h = d * rstd
    g = dy.double() * keep.double() * scale
    max_w = float(w.double().abs().max())
    max_g = float(g[constant].abs().max())
    max_wg = float((w.double() * g)[constant].abs().max())
    const_tol = {"y": dict(tol, atol=tol["atol"] + h * max_w * scale),
                 "dx": dict(tol, atol=(tol["atol"] + 2 * h * h * max_wg) * rstd)}
    dw_tol = sum_tol(tol, shape[0], dtype)
    dw_tol["atol"] += h * max_g * len(constant)
    for name, t, e in (("y", y, want_y), ("dx", got[0], want[0])):
        check.assert_close(t[others], e[others], tol=tol, dtype=dtype,
                           what=f"{name} in the rows {others} (not constant)", **ctx)
        try:
            check.assert_close(t[constant], e[constant], tol=const_tol[name], dtype=dtype,
                               what=f"{name} in the constant rows {constant} (variance 0, "
                                    f"rstd = 1/sqrt(eps))", **ctx)
        except Mismatch as err:
            raise Mismatch(f"{err}\n  The bound allows the float32 mean of N equal values to be "
                           f"off by (N + 2) u |c|, times rstd = 1/sqrt(eps): further off, the "
                           f"variance or the mean of these rows is wrong (compute the mean first, "
                           f"then mean((x - mean)^2), with padding lanes masked out)") from None
    check.assert_close(got[1], want[1], tol=dw_tol, dtype=dtype, what="dw (constant rows: "
                       "x-hat ~ 0 there)", **ctx)
    check.assert_close(got[2], want[2], tol=sum_tol(tol, shape[0], dtype), dtype=dtype,
                       what="db", **ctx)


def test_large_offset(impl, ref, device):
    """Rows with mean 1e4 and standard deviation 1: E[x^2] - E[x]^2 in float32 cancels to noise
    (E[x^2] = 1e8, float32 spacing 8 there); subtract the mean first (two passes over the row
    in registers, or Welford)."""
    shape = (8, 500)
    x, w, b, _ = _inputs(shape, 15, torch.float32, device, offset=1e4)
    y = impl.layernorm_dropout(x, w, b, 0.1, 6, EPS)
    want = ref.with_mask(x.double(), w.double(), b.double(), y != 0, 0.1, EPS)
    try:
        # the float32 mean of values ~1e4 is off by ~1e4 * 2^-24 * log2(N): ~1e-2 / 1 in x-hat
        check.assert_close(y, want, tol={"atol": 2e-2, "rtol": 2e-2}, dtype=torch.float32,
                           what="y for rows with mean 1e4", shape=shape)
    except Mismatch as e:
        raise Mismatch(f"{e}\n  The variance as E[x^2] - E[x]^2 loses every digit when the mean "
                       f"is large against the spread: compute mean first, then "
                       f"mean((x - mean)^2)") from None


# --- a second call on the same buffers, new values in between (the shared check) ----------------

def test_new_contents_same_shapes(impl, ref, exercise, device):
    """Called twice on the same buffers, new values written into x, w and b in between (the same
    p and seed, so the same mask): y right both times (a result kept from the first call, by
    shape or by pointer, is wrong the second time)."""
    x, w, b, _ = _inputs((6, 200), 101, torch.float32, device)
    p, seed = 0.25, 1234

    def compare(outs, want):
        y, (xx, ww, bb) = outs[0], want
        if not isinstance(y, torch.Tensor):
            raise Mismatch(f"layernorm_dropout must return a tensor, got {type(y).__name__}")
        check.assert_close(y, ref.with_mask(xx.double(), ww.double(), bb.double(), y != 0, p, EPS),
                           tol=_tol(exercise, x.dtype, p), dtype=x.dtype,
                           what="y where kept (layernorm(x) / (1 - p))", atol_scale=_y_scale(xx),
                           p=p, rng_seed=seed)
    new_contents_same_shapes(impl.layernorm_dropout, (x, w, b, p, seed, EPS),
                             ("x", "w", "b", "p", "seed", "eps"),
                             lambda a: tuple(t.clone() for t in a[:3]), compare, seed=102)


# --- argument checks ----------------------------------------------------------------------------

def test_refuses_bad_w_and_b(impl, device):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    good = randn(100, seed=2, dtype=torch.float32, device=device)
    impl.layernorm_dropout(x, good, good, 0.1, 1, EPS)  # a stub fails here, with its own message
    for bad in (randn(101, seed=3, dtype=torch.float32, device=device),
                randn((1, 100), seed=3, dtype=torch.float32, device=device)):
        expect_refusal(impl.layernorm_dropout, x, bad, good, 0.1, 1, EPS, argument="w")
        expect_refusal(impl.layernorm_dropout, x, good, bad, 0.1, 1, EPS, argument="b")


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_refuses_p_outside_0_1(impl, device, p):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    w = randn(100, seed=2, dtype=torch.float32, device=device)
    impl.layernorm_dropout(x, w, w, 0.1, 1, EPS)
    expect_refusal(impl.layernorm_dropout, x, w, w, p, 1, EPS, argument="p")


@pytest.mark.backward
@pytest.mark.parametrize("layout", ["every other column", "transposed"])
def test_strided_x_handled_or_refused(impl, ref, exercise, device, layout):
    """A view that is not contiguous must give the right answer or be refused, naming `x`."""
    if layout == "every other column":
        x = randn((9, 2 * 130), seed=21, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((130, 9), seed=21, dtype=torch.float32, device=device).t()
    _, w, b, dy = _inputs((9, 130), 22, torch.float32, device)
    try:
        _grads_checked(impl, ref, exercise, x, w, b, 0.25, 3, dy, layout=layout)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, exercise, device):
    """x, w and b in turn, each as a strided view and as a view one element into its memory, the
    others dense: y right where kept (the mask as y shows it, its kept fraction held to the
    binomial bound), or a strided view refused naming it. Forward only."""
    x, w, b, _ = _inputs((7, 131), 51, torch.float32, device)
    p, seed = 0.25, 1234

    def compare(outs):
        y = outs[0]
        if not isinstance(y, torch.Tensor):
            raise Mismatch(f"layernorm_dropout must return a tensor, got {type(y).__name__}")
        keep = y != 0
        check.assert_close(y, ref.with_mask(x.double(), w.double(), b.double(), keep, p, EPS),
                           tol=_tol(exercise, x.dtype, p), dtype=x.dtype,
                           what="y where kept (layernorm(x) / (1 - p))", atol_scale=_y_scale(x),
                           p=p, rng_seed=seed)
        _check_mask_fraction(keep, p, p=p, rng_seed=seed)
    _views(impl.layernorm_dropout, (x, w, b, p, seed, EPS), ("x", "w", "b", "p", "seed", "eps"),
           compare, seed=51)


# --- what it costs: no mask kept between the forward and the backward --------------------------

@pytest.mark.backward
def test_no_mask_kept_for_the_backward(impl, ref, exercise, track, device):
    """Between the forward and the backward the op may keep x, w, b and a few numbers per row,
    not a mask: a stored mask is 1 byte per element (1 bit packed) more to write and read.

    Measured as the GPU memory of the submission's process, as the driver counts it, while many
    forward calls' graphs stay alive (grader.judge.testing.kept_per_call): a cache, or a reserve made
    beforehand, cannot hide a mask kept per call. Then the backward of the first and the last
    of those calls is checked: one mask kept for all the calls would give wrong gradients."""
    x = randn((64, 256), seed=30, dtype=torch.bfloat16, device=device)
    impl.layernorm_dropout(x, x[0], x[0], 0.1, 1, EPS)  # a stub fails here
    if on_interpreter(track, device) or device != "cuda":
        pytest.skip("needs a GPU: measured as the GPU memory of the submission's process")
    m, n = 4096, 4096
    x, w, b, dy = _inputs((m, n), 31, torch.bfloat16, device)
    for t in (x, w, b):
        t.requires_grad_()
    # kept per call in the op's process: its output y (its graph holds it) and a few numbers per
    # row; x, w and b arrive as copies in the judge's memory
    live = kept_per_call(impl, lambda s: impl.layernorm_dropout(x, w, b, 0.1, 100 + s, EPS),
                         forbidden_elements=m * n, element_bits=1,
                         allowed=m * n * 2 + 16 * m,
                         what="a stored mask (bit-packed, the least a mask can be)",
                         fix="Save the seed and regenerate the mask in the backward instead")
    tol = exercise.tolerance["bfloat16"]
    for s in (0, len(live) - 1):  # each with its own seed, so its own mask
        got = torch.autograd.grad(live[s], (x,), dy, retain_graph=True)[0]
        fn = ref.matching((x, w, b, 0.1, 100 + s, EPS), live[s])
        want = expected_grads(fn, x, w, b, 0.1, 100 + s, EPS, wrt=(0,), dy=dy)[1][0]
        check.assert_close(got, want, tol=sum_tol(tol, n, torch.bfloat16), dtype=torch.bfloat16,
                           what=f"dx of forward {s + 1} of {len(live)} kept alive")
    del live
