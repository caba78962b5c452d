"""Checks for exercise 12 (matmul_tc), for both tracks. Run through the grader: `make exercise-12`.

The expectation is the reference (reference.py) evaluated in float64 on the same 16-bit input
values: the op is held to the exact math, accumulated in fp32 and rounded once. Two measures:

- the relative error of the whole output, ||out - ref|| / ||ref||, within 2 units of roundoff
  of the output dtype (REL_BOUND): rounding each element once to the nearest bf16 / fp16 gives
  at most 1 unit (2^-8 / 2^-11) element by element, so at most 1 unit on the norm; fp32
  accumulation adds ~sqrt(K) 2^-24, nothing at these sizes. Accumulating in 16 bits, or
  rounding A @ B to 16 bits before the bias and the activation, goes past it;
- and element by element (exercise.toml's tolerance) on the same small shapes, which shows
  *where* an output is wrong (a column tail, a row, the K tail) when it is.

Shapes are awkward on purpose: M, N, K not multiples of any tile, K = 1, M = 1. A track may
refuse K or N that are not multiples of 8 (TMA moves 16-byte aligned rows), with a message
naming the argument (A or K, B or N); everything else must work.
"""

import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument, within
from grader.judge.strategies import FP16_MAX, past_fp16, randn, seeds
from grader.judge.testing import compiled_matches, new_contents_same_shapes, opcheck_samples

DTYPES = [torch.bfloat16, torch.float16]
ACTS = ["none", "relu", "gelu_tanh"]
# unit roundoff of the output dtype: |round(x) - x| <= u |x|
UNIT = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
REL_BOUND = {dt: 2 * u for dt, u in UNIT.items()}  # 7.8e-3 (bf16), 9.8e-4 (fp16)
AWKWARD_SMALL = (1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 100)
AWKWARD_GPU = AWKWARD_SMALL + (127, 128, 129, 255, 256, 257, 1000, 1023, 1025)


def _sizes(device, *, k: bool = False):
    """Awkward sizes always; random ones up to 1024 (2048 for K) on a GPU, 96 (160) on the CPU."""
    hi = (2048 if k else 1024) if device == "cuda" else (160 if k else 96)
    fixed = [s for s in (AWKWARD_GPU if device == "cuda" else AWKWARD_SMALL) if s <= hi]
    return st.one_of(st.sampled_from(fixed), st.integers(1, hi))


def _inputs(M, N, K, seed, dtype, device, bias_scale=1.0):
    """A @ B is O(1) whatever K (B scaled by K^-1/2, as a Linear layer's init), bias O(1)."""
    A = randn((M, K), seed=seed, dtype=dtype, device=device)
    B = randn((K, N), seed=seed + 1, dtype=dtype, device=device, scale=K ** -0.5)
    bias = randn((N,), seed=seed + 2, dtype=dtype, device=device, scale=bias_scale)
    return A, B, bias


def _may_refuse(K, N):
    """Which arguments a refusal may name for this shape (TMA's 16-byte rows), else ()."""
    names = ()
    if K % 8:
        names += ("A", "K")
    if N % 8:
        names += ("B", "N")
    return names


def _call(impl, A, B, bias, act, *, may_refuse=()):
    """impl.matmul_act, checked (inputs unchanged, output fresh); None if it refused an input
    that the exercise allows refusing (may_refuse: the names the message must contain)."""
    try:
        return call_checked(impl.matmul_act, A, B, bias, act, names=("A", "B", "bias", "act"))
    except (RuntimeError, ValueError, TypeError) as e:
        msg = str(e)
        if "not implemented yet" in msg or not may_refuse:
            raise
        if any(names_argument(msg, a) for a in may_refuse):
            return None
        raise Mismatch(f"the input was refused, but the message names none of "
                       f"{', '.join(may_refuse)}: {msg.splitlines()[0] if msg else type(e)}")


def _expected(ref, A, B, bias, act):
    return ref.reference(A.double(), B.double(), bias.double(), act)


def _relative_error_within(got, want, dtype, **ctx):
    """||got - want|| / ||want|| <= REL_BOUND[dtype] (see the module docstring)."""
    g = got.detach().double()
    if not bool(torch.isfinite(g).all()):
        return  # the elementwise check says where the NaN/inf are, with a likely cause
    err = (g - want).norm().item()
    scale = want.norm().item()
    rel = err / scale if scale > 0 else err
    within(rel, REL_BOUND[dtype], what="||out - ref|| / ||ref|| =", **ctx,
           why=f"2 units of roundoff of {str(dtype).removeprefix('torch.')}.\n  Rounding each "
               f"output once gives at most 1 unit: accumulate A @ B in float32 (tl.dot's "
               f"accumulator / ElementAccumulator = float), add the bias and apply the "
               f"activation in float32, and cast only when storing")


def _check_output(got, want, dtype, assert_close, **ctx):
    try:
        _relative_error_within(got, want, dtype, **ctx)
    except Mismatch as norm:
        # the normwise verdict stands; the elementwise report says where and the likely cause
        try:
            assert_close(got, want, dtype=dtype, **ctx)
        except Mismatch as where:
            raise Mismatch(f"{norm}\n{where}") from None
        raise
    assert_close(got, want, dtype=dtype, **ctx)


# --- values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(data=st.data(), act=st.sampled_from(ACTS), seed=seeds)
def test_matches_reference(impl, ref, track, device, assert_close, dtype, data, act, seed):
    M = data.draw(_sizes(device), label="M")
    N = data.draw(_sizes(device), label="N")
    K = data.draw(_sizes(device, k=True), label="K")
    A, B, bias = _inputs(M, N, K, seed, dtype, device)
    out = _call(impl, A, B, bias, act, may_refuse=_may_refuse(K, N))
    if out is None:  # refused K or N not a multiple of 8, naming the argument (allowed): the
        # same example at the next multiples of 8, so that every example checks values (most
        # draws have one unaligned: a TMA track would otherwise be checked on few, or none)
        K, N = K + -K % 8, N + -N % 8
        A, B, bias = _inputs(M, N, K, seed, dtype, device)
        out = _call(impl, A, B, bias, act)
    _check_output(out, _expected(ref, A, B, bias, act), dtype, assert_close,
                  shape=(M, N, K), act=act, seed=seed)


EDGE_SHAPES = [(1, 1, 1), (1, 64, 64), (64, 1, 64), (64, 64, 1), (1, 8, 8), (3, 5, 7),
               (17, 33, 65), (65, 17, 16), (33, 129, 8)]
EDGE_SHAPES_GPU = [(1, 4096, 4096), (4096, 8, 256), (129, 257, 1000), (1000, 1000, 1000),
                   (2048, 2056, 2040), (300, 384, 12288)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_edge_shapes(impl, ref, track, device, assert_close, dtype):
    """M = 1 (decode), N = 1, K = 1, one past a tile, and (GPU) sizes with a ragged last tile."""
    shapes = EDGE_SHAPES + (EDGE_SHAPES_GPU if device == "cuda" else [])
    for i, (M, N, K) in enumerate(shapes):
        A, B, bias = _inputs(M, N, K, 300 + i, dtype, device)
        for act in ACTS:
            out = _call(impl, A, B, bias, act, may_refuse=_may_refuse(K, N))
            if out is not None:
                _check_output(out, _expected(ref, A, B, bias, act), dtype, assert_close,
                              shape=(M, N, K), act=act)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_k_tail_reads_nothing_past_k(impl, ref, track, device, assert_close, dtype):
    """A and B are views into bigger buffers whose extra columns / rows hold 1000s: a K loop
    whose last step reads past K (a missing or wrong mask on the K tail) picks them up."""
    M, N, pad = 24, 40, 264  # pad: more than any BLOCK_K, and a multiple of 8
    for i, K in enumerate((1, 7, 24, 33, 100, 200)):
        A, B, bias = _inputs(M, N, K, 400 + i, dtype, device)
        bigA = torch.full((M, K + pad), 1000.0, dtype=dtype, device=device)
        bigB = torch.full((K + pad, N), 1000.0, dtype=dtype, device=device)
        bigA[:, :K] = A
        bigB[:K] = B
        Av, Bv = bigA[:, :K], bigB[:K]  # A's rows are K + pad apart; B's rows end at K
        out = _call(impl, Av, Bv, bias, "relu", may_refuse=_may_refuse(K, N) + ("A",))
        if out is None:
            continue
        try:
            _check_output(out, _expected(ref, A, B, bias, "relu"), dtype, assert_close,
                          shape=(M, N, K), A="a view with row stride K + 264")
        except Mismatch as e:
            raise Mismatch(f"{e}\n  The values past K in each row of A and past row K of B are "
                           f"1000 here: the last K step must mask (or never load) k >= K") from None


def test_partial_sums_beyond_fp16_range(impl, ref, track, device, assert_close):
    """float16: the first half of each dot product sums to ~ +83000, the second half cancels it.
    Every input and the result fit in float16 (max 65504); the running sum does not: a float16
    accumulator overflows to inf. float32 accumulation is exact enough."""
    M, N, K = 16, 24, 2048
    A, B, bias = _inputs(M, N, K, 500, torch.float16, device)
    sign = torch.ones(K, dtype=torch.float64, device=device)
    sign[K // 2:] = -1
    A = (9.0 * sign + 4.0 * randn((M, K), seed=501, dtype=torch.float64, device=device)
         ).to(torch.float16)
    B = (9.0 + 0.5 * randn((K, N), seed=502, dtype=torch.float64, device=device)
         ).to(torch.float16)
    want = _expected(ref, A, B, bias, "none")
    assert float(want.abs().max()) < 60000, "the test's own values must fit in float16"
    out = _call(impl, A, B, bias, "none")
    if not bool(torch.isfinite(out).all()):
        raise Mismatch(f"{int((~torch.isfinite(out)).sum())} of {out.numel()} outputs are inf/"
                       f"NaN although every input and the exact result fit in float16: the "
                       f"running sum passes 65504 halfway through K. Accumulate in float32 "
                       f"(tl.zeros(..., dtype=tl.float32) / ElementAccumulator = float)")
    _relative_error_within(out, want, torch.float16, shape=(M, N, K))


@pytest.mark.parametrize("act", ACTS)
def test_outputs_beyond_fp16_range(impl, ref, track, device, assert_close, act):
    """bfloat16 outputs past fp16's largest number (65504), as bf16 holds up to 3.4e38: a bias
    of 1e5-3e5 in magnitude (random signs) and A @ B ~ 1e4 around it. A kernel that takes the
    result through fp16 (a cast, an fp16 epilogue or store) writes inf there. The bounds are the
    usual ones, relative to the values (each output rounded once to bf16: 2^-9 of it; fp32 sums
    of 65 terms of up to ~3e5: ~1e-6 of it, the bias dominating A @ B)."""
    M, N, K = 33, 48, 64  # test_activation_sees_the_bias's shape: no new Triton specialization
    A, B, _ = _inputs(M, N, K, 750, torch.bfloat16, device)
    B = (B.double() * 1e4).to(torch.bfloat16)  # A @ B ~ N(0, 1e4^2)
    bias = past_fp16((N,), seed=751, device=device, lo=1e5)
    before = _expected(ref, A, B, bias, "none")  # the check's own values, before the activation
    assert float(before.abs().min()) > 1e4 and float((before.abs() > FP16_MAX).double().mean()) \
        > 0.9, "the test's own values: past fp16's range, far from 0"
    out = _call(impl, A, B, bias, act)
    if not bool(torch.isfinite(out).all()):
        raise Mismatch(f"{int((~torch.isfinite(out)).sum())} of {out.numel()} bfloat16 outputs "
                       f"are inf/NaN where the exact results (up to "
                       f"{float(before.abs().max()):.3g} in magnitude) fit in bfloat16 but not "
                       f"in float16 (at most {FP16_MAX:g}) (act={act}): the result went through "
                       f"float16. Keep the accumulator and the epilogue in float32 and cast once, "
                       f"to the output's dtype (A's)")
    _check_output(out, _expected(ref, A, B, bias, act), torch.bfloat16, assert_close, act=act,
                  bias="1e5-3e5 in magnitude")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_long_k(impl, ref, track, device, assert_close, dtype):
    """A long sum: K = 1024 on the CPU, 65536 on a GPU (fp32 accumulation stays within 2 units
    of the output's roundoff; a 16-bit running sum does not)."""
    M, N, K = (16, 16, 1024) if device == "cpu" else (256, 256, 65536)
    A, B, bias = _inputs(M, N, K, 600, dtype, device, bias_scale=0.0)
    out = _call(impl, A, B, bias, "none")
    _check_output(out, _expected(ref, A, B, bias, "none"), dtype, assert_close, shape=(M, N, K))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_activation_sees_the_bias(impl, ref, track, device, assert_close, dtype):
    """bias of +-3 against A @ B of size ~1: act(A @ B + bias) and act(A @ B) + bias differ in
    most elements, and gelu_tanh is checked on both tails (-3: ~0, +3: ~x)."""
    M, N, K = 33, 48, 64
    A, B, _ = _inputs(M, N, K, 700, dtype, device)
    bias = (3.0 * torch.where(torch.arange(N, device=device) % 2 == 0, 1.0, -1.0)).to(dtype)
    for act in ACTS:
        out = _call(impl, A, B, bias, act)
        try:
            _check_output(out, _expected(ref, A, B, bias, act), dtype, assert_close, act=act,
                          bias="+3 / -3 alternating")
        except Mismatch as e:
            why = ("the epilogue order is act(acc + bias): add the bias before the activation"
                   if act != "none" else
                   "with act='none' the order cannot matter: is bias[n] added to column n (not "
                   "bias[m] to row m), once?")
            raise Mismatch(f"{e}\n  {why}") from None


def test_output_dtype_shape_and_device(impl, track, device):
    dtype = torch.float16
    A, B, bias = _inputs(5, 16, 24, 800, dtype, device)
    out = _call(impl, A, B, bias, "relu")
    if out.dtype != dtype or tuple(out.shape) != (5, 16) or out.device != A.device:
        raise Mismatch(f"the output must be [M, N] = [5, 16] in A's dtype on A's device, got "
                       f"{tuple(out.shape)} {out.dtype} on {out.device}")


def test_transposed_b_handled_or_refused(impl, ref, track, device, assert_close):
    """B given as W.t() (a Linear layer's weight, N-by-K in memory): handled, or refused naming
    B (a kernel that assumes B's rows are contiguous must say so, not return garbage)."""
    M, N, K = 16, 40, 48
    A, _, bias = _inputs(M, N, K, 900, torch.float16, device)
    W = randn((N, K), seed=901, dtype=torch.float16, device=device, scale=K ** -0.5)
    out = _call(impl, A, W.t(), bias, "none", may_refuse=("B",))
    if out is not None:
        _check_output(out, _expected(ref, A, W.t(), bias, "none"), torch.float16, assert_close,
                      B="W.t() (column-major)")


def test_strided_bias_handled_or_refused(impl, ref, track, device, assert_close):
    """bias as every other element of a longer vector: handled (its stride), or refused naming
    bias; never read as if it were contiguous."""
    M, N, K = 16, 40, 32
    A, B, _ = _inputs(M, N, K, 950, torch.float16, device)
    bias = randn((2 * N,), seed=951, dtype=torch.float16, device=device)[::2]
    out = _call(impl, A, B, bias, "relu", may_refuse=("bias",))
    if out is not None:
        _check_output(out, _expected(ref, A, B, bias, "relu"), torch.float16, assert_close,
                      bias="a view with stride 2")


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, track, device, assert_close):
    """A, B and bias in turn, each as a strided view and as a view one element into its memory,
    the others dense: the right C, or a refusal naming that argument. The shape's K and N are
    multiples of 8, so only the view can be refused; and here a view one element in may be
    refused too (naming it): TMA (the CUTLASS kernel) needs 16-byte aligned base addresses."""
    M, N, K = 16, 40, 32
    dtype = torch.float16
    A, B, bias = _inputs(M, N, K, 51, dtype, device)
    want = _expected(ref, A, B, bias, "relu")
    _views(impl.matmul_act, (A, B, bias, "relu"), ("A", "B", "bias", "act"),
           lambda outs: _check_output(outs[0], want, dtype, assert_close, shape=(M, N, K),
                                      act="relu"),
           seed=51, refuse_offset=True)


# --- refused inputs ----------------------------------------------------------------------------

def test_refuses_bad_inputs(impl, device):
    f16 = torch.float16
    A, B, bias = _inputs(8, 16, 32, 1000, f16, device)
    impl.matmul_act(A, B, bias, "relu")  # a stub fails here, with its own message
    expect_refusal(impl.matmul_act, A, B[:24], bias, "relu", argument="B")  # K mismatch
    expect_refusal(impl.matmul_act, A, B, bias[:8], "relu", argument="bias")
    expect_refusal(impl.matmul_act, A, B, bias.view(1, 16), "relu", argument="bias")
    expect_refusal(impl.matmul_act, A.float(), B.float(), bias.float(), "relu", argument="A")
    expect_refusal(impl.matmul_act, A, B.to(torch.bfloat16), bias, "relu", argument="B")
    expect_refusal(impl.matmul_act, A, B, bias.to(torch.bfloat16), "relu", argument="bias")
    expect_refusal(impl.matmul_act, A.view(2, 4, 32), B, bias, "relu", argument="A")
    expect_refusal(impl.matmul_act, A, B, bias, "tanh", argument="act")


def test_refuses_inputs_on_another_device(impl, device):
    A, B, bias = _inputs(8, 16, 32, 1001, torch.float16, device)
    impl.matmul_act(A, B, bias, "none")  # a stub fails here
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: a second device to put B on")
    other = "cpu" if device == "cuda" else "cuda"
    expect_refusal(impl.matmul_act, A, B.to(other), bias, "none", argument="B")
    expect_refusal(impl.matmul_act, A, B, bias.to(other), "none", argument="bias")


# --- a second call on the same buffers, new values in between (the shared check) ----------------

def test_new_contents_same_shapes(impl, ref, track, device, assert_close):
    """Called twice on the same buffers, new values written into A, B and bias in between: C
    right both times (a result kept from the first call, by shape or by pointer, is wrong the
    second time)."""
    M, N, K = 33, 40, 48  # multiples of 8 where TMA needs them: nothing may be refused
    dtype = torch.bfloat16
    A, B, bias = _inputs(M, N, K, 121, dtype, device)
    new_contents_same_shapes(
        impl.matmul_act, (A, B, bias, "relu"), ("A", "B", "bias", "act"),
        lambda a: _expected(ref, a[0], a[1], a[2], "relu"),
        lambda outs, want: _check_output(outs[0], want, dtype, assert_close, shape=(M, N, K),
                                         act="relu"),
        seed=122)


# --- registration: opcheck, torch.compile ------------------------------------------------------

def test_opcheck(impl, track, device):
    """torch.library.opcheck of ex12_<track>::matmul_act: schema, fake kernel, AOT dispatch."""
    A, B, bias = _inputs(16, 24, 32, 1100, torch.float16, device)
    impl.matmul_act(A, B, bias, "relu")  # a stub fails here, with its own message
    samples = []
    for dtype in DTYPES:
        for (M, N, K), act in (((16, 24, 32), "relu"), ((1, 8, 64), "gelu_tanh"),
                               ((37, 40, 16), "none")):
            A, B, bias = _inputs(M, N, K, 1101, dtype, device)
            samples.append(((A, B, bias, act), None))
    opcheck_samples(impl, track, device, f"ex12_{track.name}::matmul_act", samples)


def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of Linear -> matmul_act(gelu_tanh) -> Linear: no graph
    break, and the values of the float64 reference (within the rounding of the 16-bit Linears)."""
    dtype = torch.float16
    x = randn((8, 64), seed=1200, dtype=dtype, device=device)
    w1 = randn((64, 64), seed=1201, dtype=dtype, device=device, scale=0.125)
    B = randn((64, 48), seed=1202, dtype=dtype, device=device, scale=0.125)
    bias = randn((48,), seed=1203, dtype=dtype, device=device)
    w2 = randn((32, 48), seed=1204, dtype=dtype, device=device, scale=48 ** -0.5)
    args = (x, w1, B, bias, w2)
    impl.matmul_act(x, B, bias, "relu")  # a stub fails here, with its own message
    want = ref.small_model(ref.reference)(*[a.double() for a in args])
    compiled_matches(impl, track, device, "matmul_act", args, expected=[want],
                     tol={"atol": 1e-2, "rtol": 1e-2}, wrap="small_model",
                     names=["Linear -> matmul_act -> Linear, compiled"])
