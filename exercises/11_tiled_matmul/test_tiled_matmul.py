"""Checks for exercise 11 (tiled_matmul). Run through the grader: `python -m grader grade --exercise 11`.

Every check runs on "cuda" (your kernels; "needs a GPU" on a machine without one) and on "cpu"
(your C++ loops). Expectations come from reference.py evaluated in float64.

How a sum is judged. Y[m, n] adds K products (and the bias). A float32 sum rounds at every
addition, so its error grows with K: any order of summation (a loop, tiles, a tree) stays below
    4 * sqrt(K + 1) * u * max_{m,n} (|A| @ |B| + |bias|)[m, n]        u = 2^-24 for float32
with overwhelming probability (grader.judge.testing.sum_bound; Higham & Mary 2019). That is the atol
here, plus 4 units of the last place of the output as rtol. A sum in a 16-bit type, TF32
inputs, a dropped or doubled tile, a stale shared-memory value are all far outside it. The same
bound with M or N terms judges dA, dB and dbias. float64 gets the float64 bound, doubled (the
float64 reference has rounding errors of the same size).

Gradients are checked away from the ReLU's kink: dY is zeroed where |Z| = |A @ B + bias| is
within a few bounds of 0, where float32 rounding may put Z on the other side than float64 does
(the mask would then test luck, not your code).
"""

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import check
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import randn, seeds
from grader.judge.testing import (compiled_matches, expected_grads, float64, new_contents_same_shapes,
                            opcheck_samples, sum_bound,
                            value_and_grads)

DTYPES = [torch.float32, torch.float64]
NAMES = ("A", "B", "bias")
# sizes that break GEMMs: 1, primes, one off a tile edge (BM = BN = 128, BK = 8 or 16), 1000-odd
AWKWARD = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 64, 127, 128, 129, 255, 257, 1000, 1001, 1031)
# (M cap, N cap, K cap): the CPU runs your loops, the GPU your kernels
CAPS = {"cpu": (48, 160, 1031), "cuda": (2100, 2100, 2100)}


# --- helpers -----------------------------------------------------------------------------------

def dims(cap):
    return st.one_of(st.sampled_from([d for d in AWKWARD if d <= cap]), st.integers(1, cap))


def draw_shape(data, device):
    mc, nc, kc = CAPS[device]
    return (data.draw(dims(mc), label="M"), data.draw(dims(nc), label="N"),
            data.draw(dims(kc), label="K"))


def make_inputs(shape, *, seed, dtype, device):
    """A ~ N(0, 1), B ~ N(0, 1/K), bias ~ N(0, 1/4): |Z| ~ 1 for any K, half of Y positive."""
    M, N, K = shape
    A = randn((M, K), seed=seed, dtype=dtype, device=device)
    B = randn((K, N), seed=seed + 1, dtype=dtype, device=device, scale=K ** -0.5)
    bias = randn(N, seed=seed + 2, dtype=dtype, device=device, scale=0.5)
    return A, B, bias


def sum_tol(abs_products, terms, dtype):
    """{"atol", "rtol"} for outputs that are sums of `terms` products, given sum_k |a_k b_k|
    for every output (a float64 tensor): the bound in this file's docstring."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    mag = abs_products.max().item() if abs_products.numel() else 0.0
    atol = sum_bound(mag, terms, acc=acc) * (2 if dtype == torch.float64 else 1)
    return {"atol": atol, "rtol": 4 * torch.finfo(dtype).eps / 2}


def forward_tol(A, B, bias, dtype):
    A64, B64, b64 = float64((A, B, bias))
    return sum_tol(A64.abs() @ B64.abs() + b64.abs(), A.shape[1] + 1, dtype)


def check_forward(impl, ref, A, B, bias, *, what="Y = relu(A @ B + bias)", **ctx):
    dtype = A.dtype
    Y = call_checked(impl.linear_relu, A, B, bias, names=NAMES)
    want = ref.reference(*float64((A, B, bias)))
    check.assert_close(Y, want, tol=forward_tol(A, B, bias, dtype), dtype=dtype, what=what,
                       MNK=(A.shape[0], B.shape[1], A.shape[1]), **ctx)
    return Y


def away_from_kink(A, B, bias, dY):
    """dY with zeros where float32 rounding could flip the ReLU's mask (|Z| within 8 bounds)."""
    A64, B64, b64 = float64((A, B, bias))
    Z = A64 @ B64 + b64
    margin = 8 * forward_tol(A, B, bias, torch.float32)["atol"]
    return torch.where(Z.abs() < margin, torch.zeros_like(dY), dY)


def check_backward(impl, ref, A, B, bias, dY, **ctx):
    """dA, dB, dbias against float64 autograd through the reference, each with its sum bound."""
    dtype = A.dtype
    dY = away_from_kink(A, B, bias, dY)
    _, (dA, dB, db) = value_and_grads(impl.linear_relu, A, B, bias, wrt=(0, 1, 2), dy=dY)
    _, (dA64, dB64, db64) = expected_grads(ref.reference, A, B, bias, wrt=(0, 1, 2), dy=dY)
    A64, B64, b64, dY64 = float64((A, B, bias, dY))
    dZ = (dY64 * (A64 @ B64 + b64 > 0)).abs()
    M, K = A.shape
    N = B.shape[1]
    mnk = (M, N, K)
    check.assert_close(dA, dA64, tol=sum_tol(dZ @ B64.abs().t(), N, dtype), dtype=dtype,
                       what="dA = dZ @ B.T (dZ = dY * (Y > 0))", MNK=mnk, **ctx)
    check.assert_close(dB, dB64, tol=sum_tol(A64.abs().t() @ dZ, M, dtype), dtype=dtype,
                       what="dB = A.T @ dZ (dZ = dY * (Y > 0))", MNK=mnk, **ctx)
    check.assert_close(db, db64, tol=sum_tol(dZ.sum(0), M, dtype), dtype=dtype,
                       what="dbias = dZ summed over rows", MNK=mnk, **ctx)


# --- the epilogue: bias per column ---------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 200, 5), (2, 129, 1)], ids=str)
def test_bias_is_per_column(impl, ref, device, shape):
    """Y[m, n] = relu(sum_k A[m, k] B[k, n] + bias[n]): bias broadcast over the rows.

    Small A @ B, large distinct biases: Y ~ bias[n] down every column. M < N here, so a bias
    indexed by the row (bias[m]) reads real, wrong values instead of running off its end.
    """
    M, N, K = shape
    A, B, _ = make_inputs(shape, seed=3, dtype=torch.float32, device=device)
    A = A * 1e-2
    bias = torch.linspace(-3.0, 5.0, N, dtype=torch.float32, device=device)
    try:
        check_forward(impl, ref, A, B, bias, what="Y with bias[n] = linspace(-3, 5, N)")
    except Mismatch as e:
        raise Mismatch(f"{e}\n  the bias is per column: Y[m, n] adds bias[n] (n = the output "
                       f"column), broadcast down the M rows; bias[m] or a bias read with the "
                       f"row's stride gives exactly this") from None


# --- values and gradients --------------------------------------------------------------------------

@given(data=st.data(), dtype=st.sampled_from(DTYPES), seed=seeds)
def test_forward_matches_reference(impl, ref, device, data, dtype, seed):
    shape = draw_shape(data, device)
    A, B, bias = make_inputs(shape, seed=seed, dtype=dtype, device=device)
    check_forward(impl, ref, A, B, bias, seed=seed)


@pytest.mark.backward
@given(data=st.data(), dtype=st.sampled_from(DTYPES), seed=seeds)
def test_backward_matches_reference(impl, ref, device, data, dtype, seed):
    shape = draw_shape(data, device)
    A, B, bias = make_inputs(shape, seed=seed, dtype=dtype, device=device)
    dY = randn((shape[0], shape[1]), seed=seed + 3, dtype=dtype, device=device)
    check_backward(impl, ref, A, B, bias, dY, seed=seed)


# (M, N, K): vectors, single elements, tile edges, tails in every dimension. Both lists have
# the same length, so that check i runs one shape on either device (none is skipped).
SHAPES = {
    "cpu": [(1, 1, 1), (1, 160, 37), (48, 1, 300), (17, 33, 1), (13, 7, 1031), (32, 128, 256),
            (31, 129, 127), (2, 3, 1000), (48, 160, 1), (5, 17, 1031)],
    "cuda": [(1, 1, 1), (1, 4096, 1000), (4096, 1, 1001), (1000, 1001, 1), (127, 129, 4093),
             (128, 128, 128), (129, 257, 255), (1031, 1000, 1001), (2048, 2048, 8),
             (3, 5, 20000)],
}


assert len(SHAPES["cpu"]) == len(SHAPES["cuda"])


@pytest.mark.backward
@pytest.mark.parametrize("i", range(len(SHAPES["cuda"])))
def test_awkward_shapes(impl, ref, device, i):
    """Forward and backward at sizes that are not tile multiples: 1, primes, one off 128, 1000-odd."""
    shape = SHAPES[device][i]
    A, B, bias = make_inputs(shape, seed=100 + i, dtype=torch.float32, device=device)
    check_forward(impl, ref, A, B, bias)
    dY = randn(shape[:2], seed=200 + i, dtype=torch.float32, device=device)
    check_backward(impl, ref, A, B, bias, dY)


@pytest.mark.parametrize("K", [1, 2, 3, 5, 7, 9, 12, 15, 17, 20, 100, 1001])
def test_k_tails(impl, ref, device, K):
    """K not a multiple of the K tile: the last tile is partly outside A and B.

    Outside the matrix the staged tile must hold zeros. Skipping the load instead (the seed's
    sketch) leaves the previous tile's values in shared memory or registers, and the last tile
    adds them a second time.
    """
    M, N = (64, 96) if device == "cpu" else (256, 384)
    A, B, bias = make_inputs((M, N, K), seed=K, dtype=torch.float32, device=device)
    try:
        check_forward(impl, ref, A, B, bias, what=f"Y with K = {K}")
    except Mismatch as e:
        raise Mismatch(f"{e}\n  with K = {K} the last K tile reaches past A's columns and B's "
                       f"rows: stage zeros there (if k < K load, else 0), never skip the "
                       f"load") from None


def test_many_tiles(impl, ref, device):
    """Large products: hundreds of blocks and K tiles, so a missing barrier between tiles (a warp
    overwriting a tile another warp still reads) has every chance to show."""
    shapes = [(256, 192, 1024)] if device == "cpu" else [(2048, 2048, 1024), (1024, 3072, 2048)]
    for i, shape in enumerate(shapes):
        A, B, bias = make_inputs(shape, seed=300 + i, dtype=torch.float32, device=device)
        try:
            check_forward(impl, ref, A, B, bias)
        except Mismatch as e:
            raise Mismatch(f"{e}\n  scattered wrong values in a large product are the mark of a "
                           f"race on shared memory: __syncthreads() after the tile is stored "
                           f"(before anyone reads it) and before it is overwritten") from None


@pytest.mark.backward
def test_relu_mask_in_backward(impl, ref, device):
    """dY = 1 everywhere: dbias[n] then counts the rows where Y[m, n] > 0, and dA, dB are
    wrong wherever the mask is forgotten (about half the entries here)."""
    shape = (37, 53, 29)
    A, B, bias = make_inputs(shape, seed=41, dtype=torch.float32, device=device)
    dY = torch.ones(shape[:2], dtype=torch.float32, device=device)
    try:
        check_backward(impl, ref, A, B, bias, dY)
    except Mismatch as e:
        raise Mismatch(f"{e}\n  the gradient flows only where the ReLU passed its input: "
                       f"dZ = dY * (Y > 0) (or Z > 0), then dA = dZ @ B.T, dB = A.T @ dZ, "
                       f"dbias = dZ.sum(0)") from None


def test_long_k(impl, ref, device):
    """A long sum (K = 4099 on the CPU, 65537 on a GPU): accumulate in float32 registers, and
    the error stays within the sqrt(K) bound."""
    shape = (8, 8, 4099) if device == "cpu" else (64, 96, 65537)
    A, B, bias = make_inputs(shape, seed=51, dtype=torch.float32, device=device)
    check_forward(impl, ref, A, B, bias)


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape", [(3, 2, 2), (1, 3, 2), (2, 1, 3), (2, 2, 1), (6, 5, 7)], ids=str)
def test_gradcheck(impl, ref, device, shape):
    """torch.autograd.gradcheck in float64 for A, B and bias (inputs chosen with |Z| >= 0.05,
    away from the kink). The full Jacobian on tiny shapes; a projection of it (fast mode) on
    the larger one (grader.judge.gradcheck.FULL_JACOBIAN_MAX)."""
    for seed in range(60, 200):
        A, B, bias = make_inputs(shape, seed=seed, dtype=torch.float64, device=device)
        if float((A @ B + bias).abs().min()) > 0.05:
            break
    args = tuple(t.clone().requires_grad_() for t in (A, B, bias))
    gradcheck_checked(impl.linear_relu, args, names=("A", "B", "bias"), reference=ref.reference,
                      eps=1e-6, atol=1e-6, rtol=1e-5,
                      hint="with dZ = dY * (Z > 0): dA = dZ @ Bᵀ, dB = Aᵀ @ dZ, dbias = the sum "
                           "of dZ over rows")


# --- layouts --------------------------------------------------------------------------------------

def misaligned(t):
    """A contiguous copy of t starting one element into a fresh allocation (not 16-byte aligned)."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    flat[1:] = t.reshape(-1)
    return flat[1:].view(t.shape)


def test_misaligned_inputs(impl, ref, device):
    """Sizes that allow 16-byte loads, pointers that do not: fall back to narrower loads."""
    shape = (64, 128, 96)
    A, B, bias = make_inputs(shape, seed=61, dtype=torch.float32, device=device)
    for name, args in (("A", (misaligned(A), B, bias)), ("B", (A, misaligned(B), bias)),
                       ("bias", (A, B, misaligned(bias)))):
        check_forward(impl, ref, *args, misaligned=name)


LAYOUTS = ["A transposed view", "B transposed view", "both transposed", "A every other column",
           "B rows sliced"]


@pytest.mark.backward
@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_inputs_handled_or_refused(impl, ref, device, layout):
    """Views that are not contiguous: the right answer (read through the strides, or copied) or
    a refusal naming the argument. A.t()-style views cost nothing to read in place: the
    backward itself multiplies by B.t() and A.t()."""
    M, N, K = 40, 72, 56
    A, B, bias = make_inputs((M, N, K), seed=71, dtype=torch.float32, device=device)
    if "A transposed" in layout or "both" in layout:
        A = A.t().contiguous().t()
    if "B transposed" in layout or "both" in layout:
        B = B.t().contiguous().t()
    if layout == "A every other column":
        A = torch.stack([A, A], dim=2).reshape(M, 2 * K)[:, ::2]
    if layout == "B rows sliced":
        B = torch.cat([B, B], dim=1)[:, :N]
    argument = "B" if layout.startswith("B") else "A"
    try:
        check_forward(impl, ref, A, B, bias, layout=layout)
        dY = randn((M, N), seed=72, dtype=torch.float32, device=device)
        check_backward(impl, ref, A, B, bias, dY, layout=layout)
    except (RuntimeError, ValueError) as e:
        if isinstance(e, Mismatch) or "not implemented yet" in str(e) or \
                not names_argument(str(e), argument):
            raise


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device):
    """A, B and bias in turn, each as a strided view and as a view one element into its memory,
    the others dense: the right Y, or a strided view refused naming it. Forward only."""
    mnk = (9, 40, 33)
    A, B, bias = make_inputs(mnk, seed=51, dtype=torch.float32, device=device)
    want, tol = ref.reference(*float64((A, B, bias))), forward_tol(A, B, bias, torch.float32)

    def compare(outs):
        check.assert_close(outs[0], want, tol=tol, dtype=torch.float32,
                           what="Y = relu(A @ B + bias)", MNK=mnk)
    _views(impl.linear_relu, (A, B, bias), NAMES, compare, seed=51)


# --- refused inputs -------------------------------------------------------------------------------

def test_refuses_shape_mismatch(impl, device):
    A = randn((5, 7), seed=1, dtype=torch.float32, device=device)
    B = randn((7, 3), seed=2, dtype=torch.float32, device=device)
    bias = randn(3, seed=3, dtype=torch.float32, device=device)
    impl.linear_relu(A, B, bias)  # a stub fails here, with its own message
    expect_refusal(impl.linear_relu, A, randn((6, 3), seed=2, dtype=torch.float32, device=device),
                   bias, argument="B")
    expect_refusal(impl.linear_relu, A, randn(7, seed=2, dtype=torch.float32, device=device),
                   bias, argument="B")
    expect_refusal(impl.linear_relu, A, B, randn(4, seed=3, dtype=torch.float32, device=device),
                   argument="bias")
    expect_refusal(impl.linear_relu, A, B,
                   randn((1, 3), seed=3, dtype=torch.float32, device=device), argument="bias")
    expect_refusal(impl.linear_relu, randn(7, seed=1, dtype=torch.float32, device=device), B,
                   bias, argument="A")


def test_refuses_wrong_dtype(impl, device):
    A = randn((5, 7), seed=1, dtype=torch.float32, device=device)
    B = randn((7, 3), seed=2, dtype=torch.float32, device=device)
    bias = randn(3, seed=3, dtype=torch.float32, device=device)
    impl.linear_relu(A, B, bias)
    expect_refusal(impl.linear_relu, A.half(), B.half(), bias.half(), argument="A")
    expect_refusal(impl.linear_relu, A.bfloat16(), B, bias, argument="A")
    expect_refusal(impl.linear_relu, A, B.double(), bias, argument="B")
    expect_refusal(impl.linear_relu, A, B, bias.double(), argument="bias")
    expect_refusal(impl.linear_relu, A.to(torch.int32), B.to(torch.int32), bias.to(torch.int32),
                   argument="A")


def test_refuses_other_device(impl, device):
    A = randn((5, 7), seed=1, dtype=torch.float32, device=device)
    B = randn((7, 3), seed=2, dtype=torch.float32, device=device)
    bias = randn(3, seed=3, dtype=torch.float32, device=device)
    impl.linear_relu(A, B, bias)
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: a second device to put B and bias on")
    other = "cpu" if device == "cuda" else "cuda"
    expect_refusal(impl.linear_relu, A, B.to(other), bias, argument="B")
    expect_refusal(impl.linear_relu, A, B, bias.to(other), argument="bias")


# --- a second call on the same buffers, new values in between (the shared check) ----------------

def test_new_contents_same_shapes(impl, ref, device):
    """Called twice on the same buffers, new values written into A, B and bias in between: Y
    right both times (a result kept from the first call, by shape or by pointer, is wrong the
    second time)."""
    mnk = (9, 40, 33)
    A, B, bias = make_inputs(mnk, seed=111, dtype=torch.float32, device=device)

    def compare(outs, want):
        check.assert_close(outs[0], want[0], tol=want[1], dtype=torch.float32,
                           what="Y = relu(A @ B + bias)", MNK=mnk)
    new_contents_same_shapes(
        impl.linear_relu, (A, B, bias), NAMES,
        lambda a: (ref.reference(*float64(a)), forward_tol(*a, torch.float32)), compare, seed=112)


# --- registration: opcheck, torch.compile --------------------------------------------------------

@pytest.mark.backward
def test_opcheck(impl, track, device):
    """torch.library.opcheck of the three ops: schema, fake kernels, autograd, AOT dispatch."""
    A, B, bias = make_inputs((9, 12, 20), seed=81, dtype=torch.float32, device=device)
    impl.linear_relu(A, B, bias)
    grad = lambda *ts: tuple(t.clone().requires_grad_() for t in ts)
    Y = impl.linear_relu(A, B, bias)
    dY = randn(Y.shape, seed=82, dtype=torch.float32, device=device)
    opcheck_samples(impl, track, device, "ex11_cuda::linear_relu", [
        ((A, B, bias), None), (grad(A, B, bias), None), ((A, *grad(B, bias)), None),
        (float64((A, B, bias)), None), ((A[:1], B, bias), None)])
    opcheck_samples(impl, track, device, "ex11_cuda::matmul", [
        ((A, B), None), ((Y, B.t()), None), ((A.t(), Y), None), ((A[:, :1], B[:1]), None)])
    opcheck_samples(impl, track, device, "ex11_cuda::relu_grad_colsum", [
        ((dY, Y), None), (float64((dY, Y)), None)])


@pytest.mark.backward
def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of two linear_relu layers: no graph break; values and all
    five gradients match float64."""
    x, B1, b1 = make_inputs((16, 24, 32), seed=91, dtype=torch.float32, device=device)
    _, B2, b2 = make_inputs((16, 8, 24), seed=94, dtype=torch.float32, device=device)
    dY = randn((16, 8), seed=97, dtype=torch.float32, device=device)
    args = (x, B1, b1, B2, b2)
    impl.linear_relu(x, B1, b1)  # a stub fails here, with its own message
    outs, grads = expected_grads(ref.two_layers(ref.reference), *args, wrt=range(5), dy=dY)
    compiled_matches(impl, track, device, "linear_relu", args, expected=outs + grads,
                     tol={"atol": 1e-4, "rtol": 1e-4}, wrap="two_layers", wrt=tuple(range(5)),
                     dy=dY, names=["compiled output", "dx", "dB1", "dbias1", "dB2", "dbias2"])
