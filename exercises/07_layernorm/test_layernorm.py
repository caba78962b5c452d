"""Checks for exercise 07 (layernorm). Run through the grader: `make exercise-07`.

Every expectation is the reference (reference.py) evaluated in float64 on the same input values
and differentiated by PyTorch's autograd: the op is held to the exact math, rounded once.
dw and db are sums over rows: their bound grows with the number of rows (grader.judge.testing.sum_tol).
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check, probes
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import (compiled_matches, expected_grads, opcheck_samples, rstd_scale,
                            sum_tol, value_and_grads)

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-5
FWD, BWD = "ex07_cuda::layernorm_fwd", "ex07_cuda::layernorm_bwd"
GRADS = ("dx", "dw (the sum over rows of dy * x̂)", "db (the sum over rows of dy)")


def _inputs(shape, seed, dtype, device, scale=1.0, offset=0.0):
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale, offset=offset)
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device=device, scale=0.5, offset=1.0)
    b = randn(shape[-1], seed=seed + 2, dtype=dtype, device=device, scale=0.5)
    dy = randn(shape, seed=seed + 3, dtype=dtype, device=device)
    return x, w, b, dy


def _rows(shape):
    return math.prod(shape[:-1])


def _tol(exercise, dtype):
    return dict(exercise.tolerance[str(dtype).removeprefix("torch.")])


def _run(fn, x, w, b, dy, wrt=(0, 1, 2), eps=EPS):
    """(y, grads of the inputs in wrt) of fn(x, w, b, eps) for the incoming gradient dy."""
    (y,), grads = value_and_grads(fn, x, w, b, eps, wrt=wrt, dy=dy)
    return y, grads


def _expected(ref, x, w, b, dy, wrt=(0, 1, 2), eps=EPS):
    (y,), grads = expected_grads(ref.reference, x, w, b, eps, wrt=wrt, dy=dy)
    return y, grads


def _grads_close(exercise, got, want, *, x, dtype, shape, wrt=(0, 1, 2), eps=EPS, **ctx):
    """dx like any output, its atol scaled by max(1, rstd) per row (grader.judge.testing.rstd_scale:
    rows of one element or of equal values have rstd = 1/sqrt(eps) ~ 316); dw and db as sums
    over rows."""
    tol = _tol(exercise, dtype)
    ctx = dict(ctx, eps=eps)
    for i, g, e in zip(wrt, got, want):
        if i == 0:
            check.assert_close(g, e, tol=tol, dtype=dtype, what=GRADS[0], shape=shape,
                               atol_scale=rstd_scale(x, eps, centered=True), **ctx)
            continue
        check.assert_close(g, e, tol=sum_tol(tol, _rows(shape), dtype), dtype=dtype,
                           what=GRADS[i], shape=shape, **ctx)


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, eps=st.sampled_from([1e-5, 1e-6, 1e-2]))
def test_forward_matches_reference(impl, ref, device, assert_close, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, w, b, _ = _inputs(shape, seed, dtype, device)
    y = call_checked(impl.layernorm, x, w, b, eps, names=("x", "w", "b", "eps"))
    assert_close(y, ref.reference(x.double(), w.double(), b.double(), eps), dtype=dtype,
                 atol_scale=rstd_scale(x, eps, centered=True),
                 shape=shape, eps=eps, seed=seed)


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, eps=st.sampled_from([1e-5, 1e-6, 1e-2]))
def test_backward_matches_reference(impl, ref, exercise, device, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, w, b, dy = _inputs(shape, seed, dtype, device)
    _, got = _run(impl.layernorm, x, w, b, dy, eps=eps)
    _, want = _expected(ref, x, w, b, dy, eps=eps)
    _grads_close(exercise, got, want, x=x, dtype=dtype, shape=shape, eps=eps, seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_longer_than_a_block(impl, ref, exercise, device, assert_close, dtype):
    """Rows of 16K-128K elements: more than the registers of one block hold."""
    cases = [(3, 65537)] if device == "cpu" else [(37, 16385), (33, 65536), (9, 65537),
                                                 (5, 131075)]
    for i, shape in enumerate(cases):
        x, w, b, dy = _inputs(shape, 100 + i, dtype, device)
        y, got = _run(impl.layernorm, x, w, b, dy)
        y_ref, want = _expected(ref, x, w, b, dy)
        assert_close(y, y_ref, dtype=dtype, shape=shape,
                     atol_scale=rstd_scale(x, EPS, centered=True))
        _grads_close(exercise, got, want, x=x, dtype=dtype, shape=shape)


@pytest.mark.backward
def test_dw_db_over_many_rows(impl, ref, exercise, device, assert_close):
    """dw and db over many rows, accumulated in float32 (per-block partials), never in bf16.

    With x ~ N(0, 1) and dy = x + 3, the terms of db (dy) and of dw (dy * x̂ ~ x² + 3x) are
    positive on average, so both sums grow like the number of rows: a bf16 running sum stops
    growing once its spacing (2^-7 of it) exceeds a term, far outside the bound. On a GPU,
    262144 rows: ~1000 per block of a persistent grid, enough for a bf16 per-block sum to stall.
    """
    shape = (512, 24) if device == "cpu" else (262144, 64)
    x, w, b, _ = _inputs(shape, 51, torch.bfloat16, device)
    dy = (x.float() + 3).to(torch.bfloat16)
    y, got = _run(impl.layernorm, x, w, b, dy)
    y_ref, want = _expected(ref, x, w, b, dy)
    assert_close(y, y_ref, dtype=torch.bfloat16, shape=shape,
                 atol_scale=rstd_scale(x, EPS, centered=True))
    try:
        _grads_close(exercise, got, want, x=x, dtype=torch.bfloat16, shape=shape, dy="x + 3")
    except Mismatch as e:
        raise Mismatch(f"{e}\n  dw and db add {shape[0]} positive terms per column here: sum "
                       f"them in float32 (registers, then per-block partial rows and a second "
                       f"reduction), and round to bf16 once at the end") from None


@pytest.mark.backward
def test_deterministic(impl, device):
    """The same inputs give the same bits: dw and db added in a fixed order (no atomics)."""
    shape = (64, 40) if device == "cpu" else (8192, 1024)
    x, w, b, dy = _inputs(shape, 61, torch.float32, device)
    runs = [_run(impl.layernorm, x, w, b, dy) for _ in range(3)]
    for k in range(1, 3):
        for i, name in enumerate(("dx", "dw", "db")):
            if not torch.equal(runs[0][1][i], runs[k][1][i]):
                diff = (runs[0][1][i] - runs[k][1][i]).abs().max().item()
                raise Mismatch(f"{name} differs between two identical calls (by up to {diff:g}): "
                               f"the order of its additions depends on timing. Atomics into dw / "
                               f"db do that; write per-block partial rows and add them in a "
                               f"fixed order instead")


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (4, 9), (2, 3, 6)], ids=str)
def test_gradcheck(impl, ref, device, shape):
    """torch.autograd.gradcheck in float64 for x, w and b: the math must run in float64 too."""
    x, w, b, _ = _inputs(shape, 7, torch.float64, device)
    args = tuple(t.requires_grad_() for t in (x, w, b))
    gradcheck_checked(lambda a, c, d: impl.layernorm(a, c, d, EPS), args, names=("x", "w", "b"),
                      reference=lambda a, c, d: ref.reference(a, c, d, EPS), eps=1e-6,
                      atol=1e-5, rtol=1e-4,
                      hint="with g = dy * w and xhat = (x - mean) * rstd: dx = rstd * (g - "
                           "mean(g) - xhat * mean(g * xhat)) over the row; dw = the sum over rows "
                           "of dy * xhat, db = the sum over rows of dy")


@pytest.mark.backward
@pytest.mark.parametrize("wrt", [(0,), (1, 2), (0, 2), (1,)], ids=lambda w: "grad of " +
                         "+".join("xwb"[i] for i in w))
def test_only_the_gradients_asked_for(impl, ref, exercise, device, wrt):
    """When only some inputs require grad (frozen weights; the first layer's x), the backward
    computes only those (ctx.needs_input_grad) and they are still right."""
    shape = (37, 100)
    x, w, b, dy = _inputs(shape, 71, torch.float32, device)
    _, got = _run(impl.layernorm, x, w, b, dy, wrt=wrt)
    _, want = _expected(ref, x, w, b, dy, wrt=wrt)
    _grads_close(exercise, got, want, x=x, dtype=torch.float32, shape=shape, wrt=wrt)


# --- numerics: constant rows, large offsets ----------------------------------------------------

@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_constant_rows(impl, ref, exercise, device, assert_close, dtype):
    """A row of equal values has variance 0: rstd = 1/sqrt(eps) must be finite, y = b exactly,
    and the gradients finite."""
    shape = (6, 40)
    x, w, b, dy = _inputs(shape, 11, dtype, device)
    x[1] = 3.25
    x[4] = -1234.5
    y, got = _run(impl.layernorm, x, w, b, dy)
    constant = [1, 4]  # the rows of one value each (the others are random)
    for what, t in (("y", y),) + tuple(zip(("dx", "dw", "db"), got)):
        if not bool(torch.isfinite(t).all()):
            raise Mismatch(f"{what} has NaN or inf for rows of equal values: there the variance "
                           f"is 0, so rstd = 1/sqrt(0 + eps) must be finite; add eps before the "
                           f"square root, and compute the variance so that it cannot come out "
                           f"negative (Welford, or the mean first, then sum((x - mean)^2))")
    y_ref, want = _expected(ref, x, w, b, dy)
    try:
        assert_close(y, y_ref, dtype=dtype, shape=shape, rows=f"{constant} constant")
        # dx's rounding ~ rstd = 1/sqrt(eps) ~ 316 in the constant rows: _grads_close scales
        # their atol by it (grader.judge.testing.rstd_scale), the other rows keep the dtype's
        _grads_close(exercise, got, want, x=x, dtype=dtype, shape=shape)
    except Mismatch as e:
        raise Mismatch(f"{e}\n  rows {constant} hold one value each (variance 0, y = b): a "
                       f"variance from E[x^2] - E[x]^2 is a difference of two rounded numbers "
                       f"of size x^2 here, not 0; Welford's update, or the mean first and then "
                       f"the deviations from it (README: The statistics), gives exactly 0"
                       ) from None


@pytest.mark.backward
@pytest.mark.parametrize("shape", [(7, 300), (3, 4096)], ids=str)
def test_large_offsets(impl, ref, exercise, device, shape):
    """Mean 1e4, standard deviation 1 (float32): the one-pass E[x²] - E[x]² loses it all.

    E[x²] ~ 1e8, whose float32 spacing is 8: the variance (1) drowns in its rounding, and can
    come out negative. Welford (or the mean first, then the squared deviations) keeps it. The
    bound: float32 holds the mean itself only to ~u * 1e4 ~ 6e-4 (u = 2^-24), and every x̂
    inherits that error times rstd ~ 1; we allow 32 times it. The one-pass formula misses by
    O(1), or gives NaN.
    """
    offset = 1e4
    x, w, b, dy = _inputs(shape, 13, torch.float32, device, offset=offset)
    y, got = _run(impl.layernorm, x, w, b, dy)
    y_ref, want = _expected(ref, x, w, b, dy)
    atol = 32 * 2.0 ** -24 * offset  # ~2e-2
    tol = {"atol": atol, "rtol": 1e-4}
    hint = ("\n  x has mean 1e4 and variance ~1 here: E[x^2] - E[x]^2 subtracts two numbers of "
            "size 1e8 (float32 spacing 8) to get ~1. Use Welford's update, merging partial "
            "results with Chan's formula, or the mean first and then the sums of (x - mean) and "
            "(x - mean)^2 (README: The statistics)")
    try:
        check.assert_close(y, y_ref, tol=tol, dtype=torch.float32, what="y", shape=shape,
                           offset=offset)
        check.assert_close(got[0], want[0], tol=tol, dtype=torch.float32, what="dx",
                           shape=shape, offset=offset)
        for name, g, e in zip(GRADS[1:], got[1:], want[1:]):
            check.assert_close(g, e, tol={"atol": atol * math.sqrt(shape[0]), "rtol": 1e-4},
                               dtype=torch.float32, what=name, shape=shape, offset=offset)
    except Mismatch as e:
        raise Mismatch(f"{e}{hint}") from None


# --- layouts and refusals ----------------------------------------------------------------------

@pytest.mark.backward
@pytest.mark.parametrize("layout", ["row stride > N", "every other row", "every other column",
                                    "transposed"])
def test_strided_x_handled_or_refused(impl, ref, exercise, device, assert_close, layout):
    """A view must give the right answer, or be refused naming `x`. Rows of contiguous
    elements at a fixed stride (x[:, :N], x[::2]) are best read in place, with the row stride
    as a kernel argument: a silent .contiguous() is one more pass over memory."""
    n = 130
    if layout == "row stride > N":
        x = randn((9, n + 6), seed=21, dtype=torch.float32, device=device)[:, 3:n + 3]
    elif layout == "every other row":
        x = randn((18, n), seed=21, dtype=torch.float32, device=device)[::2]
    elif layout == "every other column":
        x = randn((9, 2 * n), seed=21, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((n, 9), seed=21, dtype=torch.float32, device=device).t()
    _, w, b, dy = _inputs((9, n), 22, torch.float32, device)
    try:
        y, got = _run(impl.layernorm, x, w, b, dy)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine

    def compare(y, got, x, w, b, dy):
        y_ref, want = _expected(ref, x, w, b, dy)
        assert_close(y, y_ref, dtype=torch.float32, layout=layout)
        _grads_close(exercise, got, want, x=x, dtype=torch.float32, shape=(9, n), layout=layout)
    verify = lambda *a: compare(*_run(impl.layernorm, *a), *a)
    with probes.explained(probes.strides(verify, (x, w, b, dy), ("x", "w", "b", "dy")),
                          hint_on_evidence=True):
        compare(y, got, x, w, b, dy)


def test_refuses_bad_inputs(impl, device):
    x, w, b, _ = _inputs((4, 100), 1, torch.float32, device)
    impl.layernorm(x, w, b, EPS)  # a stub fails here, with its own message
    for bad in (w[:99], w.reshape(1, 100)):
        expect_refusal(impl.layernorm, x, bad, b, EPS, argument="w")
    for bad in (b[:99], torch.cat([b, b])):
        expect_refusal(impl.layernorm, x, w, bad, EPS, argument="b")
    expect_refusal(impl.layernorm, x, w.double(), b, EPS, argument="w")
    expect_refusal(impl.layernorm, x, w, b.half(), EPS, argument="b")
    expect_refusal(impl.layernorm, x.to(torch.int32), w.to(torch.int32), b.to(torch.int32), EPS,
                   argument="x")
    expect_refusal(impl.layernorm, x, w, b, -1.0, argument="eps")


def test_refuses_parameters_on_another_device(impl, device):
    x, w, b, _ = _inputs((4, 100), 1, torch.float32, device)
    impl.layernorm(x, w, b, EPS)  # a stub fails here
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: a second device to put w and b on")
    other = "cpu" if device == "cuda" else "cuda"
    expect_refusal(impl.layernorm, x, w.to(other), b, EPS, argument="w")
    expect_refusal(impl.layernorm, x, w, b.to(other), EPS, argument="b")


# --- registration: opcheck, torch.compile ------------------------------------------------------

def test_opcheck(impl, track, device):
    """torch.library.opcheck of both ops: schema, fake (meta) kernels, autograd registration,
    AOT dispatch; several shapes and dtypes, with and without grad, every output_mask."""
    x, w, b, _ = _inputs((3, 5, 33), 31, torch.float32, device)
    impl.layernorm(x, w, b, EPS)  # a stub fails here, with its own message
    fwd = []
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        xs, ws, bs = (t.to(dtype) for t in (x, w, b))
        fwd.append(((xs, ws, bs, EPS), None))
        fwd.append(((xs.clone().requires_grad_(), ws.clone().requires_grad_(),
                     bs.clone().requires_grad_(), EPS), None))
    wide = randn((7, 40), seed=33, dtype=torch.float32, device=device)[:, 3:36]  # a row stride
    fwd.append(((wide.requires_grad_(), w.clone().requires_grad_(), b, 1e-3), None))
    fwd.append(((x[0, 0], w, b, EPS), None))  # one row, 1-d
    opcheck_samples(impl, track, device, FWD, fwd)
    bwd = []
    for dtype in (torch.float32, torch.bfloat16):
        xs, ws, bs = (t.to(dtype) for t in (x, w, b))
        _, mean, rstd = impl.op(FWD)(xs, ws, bs, EPS)
        dy = randn(xs.shape, seed=34, dtype=dtype, device=device)
        for mask in ([True, True, True], [True, False, False], [False, True, True],
                     [False, False, True]):
            bwd.append(((dy, xs, ws, mean, rstd, mask), None))
    opcheck_samples(impl, track, device, BWD, bwd)


@pytest.mark.backward
def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of Linear -> layernorm -> Linear (reference.block): no
    graph break, and the same values and gradients as the float64 reference."""
    n = 64
    x = randn((2, 8, n), seed=44, dtype=torch.float32, device=device)
    w_in = randn((n, n), seed=41, dtype=torch.float32, device=device, scale=n ** -0.5)
    w_ln = randn(n, seed=42, dtype=torch.float32, device=device, scale=0.5, offset=1.0)
    b_ln = randn(n, seed=43, dtype=torch.float32, device=device, scale=0.5)
    w_out = randn((n, n), seed=45, dtype=torch.float32, device=device, scale=n ** -0.5)
    dy = randn((2, 8, n), seed=46, dtype=torch.float32, device=device)
    args = (x, w_in, w_ln, b_ln, w_out)
    impl.layernorm(x, w_ln, b_ln, EPS)  # a stub fails here, with its own message
    wrt = (0, 1, 2, 3, 4)
    outs, grads = expected_grads(ref.block(ref.reference), *args, wrt=wrt, dy=dy)
    compiled_matches(impl, track, device, "layernorm", args, expected=outs + grads,
                     tol={"atol": 1e-4, "rtol": 1e-4}, wrap="block", wrt=wrt, dy=dy,
                     names=["compiled output", "x.grad", "w_in.grad", "w_ln.grad (dw)",
                            "b_ln.grad (db)", "w_out.grad"])


# --- layouts and repeated calls (the shared checks: grader.judge.strategies.each_view) -----------------
from grader.judge.testing import new_contents_same_shapes as _twice, views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device, assert_close):
    """Each tensor argument in turn as a strided view and as a view one element into its
    memory, the others dense: the right values, or a strided view refused naming it. Forward
    only: no backward is needed."""
    x = randn((7, 131), seed=51, dtype=torch.float32, device=device)
    w = randn(131, seed=51 + 1, dtype=torch.float32, device=device, scale=0.1, offset=1.0)
    b = randn(131, seed=51 + 2, dtype=torch.float32, device=device, scale=0.1)
    want = (lambda a: (ref.reference(a[0].double(), a[1].double(), a[2].double(), a[3]),))((x, w, b, EPS))

    def compare(outs):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _views(impl.layernorm, (x, w, b, EPS), ("x", "w", "b", "eps"), compare, seed=51)


def test_new_contents_same_shapes(impl, ref, device, assert_close):
    """Called twice with inputs of the same shapes, new values the second time: both right."""
    x = randn((7, 131), seed=61, dtype=torch.float32, device=device)
    w = randn(131, seed=61 + 1, dtype=torch.float32, device=device, scale=0.1, offset=1.0)
    b = randn(131, seed=61 + 2, dtype=torch.float32, device=device, scale=0.1)

    def compare(outs, want):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _twice(impl.layernorm, (x, w, b, EPS), ("x", "w", "b", "eps"), lambda a: (ref.reference(a[0].double(), a[1].double(), a[2].double(), a[3]),), compare, seed=71)
