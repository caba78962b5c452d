"""Checks for exercise 09 (rmsnorm_quant), for both tracks. Run through the grader.

The expectation is the reference evaluated in float64 on the same input values. q is an integer,
so it is judged by its own rule: it must equal round_half_even(y / scale) (clamped to ±127),
except that where y / scale lies within float32 rounding error of a half-integer (NEAR_HALF) a
difference of 1 is accepted: there float32 math may legitimately land on either side. Nowhere
else may q differ. The scale is compared like any fp32 output.

The seeds' version of this kernel has four bugs (wrong/ has each):
  truncation instead of rounding   test_q_matches_reference (and every q check): "rounded toward
                                   zero (truncated)"
  0 / 0 on an all-zero row         test_all_zero_rows: "divides by zero"
  a shared-memory race (CUDA)      test_many_rows and the other q checks: "the same few slots of
                                   every row"; test_repeated_calls_agree: "a race";
                                   compute-sanitizer --tool racecheck (README)
  int8 conversion before the clamp no effect under this scale rule: y/scale never leaves
                                   [-127, 127], so the clamp never engages (README). Any q past
                                   the range is reported as "wrapped around";
                                   test_q_never_wraps_around holds the edges (±127, never -128)
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import draw_row_shape, dtypes, randn, seeds
from grader.judge.testing import (compiled_matches, new_contents_same_shapes, opcheck_samples)

DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-6
QMAX = 127
# y/scale = 127 * x*w / max|x*w| (rstd cancels): a few float32 roundings of values up to 127,
# ~127 * 5 * 2^-24 = 4e-5 apart from float64. Within NEAR_HALF of a half-integer, either
# neighbour is a correct rounding of a correct float32 computation.
NEAR_HALF = 2e-4


def _qualname(track):
    return f"ex09_{track.name}::rmsnorm_quant"


def _inputs(shape, seed, dtype, device, scale=1.0):
    x = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device=device, scale=0.5, offset=1.0)
    return x, w


def _round_half_even(t):
    return torch.round(t)  # torch.round rounds half to even


def _diagnose(q, t, bad, shape) -> str:
    """What usually causes this pattern of wrong q values (the learner's next step)."""
    g = q.to(torch.float64)[bad]
    tb = t[bad]
    r = _round_half_even(tb)
    wrapped = torch.remainder(r + 128, 256) - 128  # what an int8 conversion without a clamp keeps
    if bool(((r.abs() > QMAX) & (g == wrapped)).any()):
        return ("values wrapped around (e.g. 200 -> -56): the float was converted to int8 "
                "before it was clamped; clamp to [-127, 127] in float, then convert")
    trunc = torch.clamp(torch.trunc(tb), -QMAX, QMAX)
    if bool((g == trunc).float().mean() > 0.9):
        return ("q is y/scale rounded toward zero (truncated), as a float-to-int conversion "
                "does: round to the nearest integer first (rintf in CUDA; in Triton "
                "libdevice.rint, or the 1.5 * 2^23 add in the README hints), then "
                "clamp, then convert")
    if len(shape) >= 1 and shape[-1] > 64:
        cols = torch.nonzero(bad.reshape(-1, shape[-1]))[:, 1].unique()
        rows = int(bad.reshape(-1, shape[-1]).any(dim=1).sum())
        if cols.numel() <= 33 and rows > 1:
            return (f"only columns {cols.tolist()[:8]} are wrong, in {rows} rows: the same "
                    f"few slots of every row. Is a shared-memory buffer that holds the row's "
                    f"values also used by a block reduction (or written while another warp "
                    f"still reads it)? Keep the row in registers, or give it its own buffer "
                    f"with a barrier between the last read and the next write")
    return None


def check_q(q, scale, x, w, epsilon, ref, **ctx):
    """q and scale of one call against the float64 reference, with the ±1 rule near halves."""
    where = ", ".join(f"{k}={v}" for k, v in ctx.items())
    if not isinstance(q, torch.Tensor) or not isinstance(scale, torch.Tensor):
        raise Mismatch(f"rmsnorm_quant must return (q, scale), two tensors; got "
                       f"{type(q).__name__}, {type(scale).__name__} ({where})")
    if q.dtype != torch.int8:
        raise Mismatch(f"q has dtype {q.dtype}, expected torch.int8 ({where})")
    if scale.dtype != torch.float32:
        raise Mismatch(f"scale has dtype {scale.dtype}, expected torch.float32 (one fp32 scale "
                       f"per row, whatever x's dtype) ({where})")
    if tuple(q.shape) != tuple(x.shape):
        raise Mismatch(f"q has shape {tuple(q.shape)}, expected x's shape {tuple(x.shape)} "
                       f"({where})")
    if tuple(scale.shape) != tuple(x.shape[:-1]):
        raise Mismatch(f"scale has shape {tuple(scale.shape)}, expected {tuple(x.shape[:-1])} "
                       f"(one per row: x's shape without the last dimension) ({where})")
    t, scale64, _ = ref.ratio(x, w, epsilon)
    s = scale.detach().double()
    if not bool((torch.isfinite(s) & (s > 0)).all()):  # NaN is neither finite nor > 0
        zero_rows = (scale64 == 1) & (t.abs().amax(-1) == 0) if t.dim() else None
        hint = ""
        if zero_rows is not None and bool(zero_rows.any()):
            hint = (" (all-zero rows are among these: max|y| = 0 there, and scale = 0 makes "
                    "y / scale = 0 / 0: give such a row scale 1)")
        raise Mismatch(f"scale has NaN, inf, zero or negative values ({where}){hint}")
    ctx = {("x_dtype" if k == "dtype" else k): v for k, v in ctx.items()}
    check.assert_close(scale, scale64, tol={"atol": 1e-30, "rtol": 1e-5}, dtype=torch.float32,
                       what="scale (max|y| / 127 per row)", **ctx)
    qd = q.detach().to(torch.float64)
    if not bool((qd.abs() <= QMAX).all()):
        raise Mismatch(f"q has {int((qd.abs() > QMAX).sum())} values of -128: clamp to the "
                       f"symmetric range [-127, 127] ({where})")
    want = torch.clamp(_round_half_even(t), -QMAX, QMAX)
    diff = qd - want
    frac = t.abs() - torch.floor(t.abs())
    near_half = (frac - 0.5).abs() <= NEAR_HALF
    bad = (diff != 0) & ~(near_half & (diff.abs() == 1))
    if bool(bad.any()):
        flat = bad.reshape(-1).nonzero().flatten()
        shape = tuple(q.shape)
        lines = [f"q: {flat.numel()} of {q.numel()} values are wrong ({where})",
                 "  first mismatches (index: got vs expected, y/scale):"]
        qf, wf, tf = qd.reshape(-1).cpu(), want.reshape(-1).cpu(), t.reshape(-1).cpu()
        for i in flat[:5].tolist():
            idx = [int(j) for j in torch.unravel_index(torch.tensor(i), shape)] if shape else []
            lines.append(f"    {idx}: {int(qf[i])} vs {int(wf[i])} ({tf[i].item():.6f})")
        lines.append("  (a difference of 1 is accepted only where y/scale is within "
                     f"{NEAR_HALF:g} of a half-integer)")
        hint = _diagnose(qd.cpu(), t.cpu(), bad.cpu(), shape)
        if hint:
            lines.append(f"  likely cause: {hint}")
        raise Mismatch("\n".join(lines))


def _quantize(impl, x, w, eps=EPS):
    out = call_checked(impl.rmsnorm_quant, x, w, eps, names=("x", "w", "eps"))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Mismatch(f"rmsnorm_quant must return a tuple (q, scale), got {type(out).__name__}")
    return out


# --- values ------------------------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds,
       eps=st.sampled_from([1e-6, 1e-5, 1e-2]))
def test_q_matches_reference(impl, ref, device, data, dtype, seed, eps):
    shape = draw_row_shape(data, device)
    x, w = _inputs(shape, seed, dtype, device)
    q, scale = _quantize(impl, x, w, eps)
    check_q(q, scale, x, w, eps, ref, dtype=str(dtype).removeprefix("torch."), shape=shape,
            eps=eps, seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_output_dtypes(impl, device, dtype):
    """q is exactly int8 and scale exactly float32, whatever x's dtype."""
    x, w = _inputs((3, 40), 3, dtype, device)
    q, scale = _quantize(impl, x, w)
    if q.dtype != torch.int8 or scale.dtype != torch.float32:
        raise Mismatch(f"for {dtype} input the outputs have dtypes ({q.dtype}, {scale.dtype}); "
                       f"expected exactly (torch.int8, torch.float32)")
    if q.device != x.device or scale.device != x.device:
        raise Mismatch(f"outputs on ({q.device}, {scale.device}), expected on x's device "
                       f"{x.device}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_long_rows(impl, ref, device, dtype):
    """N from one past a power of two up to 65536 and beyond: rows longer than one block."""
    cases = [(3, 16385), (2, 65537)] if device == "cpu" else [
        (37, 8191), (33, 8192), (17, 16385), (9, 65536), (5, 65537), (3, 131075)]
    for i, shape in enumerate(cases):
        x, w = _inputs(shape, 100 + i, dtype, device)
        q, scale = _quantize(impl, x, w)
        check_q(q, scale, x, w, EPS, ref, dtype=str(dtype).removeprefix("torch."), shape=shape)


def test_many_rows(impl, ref, device):
    """More rows than one launch's first wave, each its own scale."""
    shape = (300, 64) if device == "cpu" else (40000, 256)
    x, w = _inputs(shape, 61, torch.bfloat16, device)
    x = x * torch.linspace(0.01, 100, shape[0], device=device).to(x.dtype)[:, None]
    q, scale = _quantize(impl, x, w)
    check_q(q, scale, x, w, EPS, ref, shape=shape)


# --- properties --------------------------------------------------------------------------------

@given(dtype=dtypes(DTYPES), seed=seeds, n=st.sampled_from([1, 2, 7, 127, 129, 1000]))
def test_properties(impl, ref, device, dtype, seed, n):
    """|q| <= 127; every nonzero row reaches |q| = 127; |q * scale - y| <= scale / 2 (+ ulp)."""
    x, w = _inputs((6, n), seed, dtype, device)
    q, scale = _quantize(impl, x, w)
    qd, s = q.double(), scale.double()
    if not bool((qd.abs() <= QMAX).all()):
        raise Mismatch(f"|q| must stay <= 127 (the symmetric int8 range), got "
                       f"{int(qd.abs().max())} (seed={seed}, n={n})")
    reach = qd.abs().amax(-1)
    if bool((reach != QMAX).any()):
        r = int((reach != QMAX).nonzero()[0, 0])
        raise Mismatch(f"row {r} is nonzero but its largest |q| is {int(reach[r])}, not 127: "
                       f"the scale must be max|y| / 127 of that row (max of |y|, not of y or "
                       f"of x) (seed={seed}, n={n})")
    _, _, y = ref.ratio(x, w, EPS)
    # a rounded value is at most half a scale away; 1e-3 for the float rounding of y / scale
    check.within((qd * s[:, None] - y).abs() / s[:, None], 0.5 + 1e-3,
                 what="|q * scale - y| / scale (in scales)", seed=seed, n=n,
                 why="q * scale must be within half a scale of y, as a value rounded to the "
                     "nearest integer is")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_all_zero_rows(impl, ref, device, dtype):
    """A row whose max|y| is 0 gets scale 1 and q = 0: never 0 / 0."""
    shape = (6, 37)
    x, w = _inputs(shape, 11, dtype, device)
    x[1] = 0
    x[4] = 0
    q, scale = _quantize(impl, x, w)
    s = scale.detach().double()
    for r in (1, 4):
        if not math.isfinite(s[r].item()) or s[r].item() != 1.0:
            raise Mismatch(f"scale of an all-zero row is {s[r].item()}, expected 1: max|y| = 0 "
                           f"there, so max|y| / 127 = 0 and y / scale divides by zero (0 / 0 "
                           f"= NaN); test for a zero max and use scale 1 (q = 0) for such a row")
        if bool((q[r] != 0).any()):
            raise Mismatch(f"q of an all-zero row must be all 0, got {q[r].tolist()[:8]}...: a "
                           f"NaN from 0 / 0 converted to int8 is undefined; a row with max|y| = "
                           f"0 divides by zero")
    check_q(q, scale, x, w, EPS, ref, dtype=str(dtype).removeprefix("torch."), shape=shape)
    # w = 0 also makes every y zero, with nonzero x
    q, scale = _quantize(impl, x, torch.zeros_like(w))
    if not bool((scale.double() == 1).all()) or bool((q != 0).any()):
        raise Mismatch("with w = 0 every y is 0: every scale must be 1 and q all 0 (got scales "
                       f"{scale.tolist()[:4]}...): a zero max|y| divides by zero")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_one_huge_element(impl, ref, device, dtype):
    """One element 1e4 times the rest: it gets ±127, everything else rounds to 0."""
    shape = (5, 300)
    x, w = _inputs(shape, 13, dtype, device)
    x[:, 7] = 1e4
    x[2, 7] = -1e4
    q, scale = _quantize(impl, x, w)
    check_q(q, scale, x, w, EPS, ref, dtype=str(dtype).removeprefix("torch."), shape=shape)
    rest = torch.cat([q[:, :7], q[:, 8:]], dim=1)
    if bool((rest != 0).any()):
        raise Mismatch("next to an element 1e4 times larger, every other |y|/scale is ~0.013 "
                       "and must round to 0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_q_never_wraps_around(impl, ref, device, dtype):
    """The largest |y| of every row lands exactly on ±127, in both signs, at every position.

    With scale = max|y| / 127, y/scale reaches 127 (times 1 + a few float32 ulps) and never
    128, so a clamp placed after the int8 conversion is dead code here: this check cannot see
    that seed bug on its own. It holds the edges a wrong conversion breaks instead: -127 and
    127 exactly, never -128 or a wrapped value, for maxima of both signs at the first, last and
    middle column of rows of several lengths.
    """
    for n in (1, 8, 33, 1000):
        x, w = _inputs((6, n), 17 + n, dtype, device)
        for r, c in enumerate((0, n - 1, n // 2, 0, n - 1, n // 2)):
            x[r, c] = (-1) ** r * 50
        q, scale = _quantize(impl, x, w)
        check_q(q, scale, x, w, EPS, ref, dtype=str(dtype).removeprefix("torch."), n=n)


@pytest.mark.parametrize("layout", ["every other column", "transposed", "slice of wider rows"])
def test_strided_x_handled_or_refused(impl, ref, device, layout):
    """A view that is not contiguous must give the right answer or be refused, naming `x`."""
    if layout == "every other column":
        x = randn((9, 2 * 130), seed=21, dtype=torch.float32, device=device)[:, ::2]
    elif layout == "transposed":
        x = randn((130, 9), seed=21, dtype=torch.float32, device=device).t()
    else:
        x = randn((9, 141), seed=21, dtype=torch.float32, device=device)[:, 3:133]
    w = randn(130, seed=22, dtype=torch.float32, device=device, offset=1.0)
    try:
        q, scale = _quantize(impl, x, w)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine
    check_q(q, scale, x, w, EPS, ref, layout=layout)


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device):
    """x, then w, each as a strided view and as a view one element into its memory, the other
    dense: the right q and scale, or a strided view refused naming it."""
    shape = (7, 131)
    x, w = _inputs(shape, 51, torch.float32, device)

    def compare(outs):
        if len(outs) != 2:
            raise Mismatch(f"rmsnorm_quant must return a tuple (q, scale), got {len(outs)} "
                           f"output(s)")
        check_q(outs[0], outs[1], x, w, EPS, ref, shape=shape)
    _views(impl.rmsnorm_quant, (x, w, EPS), ("x", "w", "eps"), compare, seed=51)


def test_refuses_w_of_the_wrong_size(impl, device):
    x = randn((4, 100), seed=1, dtype=torch.float32, device=device)
    impl.rmsnorm_quant(x, randn(100, seed=2, dtype=torch.float32, device=device))  # a stub fails here
    for bad in (randn(101, seed=2, dtype=torch.float32, device=device),
                randn((1, 100), seed=2, dtype=torch.float32, device=device)):
        expect_refusal(impl.rmsnorm_quant, x, bad, EPS, argument="w")


def test_refuses_integer_x(impl, device):
    x = torch.ones((4, 100), dtype=torch.int32, device=device)
    impl.rmsnorm_quant(x.float(), torch.ones(100, device=device), EPS)  # a stub fails here
    expect_refusal(impl.rmsnorm_quant, x, torch.ones(100, dtype=torch.int32, device=device), EPS,
                   argument="x")


def test_repeated_calls_agree(impl, device):
    """The same input gives the same bits every time: a shared-memory race does not.

    A race (one warp writing a shared-memory slot that another still reads, without a barrier
    between) shows as results that change from call to call, most often on big inputs with
    many blocks in flight.
    """
    cases = [(64, 300)] if device == "cpu" else [(8192, 4096), (4096, 1000), (2048, 8192)]
    for i, shape in enumerate(cases):
        x, w = _inputs(shape, 71 + i, torch.bfloat16, device)
        q0, s0 = _quantize(impl, x, w)
        for k in range(2 if device == "cpu" else 10):
            q, s = impl.rmsnorm_quant(x, w, EPS)
            if not torch.equal(q, q0) or not torch.equal(s, s0):
                nq = int((q != q0).sum())
                raise Mismatch(f"call {k + 2} on the same input differs from the first "
                               f"({nq} q values, {int((s != s0).sum())} scales; shape={shape}): "
                               f"a race. Typically a shared-memory buffer is written while "
                               f"another warp still reads it (e.g. the reduction buffer reused "
                               f"for the row's values); compute-sanitizer --tool racecheck "
                               f"shows where")


# --- a second call on the same buffers, new values in between (the shared check) ----------------

def test_new_contents_same_shapes(impl, ref, device):
    """Called twice on the same buffers, new values written into them in between: q and scale
    right both times (a result kept from the first call, by shape or by pointer, is wrong the
    second time)."""
    shape = (6, 300)
    x, w = _inputs(shape, 91, torch.float32, device)

    def compare(outs, want):
        if len(outs) != 2:
            raise Mismatch(f"rmsnorm_quant must return a tuple (q, scale), got {len(outs)} "
                           f"output(s)")
        check_q(outs[0], outs[1], want[0], want[1], EPS, ref, shape=shape)
    new_contents_same_shapes(impl.rmsnorm_quant, (x, w, EPS), ("x", "w", "eps"),
                             lambda a: (a[0].clone(), a[1].clone()), compare, seed=92)


# --- registration: opcheck, torch.compile ------------------------------------------------------

def test_opcheck(impl, track, device):
    """torch.library.opcheck: schema, fake (meta) kernel, no autograd surprises, AOT dispatch."""
    x, w = _inputs((3, 5, 33), 31, torch.float32, device)
    impl.rmsnorm_quant(x, w, EPS)  # a stub fails here, with its own message
    samples = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for shape in ((3, 5, 33), (7, 64), (1,), (2, 4097)):
            xs, ws = _inputs(shape, 32, dtype, device)
            samples.append(((xs, ws, EPS), None))
    opcheck_samples(impl, track, device, _qualname(track), samples)


def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of Linear -> rmsnorm_quant: no graph break, same values."""
    n = 64
    x = randn((2, 8, n), seed=44, dtype=torch.float32, device=device)
    w_in = randn((n, n), seed=45, dtype=torch.float32, device=device, scale=n ** -0.5)
    w = randn(n, seed=46, dtype=torch.float32, device=device, scale=0.5, offset=1.0)
    eager = ref.linear_then_quant(impl.rmsnorm_quant)(x, w_in, w, EPS)  # a stub fails here
    # Inductor may order the Linear's sums differently: q within 1, the scale within 1e-4
    compiled_matches(impl, track, device, "rmsnorm_quant", (x, w_in, w, EPS),
                     expected=[t.double() for t in eager], tol={"atol": 1, "rtol": 1e-4},
                     wrap="linear_then_quant", names=["compiled q", "compiled scale"])
