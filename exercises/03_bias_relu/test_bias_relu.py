"""Checks for exercise 03 (bias_relu). Run through the grader: `python -m grader grade --exercise 03`.

Every check runs twice: on "cuda" (your kernels; reported as "needs a GPU" on a machine without
one) and on "cpu" (your C++ CPU path). Expected values come from reference.py in float64:
forward values from reference(x.double(), ...), gradients from float64 autograd through it.

Gradients are checked away from the kink z = x*scale + bias = 0, where relu has no derivative:
next to it a float32 rounding of z may land on the other side than the float64 reference does,
and the check would test luck, not your code.
"""
import math

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, assert_close as compare, call_checked, expect_refusal, names_argument
from grader.judge.strategies import dtypes, matrices, randn, seeds

DTYPES = ["float32", "float16", "bfloat16", "float64"]
SCALES = (2.0, 1.0, 0.5, 0.3, -1.5, -0.7)   # fractional, negative; 0.3 is not a power of two
NAMES = ("x", "bias", "scale")


# --- helpers -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tolerance(exercise):
    """This exercise's {dtype name: {"atol", "rtol"}} (short to print in a failing example)."""
    return exercise.tolerance


def make_inputs(shape, *, seed, dtype, device, scale, margin=None):
    """x [M, N] ~ N(0, 1) and bias [N] ~ N(0, 0.25); with `margin`, no |z| below it."""
    x = randn(shape, seed=seed, dtype=dtype, device=device)
    bias = randn(shape[1], seed=seed + 1, dtype=dtype, device=device, scale=0.5)
    if margin is not None:
        x = away_from_kink(x, bias, scale, margin)
    return x, bias


def away_from_kink(x, bias, scale, margin):
    """Move the elements whose |z| < margin to z ~ +-1 (on the side they were on)."""
    b64 = bias.double()
    z = x.double() * scale + b64
    near = z.abs() < margin
    if bool(near.any()):
        side = torch.where(z >= 0, 1.0, -1.0)
        x = torch.where(near, (side - b64) / scale, x.double()).to(x.dtype)
        assert bool(((x.double() * scale + b64).abs() >= margin).all())
    return x


def misaligned(t):
    """A contiguous copy of t starting one element into a fresh (16-byte aligned) allocation."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    flat[1:] = t.reshape(-1)
    return flat[1:].view(t.shape)


def expected_f64(ref, x, bias, scale, grad_y):
    """y, grad_x, grad_bias and the terms grad_y * (z > 0) that grad_bias sums, all in float64."""
    x64 = x.detach().double().requires_grad_(True)
    b64 = bias.detach().double().requires_grad_(True)
    y64 = ref.reference(x64, b64, scale)
    g64 = grad_y.detach().double()
    y64.backward(g64)
    terms = g64 * (x64.detach() * scale + b64.detach() > 0)
    return y64.detach(), x64.grad, b64.grad, terms


def check_grad_bias(got, expected, terms, *, tolerance, dtype, **ctx):
    """grad_bias against float64, with a bound that grows with the number of rows M summed.

    grad_bias[j] adds M terms. In a float32 accumulator (float64 for float64) each addition
    rounds by up to half a unit of the running sum; those errors behave like a random walk, so
    the total grows like u * sqrt(M) * ||terms[:, j]||_2 (u = 2^-24 for float32). With the 4x
    headroom below that is ~7e-4 for M = 4096 and unit-normal grad_y: 70x float32's default
    atol of 1e-5, which a plain float32 loop over 20000 rows misses by 20x. Any summation order
    (one loop, per-block partials, a tree) fits under it. For fp16/bf16 the M-dependent part
    hardly matters: storing the sum rounds it once more, relative to its size, and the dtype's
    rtol covers that. Accumulating in fp16/bf16 itself (u = 2^-11 / 2^-8) does not fit, which
    is the point.
    """
    base = tolerance[str(dtype).removeprefix("torch.")]
    u = 2.0 ** -53 if dtype == torch.float64 else 2.0 ** -24
    rows = terms.shape[0]
    spread = terms.pow(2).sum(0).sqrt().max().item() if terms.numel() else 0.0
    tol = {"atol": base["atol"] + 4 * u * math.sqrt(rows) * spread, "rtol": base["rtol"]}
    compare(got, expected, tol=tol, dtype=dtype, what="grad of bias", **ctx)


def differentiable(y, what="bias_relu(x, bias, scale)"):
    """y must carry a grad_fn when its inputs require grad."""
    if not isinstance(y, torch.Tensor) or y.grad_fn is None:
        raise Mismatch(f"{what} with inputs that require grad returned a tensor without grad_fn: "
                       f"return BiasReLUFunction.apply(...), not bias_relu_ext.forward(...)")
    return y


def run_backward(impl, x, bias, scale, grad_y):
    """Our y, x.grad and bias.grad for `grad_y` (left unchanged: checked)."""
    xr = x.detach().clone().requires_grad_(True)
    br = bias.detach().clone().requires_grad_(True)
    y = differentiable(impl.bias_relu(xr, br, scale))
    before = grad_y.clone()
    y.backward(grad_y)
    if not torch.equal(grad_y, before):
        raise Mismatch("backward modified grad_output: write grad_x to a new tensor")
    for name, t in (("x", xr), ("bias", br)):
        if t.grad is None:
            raise Mismatch(f"{name}.grad is None after backward: BiasReLUFunction.backward must "
                           f"return (grad_x, grad_bias, None), in the order of forward's inputs")
    return y.detach(), xr.grad, br.grad


def check_values_and_grads(impl, ref, assert_close, tolerance, shape, *, seed, dtype, device,
                           scale):
    x, bias = make_inputs(shape, seed=seed, dtype=dtype, device=device, scale=scale, margin=1e-3)
    grad_y = randn(shape, seed=seed + 2, dtype=dtype, device=device)
    y64, gx64, gb64, terms = expected_f64(ref, x, bias, scale, grad_y)
    y, gx, gb = run_backward(impl, x, bias, scale, grad_y)
    ctx = dict(shape=shape, scale=scale, seed=seed)
    assert_close(y, y64, dtype=dtype, what="y", **ctx)
    assert_close(gx, gx64, dtype=dtype, what="grad of x", **ctx)
    check_grad_bias(gb, gb64, terms, tolerance=tolerance, dtype=dtype, **ctx)


# --- forward values ----------------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), scale=st.sampled_from(SCALES + (0.0,)), seed=seeds)
def test_forward_matches_reference(impl, ref, device, assert_close, data, dtype, scale, seed):
    shape = data.draw(matrices(device), label="(M, N)")
    x, bias = make_inputs(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    y = call_checked(impl.bias_relu, x, bias, scale, names=NAMES)
    assert_close(y, ref.reference(x.double(), bias.double(), scale), dtype=dtype, shape=shape,
                 scale=scale, seed=seed)


# --- backward values ---------------------------------------------------------------------------

@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), scale=st.sampled_from(SCALES), seed=seeds)
def test_backward_matches_reference(impl, ref, tolerance, device, assert_close, data, dtype, scale,
                                    seed):
    shape = data.draw(matrices(device), label="(M, N)")
    check_values_and_grads(impl, ref, assert_close, tolerance, shape, seed=seed, dtype=dtype,
                           device=device, scale=scale)


@pytest.mark.backward
def test_awkward_shapes(impl, ref, tolerance, device, assert_close):
    """One column, one row, primes, N not a multiple of 4 or 8 (no whole 16-byte vectors), and
    on the GPU large M (many rows per thread, many partial sums) and very long rows."""
    shapes = [(1, 1), (1, 4097), (4097, 1), (3, 7), (7, 3), (129, 1031), (2, 5003), (33, 1024)]
    if device == "cuda":
        shapes += [(65537, 3), (1 << 20, 1), (3, (1 << 20) + 5), (8193, 1025), (2048, 8192),
                   (30011, 776)]
    for i, shape in enumerate(shapes):
        for dtype in (torch.float32, torch.bfloat16):
            check_values_and_grads(impl, ref, assert_close, tolerance, shape, seed=100 + i,
                                   dtype=dtype, device=device, scale=-1.5 if i % 2 else 2.0)


@pytest.mark.backward
@pytest.mark.parametrize("how", ["y.sum().backward()", "transposed grad_y"])
def test_backward_with_strided_grad_output(impl, ref, tolerance, device, assert_close, how):
    """Autograd hands backward whatever gradient it has: y.sum().backward() passes ones expanded
    to [M, N] with strides (0, 0); a transposed gradient has strides (1, M). Neither is dense."""
    shape = (37, 1000) if device == "cpu" else (4099, 1000)
    scale = 1.5
    x, bias = make_inputs(shape, seed=7, dtype=torch.float32, device=device, scale=scale,
                          margin=1e-3)
    xr, br = x.clone().requires_grad_(True), bias.clone().requires_grad_(True)
    y = differentiable(impl.bias_relu(xr, br, scale))
    if how == "y.sum().backward()":
        y.sum().backward()
        grad_y = torch.ones(shape, device=device)
    else:
        grad_y = randn(shape[::-1], seed=8, dtype=torch.float32, device=device).t()
        y.backward(grad_y)
    _, gx64, gb64, terms = expected_f64(ref, x, bias, scale, grad_y)
    hint = dict(how=how, shape=shape)
    for name, t in (("x", xr), ("bias", br)):
        if t.grad is None:
            raise Mismatch(f"{name}.grad is None after {how}")
    assert_close(xr.grad, gx64, dtype=torch.float32, what="grad of x", **hint)
    check_grad_bias(br.grad, gb64, terms, tolerance=tolerance, dtype=torch.float32, **hint)


@pytest.mark.gradcheck
@pytest.mark.parametrize("shape,scale", [((3, 5), 2.0), ((1, 7), -0.5), ((6, 1), 1.5),
                                         ((4, 33), 0.3), ((9, 16), -2.0)])
def test_gradcheck(impl, ref, device, shape, scale):
    """torch.autograd.gradcheck in float64: your backward against finite differences of your
    forward. Inputs stay 0.1 away from the kink, far beyond gradcheck's eps = 1e-6 steps."""
    x, bias = make_inputs(shape, seed=11, dtype=torch.float64, device=device, scale=scale,
                          margin=0.1)
    x.requires_grad_(True)
    bias.requires_grad_(True)
    gradcheck_checked(lambda a, b: impl.bias_relu(a, b, scale), (x, bias), names=("x", "bias"),
                      reference=lambda a, b: ref.reference(a, b, scale), eps=1e-6, atol=1e-7,
                      rtol=1e-5, hint="grad_x = grad_y * (y > 0) * scale; grad_bias = the sum "
                                      "over rows of grad_y * (y > 0): no scale there")


# --- the nn.Module -----------------------------------------------------------------------------

def test_module_holds_bias_as_parameter(impl, device, assert_close, ref):
    """BiasReLU is an nn.Module holding its bias as a Parameter (built where the track runs:
    reference.module_report)."""
    bias = randn(24, seed=3, dtype=torch.float32, device="cpu")
    x = randn((5, 24), seed=4, dtype=torch.float32, device="cpu")
    rep = impl.run("module_report", device, bias, x)
    if not rep["bias_is_parameter"] or rep["bias_shape"] != (24,):
        raise Mismatch(f"BiasReLU(24, scale=1.5) must hold its bias as nn.Parameter of shape (24,) "
                       f"named `bias` (self.bias = nn.Parameter(torch.zeros(features))), so that "
                       f"optimizers, state_dict and .to() see it; parameters found: "
                       f"{rep['params']}")
    if not rep["scale_is_float_1_5"]:
        raise Mismatch(f"BiasReLU(24, scale=1.5).scale must be the float 1.5, got {rep['scale']}")
    if "bias" not in rep["state_dict_keys"]:
        raise Mismatch("state_dict() has no `bias`: register it as an nn.Parameter")
    after = rep["after_to"]
    if not after["is_parameter"] or after["device"] != device:
        raise Mismatch(f"after .to({device!r}) the bias is {after['type']} on {after['device']}: "
                       f"keep it an nn.Parameter so that .to() moves it")
    expected = ref.reference(x.to(device).double(), bias.to(device).double(), 1.5)
    assert_close(rep["y"], expected, dtype=torch.float32, what="BiasReLU(x)")
    assert_close(rep["y_twin"], expected, dtype=torch.float32,
                 what="BiasReLU(x) after load_state_dict")
    assert_close(rep["y64"], expected, dtype=torch.float64, what="BiasReLU.double()(x)")


@pytest.mark.backward
def test_module_in_sequential_trains_its_bias(impl, device, ref):
    """nn.Linear -> BiasReLU in nn.Sequential, built on the CPU and moved with .to(device)
    (reference.sequential_report). Small integers everywhere make every product and sum exact in
    float32 (and in TF32), and put every z at least 0.25 from the kink, so the gradients can be
    checked exactly."""
    B, K, N, scale = 16, 12, 24, 0.5
    g = torch.Generator().manual_seed(5)
    ints = lambda *shape: torch.randint(-2, 3, shape, generator=g).float()
    w, b_lin, x, grad_y = ints(N, K), ints(N), ints(B, K), ints(B, N) + 0.5
    bias = ints(N) * 0.5 + 0.25  # h * scale is a multiple of 0.5, so |z| >= 0.25
    rep = impl.run("sequential_report", device, w, b_lin, bias, x, grad_y, scale)
    if not rep["requires_grad"]:
        raise Mismatch("nn.Sequential(nn.Linear, BiasReLU)(x) does not require grad: is the "
                       "output made by BiasReLUFunction.apply?")
    # the same network, in float64 with the reference
    w64, bl64, bias64 = (t.double().requires_grad_(True) for t in (w, b_lin, bias))
    out64 = ref.reference(x.double() @ w64.T + bl64, bias64, scale)
    out64.backward(grad_y.double())
    exact = {"atol": 1e-6, "rtol": 1e-6}
    compare(rep["out"], out64.detach().to(device), tol=exact, what="model(x)")
    if rep["bias_grad"] is None:
        raise Mismatch("the BiasReLU bias got no gradient inside nn.Sequential: is the output "
                       "made by BiasReLUFunction.apply, and does backward return grad_bias?")
    compare(rep["bias_grad"], bias64.grad.to(device), tol=exact, what="grad of BiasReLU.bias")
    if rep["weight_grad"] is None:
        raise Mismatch("nn.Linear before BiasReLU got no gradient: backward must return grad_x")
    compare(rep["weight_grad"], w64.grad.to(device), tol=exact, what="grad of Linear.weight")
    compare(rep["lin_bias_grad"], bl64.grad.to(device), tol=exact, what="grad of Linear.bias")


# --- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(24,), (2, 3, 24)])
def test_refuses_x_not_2d(impl, device, shape):
    x = randn(shape, seed=1, dtype=torch.float32, device=device)
    bias = randn(24, seed=2, dtype=torch.float32, device=device)
    expect_refusal(impl.bias_relu, x, bias, 2.0, argument="x")


def test_refuses_integer_x(impl, device):
    x = torch.arange(-12, 12, device=device, dtype=torch.int32).reshape(2, 12)
    bias = torch.ones(12, device=device, dtype=torch.int32)
    expect_refusal(impl.bias_relu, x, bias, 2.0, argument="x")


@pytest.mark.parametrize("bias_shape", [(25,), (23,), (1, 24), ()])
def test_refuses_bias_of_wrong_shape(impl, device, bias_shape):
    x = randn((4, 24), seed=1, dtype=torch.float32, device=device)
    bias = randn(bias_shape, seed=2, dtype=torch.float32, device=device)
    expect_refusal(impl.bias_relu, x, bias, 2.0, argument="bias")


def test_refuses_bias_on_another_device(impl, device):
    # on the CPU, "another device" is the meta device: tensors with a shape and no data
    other = "cpu" if device == "cuda" else "meta"
    x = randn((4, 24), seed=1, dtype=torch.float32, device=device)
    bias = randn(24, seed=2, dtype=torch.float32, device="cpu").to(other)
    expect_refusal(impl.bias_relu, x, bias, 2.0, argument="bias")


@pytest.mark.parametrize("bias_dtype", [torch.float16, torch.float64])
def test_refuses_bias_of_another_dtype(impl, device, bias_dtype):
    x = randn((4, 24), seed=1, dtype=torch.float32, device=device)
    bias = randn(24, seed=2, dtype=bias_dtype, device=device)
    expect_refusal(impl.bias_relu, x, bias, 2.0, argument="bias")


# --- layouts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["x.t()", "x[:, ::2]", "bias[::2]"])
def test_strided_inputs_handled_or_refused(impl, ref, device, assert_close, layout):
    """A strided view must give the right answer or be refused with a message naming it."""
    M, N = (37, 29) if device == "cpu" else (1025, 1031)
    if layout == "x.t()":
        x = randn((N, M), seed=1, dtype=torch.float32, device=device).t()
    elif layout == "x[:, ::2]":
        x = randn((M, 2 * N), seed=1, dtype=torch.float32, device=device)[:, ::2]
    else:
        x = randn((M, N), seed=1, dtype=torch.float32, device=device)
    if layout == "bias[::2]":
        bias = randn(2 * N, seed=2, dtype=torch.float32, device=device)[::2]
    else:
        bias = randn(N, seed=2, dtype=torch.float32, device=device)
    argument = layout[:layout.index("[") if "[" in layout else layout.index(".")]
    try:
        y = call_checked(impl.bias_relu, x, bias, -0.7, names=NAMES)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), argument):
            raise
        return  # refused, naming the argument: fine
    assert_close(y, ref.reference(x.double(), bias.double(), -0.7), dtype=torch.float32,
                 layout=layout)


@pytest.mark.backward
def test_empty_batch(impl, device):
    """M = 0 rows: y is [0, N], and grad_bias, a sum over no rows, is zeros (not unwritten)."""
    x = torch.empty((0, 24), device=device, requires_grad=True)
    bias = randn(24, seed=2, dtype=torch.float32, device=device).requires_grad_(True)
    y = differentiable(impl.bias_relu(x, bias, 2.0))
    if tuple(y.shape) != (0, 24):
        raise Mismatch(f"bias_relu of a [0, 24] x returned shape {tuple(y.shape)}")
    y.sum().backward()
    if bias.grad is None or not torch.equal(bias.grad, torch.zeros_like(bias)):
        raise Mismatch(f"with M = 0 rows grad_bias must be zeros (a sum over no rows), got "
                       f"{None if bias.grad is None else bias.grad[:5].tolist()}...: allocate it "
                       f"with zeros, or skip the kernels and fill it, when M == 0")
    if x.grad is None or tuple(x.grad.shape) != (0, 24):
        raise Mismatch("with M = 0 rows x.grad must be an empty [0, 24] tensor")


@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_misaligned_views(impl, ref, tolerance, device, assert_close, dtype):
    """x = flat[1:].view(M, N) is contiguous, but starts one element past a 16-byte boundary
    (as any row slice x[1:] does when N is odd): a 16-byte vector load there faults with
    "misaligned address". N = 64 is a multiple of every vector width, so only the pointer
    check can send these to the narrow path. Same for bias and for grad_y."""
    M, N, scale = 33, 64, 2.0
    x, bias = make_inputs((M, N), seed=1, dtype=dtype, device=device, scale=scale, margin=1e-3)
    x, bias = misaligned(x), misaligned(bias)
    grad_y = misaligned(randn((M, N), seed=3, dtype=dtype, device=device))
    y = call_checked(impl.bias_relu, x, bias, scale, names=NAMES)
    y64, gx64, gb64, terms = expected_f64(ref, x, bias, scale, grad_y)
    assert_close(y, y64, dtype=dtype, what="y", case="misaligned x and bias")
    _, gx, gb = run_backward(impl, x, bias, scale, grad_y)
    assert_close(gx, gx64, dtype=dtype, what="grad of x", case="misaligned grad_y")
    check_grad_bias(gb, gb64, terms, tolerance=tolerance, dtype=dtype, case="misaligned grad_y")


# Last: an implementation with 32-bit offsets faults here, and a fault ends the CUDA context
# (and every check after it).
@pytest.mark.backward
def test_more_than_2_31_elements(impl, ref, tolerance, assert_close):
    """2^31 + 4096 elements in fp16 (4.3 GB a tensor): r * N overflows a 32-bit int on the last
    rows, so offsets must be int64. Checks the last rows and the column sums over all rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    free, _ = torch.cuda.mem_get_info()
    if free < 24e9:
        pytest.skip("needs a GPU with 24 GB free (4 tensors of 4.3 GB, and temporaries)")
    M, N, scale, dtype = (1 << 19) + 1, 4096, 2.0, torch.float16
    g = torch.Generator(device="cuda").manual_seed(9)
    # No away_from_kink here (it would need float64 copies of 2^31 elements). None is needed:
    # with scale = 2 and fp16 inputs, z = 2x + b is a multiple of 2^-24 that float32 holds
    # exactly, so its sign matches float64, and y = relu(z) rounds to 0 in fp16 only where z = 0.
    x = torch.randn(M, N, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
    bias = torch.randn(N, device="cuda", dtype=dtype, generator=g).requires_grad_(True)
    grad_y = torch.randn(M, N, device="cuda", dtype=dtype, generator=g)
    tail = slice(M - 3, M)
    y = differentiable(impl.bias_relu(x, bias, scale))
    y64, gx64, _, _ = expected_f64(ref, x[tail], bias, scale, grad_y[tail])
    assert_close(y.detach()[tail], y64, dtype=dtype, what="y, last 3 rows", shape=(M, N))
    y.backward(grad_y)
    del y
    if x.grad is None or bias.grad is None:
        raise Mismatch("x.grad or bias.grad is None after backward")
    assert_close(x.grad[tail], gx64, dtype=dtype, what="grad of x, last 3 rows", shape=(M, N))
    x.grad = None
    gb64 = torch.zeros(N, device="cuda", dtype=torch.float64)
    sq = torch.zeros(N, device="cuda", dtype=torch.float64)
    b64 = bias.detach().double()
    for start in range(0, M, 1 << 15):
        rows = slice(start, min(start + (1 << 15), M))
        t = grad_y[rows].double() * (x.detach()[rows].double() * scale + b64 > 0)
        gb64 += t.sum(0)
        sq += t.pow(2).sum(0)
        del t
    # check_grad_bias's bound, from the column norms summed above
    u, base = 2.0 ** -24, tolerance["float16"]
    tol = {"atol": base["atol"] + 4 * u * math.sqrt(M) * sq.sqrt().max().item(),
           "rtol": base["rtol"]}
    compare(bias.grad, gb64, tol=tol, dtype=dtype, what="grad of bias over 2^19 + 1 rows")


# --- layouts and repeated calls (the shared checks: grader.judge.strategies.each_view) -----------------
from grader.judge.testing import new_contents_same_shapes as _twice, views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, device, assert_close):
    """Each tensor argument in turn as a strided view and as a view one element into its
    memory, the others dense: the right values, or a strided view refused naming it. Forward
    only: no backward is needed."""
    x = randn((7, 131), seed=51, dtype=torch.float32, device=device)
    bias = randn(131, seed=51 + 1, dtype=torch.float32, device=device)
    want = (lambda a: (ref.reference(a[0].double(), a[1].double(), a[2]),))((x, bias, 0.7))

    def compare(outs):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _views(impl.bias_relu, (x, bias, 0.7), ("x", "bias", "scale"), compare, seed=51)


def test_new_contents_same_shapes(impl, ref, device, assert_close):
    """Called twice with inputs of the same shapes, new values the second time: both right."""
    x = randn((7, 131), seed=61, dtype=torch.float32, device=device)
    bias = randn(131, seed=61 + 1, dtype=torch.float32, device=device)

    def compare(outs, want):
        for got, w in zip(outs, want):
            assert_close(got, w, dtype=torch.float32)
    _twice(impl.bias_relu, (x, bias, 0.7), ("x", "bias", "scale"), lambda a: (ref.reference(a[0].double(), a[1].double(), a[2]),), compare, seed=71)
