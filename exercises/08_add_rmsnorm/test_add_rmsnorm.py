"""Checks for exercise 08 (add_rmsnorm). Run through the grader: `make exercise-08`.

Every expectation is the reference (reference.py) evaluated in float64 on the same input values
and differentiated by PyTorch's autograd. The in-place form is held to the functional one, by
values: after the call, `residual` holds h and nothing else changed.
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check, probes
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import (assert_all_close, compiled_matches, expected_grads, float64,
                            opcheck_samples, rstd_scale, sum_tol, value_and_grads)

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-6
NS = "ex08_triton"
NAMES = ("x", "residual", "w", "eps")


def _inputs(shape, seed, dtype, device, scale=1.0):
    """x, residual, w, and the incoming gradients dy (of y) and dh (of h)."""
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    r = randn(shape, seed=seed + 1, dtype=dtype, device=device, scale=scale)
    w = randn(shape[-1], seed=seed + 2, dtype=dtype, device=device, scale=0.5, offset=1.0)
    dy = randn(shape, seed=seed + 3, dtype=dtype, device=device)
    dh = randn(shape, seed=seed + 4, dtype=dtype, device=device)
    return x, r, w, dy, dh


def _x_exp(h, r):
    """x for the float64 expectation of y and the gradients, chosen so that x + residual is
    exactly the h the op returned (h itself is checked against x + residual first): y must be
    the norm of that same rounded h, the one the backward reloads. The gradients with respect
    to this x are the gradients with respect to x. (Not torch's own rounding of x + residual:
    an h that differs from it in the last bit, e.g. one rounded float32 -> bfloat16 toward zero
    (fp_downcast_rounding="rtz"), is within h's tolerance, and y is judged against it.)"""
    return h.double() - r.double()


def _check_h(h, x, r, tol, **ctx):
    check.assert_close(h, x.double() + r.double(), tol=tol, dtype=x.dtype,
                       what="h (= x + residual)", **ctx)


def _rows(shape):
    return math.prod(shape[:-1])


def _tol(exercise, dtype):
    return exercise.tolerance[str(dtype).removeprefix("torch.")]


def _run(impl, ref, x, r, w, eps, dy, dh, tol):
    """(got, want): (y, h, dx, dresidual, dw) of the submission and of the float64 reference."""
    try:
        outs, grads = value_and_grads(impl.add_rmsnorm, x, r, w, eps, wrt=(0, 1, 2), dy=(dy, dh))
    except Mismatch as e:
        raise Mismatch(f"{e}\n  add_rmsnorm returns (y, h); both must carry gradients back to x, "
                       f"residual and w: register the autograd formula on the forward op "
                       f"(register_autograd) and return one gradient per input") from None
    if len(outs) != 2:
        raise Mismatch(f"add_rmsnorm must return two tensors (y, h), got {len(outs)}")
    _check_h(outs[1], x, r, tol, shape=tuple(x.shape))
    want_outs, want_grads = expected_grads(ref.reference, _x_exp(outs[1], r), r, w, eps,
                                           wrt=(0, 1, 2), dy=(dy, dh))
    return outs + grads, want_outs + want_grads


def _y_of(impl, ref, exercise):
    """y for the probes (grader.judge.probes): run(x, residual, w, eps) -> the op's y,
    reference(...) -> its float64 expectation, verify(...) runs and compares (raises)."""
    def run(x, r, w, eps):
        return impl.add_rmsnorm(x, r, w, eps)[0]

    def reference(x, r, w, eps):
        return ref.reference(x.double(), r.double(), w.double(), eps)[0]

    def verify(*a):
        y = run(*a)
        check.assert_close(y, reference(*a), tol=_tol(exercise, y.dtype), dtype=y.dtype, what="y")
    return run, reference, verify


def _y_probes(impl, ref, exercise, args):
    """What a wrong y can have as a cause, each confirmed on the op: eps where the formula does
    not have it (probed in float32), 16-bit arithmetic. `args`: (x, residual, w, eps)."""
    run, reference, verify = _y_of(impl, ref, exercise)
    in_float32 = tuple(t.float() for t in args[:3]) + args[3:]
    return (probes.eps_placement(verify, in_float32, eps_at=3, formula="1/sqrt(mean(h²) + eps)"),
            probes.sixteen_bit(run, reference, verify, args))


@pytest.fixture(scope="module")
def all_close(exercise):
    """Compare (y, h, dx, dresidual, dw); dx and dresidual with their atol scaled by each row's
    max(1, rstd) (grader.judge.testing.rstd_scale: the gradient through the norm is rstd * (...));
    dw is a sum over rows: its bound grows (sum_tol). `dh`: the incoming gradient of h, when it
    had one: a dx that is only one of its two parts (the norm's, dh) is then named."""
    def close(got, want, *, dtype, shape, dh=None, **ctx):
        tol = _tol(exercise, dtype)
        tols = [tol] * (len(got) - 1) + [sum_tol(tol, _rows(shape), dtype)]
        names = ["y", "h (= x + residual)", "dx", "dresidual",
                 "dw (the sum over rows of dy * hhat)"]
        scale = rstd_scale(want[1], ctx.get("eps", EPS), centered=False)  # want[1]: h, float64
        scales = [None, None, scale, scale, None] if len(got) == 5 else None
        parts = []
        if dh is not None and len(got) == 5:  # dx = dresidual = (through the norm, from dy) + dh
            dh64 = dh.double()
            feeds = "h = x + residual feeds both y and the h output: dx = dresidual = (the " \
                    "gradient through the norm, from dy) + dh, the gradient of h itself"
            parts = [("dh alone", lambda: dh64, f"the gradient through the norm, from dy, is "
                                                f"missing: {feeds}"),
                     ("the gradient through the norm alone, without dh",
                      lambda: want[2] - dh64, f"dh is not added: {feeds}")]
        dx_close = lambda g, w: check.assert_close(g, w, tol=tol, dtype=dtype, what="dx",
                                                   atol_scale=scale)
        with probes.explained(probes.variants(got[2], dx_close, parts)):
            assert_all_close(got, want, tols=tols, names=names[:len(got) - 1] + names[-1:],
                             atol_scales=scales, shape=shape, **ctx)
    return close


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_forward_matches_reference(impl, ref, exercise, device, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, r, w, _, _ = _inputs(shape, seed, dtype, device)
    out = call_checked(impl.add_rmsnorm, x, r, w, eps, names=NAMES)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Mismatch("add_rmsnorm must return the pair (y, h): h = x + residual is the next "
                       "layer's residual stream, and writing it costs one pass, not two")
    _check_h(out[1], x, r, _tol(exercise, dtype), shape=shape, seed=seed)
    want_y, _ = ref.reference(_x_exp(out[1], r), r.double(), w.double(), eps)
    with probes.explained(*_y_probes(impl, ref, exercise, (x, r, w, eps))):
        check.assert_close(out[0], want_y, tol=_tol(exercise, dtype), dtype=dtype, what="y",
                           shape=shape, eps=eps, seed=seed)


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_backward_matches_reference(impl, ref, exercise, device, all_close, data, dtype, seed, eps):
    """Gradients flow into both outputs (dy into y, dh into h), as in a transformer block."""
    shape = draw_row_shape(data, device)
    x, r, w, dy, dh = _inputs(shape, seed, dtype, device)
    got, want = _run(impl, ref, x, r, w, eps, dy, dh, _tol(exercise, dtype))
    all_close(got, want, dtype=dtype, shape=shape, dh=dh, eps=eps, seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("used", ["y only", "h only"])
def test_gradient_of_one_output(impl, ref, device, used):
    """Only one output is differentiated: the other's gradient is None (or zeros) and adds
    nothing."""
    shape = (7, 130)
    x, r, w, dy, dh = _inputs(shape, 61, torch.float32, device)
    dys = (dy, None) if used == "y only" else (None, dh)
    wrt = (0, 1) if used == "h only" else (0, 1, 2)   # h alone does not depend on w
    (_, h), grads = value_and_grads(impl.add_rmsnorm, x, r, w, EPS, wrt=wrt, dy=dys)
    _, want_grads = expected_grads(ref.reference, _x_exp(h, r), r, w, EPS, wrt=wrt, dy=dys)
    assert_all_close(grads, want_grads, tols={"atol": 1e-5, "rtol": 1e-5},
                     names=["dx", "dresidual", "dw"][:len(grads)], used=used)


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_longer_than_a_block(impl, ref, exercise, device, all_close, dtype):
    """Rows of 16K-128K elements: more than one block holds (loop over column blocks)."""
    cases = [(3, 20011)] if device == "cpu" else [(37, 16385), (33, 65536), (9, 65537),
                                                 (5, 131075)]
    for i, shape in enumerate(cases):
        x, r, w, dy, dh = _inputs(shape, 100 + i, dtype, device)
        got, want = _run(impl, ref, x, r, w, EPS, dy, dh, _tol(exercise, dtype))
        all_close(got, want, dtype=dtype, shape=shape, dh=dh)


@pytest.mark.backward
def test_dw_over_many_rows(impl, ref, exercise, device, all_close):
    """dw over many rows, accumulated in float32 (per-program partials), never in bf16.

    With dy = h every term dy * hhat is positive, so dw grows like M: a bf16 running sum stops
    growing once its spacing (2^-7 of it) exceeds a term, far off the bound.
    """
    # Each program's bf16 sum must reach a few hundred, where the spacing of bf16 (1 to 4) is
    # near a term (~1.4): every addition is then rounded by a good part of it. CPU: few programs
    # (the interpreter's), each summing ~128 rows (each interpreted row costs ~15 ms: 2048 rows
    # were a minute of the grade). GPU: 131072 rows, ~500 per program at 2 per SM on 132 SMs
    # (16384 rows, ~60 each, left a bf16 sum within 1% of the exact one: within the bound)
    shape = (512, 8) if device == "cpu" else (131072, 256)
    x, r, w, _, _ = _inputs(shape, 51, torch.bfloat16, device)
    h = x + r
    got, want = _run(impl, ref, x, r, w, EPS, h, None, _tol(exercise, torch.bfloat16))
    all_close(got, want, dtype=torch.bfloat16, shape=shape, dy="h")


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (4, 9), (2, 3, 6)], ids=str)
def test_gradcheck(impl, ref, device, shape):
    """torch.autograd.gradcheck in float64, for x, residual and w, through both outputs."""
    x, r, w, _, _ = _inputs(shape, 7, torch.float64, device)
    args = tuple(t.requires_grad_() for t in (x, r, w))
    gradcheck_checked(lambda a, b, c: impl.add_rmsnorm(a, b, c, EPS), args,
                      names=("x", "residual", "w"), outputs=("y", "h (= x + residual)"),
                      reference=lambda a, b, c: ref.reference(a, b, c, EPS), eps=1e-6, atol=1e-5,
                      rtol=1e-4, hint="h = x + residual feeds both outputs: dh = the RMSNorm's dx "
                                      "of dy plus the incoming dh, and dx = dresidual = dh")


# --- the in-place form -------------------------------------------------------------------------

def _in_place(impl, x, r, w, eps):
    """Call add_rmsnorm_ on a copy of residual; check x and w are untouched. -> (y, residual)."""
    residual = r.clone()
    before = [("x", x, x.clone()), ("w", w, w.clone())]
    y = impl.add_rmsnorm_(x, residual, w, eps)
    for name, t, copy in before:
        if not torch.equal(t, copy):
            raise Mismatch(f"add_rmsnorm_ modified `{name}`: the in-place form writes h into "
                           f"`residual` only (mutates_args=(\"residual\",)); every other input "
                           f"is read-only")
    if not isinstance(y, torch.Tensor):
        raise Mismatch(f"add_rmsnorm_ must return y (a tensor), got {type(y).__name__}")
    return y, residual


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_in_place_form(impl, ref, exercise, device, data, dtype, seed):
    """y matches; residual now holds h = x + residual; x and w are unchanged."""
    shape = draw_row_shape(data, device)
    x, r, w, _, _ = _inputs(shape, seed, dtype, device)
    y, residual = _in_place(impl, x, r, w, EPS)
    tol = _tol(exercise, dtype)
    if torch.equal(residual, r):
        raise Mismatch("add_rmsnorm_ left `residual` unchanged: it must write h = x + residual "
                       "into it (pass residual as the kernel's h output)")
    check.assert_close(residual, x.double() + r.double(), tol=tol, dtype=dtype,
                       what="residual after the call (must hold h = x + residual)", shape=shape,
                       seed=seed)
    want_y, _ = ref.reference(_x_exp(residual, r), r.double(), w.double(), EPS)
    check.assert_close(y, want_y, tol=tol, dtype=dtype, what="y", shape=shape, seed=seed)


def test_in_place_matches_functional(impl, device):
    """The two forms give the same y and h, to the bit (same kernel, same rounding)."""
    shape = (9, 333)
    for dtype in (torch.float32, torch.bfloat16):
        x, r, w, _, _ = _inputs(shape, 71, dtype, device)
        y, h = impl.add_rmsnorm(x, r, w, EPS)
        y_, residual = _in_place(impl, x, r, w, EPS)
        for what, a, b in (("y", y_, y), ("residual (h)", residual, h)):
            if not torch.equal(a, b):
                diff = (a.double() - b.double()).abs().max().item()
                raise Mismatch(f"add_rmsnorm_ and add_rmsnorm differ in {what} (max {diff:g}, "
                               f"{dtype}): round h to the storage dtype once and normalize that "
                               f"same h in both forms")


def test_in_place_strided_residual_handled_or_refused(impl, ref, device):
    """residual = every other column of a bigger tensor: write h through the view, or refuse
    naming `residual`. A silent .contiguous() writes h into a copy and loses it."""
    base = randn((9, 2 * 130), seed=81, dtype=torch.float32, device=device)
    keep = base.clone()
    residual = base[:, ::2]
    r0 = residual.clone()
    x = randn((9, 130), seed=82, dtype=torch.float32, device=device)
    w = randn(130, seed=83, dtype=torch.float32, device=device, offset=1.0)
    try:
        y = impl.add_rmsnorm_(x, residual, w, EPS)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "residual"):
            raise
        return  # refused with a message naming residual: fine
    want_h = x.double() + r0.double()
    want_y, _ = ref.reference(_x_exp(base[:, ::2], r0), r0.double(), w.double(), EPS)
    tol = {"atol": 1e-5, "rtol": 1e-5}
    try:
        check.assert_close(base[:, ::2], want_h, tol=tol, dtype=torch.float32,
                           what="residual after the call (a strided view)")
    except Mismatch as e:
        raise Mismatch(f"{e}\n  residual was a strided view: h must land in it, not in a "
                       f"contiguous copy (.contiguous() copies). Take its strides, or refuse it "
                       f"with a message naming `residual`") from None
    if not torch.equal(base[:, 1::2], keep[:, 1::2]):
        raise Mismatch("add_rmsnorm_ wrote into the columns of residual's base tensor that are "
                       "not part of the view")
    check.assert_close(y, want_y, tol=tol, dtype=torch.float32, what="y")


# --- properties and edge cases -----------------------------------------------------------------

@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_rows_where_h_is_zero(impl, ref, exercise, device, all_close, dtype):
    """residual = -x in some rows: h is 0 there, y is 0 (rstd = 1/sqrt(eps)), gradients finite."""
    shape = (6, 37)
    x, r, w, dy, dh = _inputs(shape, 11, dtype, device)
    r[1] = -x[1]
    r[4] = -x[4]
    got, want = _run(impl, ref, x, r, w, EPS, dy, dh, _tol(exercise, dtype))
    for what, t in zip(("y", "h", "dx"), got):
        if not bool(torch.isfinite(t).all()):
            raise Mismatch(f"{what} has NaN or inf where h = x + residual = 0: there mean(h^2) = "
                           f"0, so rstd = 1/sqrt(0 + eps) must be finite; add eps before the "
                           f"square root")
    if bool((got[0][[1, 4]] != 0).any()):
        raise Mismatch("where h is a row of zeros, y must be exactly zeros")
    all_close(got, want, dtype=dtype, shape=shape, dh=dh)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_large_magnitudes(impl, ref, exercise, device, dtype):
    """|h| ~ 1e4: h*h ~ 1e8 overflows float16 (max 65504): square in float32."""
    shape = (7, 300)
    x, r, w, _, _ = _inputs(shape, 13, dtype, device, scale=5e3)
    y, h = impl.add_rmsnorm(x, r, w, EPS)
    _check_h(h, x, r, _tol(exercise, dtype), shape=shape, x_scale=5e3)
    want_y, _ = ref.reference(_x_exp(h, r), r.double(), w.double(), EPS)
    _, _, verify = _y_of(impl, ref, exercise)
    overflow = probes.in_float32(verify, (x, r, w, EPS), "|h| ~ 1e4 here: h*h ~ 1e8 is inf in "
                                                         "float16 (max 65504): square and sum "
                                                         "in float32")
    with probes.explained(overflow):
        check.assert_close(y, want_y, tol=_tol(exercise, dtype), dtype=dtype, what="y",
                           shape=shape, x_scale=5e3)


@pytest.mark.backward
@pytest.mark.parametrize("layout", ["every other column", "transposed"])
def test_strided_x_handled_or_refused(impl, ref, exercise, device, all_close, layout):
    """A view that is not contiguous must give the right answer or be refused, naming `x`."""
    if layout == "every other column":
        x = randn((9, 2 * 130), seed=21, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((130, 9), seed=21, dtype=torch.float32, device=device).t()
    _, r, w, dy, dh = _inputs((9, 130), 22, torch.float32, device)
    try:
        got, want = _run(impl, ref, x, r, w, EPS, dy, dh, _tol(exercise, torch.float32))
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine

    def verify(*args):
        all_close(*_run(impl, ref, *args, _tol(exercise, torch.float32)), dtype=torch.float32,
                  shape=(9, 130), dh=args[-1], layout=layout)
    with probes.explained(probes.strides(verify, (x, r, w, EPS, dy, dh), NAMES + ("dy", "dh")),
                          hint_on_evidence=True):
        all_close(got, want, dtype=torch.float32, shape=(9, 130), dh=dh, layout=layout)


def test_refuses_bad_residual_and_w(impl, device):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    r = randn((4, 100), seed=2, dtype=torch.float32, device=device)
    w = randn(100, seed=3, dtype=torch.float32, device=device)
    impl.add_rmsnorm(x, r, w, EPS)  # a stub fails here, with its own message
    for fn in (impl.add_rmsnorm, impl.add_rmsnorm_):
        expect_refusal(fn, x, randn((4, 101), seed=2, dtype=torch.float32, device=device), w,
                       EPS, argument="residual")
        expect_refusal(fn, x, r.to(torch.float16), w, EPS, argument="residual")
        expect_refusal(fn, x, r.clone(), randn(101, seed=3, dtype=torch.float32, device=device),
                       EPS, argument="w")


# --- registration: opcheck, torch.compile ------------------------------------------------------

def _samples(device, grad):
    for shape, dtype in (((3, 5, 33), torch.float32), ((7, 130), torch.bfloat16), ((1, 1),
                                                                                  torch.float32)):
        x, r, w, dy, dh = _inputs(shape, 31, dtype, device)
        if grad:
            x, r, w = (t.requires_grad_() for t in (x, r, w))
        yield shape, dtype, (x, r, w, dy, dh)


@pytest.mark.backward
def test_opcheck(impl, track, device):
    """torch.library.opcheck of the three ops: schema (a mutation must be declared), fake
    kernel, autograd registration, AOT dispatch; with and without grad."""
    x, r, w, _, _ = _inputs((3, 33), 31, torch.float32, device)
    impl.add_rmsnorm(x, r, w, EPS)  # a stub fails here, with its own message
    fwd = [((x, r, w, EPS), None) for grad in (False, True)
           for _, _, (x, r, w, _, _) in _samples(device, grad)]
    opcheck_samples(impl, track, device, f"{NS}::add_rmsnorm_fwd", fwd)
    # the mutating op: no autograd (an in-place form is for inference)
    inplace = [((x, r, w, EPS), None) for _, _, (x, r, w, _, _) in _samples(device, False)]
    opcheck_samples(impl, track, device, f"{NS}::add_rmsnorm_inplace", inplace)
    fwd_op = impl.op(f"{NS}::add_rmsnorm_fwd")
    bwd = []
    for _, _, (x, r, w, dy, dh) in _samples(device, False):
        _, h, rstd = fwd_op(x, r, w, EPS)
        bwd += [((dy, dh, h, w, rstd), None), ((dy, None, h, w, rstd), None)]
    opcheck_samples(impl, track, device, f"{NS}::add_rmsnorm_bwd", bwd)


def _block_args(device, n=64, seed=41):
    x = randn((2, 8, n), seed=seed, dtype=torch.float32, device=device)
    residual = randn((2, 8, n), seed=seed + 1, dtype=torch.float32, device=device)
    a1 = randn((n, n), seed=seed + 2, dtype=torch.float32, device=device, scale=n ** -0.5)
    g1 = randn(n, seed=seed + 3, dtype=torch.float32, device=device, scale=0.5, offset=1.0)
    a2 = randn((n, n), seed=seed + 4, dtype=torch.float32, device=device, scale=n ** -0.5)
    g2 = randn(n, seed=seed + 5, dtype=torch.float32, device=device, scale=0.5, offset=1.0)
    return x, residual, a1, g1, a2, g2


COMPILE_TOL = {"atol": 1e-4, "rtol": 1e-4}  # fp32 against float64: the Linears' sums round


@pytest.mark.backward
def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of two residual layers (reference.block): no graph break,
    values and every gradient as the float64 reference."""
    args = _block_args(device)
    dy = randn((2, 8, 64), seed=47, dtype=torch.float32, device=device)
    dh = randn((2, 8, 64), seed=48, dtype=torch.float32, device=device)
    impl.add_rmsnorm(*args[:2], args[3], EPS)  # a stub fails here, with its own message
    wrt = tuple(range(6))
    outs, grads = expected_grads(ref.block(ref.reference), *args, wrt=wrt, dy=(dy, dh))
    compiled_matches(impl, track, device, "add_rmsnorm", args, expected=outs + grads,
                     tol=COMPILE_TOL, wrap="block", wrt=wrt, dy=(dy, dh),
                     names=["compiled y2", "compiled h2", "dx", "dresidual", "da1", "dg1",
                            "da2", "dg2"])


def test_torch_compile_in_place_form(impl, ref, track, device):
    """The same two layers with add_rmsnorm_ (inference), compiled: the declared mutation of
    residual survives functionalization (the second layer reads the first one's h, so y2 shows
    it) and reaches the caller's tensor (residual holds h2 after the call)."""
    args = _block_args(device)
    impl.add_rmsnorm_(args[0], args[1].clone(), args[3], EPS)  # a stub fails here
    want_y2, want_h2 = ref.block(ref.reference)(*float64(args))
    call_args = tuple(a.clone() for a in args)
    compiled_matches(impl, track, device, "add_rmsnorm_", call_args, expected=(want_y2,),
                     tol=COMPILE_TOL, wrap="block_", names=["compiled y2"])
    try:
        check.assert_close(call_args[1], want_h2, tol=COMPILE_TOL, dtype=torch.float32,
                           what="residual after both compiled layers (must hold h2)")
    except Mismatch as e:
        raise Mismatch(f"{e}\n  the compiled model lost the in-place write: declare it "
                       f"(mutates_args=(\"residual\",)) so functionalization copies h back "
                       f"into the caller's residual") from None


# --- layouts and repeated calls (the shared checks: grader.judge.strategies.each_view) -----------------
from grader.judge.testing import new_contents_same_shapes as _twice, views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device, assert_close):
    """Each tensor argument in turn as a strided view and as a view one element into its
    memory, the others dense: the right values, or a strided view refused naming it. Forward
    only: no backward is needed."""
    x = randn((7, 131), seed=51, dtype=torch.float32, device=device)
    residual = randn((7, 131), seed=51 + 1, dtype=torch.float32, device=device)
    w = randn(131, seed=51 + 2, dtype=torch.float32, device=device, scale=0.1, offset=1.0)
    want = (lambda a: tuple(ref.reference(a[0].double(), a[1].double(), a[2].double(), a[3])))((x, residual, w, EPS))

    def compare(outs):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _views(impl.add_rmsnorm, (x, residual, w, EPS), ("x", "residual", "w", "eps"), compare, seed=51)


def test_new_contents_same_shapes(impl, ref, device, assert_close):
    """Called twice with inputs of the same shapes, new values the second time: both right."""
    x = randn((7, 131), seed=61, dtype=torch.float32, device=device)
    residual = randn((7, 131), seed=61 + 1, dtype=torch.float32, device=device)
    w = randn(131, seed=61 + 2, dtype=torch.float32, device=device, scale=0.1, offset=1.0)

    def compare(outs, want):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _twice(impl.add_rmsnorm, (x, residual, w, EPS), ("x", "residual", "w", "eps"), lambda a: tuple(ref.reference(a[0].double(), a[1].double(), a[2].double(), a[3])), compare, seed=71)
