"""Checks for exercise 13 (flash_attention). Run through the grader: `make exercise-13`.

Every expectation is the reference (reference.py: the S x S softmax written out) evaluated in
float64 on the same input values and differentiated by PyTorch's autograd. The submission is
reached only through `impl.flash_attention(q, k, v, causal, scale)`.

How close is close: each output element is a weighted sum of up to S terms, and the 16-bit
kernels round P (and dS) to the input dtype before their matmuls, as every FlashAttention does.
Measured against the RMS of its (batch, head) slice that error does not grow with S (on an
H200, 2026-11-26, bf16: normwise 2.0-2.5e-3 for o, dq, dk, dv at S from 333 to 16384,
benchmarks/flash_attention.py --check). So each element is held to
atol x max(RMS(slice), FLOOR) x (1 + log2(S) / 8) + rtol x |expected| (the log term: fp32 sums
of S terms in another order; the floor: where the exact gradient is 0, as dq and dk at S = 1,
rounding still leaves ~1e-7 of the inputs' scale), and the whole tensor to a normwise bound of a
few units of the dtype. Where an element sums a few large terms (the first keys' dk and dv under
a causal mask) its rounding error is larger than the slice's RMS: there the root-sum-square of
its terms replaces the RMS (_terms).
"""
import functools
import math

import pytest
import torch
from hypothesis import assume, given, strategies as st

from grader.judge import check, probes
from grader.judge.gradcheck import gradcheck_checked
from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import (FP16_MAX, dtypes, exp_limit, in_this_share, randn,
                                     seeds)
from grader.judge.testing import (compiled_matches, expected_grads, kept_per_call,
                            new_contents_same_shapes, on_interpreter, opcheck_samples,
                            value_and_grads)

DTYPES = ["float32", "float16", "bfloat16"]
NAMES = ("o", "dq", "dk", "dv")
# ||got - expected|| / ||expected||: measured 2.0-2.5e-3 (bf16), 2.4-3.1e-4 (fp16), 1.9-3.2e-7
# (fp32), 6-9e-16 (fp64) on an H200 (see the top); about 4x that
# (fp32 allowed more: inputs of scale 4-7 make the softmax sharper, and its conditioning worse:
# 2.3e-6 seen on the CPU interpreter; tf32 products would give ~1e-3)
NORMWISE = {torch.bfloat16: 1e-2, torch.float16: 1.5e-3, torch.float32: 1e-5,
            torch.float64: 1e-12}
MAX_SUBTRACTION = ("\n  softmax(s) = exp(s - m) / sum(exp(s - m)) with m the running row max: "
                   "exp of a raw score overflows (exp(89) is inf in float32); the online softmax "
                   "rescales acc and l by exp(m_old - m_new) whenever the max grows")


def _inputs(shape, seed, dtype, device, scale=1.0):
    q = randn(shape, seed=seed, dtype=dtype, device=device, scale=scale)
    k = randn(shape, seed=seed + 1, dtype=dtype, device=device, scale=scale)
    v = randn(shape, seed=seed + 2, dtype=dtype, device=device)
    do = randn(shape, seed=seed + 3, dtype=dtype, device=device)
    return q, k, v, do


def _run(impl, q, k, v, do, causal, scale=None):
    """(o, dq, dk, dv) of the submission."""
    (o,), grads = value_and_grads(lambda a, b, c: impl.flash_attention(a, b, c, causal, scale),
                                  q, k, v, wrt=(0, 1, 2), dy=do)
    return (o,) + grads


class _Expected(tuple):
    """(o, dq, dk, dv) in float64, with `terms`: each element's root-sum-square of the terms
    summed into it (_terms), the scale of its rounding error, computed when first read (S x S
    in float64 again: a check that reads only norms never pays it)."""
    inputs: tuple = ()

    @functools.cached_property
    def terms(self) -> tuple:
        return _terms(*self.inputs)


def _expected(ref, q, k, v, do, causal, scale=None):
    (o,), grads = expected_grads(lambda a, b, c: ref.reference(a, b, c, causal, scale),
                                 q, k, v, wrt=(0, 1, 2), dy=do)
    want = _Expected((o,) + grads)
    want.inputs = (q, k, v, do, causal, scale)
    return want


def _terms(q, k, v, do, causal, scale=None):
    """Per element of (o, dq, dk, dv), in float64: sqrt(sum over the terms of its sum of
    term^2), the sums being o = P v, dv = Pᵀ dO, dq = scale dS k and dk = scale dSᵀ q with
    dS = P (dO vᵀ - delta). A 16-bit kernel rounds P and dS to the dtype before those matmuls
    (every FlashAttention does): each term carries a relative error of ~2^-8 (bf16), random in
    sign, so an element's error grows with this root-sum-square, not with its own value. Where
    the weights are spread, it is about the RMS of the slice; where a few weights are large (the
    first keys under a causal mask, summed over every later query with P up to 1/2) it is
    several times the RMS: a float64 emulation of those roundings (B 2, H 4, S 1000, D 128,
    causal, bf16) put dk 1.1x over an RMS-scaled bound there, and an H200 grade saw the same.

    One more rounding: delta = rowsum(dO ∘ O) reads O as the forward stored it, in the dtype
    (FlashAttention's preprocessing step). Its error, one per query row, shifts every dS of the
    row by P delta's error, so dq_i by scale (P k)_i times it, and dk_j by a sum over i of
    P_ij q_i times it: terms of size rowsum-square(dO ∘ O) (P k)_i and P_ij q_i. Early causal
    rows see few keys, so (P k)_i does not average out: an H200 grade (bf16, B 2, H 3, S 333,
    D 128) saw a correct dq 0.0149 off at query 1 against a bound of 0.0087 without these terms,
    and a float64 emulation with O rounded to bf16 gives the same 0.0149."""
    qd, kd, vd, dod = (t.double() for t in (q, k, v, do))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (qd @ kd.transpose(-2, -1)) * scale
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    p = torch.softmax(s, dim=-1)
    del s
    do_o = dod * (p @ vd)  # delta's terms: delta = rowsum(dO ∘ O)
    delta2 = do_o.square().sum(-1, keepdim=True)  # their sum of squares, per row
    dq_delta2 = (p @ kd).square_().mul_(delta2)
    ds2 = (dod @ vd.transpose(-2, -1)).sub_(do_o.sum(-1, keepdim=True)).mul_(p)
    ds2.square_()
    p.square_()  # P² from here on: one S x S matrix at a time besides dS²
    dk_delta2 = p.transpose(-2, -1) @ (qd.square() * delta2)
    return ((p @ vd.square()).sqrt_(),
            (ds2 @ kd.square()).add_(dq_delta2).sqrt_().mul_(scale),
            (ds2.transpose(-2, -1) @ qd.square()).add_(dk_delta2).sqrt_().mul_(scale),
            (p.transpose(-2, -1) @ dod.square()).sqrt_())


# Where the exact gradient is 0 (dq and dk at S = 1: softmax over one key), what is left is the
# rounding of dP - delta (two sums of D products of O(1) inputs, ~D x 2^-24 ~ 4e-6 in fp32),
# times the scale and |k|: up to ~1e-6 on unit-scale inputs, 0.05 of fp32's atol of 2e-5 (on an
# H200, 2026-11-26, a correct fp32 dq was 4.4e-7 off there, over a floor of 0.02). So a slice's
# scale is floored at 0.1 of the inputs' unit scale.
FLOOR = 0.1


def _close(exercise, got, want, dtype, *, what=NAMES, loose=1.0, **ctx):
    """Each of got (o, dq, dk, dv) against the float64 expectation: elementwise (atol scaled by
    the RMS of each (batch, head) slice and growing with log S), then normwise; `loose` widens
    both where the math itself is ill-conditioned."""
    tol = {k: v * loose for k, v in exercise.tolerance[str(dtype).removeprefix("torch.")].items()}
    S = want[0].shape[-2]
    grow = 1 + math.log2(max(S, 1)) / 8
    terms = getattr(want, "terms", None) or (None,) * len(want)
    for name, g, w, t in zip(what, got, want, terms):
        w64 = w.double()
        rms = w64.pow(2).mean(dim=(-2, -1), keepdim=True).sqrt().clamp_min(FLOOR)
        scale, said = rms, "the RMS of its (batch, head) slice"
        if t is not None:
            scale = torch.maximum(rms, t)
            said = f"the larger of {said} and the root-sum-square of the terms summed into it"
        check.assert_close(g, w64, tol=tol, dtype=dtype, what=name,
                           atol_scale=(scale * grow, f"{said} x {grow:.2f}"), **ctx)
        if w64.norm() > 0:  # an all-zero expectation: the elementwise bound said it all
            check.within(((g.double() - w64).norm() / w64.norm()).item(),
                         NORMWISE[dtype] * loose, what=f"{name}: normwise relative error",
                         why="every element is within its own bound, but the whole is less "
                             "accurate than rounding P to the dtype once gives. Accumulate every "
                             "matmul and every running sum in float32 (dq too: README: The "
                             "backward)", **ctx)


def _attend(q, k, v, scale, diagonal=None):
    """softmax(scale q kᵀ) v in float64, query i seeing key j where j <= i + diagonal (None:
    every key): the reference (diagonal 0 is causal) and the variants the probes compare with."""
    s = (q.double() @ k.double().transpose(-2, -1)) * scale
    if diagonal is not None:
        S = q.shape[-2]
        hidden = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(diagonal + 1)
        s = s.masked_fill(hidden, float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def _o_close(exercise, o, want, **ctx):
    _close(exercise, (o,), (want,), o.dtype, what=("o",), **ctx)


PROBE_S = 100  # the probes' sequences: several key blocks (16 to 128 keys), the last partial


def _probe_inputs(device, shift=0.0, peak=None):
    """q, k, v (float32, [1, 1, PROBE_S, 64]) whose scores are every score shifted by `shift`,
    or (`peak`: "first" or "last") one key that every query scores 8, the others ~N(0, 1)."""
    q, k, v, _ = _inputs((1, 1, PROBE_S, 64), 210, torch.float32, device)
    q[..., 0], k[..., 0] = 1.0, shift * 8.0  # the scale is 1/8: feature 0 adds `shift` to scores
    if peak is not None:
        at = 0 if peak == "first" else PROBE_S - 1
        k[..., at, :] = 0.0
        k[..., at, 0] = 64.0
    return q, k, v


def _forward_probes(impl, exercise, device, q, k, v, o, causal):
    """What a wrong o can have as a cause, each confirmed on the op (grader.judge.probes): the
    scale twice or missing, the causal diagonal off by one, a missing online rescale, the max not
    subtracted, masked keys scored 0, 16-bit arithmetic."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    diagonal = 0 if causal else None
    check_o = lambda got, want: _o_close(exercise, got, want)
    run = lambda a, b, c: impl.flash_attention(a, b, c, causal, None)
    reference = lambda a, b, c: _attend(a, b, c, scale, diagonal)
    verify = lambda a, b, c: check_o(run(a, b, c), reference(a, b, c))
    plain = lambda a, b, c: check_o(impl.flash_attention(a, b, c, False, None),
                                    _attend(a, b, c, 0.125))
    found = [probes.scale(o, check_o, lambda s: _attend(q, k, v, s, diagonal), scale)]
    if causal:
        mask = "keep key j for query i where j <= i, both in absolute positions (start_n + j, " \
               "start_m + i)"
        found.append(probes.variants(o, check_o, [
            ("causal attention where each query also sees the key after it",
             lambda: _attend(q, k, v, scale, 1), f"the causal mask lets a key past the query "
                                                 f"through: {mask}")]))
        # hiding its own key leaves the first query no key at all: its row is whatever the
        # kernel makes of an empty softmax (0/0 is NaN on a GPU), so rows 1.. are compared
        # (S = 1: no such row, no evidence either way)
        if q.shape[-2] > 1:
            found.append(probes.variants(o[..., 1:, :], check_o, [
                ("causal attention where each query sees the keys before it but not itself "
                 "(the first row aside)", lambda: _attend(q, k, v, scale, -1)[..., 1:, :],
                 f"the causal mask hides the query's own key (> where >= belongs): {mask}")]))
    return found + [
        probes.online_rescale(plain, lambda where: _probe_inputs(device, peak=where)),
        probes.max_subtracted(plain, lambda shift: _probe_inputs(device, shift=shift)),
        probes.max_neutral(plain, lambda sign: _probe_inputs(device, shift=16.0 * sign)),
        probes.sixteen_bit(run, reference, verify, (q, k, v)),
    ]


def _shape(data, device):
    """[B, H, S, D]: S awkward (around a block, past it), D in {64, 128}. Triton compiles a new
    kernel for an integer argument equal to 1 or a multiple of 16: S and H (both kernel
    arguments) are drawn from the values that are neither, so the examples cost one compile per
    dtype, D and causal, not one each; S = 1 and S a multiple of the blocks are
    test_awkward_lengths' cases, H = 1 test_gradcheck's, test_long_sequences' and
    test_causal_mask_position's."""
    if device == "cuda":
        S = data.draw(st.sampled_from([7, 63, 65, 127, 129, 200, 333, 1000]), label="S")
        B, H = data.draw(st.integers(1, 3), label="B"), data.draw(st.integers(2, 4), label="H")
    else:  # the interpreter: tiny
        S = data.draw(st.sampled_from([1, 5, 16, 17, 33]), label="S")
        B, H = data.draw(st.integers(1, 2), label="B"), 1
    D = data.draw(st.sampled_from([64, 128]), label="D")
    return (B, H, S, D)


# --- values and gradients ----------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, causal=st.booleans())
def test_forward_matches_reference(impl, ref, exercise, device, data, dtype, seed, causal):
    """o alone, no gradients: the forward stage (the checks marked `backward` wait for it)."""
    shape = _shape(data, device)
    q, k, v, _ = _inputs(shape, seed, dtype, device)
    o = call_checked(impl.flash_attention, q, k, v, causal, None, names=("q", "k", "v"))
    with probes.explained(*_forward_probes(impl, exercise, device, q, k, v, o, causal)):
        _o_close(exercise, o, ref.reference(q.double(), k.double(), v.double(), causal, None),
                 shape=shape, causal=causal, seed=seed)


# The backward's classes of examples: its three kernels compile once for each. A track checked
# in shares (exercise.toml: shards) draws each class's examples in one share only.
CLASSES = [(getattr(torch, d), D, c) for d in DTYPES for D in (64, 128) for c in (False, True)]
# The forward's, by dtype and causal (its given arguments; D is drawn inside): split by the
# grader (grader.judge.strategies.split_by_declared_class), not by a line in the check, whose
# source draws its 6 fixed examples in the project's tests (they catch its known-bads)
SHARE_BY = {"test_forward_matches_reference": (
    lambda dtype, causal, **_: (dtype, causal),
    [(getattr(torch, d), c) for d in DTYPES for c in (False, True)])}


@pytest.mark.backward
@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds, causal=st.booleans())
def test_backward_matches_reference(impl, ref, exercise, device, data, dtype, seed, causal):
    shape = _shape(data, device)
    assume(in_this_share((dtype, shape[3], causal), CLASSES))
    q, k, v, do = _inputs(shape, seed, dtype, device)
    call_checked(impl.flash_attention, q, k, v, causal, None, names=("q", "k", "v"))
    _close(exercise, _run(impl, q, k, v, do, causal), _expected(ref, q, k, v, do, causal),
           dtype, shape=shape, causal=causal, seed=seed)


@pytest.mark.backward
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S", [1, 15, 17, 64, 100, 128], ids=lambda s: f"S={s}")
def test_awkward_lengths(impl, ref, exercise, device, S, causal):
    """S = 1 (one key: P = 1, dq = dk = 0), S not a multiple of any block, S < D, and S a whole
    number of blocks (64, 128: no partial block at all)."""
    def verify_at(n):
        shape = (1, 2, n, 128 if n in (100, 128) else 64)
        q, k, v, do = _inputs(shape, 40 + n, torch.float16, device)
        _close(exercise, _run(impl, q, k, v, do, causal), _expected(ref, q, k, v, do, causal),
               torch.float16, shape=shape, causal=causal)
    with probes.explained(probes.partial_block(verify_at, S, (64, 128)), hint_on_evidence=True):
        verify_at(S)


@pytest.mark.backward
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_long_sequences(impl, ref, exercise, device, causal):
    """Many key blocks per query block: the online softmax's rescaling, and the long sums; on a
    GPU also whole blocks at D 128 in bf16 (S = 1024), the case a Hopper fast path takes (the
    solution's Gluon forward), which the drawn lengths never reach."""
    shapes = [(1, 2, 2048, 64), (1, 1, 4097, 128), (1, 2, 1024, 128)] if device == "cuda" \
        else [(1, 1, 200, 64)]
    for i, shape in enumerate(shapes):
        q, k, v, do = _inputs(shape, 60 + i, torch.bfloat16, device)
        _close(exercise, _run(impl, q, k, v, do, causal), _expected(ref, q, k, v, do, causal),
               torch.bfloat16, shape=shape, causal=causal)


@pytest.mark.backward
def test_explicit_scale(impl, ref, exercise, device):
    shape = (1, 2, 33, 64)
    q, k, v, do = _inputs(shape, 70, torch.float32, device)
    for scale in (0.05, 1.0):
        _close(exercise, _run(impl, q, k, v, do, True, scale),
               _expected(ref, q, k, v, do, True, scale), torch.float32, shape=shape, scale=scale)


@pytest.mark.gradcheck
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", [(1, 1, 5, 64), (1, 2, 19, 128)], ids=str)
def test_gradcheck(impl, ref, device, shape, causal):
    """torch.autograd.gradcheck in float64 for q, k and v: the math must run in float64 too."""
    q, k, v, _ = _inputs(shape, 80, torch.float64, device, scale=0.5)
    args = tuple(t.requires_grad_() for t in (q, k, v))
    gradcheck_checked(lambda a, b, c: impl.flash_attention(a, b, c, causal, None), args,
                      names=("q", "k", "v"),
                      reference=lambda a, b, c: ref.reference(a, b, c, causal, None), eps=1e-6,
                      atol=1e-6, rtol=1e-5,
                      hint="with P the probabilities (recomputed from q, k and the saved "
                           "logsumexp), dP = dO @ vᵀ, dS = P * (dP - rowsum(dO * O)) * scale: dq "
                           "= dS @ k, dk = dSᵀ @ q, dv = Pᵀ @ dO")


# --- what FlashAttention must survive ----------------------------------------------------------

@pytest.mark.backward
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_large_logits(impl, ref, exercise, device, dtype):
    """Scores of std ~50 (up to ~±200): exp of them overflows float32; subtracting the max
    does not. The values are held 4x looser: P is then nearly one-hot, and dq, dk are small
    differences (dp - delta) whose rounding shows more than at scale 1."""
    shape = (1, 2, 40, 64)
    q, k, v, do = _inputs(shape, 90, dtype, device, scale=7.0)   # q·k / 8 ~ N(0, 7^4 / 8)
    got = _run(impl, q, k, v, do, False)
    for name, t in zip(NAMES, got):
        if not bool(torch.isfinite(t).all()):
            raise Mismatch(f"{name} has NaN or inf with scores up to "
                           f"~{float((q.double() @ k.double().transpose(-2, -1)).abs().max()) / 8:.0f}"
                           f" in absolute value (dtype={str(dtype).removeprefix('torch.')}): exp overflowed."
                           f"{MAX_SUBTRACTION}")
    plain = lambda a, b, c: _o_close(exercise, impl.flash_attention(a, b, c, False, None),
                                     _attend(a, b, c, 0.125))
    with probes.explained(probes.online_rescale(plain, lambda where: _probe_inputs(device,
                                                                                   peak=where)),
                          hint_on_evidence=True):
        _close(exercise, got, _expected(ref, q, k, v, do, False), dtype, shape=shape,
               q_scale=7.0, loose=4.0)


def _finite(got, what: str, fix: str) -> None:
    for name, t in zip(NAMES, got):
        if not bool(torch.isfinite(t).all()):
            raise Mismatch(f"{name} has {int((~torch.isfinite(t)).sum())} NaN or inf values "
                           f"with {what} (dtype=bfloat16): {fix}")


def test_values_beyond_fp16_range(impl, ref, exercise, device):
    """bfloat16 v and incoming gradient past fp16's largest number (65504): o (a convex
    combination of v's rows), dv, dq and dk are past it too, as bf16 holds up to 3.4e38. A
    kernel that takes P @ V, dS @ K or a store through fp16 gets inf there. The values are a
    unit-scale check's times 2^20: multiplying by a power of two moves every rounding (bf16
    storage, float32 sums, delta = rowsum(dO * O)) exactly with them, so a correct kernel's
    relative errors are those of the unit-scale case, and the bounds (_close: relative to each
    slice's RMS and to |expected|) are that case's, unchanged."""
    shape = (1, 2, 40, 64)  # test_large_logits's shape: no new Triton specialization
    q, k, v, do = _inputs(shape, 95, torch.bfloat16, device)
    v, do = v * 2.0 ** 20, do * 2.0 ** 20  # exact in bf16: only the exponent moves
    want = _expected(ref, q, k, v, do, False)
    assert all(float(w.abs().max()) > 2 * FP16_MAX for w in want), \
        "the test's own values: every output reaches past fp16's range"
    got = _run(impl, q, k, v, do, False)
    _finite(got, f"v and dO of ~{2.0 ** 20:.0f} (o, dv, dq and dk exact values up to "
            f"{max(float(w.abs().max()) for w in want):.3g}, finite in bfloat16, past "
            f"float16's {FP16_MAX:g})",
            "a product or a store went through float16. Feed tl.dot the input dtype (P and dS "
            "cast to v's and k's dtype, not to tl.float16), keep the accumulators in float32 "
            "and cast once, to the input's dtype, when storing")
    _close(exercise, got, want, torch.bfloat16, shape=shape, v_and_grad_o="randn x 2^20")


def test_scores_past_a_16_bit_exp(impl, ref, exercise, device):
    """bfloat16 scores up to ~45: past 11.09, where exp overflows float16, short of 88.72,
    where it overflows bfloat16 and float32 (test_large_logits goes past that). A kernel that
    takes exp of a score before subtracting the row's max, then P through fp16 (the tensor-core
    cast of a kernel written for fp16), gets inf; subtracting the max keeps every exponent <= 0.
    Held 4x looser, as test_large_logits and for its reason: P is nearly one-hot, and dq, dk
    are small differences (dp - delta) whose rounding shows more than at scale 1."""
    shape = (1, 2, 40, 64)
    q, k, v, do = _inputs(shape, 97, torch.bfloat16, device, scale=3.5)  # q·k / 8 ~ N(0, 3.5^4)
    top = float((q.double() @ k.double().transpose(-2, -1)).abs().max()) / 8
    assert exp_limit(torch.float16) < top < exp_limit(torch.bfloat16), \
        f"the test's own scores: up to {top:.3g}, past fp16's exp and within bf16's"
    got = _run(impl, q, k, v, do, False)
    _finite(got, f"scores up to ~{top:.0f} (exp of them overflows float16 past "
            f"{exp_limit(torch.float16):.2f}, not bfloat16)",
            f"an exponential or P went through float16 before the row's max was subtracted."
            f"{MAX_SUBTRACTION}")
    _close(exercise, got, _expected(ref, q, k, v, do, False), torch.bfloat16, shape=shape,
           q_scale=3.5, loose=4.0)


def test_first_row_sees_one_key(impl, ref, exercise, device):
    """Causal: query 0 sees key 0 alone (every other key masked), so o[0] = v[0] exactly; with
    large scores around it the masked keys must weigh 0. (Its gradient: the backward's checks.)"""
    shape = (2, 2, 37, 64)
    q, k, v, _ = _inputs(shape, 100, torch.float32, device, scale=4.0)
    o = impl.flash_attention(q, k, v, True, None)
    row0 = o[:, :, 0]
    if not torch.allclose(row0.double(), v[:, :, 0].double(), atol=1e-6, rtol=1e-6):
        raise Mismatch(f"o[..., 0, :] must equal v[..., 0, :] (query 0 sees key 0 alone), but "
                       f"differs by up to {float((row0 - v[:, :, 0]).abs().max()):.3g}: keys "
                       f"after the query leak into the causal row (the mask: key index <= query "
                       f"index, in absolute positions, on the diagonal block)")
    _o_close(exercise, o, ref.reference(q.double(), k.double(), v.double(), True, None),
             shape=shape, causal=True)


def test_causal_mask_position(impl, ref, exercise, device):
    """The causal mask on every block: changing the last key and value changes only the last
    query's output (and every query's output when not causal)."""
    shape = (1, 1, 50, 64)
    q, k, v, _ = _inputs(shape, 110, torch.float32, device)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, -1] += 3.0
    v2[:, :, -1] += 3.0
    a = impl.flash_attention(q, k, v, True, None)
    b = impl.flash_attention(q, k2, v2, True, None)
    # "not unchanged" rather than "changed by more than 0": a NaN output counts as changed
    changed = (~((a - b).abs().amax(-1) == 0)).reshape(-1).nonzero().flatten().tolist()
    if changed != [49]:
        raise Mismatch(f"changing key/value 49 (the last) changed the causal outputs of queries "
                       f"{changed[:8]}{'...' if len(changed) > 8 else ''}, expected [49] only: "
                       f"query i sees keys 0..i (mask key > query, with both indices absolute: "
                       f"start_n + j against start_m + i)")


@pytest.mark.backward
@pytest.mark.parametrize("layout", ["[B, S, H, D] transposed", "packed qkv"])
def test_strided_views(impl, ref, exercise, device, layout):
    """q, k, v as views of a [B, S, H, D] tensor (the layout a Linear produces): right answers,
    or refused naming the argument."""
    B, S, H, D = 2, 21, 3, 64
    if layout == "packed qkv":
        qkv = randn((B, S, 3, H, D), seed=120, dtype=torch.float16, device=device)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    else:
        q, k, v = (randn((B, S, H, D), seed=121 + i, dtype=torch.float16,
                         device=device).transpose(1, 2) for i in range(3))
    do = randn((B, H, S, D), seed=125, dtype=torch.float16, device=device)
    try:
        got = _run(impl, q, k, v, do, True)
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not any(names_argument(str(e), n)
                                                      for n in ("q", "k", "v")):
            raise
        return  # refused with a message naming the argument: fine
    verify = lambda a, b, c, d: _close(exercise, _run(impl, a, b, c, d, True),
                                       _expected(ref, a, b, c, d, True), torch.float16,
                                       layout=layout)
    with probes.explained(probes.strides(verify, (q, k, v, do), ("q", "k", "v", "dO"))):
        _close(exercise, got, _expected(ref, q, k, v, do, True), torch.float16, layout=layout)


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


def test_every_argument_as_a_view(impl, ref, exercise, device):
    """q, k and v in turn, each as a strided view (every other element of D, a gap between
    rows) and as a view one element into its memory, the others dense: the right o, or a
    strided view refused naming it. Forward only (causal: its diagonal block and the blocks
    before it)."""
    shape, dtype = (1, 2, 17, 64), torch.float16
    q, k, v, _ = _inputs(shape, 51, dtype, device)
    want = (ref.reference(q.double(), k.double(), v.double(), True, None),)
    _views(impl.flash_attention, (q, k, v, True, None), ("q", "k", "v", "causal", "scale"),
           lambda outs: _close(exercise, outs, want, dtype, what=("o",), shape=shape,
                               causal=True),
           seed=51)


@pytest.mark.backward
def test_strided_grad_of_o(impl, ref, exercise, device):
    """The gradient of o.sum() is one value expanded (stride 0): the backward must read it."""
    shape = (1, 2, 20, 64)
    q, k, v, _ = _inputs(shape, 130, torch.float32, device)
    do = torch.ones((), dtype=torch.float32, device=device).expand(shape)
    _close(exercise, _run(impl, q, k, v, do, False), _expected(ref, q, k, v, do, False),
           torch.float32, incoming_grad="expanded ones (stride 0)")


@pytest.mark.backward
def test_dq_sums_in_float32(impl, ref, exercise, device):
    """dq (and dk, dv) sum over many key (query) blocks. In float32 the error stays that of
    rounding P and dS once: normwise 2.4e-3 in bf16 (measured on an H200; the same in a float64
    emulation). A running sum rounded to bf16 after each block adds a rounding per block: 9.6e-3
    over 64 blocks (the interpreter's blocks of 16 at S = 1024), 1.35e-2 over 128 blocks of 64
    (S = 8192 on a GPU), by the same emulation. On a GPU only (the interpreter would take
    minutes: see below)."""
    if device != "cuda":
        # the running sums need many key blocks to show: 64 (blocks of 16 at S = 1024) are
        # 4096 pairs of blocks per kernel, several minutes on the interpreter
        pytest.skip("needs a GPU: the sums over 64 key blocks and more take minutes on Triton's "
                    "CPU interpreter")
    shape = (1, 2, 8192, 64)
    q, k, v, do = _inputs(shape, 140, torch.bfloat16, device)
    got = _run(impl, q, k, v, do, False)
    want = _expected(ref, q, k, v, do, False)
    for name, g, w in zip(NAMES, got, want):
        err = ((g.double() - w).norm() / w.norm()).item()
        # a running sum rounded to bf16 per block gives 1e-2 to 2e-2 here (above); far more is
        # another fault, which the values checks name: the cause is said only where it fits
        kept = ("; more is a sum kept in bf16 across blocks. Keep acc, dq, dk and dv in float32 "
                "accumulators and cast once when storing (README: The backward)"
                if err <= 5e-2 else "")
        check.within(err, 6e-3, what=f"{name}: normwise relative error", S=shape[2],
                     why=f"rounding P and dS to bf16 once gives ~2.4e-3{kept}")


@pytest.mark.backward
def test_backward_is_deterministic(impl, device):
    """The same inputs give the same gradients, bit for bit (no atomics, or atomics whose order
    cannot change the sum: README: Determinism)."""
    shape = (2, 2, 300, 64) if device == "cuda" else (1, 1, 40, 64)
    q, k, v, do = _inputs(shape, 150, torch.bfloat16, device)
    a = _run(impl, q, k, v, do, True)
    b = _run(impl, q, k, v, do, True)
    for name, x, y in zip(NAMES, a, b):
        if not torch.equal(x, y):
            raise Mismatch(f"{name} differs between two identical calls (max "
                           f"{float((x.double() - y.double()).abs().max()):.3g}): float atomics "
                           f"add in the order the programs arrive. Give each output block one "
                           f"owner (dq in its own kernel: README: Determinism)")


# --- bad inputs --------------------------------------------------------------------------------

def test_refuses_bad_inputs(impl, device):
    q, k, v, _ = _inputs((1, 1, 8, 64), 160, torch.float32, device)
    impl.flash_attention(q, k, v, False, None)  # a stub fails here, with its own message
    odd, _, _, _ = _inputs((1, 1, 8, 32), 161, torch.float32, device)
    expect_refusal(impl.flash_attention, odd, odd, odd, False, None, argument="q")   # D = 32
    expect_refusal(impl.flash_attention, q[0], k[0], v[0], False, None, argument="q")  # 3-D
    expect_refusal(impl.flash_attention, q, k[:, :, :5], v, False, None, argument="k")
    expect_refusal(impl.flash_attention, q, k, v.half(), False, None, argument="v")
    ints = torch.ones((1, 1, 8, 64), dtype=torch.int32, device=device)
    expect_refusal(impl.flash_attention, ints, ints, ints, False, None, argument="q")
    if device == "cuda":
        expect_refusal(impl.flash_attention, q, k.cpu(), v, False, None, argument="k")


# --- what it keeps: no S x S matrix between the forward and the backward ------------------------

def test_no_score_matrix_kept_for_the_backward(impl, track, device):
    """Between the forward and the backward the op may keep q, k, v, o and a few numbers per
    row (the log-sum-exp), not P or S: an S x S matrix per head is S / D times o's size.

    Measured as in exercise 10 (grader.judge.testing.kept_per_call): the GPU memory of the
    submission's process as the driver counts it, while many forward calls' graphs stay alive;
    neither its allocator's cache nor a reserve made beforehand can hide a matrix per call."""
    q, k, v, _ = _inputs((1, 1, 16, 64), 170, torch.bfloat16, device)
    impl.flash_attention(q, k, v, True, None)  # a stub fails here
    if on_interpreter(track, device) or device != "cuda":
        pytest.skip("needs a GPU: measured as the GPU memory of the submission's process")
    B, H, S, D = 1, 8, 4096, 64
    q, k, v, _ = _inputs((B, H, S, D), 171, torch.bfloat16, device)
    for t in (q, k, v):
        t.requires_grad_()
    o_bytes = B * H * S * D * 2
    # kept per call in the op's process: o (its graph holds it) and fp32 statistics per row
    # (q, k, v arrive as copies in the judge's memory: 16 bytes a row allows four of them); an
    # S x S matrix per head is S / D = 64 times o's elements, counted at one byte each (a P
    # kept in uint8 or fp8 is caught; bf16, twice that)
    live = kept_per_call(impl, lambda i: impl.flash_attention(q, k, v, True, None),
                         forbidden_elements=B * H * S * S, allowed=o_bytes + 16 * B * H * S,
                         what="an S x S matrix kept per call (P or S, in any element type)",
                         fix="Save o and the log-sum-exp per row, and recompute P in the "
                             "backward")
    del live


# --- a second call on the same buffers, new values in between (the shared check) ----------------

def test_new_contents_same_shapes(impl, ref, exercise, device):
    """Called twice on the same buffers, new values written into q, k and v in between: o right
    both times (a result kept from the first call, by shape or by pointer, is wrong the second
    time)."""
    shape, dtype = (1, 2, 33, 64), torch.float16
    q, k, v, _ = _inputs(shape, 131, dtype, device)
    new_contents_same_shapes(
        impl.flash_attention, (q, k, v, True, None), ("q", "k", "v", "causal", "scale"),
        lambda a: (ref.reference(a[0].double(), a[1].double(), a[2].double(), True, None),),
        lambda outs, want: _close(exercise, outs, want, dtype, what=("o",), shape=shape,
                                  causal=True),
        seed=132)


# --- the dispatcher: opcheck and torch.compile -------------------------------------------------

# H = 2: no kernel of its own (Triton specializes an integer argument equal to 1). One check per
# sample: each compiles the kernels of its dtype and head dim, and the grader runs them side by
# side (grader.judge.strategies.share_of), not one after another in one process.
OPCHECK_SAMPLES = {"fp16-causal": (torch.float16, (1, 2, 20, 64), True),
                   "bf16-D128": (torch.bfloat16, (2, 2, 33, 128), False),
                   "fp32-causal": (torch.float32, (1, 2, 9, 64), True)}


@pytest.mark.backward
@pytest.mark.parametrize("sample", list(OPCHECK_SAMPLES))
def test_opcheck(impl, track, device, sample):
    """torch.library.opcheck of the forward and backward ops: schema, fake kernels, autograd."""
    dtype, shape, causal = OPCHECK_SAMPLES[sample]
    q, k, v, do = _inputs(shape, 181, dtype, device)
    impl.flash_attention(q, k, v, causal, None)  # a stub fails here
    ns = f"ex13_{track.name}"
    fwd = ((q.clone().requires_grad_(), k.clone().requires_grad_(), v.clone().requires_grad_(),
            causal, 0.125), None)
    o, lse = impl.op(f"{ns}::flash_attention_fwd")(q, k, v, causal, 0.125)
    bwd = ((do, q, k, v, o, lse, causal, 0.125), None)
    opcheck_samples(impl, track, device, f"{ns}::flash_attention_fwd", [fwd])
    opcheck_samples(impl, track, device, f"{ns}::flash_attention_bwd", [bwd])


@pytest.mark.backward
def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of projection -> flash_attention (causal, strided q, k, v
    views) -> projection (reference.small_model): no graph break, values and gradients of the
    float64 reference."""
    E, S = 128, 40
    x = randn((2, S, E), seed=190, dtype=torch.float32, device=device)
    w_qkv = randn((3 * E, E), seed=191, dtype=torch.float32, device=device, scale=E ** -0.5)
    w_out = randn((E, E), seed=192, dtype=torch.float32, device=device, scale=E ** -0.5)
    g = randn((2, S, E), seed=193, dtype=torch.float32, device=device)
    args = (x, w_qkv, w_out)
    value_and_grads(ref.small_model(impl.flash_attention), *args, wrt=(0, 1, 2), dy=g)  # stub
    outs, grads = expected_grads(ref.small_model(ref.reference), *args, wrt=(0, 1, 2), dy=g)
    compiled_matches(impl, track, device, "flash_attention", args, wrap="small_model",
                     wrt=(0, 1, 2), dy=g, expected=outs + grads,
                     tol={"atol": 1e-4, "rtol": 1e-4},
                     names=["compiled output", "x.grad", "w_qkv.grad", "w_out.grad"])
