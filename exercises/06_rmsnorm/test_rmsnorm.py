"""Checks for exercise 06 (rmsnorm), for both tracks. Run through the grader: `make exercise-06`.

Every expectation is the reference (reference.py) evaluated in float64 on the same input values
and differentiated by PyTorch's autograd: the op is held to the exact math, rounded once.
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import (compiled_matches, expected_grads, opcheck_samples, rstd_scale,
                            sum_tol, value_and_grads)

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-6


def _inputs(shape, seed, dtype, device, scale=1.0):
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device=device, scale=0.5, offset=1.0)
    dy = randn(shape, seed=seed + 2, dtype=dtype, device=device)
    return x, w, dy


def _grads(fn, x, w, eps, dy):
    """(y, dx, dw) of fn(x, w, eps) for the incoming gradient dy."""
    (y,), (dx, dw) = value_and_grads(lambda a, b: fn(a, b, eps), x, w, wrt=(0, 1), dy=dy)
    return y, dx, dw


def _expected(ref, x, w, eps, dy):
    (y,), (dx, dw) = expected_grads(lambda a, b: ref.reference(a, b, eps), x, w, wrt=(0, 1), dy=dy)
    return y, dx, dw


def _rows(shape):
    return math.prod(shape[:-1])


@pytest.fixture(scope="module")
def grads_close(exercise):
    """Compare (y, dx, dw) with the float64 expectation: dx with its atol scaled by each row's
    max(1, rstd) (grader.judge.testing.rstd_scale: dx = rstd * (...)); dw, a sum over the rows of
    dy * x * rstd, with a bound that grows with the number of rows (grader.judge.testing.sum_tol)."""
    def close(got, want, *, x, dtype, shape, eps=EPS, **ctx):
        _, dx, dw = got
        _, dx_ref, dw_ref = want
        tol = exercise.tolerance[str(dtype).removeprefix("torch.")]
        check.assert_close(dx, dx_ref, tol=tol, dtype=dtype, what="dx", shape=shape,
                           atol_scale=rstd_scale(x, eps, centered=False), eps=eps, **ctx)
        check.assert_close(dw, dw_ref, tol=sum_tol(tol, _rows(shape), dtype), dtype=dtype,
                           what="dw (the sum over rows of dy * x * rstd)", shape=shape, eps=eps,
                           **ctx)
    return close


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_forward_matches_reference(impl, ref, device, assert_close, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, w, _ = _inputs(shape, seed, dtype, device)
    y = call_checked(impl.rmsnorm, x, w, eps, names=("x", "w", "eps"))
    assert_close(y, ref.reference(x.double(), w.double(), eps), dtype=dtype, shape=shape,
                 eps=eps, seed=seed)


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_backward_matches_reference(impl, ref, device, grads_close, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, w, dy = _inputs(shape, seed, dtype, device)
    got = _grads(impl.rmsnorm, x, w, eps, dy)
    grads_close(got, _expected(ref, x, w, eps, dy), x=x, dtype=dtype, shape=shape, eps=eps,
                seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_longer_than_a_block(impl, ref, device, assert_close, grads_close, dtype):
    """Rows of 16K-128K elements: more than one block holds (loop over column blocks)."""
    cases = [(3, 65537)] if device == "cpu" else [(37, 16385), (33, 65536), (9, 65537),
                                                 (5, 131075)]
    for i, shape in enumerate(cases):
        x, w, dy = _inputs(shape, 100 + i, dtype, device)
        got = _grads(impl.rmsnorm, x, w, EPS, dy)
        want = _expected(ref, x, w, EPS, dy)
        assert_close(got[0], want[0], dtype=dtype, shape=shape)
        grads_close(got, want, x=x, dtype=dtype, shape=shape)


@pytest.mark.backward
def test_dw_over_many_rows(impl, ref, device, assert_close, grads_close):
    """dw over many rows, accumulated in float32 (per-program partials), never in bf16.

    With dy = x every term dy * x * rstd is positive, so dw grows like M (~M here): a bf16
    running sum stops growing once its spacing (2^-7 of it) exceeds a term, far off the bound.
    """
    shape = (512, 24) if device == "cpu" else (16384, 256)
    x, w, _ = _inputs(shape, 51, torch.bfloat16, device)
    got = _grads(impl.rmsnorm, x, w, EPS, x)
    want = _expected(ref, x, w, EPS, x)
    assert_close(got[0], want[0], dtype=torch.bfloat16, shape=shape)
    grads_close(got, want, x=x, dtype=torch.bfloat16, shape=shape, dy="x")


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (4, 9), (2, 3, 6)], ids=str)
def test_gradcheck(impl, ref, device, shape):
    """torch.autograd.gradcheck in float64, for x and w: the math must run in float64 too."""
    x = randn(shape, seed=7, dtype=torch.float64, device=device).requires_grad_()
    w = randn(shape[-1], seed=8, dtype=torch.float64, device=device, scale=0.5,
              offset=1.0).requires_grad_()
    gradcheck_checked(lambda a, b: impl.rmsnorm(a, b, EPS), (x, w), names=("x", "w"),
                      reference=lambda a, b: ref.reference(a, b, EPS), eps=1e-6, atol=1e-5,
                      rtol=1e-4, hint="with g = dy * w and xhat = x * rstd: dx = rstd * (g - xhat "
                                      "* mean(g * xhat)) over the row; dw = the sum over rows of "
                                      "dy * xhat")


# --- properties and edge cases -----------------------------------------------------------------

@given(dtype=dtypes(DTYPES), seed=seeds, k=st.integers(-6, 10))
def test_scale_invariance(impl, device, assert_close, dtype, seed, k):
    """rmsnorm(c*x) == rmsnorm(x) for c > 0 (c = 2^k, exact in every dtype; eps negligible)."""
    c = 2.0 ** k
    x, w, _ = _inputs((5, 77), seed, dtype, device)
    y = impl.rmsnorm(x, w, 1e-12)
    yc = impl.rmsnorm(x * c, w, 1e-12)
    assert_close(yc, y.double(), dtype=dtype, what=f"rmsnorm({c:g} * x) vs rmsnorm(x)",
                 seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rows_of_zeros(impl, ref, device, assert_close, grads_close, dtype):
    """A row of zeros gives zeros (rstd = 1/sqrt(eps), no 0/0) and finite gradients."""
    shape = (6, 37)
    x, w, dy = _inputs(shape, 11, dtype, device)
    x[1] = 0
    x[4] = 0
    got = _grads(impl.rmsnorm, x, w, EPS, dy)
    zero, others = [1, 4], [0, 2, 3, 5]
    for what, t in zip(("y", "dx"), got):
        if not bool(torch.isfinite(t[zero]).all()) and bool(torch.isfinite(t[others]).all()):
            raise Mismatch(f"{what} has NaN or inf in the rows of zeros only: there mean(x^2) = "
                           f"0, so rstd = 1/sqrt(0 + eps) must be finite; add eps before the "
                           f"square root (and never divide by the RMS itself)")
    want = _expected(ref, x, w, EPS, dy)
    assert_close(got[0], want[0], dtype=dtype, shape=shape)
    if bool((got[0][zero] != 0).any()):
        raise Mismatch("a row of zeros must give exactly a row of zeros")
    grads_close(got, want, x=x, dtype=dtype, shape=shape)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_large_magnitudes(impl, ref, exercise, device, assert_close, dtype):
    """|x| ~ 1e4: x*x ~ 1e8 overflows float16 (max 65504): square in float32."""
    shape = (7, 300)
    x, w, dy = _inputs(shape, 13, dtype, device, scale=1e4)
    got = _grads(impl.rmsnorm, x, w, EPS, dy)
    want = _expected(ref, x, w, EPS, dy)
    try:
        assert_close(got[0], want[0], dtype=dtype, shape=shape, x_scale=1e4)
    except Mismatch as e:
        raise Mismatch(f"{e}\n  |x| ~ 1e4 here: x*x ~ 1e8 is inf in float16 (max 65504), and a "
                       f"16-bit sum of squares loses most of its bits: square and sum in "
                       f"float32") from None
    # dx ~ rstd ~ 1e-4 here: hold it to the same relative accuracy as an O(1) output
    tol = dict(exercise.tolerance[str(dtype).removeprefix("torch.")])
    tol["atol"] *= 1e-4
    check.assert_close(got[1], want[1], tol=tol, dtype=dtype, what="dx", shape=shape,
                       x_scale=1e4)
    check.assert_close(got[2], want[2], tol=sum_tol(exercise.tolerance[str(dtype).removeprefix(
        "torch.")], shape[0], dtype), dtype=dtype, what="dw", shape=shape, x_scale=1e4)


@pytest.mark.backward
@pytest.mark.parametrize("layout", ["every other column", "transposed"])
def test_strided_x_handled_or_refused(impl, ref, device, assert_close, grads_close, layout):
    """A view that is not contiguous must give the right answer or be refused, naming `x`."""
    if layout == "every other column":
        x = randn((9, 2 * 130), seed=21, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((130, 9), seed=21, dtype=torch.float32, device=device).t()
    w = randn(130, seed=22, dtype=torch.float32, device=device, offset=1.0)
    dy = randn((9, 130), seed=23, dtype=torch.float32, device=device)
    try:
        got = _grads(impl.rmsnorm, x, w, EPS, dy)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine
    want = _expected(ref, x, w, EPS, dy)
    assert_close(got[0], want[0], dtype=torch.float32, layout=layout)
    grads_close(got, want, x=x, dtype=torch.float32, shape=(9, 130), layout=layout)


def test_refuses_w_of_the_wrong_size(impl, device):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    for bad in (randn(101, seed=2, dtype=torch.float32, device=device),
                randn((1, 100), seed=2, dtype=torch.float32, device=device)):
        expect_refusal(impl.rmsnorm, x, bad, argument="w")


def test_refuses_w_on_another_device(impl, device):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    impl.rmsnorm(x, randn(100, seed=2, dtype=torch.float32, device=device))  # a stub fails here
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: a second device to put w on")
    w = randn(100, seed=2, dtype=torch.float32, device="cpu" if device == "cuda" else "cuda")
    expect_refusal(impl.rmsnorm, x, w, argument="w")


# --- registration: opcheck, torch.compile ------------------------------------------------------

def test_opcheck(impl, track, device):
    """torch.library.opcheck: schema, fake (meta) kernel, autograd registration, AOT dispatch."""
    x = randn((3, 5, 33), seed=31, dtype=torch.float32, device=device)
    w = randn(33, seed=32, dtype=torch.float32, device=device, offset=1.0)
    impl.rmsnorm(x, w, EPS)  # a stub fails here, with its own message
    ns = f"ex06_{track.name}"
    fwd, bwd = [], []
    for dtype in (torch.float32, torch.bfloat16):
        xs, ws = x.to(dtype), w.to(dtype)
        fwd.append(((xs.clone().requires_grad_(), ws.clone().requires_grad_(), EPS), None))
        _, rstd = impl.op(f"{ns}::rmsnorm_fwd")(xs, ws, EPS)
        dy = randn(xs.shape, seed=33, dtype=dtype, device=device)
        bwd.append(((dy, xs, ws, rstd), None))
    opcheck_samples(impl, track, device, f"{ns}::rmsnorm_fwd", fwd)
    opcheck_samples(impl, track, device, f"{ns}::rmsnorm_bwd", bwd)


@pytest.mark.backward
def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of Linear -> rmsnorm -> Linear (reference.block): no graph
    break, and values and gradients of every input as the float64 reference gives them."""
    n = 64
    x = randn((2, 8, n), seed=44, dtype=torch.float32, device=device)
    w = randn(n, seed=41, dtype=torch.float32, device=device, scale=0.5, offset=1.0)
    w_in = randn((n, n), seed=42, dtype=torch.float32, device=device, scale=n ** -0.5)
    w_out = randn((n, n), seed=43, dtype=torch.float32, device=device, scale=n ** -0.5)
    g = randn((2, 8, n), seed=45, dtype=torch.float32, device=device)
    args = (x, w, w_in, w_out)
    value_and_grads(ref.block(impl.rmsnorm), *args, wrt=(0, 1, 2, 3), dy=g)  # a stub fails here
    outs, grads = expected_grads(ref.block(ref.reference), *args, wrt=(0, 1, 2, 3), dy=g)
    # Inductor may order the Linear's sums differently: fp32 against float64, loosely
    compiled_matches(impl, track, device, "rmsnorm", args, wrap="block", wrt=(0, 1, 2, 3), dy=g,
                     expected=outs + grads, tol={"atol": 1e-4, "rtol": 1e-4},
                     names=["compiled output", "x.grad", "w.grad", "w_in.grad", "w_out.grad"])


# --- layouts and repeated calls (the shared checks: grader.judge.strategies.each_view) -----------------
from grader.judge.testing import new_contents_same_shapes as _twice, views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device, assert_close):
    """Each tensor argument in turn as a strided view and as a view one element into its
    memory, the others dense: the right values, or a strided view refused naming it. Forward
    only: no backward is needed."""
    x = randn((7, 131), seed=51, dtype=torch.float32, device=device)
    w = randn(131, seed=51 + 1, dtype=torch.float32, device=device, scale=0.1, offset=1.0)
    want = (lambda a: (ref.reference(a[0].double(), a[1].double(), a[2]),))((x, w, EPS))

    def compare(outs):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _views(impl.rmsnorm, (x, w, EPS), ("x", "w", "eps"), compare, seed=51)


def test_new_contents_same_shapes(impl, ref, device, assert_close):
    """Called twice with inputs of the same shapes, new values the second time: both right."""
    x = randn((7, 131), seed=61, dtype=torch.float32, device=device)
    w = randn(131, seed=61 + 1, dtype=torch.float32, device=device, scale=0.1, offset=1.0)

    def compare(outs, want):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _twice(impl.rmsnorm, (x, w, EPS), ("x", "w", "eps"), lambda a: (ref.reference(a[0].double(), a[1].double(), a[2]),), compare, seed=71)
