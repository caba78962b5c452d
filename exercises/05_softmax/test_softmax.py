"""Checks for exercise 05 (softmax). Run through the grader: `make exercise-05`.

Every expectation is the reference (reference.py, torch.softmax) evaluated in float64 on the same
input values and differentiated by PyTorch's autograd: the op is held to the exact math, rounded
once. The submission is reached only through `impl.softmax`.
"""
import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check, probes
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.testing import off_topic
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import expected_grads, value_and_grads

DTYPES = ["float32", "float16", "bfloat16"]
TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
STABILITY = ("\n  softmax(x) = exp(x - m) / sum(exp(x - m)) with m = the row max: subtracting the "
             "max keeps every exponent <= 0, so exp never overflows (exp(89) is inf in float32, "
             "exp(12) in float16)")
LONG_ROWS = ("\n  rows longer than one block: loop over the row in blocks. The online softmax "
             "keeps a running max and a running sum (rescaled by exp(old max - new max) when the "
             "max grows) in a first pass, then a second pass writes exp(x - max) / sum; a block "
             "clipped to a maximum size silently drops the rest of the row")
LONG_ROWS_BWD = ("\n  rows longer than one block, in the backward: one loop over the row for the dot "
                 "sum(dy * y), a second to write dx")
# a check with a forward and a backward case: the backward's waits for the forward checks
STAGES = ["forward", pytest.param("backward", marks=pytest.mark.backward)]


def _grads(fn, x, dy):
    """(y, dx) of fn(x) for the incoming gradient dy. The forward runs first, alone: a learner
    who has written only the forward is told that about the backward, not about the forward."""
    fn(x)
    (y,), (dx,) = value_and_grads(fn, x, wrt=(0,), dy=dy)  # a backward not written: "start it"
    return y, dx


def _forward_only(impl, ref, exercise, x, dtype, **ctx):
    """y alone, no graph: the forward stage of a check that also has a backward stage."""
    check.assert_close(call_checked(impl.softmax, x, names=("x",)), ref.reference(x.double()),
                       tol=exercise.tolerance[str(dtype).removeprefix("torch.")], dtype=dtype,
                       what="y", **ctx)


def _y_probes(impl, ref, exercise, device, x, fix="compute in float32"):
    """What a wrong y can have as a cause, each confirmed on the op (grader.judge.probes): the
    max not subtracted, masked lanes entering the max as 0, 16-bit arithmetic."""
    def verify(a):
        y = impl.softmax(a)
        check.assert_close(y, ref.reference(a.double()), dtype=y.dtype, what="y",
                           tol=exercise.tolerance[str(y.dtype).removeprefix("torch.")])
    # rows of 77 (masked lanes in the last block), shifted far above or below 0 (float32)
    rows = randn((4, 77), seed=33, dtype=torch.float32, device=device)
    return (probes.max_subtracted(verify, lambda shift: (rows + shift,)),
            probes.max_neutral(verify, lambda sign: (rows + 30.0 * sign,)),
            probes.sixteen_bit(impl.softmax, lambda a: ref.reference(a.double()), verify, (x,),
                               fix=fix))


def _expected(ref, x, dy):
    (y,), (dx,) = expected_grads(ref.reference, x, wrt=(0,), dy=dy)
    return y, dx


def _dx_tol(exercise, dtype, y, dy):
    """dx = y * (dy - sum(dy * y)) is computed from the y the forward stored, rounded to the
    dtype (PyTorch does the same). Rounding each y_i by a relative u moves dx_k by up to
    u * y_k * (|dy_k - dot| + sum_i y_i |dy_i|) <= 3 u * y_k * max|dy|: near y = 1 in bfloat16
    (u = 2^-8) that is ~0.01 * max|dy|, past the plain tolerance. float32 barely moves."""
    tol = dict(exercise.tolerance[str(dtype).removeprefix("torch.")])
    u = torch.finfo(dtype).eps / 2
    tol["atol"] += 3 * u * float(y.abs().max()) * float(dy.abs().max()) if y.numel() else 0.0
    return tol


def _check_both(exercise, dy, got, want, dtype, **ctx):
    name = str(dtype).removeprefix("torch.")
    check.assert_close(got[0], want[0], tol=exercise.tolerance[name], dtype=dtype, what="y",
                       **ctx)
    try:
        check.assert_close(got[1], want[1], tol=_dx_tol(exercise, dtype, want[0], dy),
                           dtype=dtype, what="dx (= y * (dy - sum(dy * y)))", **ctx)
    except Mismatch as e:
        y = got[0]
        if y.dim() >= 2 and y.numel() > 1 and not y.is_contiguous():
            why = (f"the forward returned y with strides {y.stride()} (not row-major): a "
                   f"backward that reads the saved y as row-major reads the wrong elements; "
                   f"index it with its own strides, or make it row-major")
        else:
            why = ("dx = y * (dy - sum(dy * y)) needs the forward's output y "
                   "(ctx.save_for_backward(y)) and the dot sum(dy * y) over the whole row, in "
                   "float32")
        # the backward's failure: a check's forward hint (max, -inf, views) does not apply
        raise off_topic(Mismatch(f"{e}\n  y is right but dx is not: {why}")) from None


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, scale=st.sampled_from([1.0, 3.0, 30.0]))
def test_forward_matches_reference(impl, ref, exercise, device, assert_close, data, dtype, seed,
                                   scale):
    shape = draw_row_shape(data, device)
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    y = call_checked(impl.softmax, x, names=("x",))
    with probes.explained(*_y_probes(impl, ref, exercise, device, x)):
        assert_close(y, ref.reference(x.double()), dtype=dtype, shape=shape, scale=scale,
                     seed=seed)


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, scale=st.sampled_from([1.0, 3.0, 30.0]))
def test_backward_matches_reference(impl, ref, exercise, device, data, dtype, seed, scale):
    shape = draw_row_shape(data, device)
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    dy = randn(shape, seed=seed + 1, dtype=dtype, device=device)
    _check_both(exercise, dy, _grads(impl.softmax, x, dy), _expected(ref, x, dy), dtype,
                shape=shape, scale=scale, seed=seed)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_awkward_shape(impl, ref, exercise, device, assert_close, dtype, stage):
    """The Triton tutorial's awkward shape (781 columns: not a power of two), fixed seeds."""
    shape = (1823, 781) if device == "cuda" else (9, 781)
    x = randn(shape, seed=5, dtype=dtype, device=device, scale=2.0)
    if stage == "forward":
        return _forward_only(impl, ref, exercise, x, dtype, shape=shape)
    dy = randn(shape, seed=6, dtype=dtype, device=device)
    _check_both(exercise, dy, _grads(impl.softmax, x, dy), _expected(ref, x, dy), dtype,
                shape=shape)


@pytest.mark.parametrize("n", [7, 100, 700], ids=lambda n: f"N={n}")
def test_float32_accuracy(impl, ref, exercise, device, assert_close, n):
    """float32 in, float32 accuracy out: short rows, where y is O(0.1) and every bit shows."""
    x = randn((16, n), seed=31, dtype=torch.float32, device=device, scale=3.0)
    with probes.explained(*_y_probes(impl, ref, exercise, device, x, fix=(
            "convert loads to float32 and compute exp and the sum in float32, for every input "
            "dtype"))):
        assert_close(impl.softmax(x), ref.reference(x.double()), dtype=torch.float32, what="y",
                     N=n)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rows_longer_than_a_block(impl, ref, exercise, device, assert_close, dtype, stage):
    """Rows of 16K-128K elements: more than one block holds (the online softmax)."""
    cases = ([(2, 16384), (1, 65536), (1, 131075)] if device == "cpu" else
             [(37, 16384), (5, 32769), (33, 65536), (9, 131072), (5, 131075)])
    for i, shape in enumerate(cases):
        x = randn(shape, seed=100 + i, dtype=dtype, device=device, scale=3.0)
        dy = randn(shape, seed=200 + i, dtype=dtype, device=device)
        try:
            if stage == "forward":
                _forward_only(impl, ref, exercise, x, dtype, shape=shape)
                continue
            _check_both(exercise, dy, _grads(impl.softmax, x, dy), _expected(ref, x, dy), dtype,
                        shape=shape)
        except Mismatch as e:
            if getattr(e, "grader_off_topic", False):  # y right, dx wrong
                raise off_topic(Mismatch(f"{e}{LONG_ROWS_BWD}")) from None
            raise Mismatch(f"{e}{LONG_ROWS}") from None


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(13,), (4, 9), (2, 3, 6), (2, 600)], ids=str)
def test_gradcheck(impl, ref, device, shape):
    """torch.autograd.gradcheck in float64: the math must run in float64 too."""
    x = randn(shape, seed=7, dtype=torch.float64, device=device, scale=2.0).requires_grad_()
    # the larger ones check a projection of the Jacobian (grader.judge.gradcheck: fast mode
    # past FULL_JACOBIAN_MAX elements): 1200 columns of the full one take minutes on the CPU
    gradcheck_checked(impl.softmax, (x,), names=("x",), reference=ref.reference, eps=1e-6,
                      atol=1e-5, rtol=1e-4,
                      hint="dx = y * (dy - sum(dy * y)) over each row")


# --- properties and edge cases -----------------------------------------------------------------

def _unit_roundoff(dtype):
    return torch.finfo(dtype).eps / 2


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_rows_sum_to_one(impl, device, data, dtype, seed):
    """Every row of y sums to 1, up to rounding each y to the dtype (relative u each)."""
    shape = draw_row_shape(data, device)
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=3.0)
    y = impl.softmax(x)
    sums = y.double().sum(-1)
    n = shape[-1]
    # rounding each y_i moves it by at most u * y_i (u * sum = u in all), subnormals by half
    # their spacing each; the float32 math adds ~n * 2^-24 at worst
    bound = 2 * _unit_roundoff(dtype) + n * torch.finfo(dtype).smallest_normal * 2.0 ** -10 \
        + n * 2.0 ** -24 + 1e-6
    check.within((sums - 1).abs(), bound, what="a row of y: |its sum - 1| is",
                 dtype=str(dtype).removeprefix("torch."), shape=shape, seed=seed,
                 why="each row of y sums to 1. Divide by the sum of exp over the whole row "
                     "(every block of it), and sum in float32")


def _on_grid(shape, seed, dtype, device):
    """Values k/8 with |k/8| <= 8: x + c is exact in dtype for the shifts used below."""
    g = randn(shape, seed=seed, dtype=torch.float64, device="cpu", scale=2.0)
    return (torch.round(g * 8) / 8).clamp(-8, 8).to(device=device, dtype=dtype)


# the largest shift 2^k for which x + c stays exact: 8 + 2^k at spacing 1/8 needs 3 + k + 1
# significant bits (24 in float32, 11 in float16, 8 in bfloat16)
SHIFT_BITS = {torch.float32: 13, torch.float16: 6, torch.bfloat16: 3}


@given(dtype=dtypes(DTYPES), seed=seeds, k=st.integers(0, 13), sign=st.sampled_from([1, -1]))
def test_shift_invariance(impl, ref, exercise, device, assert_close, dtype, seed, k, sign):
    """softmax(x + c) == softmax(x) for any constant c (here exact in the dtype, up to 8192)."""
    c = sign * 2.0 ** min(k, SHIFT_BITS[dtype])
    shape = (5, 77)
    x = _on_grid(shape, seed, dtype, device)
    xc = (x.double() + c).to(dtype)
    assert bool((xc.double() - c == x.double()).all()), "x + c must be exact in the dtype"
    y = impl.softmax(x)
    yc = impl.softmax(xc)
    try:
        assert_close(yc, y.double(), dtype=dtype, what=f"softmax(x + {c:g}) vs softmax(x)",
                     seed=seed)
    except Mismatch as e:
        try:  # the shift is the cause only if softmax(x) itself is right
            with probes.explained(*_y_probes(impl, ref, exercise, device, x)):
                assert_close(y, ref.reference(x.double()), dtype=dtype, what="softmax(x)",
                             seed=seed)
        except Mismatch as plain:
            raise off_topic(Mismatch(f"softmax(x) is wrong already, before any shift:\n"
                                     f"{plain}")) from None
        raise Mismatch(f"{e}{STABILITY}") from None


@pytest.mark.backward
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_large_magnitudes(impl, ref, exercise, device, assert_close, dtype):
    """|x| up to ~4e4 (and rows of values all near +1e4): exp(x) alone overflows every dtype."""
    x = randn((7, 300), seed=13, dtype=dtype, device=device, scale=1e4)
    near = randn((3, 300), seed=14, dtype=torch.float64, device=device, scale=3.0) + 1e4
    x = torch.cat([x, near.to(dtype)])
    dy = randn(x.shape, seed=15, dtype=dtype, device=device)
    got, want = _grads(impl.softmax, x, dy), _expected(ref, x, dy)
    if not bool(torch.isfinite(got[0]).all()):
        rows = torch.unique(torch.nonzero(~torch.isfinite(got[0]))[:, 0]).tolist()
        raise Mismatch(f"y has NaN or inf in rows {rows} of {x.shape[0]} (|x| up to ~4e4, "
                       f"dtype={str(dtype).removeprefix('torch.')}): exp overflowed.{STABILITY}")
    try:
        _check_both(exercise, dy, got, want, dtype, shape=tuple(x.shape), x_scale=1e4)
    except Mismatch as e:
        if getattr(e, "grader_off_topic", False):  # y right, dx wrong: not the max
            raise
        raise Mismatch(f"{e}{STABILITY}") from None


@pytest.mark.backward
@pytest.mark.parametrize("n", [1, 5, 300, "long"], ids=lambda n: f"N={n}")
def test_rows_of_minus_inf(impl, ref, exercise, device, assert_close, n):
    """Masked rows: -inf everywhere but one element gives exactly 1 there and 0 elsewhere;
    rows with some -inf (an attention mask) give 0 there, and no NaN anywhere. "long": a row
    longer than one block (the online softmax), whose first blocks may hold only -inf."""
    if n == "long":
        n = 700 if device == "cpu" else 40000
    m = 6
    x = randn((m, n), seed=17, dtype=torch.float32, device=device, scale=2.0)
    g = torch.Generator().manual_seed(18)
    for r in range(3):  # one finite element: first, last, somewhere
        keep = [0, n - 1, int(torch.randint(n, (1,), generator=g))][r]
        x[r, torch.arange(n, device=device) != keep] = float("-inf")
    x[3, : n // 2] = float("-inf")   # the first half masked (a causal mask's shape)
    x[4, n // 2:] = float("-inf")    # the second half masked (a padding mask's shape)
    x[4, 0] = 0.0                    # (at least one finite element per row)
    dy = randn((m, n), seed=19, dtype=torch.float32, device=device)
    got, want = _grads(impl.softmax, x, dy), _expected(ref, x, dy)
    if not bool(torch.isfinite(got[0]).all()):
        rows = torch.unique(torch.nonzero(~torch.isfinite(got[0]))[:, 0]).tolist()
        raise Mismatch(f"y has NaN or inf in rows {rows} (N={n}), whose inputs hold -inf: "
                       f"exp(-inf - (-inf)) is NaN. Take the max over the row first, so it is "
                       f"finite; in the online softmax a block (or lane) that has seen only "
                       f"-inf has max -inf: skip its rescaling (tl.where) instead of computing "
                       f"exp(m_old - m_new)")
    _check_both(exercise, dy, got, want, torch.float32, shape=(m, n), masked="-inf")


@pytest.mark.backward
@pytest.mark.parametrize("shape", [(1,), (5, 1), (2, 3, 1)], ids=str)
def test_one_element_rows(impl, ref, exercise, device, assert_close, shape):
    """N = 1: y = 1 and dx = 0, whatever x (a huge x included)."""
    x = randn(shape, seed=23, dtype=torch.float32, device=device, scale=1e4)
    dy = randn(shape, seed=24, dtype=torch.float32, device=device)
    _check_both(exercise, dy, _grads(impl.softmax, x, dy), _expected(ref, x, dy), torch.float32,
                shape=shape)


@pytest.mark.backward
@pytest.mark.parametrize("layout", ["every other row", "every other column", "transposed"])
def test_strided_x_handled_or_refused(impl, ref, exercise, device, assert_close, layout):
    """A view that is not contiguous must give the right answer or be refused, naming `x`."""
    if layout == "every other row":
        x = randn((2 * 9, 130), seed=21, dtype=torch.float32, device=device)[::2]
    elif layout == "every other column":
        x = randn((9, 2 * 130), seed=21, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((130, 9), seed=21, dtype=torch.float32, device=device).t()
    dy = randn((9, 130), seed=23, dtype=torch.float32, device=device)
    try:
        got = _grads(impl.softmax, x, dy)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine
    want = _expected(ref, x, dy)
    try:
        _check_both(exercise, dy, got, want, torch.float32, layout=layout)
    except Mismatch as e:
        # the view explains it only if a dense x of the same values comes out right
        try:
            _check_both(exercise, dy, _grads(impl.softmax, x.contiguous(), dy), want,
                        torch.float32, layout=f"{layout}, copied to a dense x")
        except Mismatch as dense:
            raise off_topic(Mismatch(f"wrong with a dense x too, so not because of the view:\n"
                                     f"{dense}")) from None
        # the view's failure: this check's hint applies
        raise probes.with_cause(e, probes.view_evidence((x,), ("x",))) from None


@pytest.mark.backward
def test_strided_dy(impl, ref, exercise, device, assert_close):
    """The gradient of y.sum() is one value expanded (stride 0): the backward must read it right."""
    x = randn((6, 50), seed=25, dtype=torch.float32, device=device, scale=2.0)
    dy = torch.ones((), dtype=torch.float32, device=device).expand(6, 50)
    _check_both(exercise, dy, _grads(impl.softmax, x, dy), _expected(ref, x, dy), torch.float32,
                incoming_grad="expanded ones (stride 0)")


def test_refuses_integer_x(impl, device):
    impl.softmax(randn((2, 8), seed=1, dtype=torch.float32, device=device))  # a stub fails here
    expect_refusal(impl.softmax, torch.arange(16, device=device).view(2, 8), argument="x")


# --- layouts and repeated calls (the shared checks: grader.judge.strategies.each_view) -----------------
from grader.judge.testing import new_contents_same_shapes as _twice, views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device, assert_close):
    """Each tensor argument in turn as a strided view and as a view one element into its
    memory, the others dense: the right values, or a strided view refused naming it. Forward
    only: no backward is needed."""
    x = randn((7, 131), seed=51, dtype=torch.float32, device=device, scale=2.0)
    want = (lambda a: (ref.reference(a[0].double()),))((x,))

    def compare(outs):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _views(impl.softmax, (x,), ("x",), compare, seed=51)


def test_new_contents_same_shapes(impl, ref, device, assert_close):
    """Called twice with inputs of the same shapes, new values the second time: both right."""
    x = randn((7, 131), seed=61, dtype=torch.float32, device=device, scale=2.0)

    def compare(outs, want):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _twice(impl.softmax, (x,), ("x",), lambda a: (ref.reference(a[0].double()),), compare, seed=71)
