"""Checks for exercise 06 (rmsnorm), for both tracks. Run through the grader: `make exercise-06`.

Every expectation is the reference (reference.py) evaluated in float64 on the same input values
and differentiated by PyTorch's autograd: the op is held to the exact math, rounded once.
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader import check
from grader.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.strategies import dtypes, matrices, randn, seeds

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-6
INTERPRETER = ("needs a GPU: Triton's CPU interpreter reads the data pointer of every tensor a "
               "kernel gets, and {what} runs the op on FakeTensors, which have none")


def _ops(track):
    """The track's registered ops: torch.ops.ex06_triton or torch.ops.ex06_cuda."""
    return getattr(torch.ops, f"ex06_{track.name}")


def _draw_shape(data, device):
    """[N], [M, N] or [B, S, N] with awkward row lengths."""
    # at most 1024 rows on a GPU: each example is compared in float64 on the CPU
    m, n = data.draw(matrices(device, max_rows=1024 if device == "cuda" else None),
                     label="(rows, N)")
    kind = data.draw(st.sampled_from(["N", "MN", "BSN"]), label="layout")
    if kind == "N":
        return (n,)
    if kind == "MN":
        return (m, n)
    b = data.draw(st.integers(1, min(m, 4)), label="B")
    return (b, max(1, m // b), n)


def _inputs(shape, seed, dtype, device, scale=1.0):
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device=device, scale=0.5, offset=1.0)
    dy = randn(shape, seed=seed + 2, dtype=dtype, device=device)
    return x, w, dy


def _grads(fn, x, w, eps, dy):
    """(y, dx, dw) of fn(x, w, eps) for the incoming gradient dy."""
    # fresh leaves with x's own strides (clone() would make a gapped view like x[:, ::2] dense)
    xg = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)
    xg.requires_grad_()
    wg = w.detach().clone().requires_grad_()
    y = fn(xg, wg, eps)
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        raise Mismatch("the output does not require grad although x and w do: is the autograd "
                       "formula registered (register_autograd) and is rmsnorm() calling the op?")
    y.backward(dy)
    for name, t in (("x", xg), ("w", wg)):
        if t.grad is None:
            raise Mismatch(f"no gradient reached `{name}`: the backward must return a gradient "
                           f"for x and for w (and None for eps)")
    return y.detach(), xg.grad, wg.grad


def _expected(ref, x, w, eps, dy):
    return _grads(ref.reference, x.double(), w.double(), eps, dy.double())


def _rows(shape):
    return math.prod(shape[:-1])


def _dw_tol(exercise, dtype, rows):
    """dw[j] = sum over rows of dy*x*rstd: M terms of size ~1 with random signs.

    We accept an implementation that rounds each term to the storage dtype before the fp32 sum
    (Hugging Face's Llama RMSNorm and Liger's default mode do: x*rstd is rounded to bf16 before
    it meets w). Such per-term errors of relative size ~2^-9 (bf16) add up like a random walk,
    ~sqrt(M) times one term's, so for 16-bit dtypes the absolute bound grows with sqrt(M).
    Accumulating in bf16 itself (or bf16 atomics) rounds the running sum, ~sqrt(M) in size, at
    every row: an error growing like M, which test_dw_over_many_rows catches. float32 keeps its
    bound.
    """
    tol = dict(exercise.tolerance[str(dtype).removeprefix("torch.")])
    if dtype in (torch.float16, torch.bfloat16):
        tol["atol"] *= max(1.0, math.sqrt(rows))
    return tol


@pytest.fixture(scope="module")
def grads_close(exercise):
    """Compare (y, dx, dw) with the float64 expectation: dx like any output, dw as in _dw_tol."""
    def close(got, want, *, dtype, shape, **ctx):
        _, dx, dw = got
        _, dx_ref, dw_ref = want
        check.assert_close(dx, dx_ref, tol=exercise.tolerance[str(dtype).removeprefix("torch.")],
                           dtype=dtype, what="dx", shape=shape, **ctx)
        check.assert_close(dw, dw_ref, tol=_dw_tol(exercise, dtype, _rows(shape)), dtype=dtype,
                           what="dw (the sum over rows of dy * x * rstd)", shape=shape, **ctx)
    return close


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_forward_matches_reference(impl, ref, device, assert_close, data, dtype, seed, eps):
    shape = _draw_shape(data, device)
    x, w, _ = _inputs(shape, seed, dtype, device)
    y = call_checked(impl.rmsnorm, x, w, eps, names=("x", "w", "eps"))
    assert_close(y, ref.reference(x.double(), w.double(), eps), dtype=dtype, shape=shape,
                 eps=eps, seed=seed)


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_backward_matches_reference(impl, ref, device, grads_close, data, dtype, seed, eps):
    shape = _draw_shape(data, device)
    x, w, dy = _inputs(shape, seed, dtype, device)
    got = _grads(impl.rmsnorm, x, w, eps, dy)
    grads_close(got, _expected(ref, x, w, eps, dy), dtype=dtype, shape=shape, eps=eps, seed=seed)


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
        grads_close(got, want, dtype=dtype, shape=shape)


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
    grads_close(got, want, dtype=torch.bfloat16, shape=shape, dy="x")


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (4, 9), (2, 3, 6)], ids=str)
def test_gradcheck(impl, device, shape):
    """torch.autograd.gradcheck in float64, for x and w: the math must run in float64 too."""
    x = randn(shape, seed=7, dtype=torch.float64, device=device).requires_grad_()
    w = randn(shape[-1], seed=8, dtype=torch.float64, device=device, scale=0.5,
              offset=1.0).requires_grad_()
    torch.autograd.gradcheck(lambda a, b: impl.rmsnorm(a, b, EPS), (x, w), eps=1e-6, atol=1e-5,
                             rtol=1e-4)


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
    grads_close(got, want, dtype=dtype, shape=shape)


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
    check.assert_close(got[2], want[2], tol=_dw_tol(exercise, dtype, shape[0]), dtype=dtype,
                       what="dw", shape=shape, x_scale=1e4)


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
    grads_close(got, want, dtype=torch.float32, shape=(9, 130), layout=layout)


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
    if device == "cpu" and track.name == "triton":
        pytest.skip(INTERPRETER.format(what="opcheck"))
    ops = _ops(track)
    for dtype in (torch.float32, torch.bfloat16):
        xs, ws = x.to(dtype), w.to(dtype)
        torch.library.opcheck(ops.rmsnorm_fwd.default,
                              (xs.clone().requires_grad_(), ws.clone().requires_grad_(), EPS))
        _, rstd = ops.rmsnorm_fwd(xs, ws, EPS)
        dy = randn(xs.shape, seed=33, dtype=dtype, device=device)
        torch.library.opcheck(ops.rmsnorm_bwd.default, (dy, xs, ws, rstd))


def _model(fn, n, device, seed):
    """Linear -> rmsnorm -> Linear, as in a transformer block."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(n, n, bias=False, device=device)
            self.out = torch.nn.Linear(n, n, bias=False, device=device)
            self.w = torch.nn.Parameter(randn(n, seed=seed, dtype=torch.float32, device=device,
                                              scale=0.5, offset=1.0))
            with torch.no_grad():
                self.inp.weight.copy_(randn((n, n), seed=seed + 1, dtype=torch.float32,
                                            device=device, scale=n ** -0.5))
                self.out.weight.copy_(randn((n, n), seed=seed + 2, dtype=torch.float32,
                                            device=device, scale=n ** -0.5))

        def forward(self, x):
            return self.out(fn(self.inp(x), self.w, EPS))
    return Block()


def test_torch_compile_without_graph_breaks(impl, track, device):
    """torch.compile(fullgraph=True) of a small model using the op: no graph break, same values."""
    n = 64
    model = _model(impl.rmsnorm, n, device, seed=41)
    x = randn((2, 8, n), seed=44, dtype=torch.float32, device=device)
    g = randn((2, 8, n), seed=45, dtype=torch.float32, device=device)

    def run(m):
        model.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y = m(xi)
        (y * g).sum().backward()
        return [y.detach(), xi.grad, model.w.grad, model.inp.weight.grad]

    eager = run(model)  # a stub fails here, with its own message
    if device == "cpu" and track.name == "triton":
        pytest.skip(INTERPRETER.format(what="torch.compile"))
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(x)
    if explanation.graph_break_count:
        reasons = "; ".join(str(getattr(b, "reason", b)) for b in explanation.break_reasons[:3])
        raise Mismatch(f"torch._dynamo.explain found {explanation.graph_break_count} graph "
                       f"break(s): {reasons}. Register the op with the dispatcher (triton_op / "
                       f"TORCH_LIBRARY), give it a fake kernel, and call it through torch.ops")
    torch._dynamo.reset()
    compiled = run(torch.compile(model, fullgraph=True))
    tol = {"atol": 1e-4, "rtol": 1e-4}  # Inductor may order the Linear's sums differently
    for what, got, want in zip(("output", "x.grad", "w.grad", "inp.weight.grad"), compiled, eager):
        check.assert_close(got, want.double(), tol=tol, dtype=torch.float32,
                           what=f"compiled {what} vs eager")
