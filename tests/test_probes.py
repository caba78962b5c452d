"""The probes behind a diagnosis (grader.judge.probes): each finds its cause on an op that has
it, and nothing on a right op nor on an op wrong for another reason. The ops here are a few
lines of PyTorch, each with one mistake a learner makes; the exercises' known-bads
(exercises/*/wrong/) show the same probes through the grader."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from grader.judge import probes
from grader.judge.check import Mismatch, assert_close

TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-5}, torch.float16: {"atol": 1e-3, "rtol": 2e-3},
       torch.bfloat16: {"atol": 8e-3, "rtol": 1.6e-2}}


def gen(seed):
    return torch.Generator().manual_seed(seed)


def check(got, want):
    assert_close(got, want, tol=TOL[got.dtype], dtype=got.dtype)


def verifier(op, reference):
    return lambda *a: check(op(*a), reference(*a))


# --- the wrapper ---------------------------------------------------------------------------------

def test_a_cause_is_added_only_from_evidence():
    found = probes.Evidence("the cause", "what was seen")
    with pytest.raises(Mismatch) as plain:
        with probes.explained(lambda: None, lambda: 1 / 0):  # no evidence, a probe that breaks
            raise Mismatch("y: wrong")
    assert str(plain.value) == "y: wrong"
    err = Mismatch("y: wrong")
    err.grader_off_topic = True
    with pytest.raises(Mismatch) as told:
        with probes.explained(lambda: None, lambda: found, lambda: 1 / 0):
            raise err
    assert str(told.value) == ("y: wrong\n  likely cause: the cause\n    seen on your op: what "
                               "was seen")
    assert told.value.grader_off_topic  # what the failure carried, kept
    with pytest.raises(Mismatch) as symptom:  # the comparison's own reading of the values
        with probes.explained(lambda: found):
            raise Mismatch("o: wrong\n  likely cause: NaN computed where the reference is finite")
    assert str(symptom.value) == (  # the confirmed cause is read first
        "o: wrong\n  likely cause: the cause\n    seen on your op: what was seen\n"
        "  the values also show: NaN computed where the reference is finite")
    with pytest.raises(Mismatch) as hinted:
        with probes.explained(lambda: None, hint_on_evidence=True):
            raise Mismatch("y: wrong")
    assert hinted.value.grader_off_topic  # the check's hint is about a cause not confirmed


def test_probes_run_on_the_example_hypothesis_reports_only():
    """Hypothesis replays a failing example many times while it shrinks: the probes (calls of
    the learner's op) run once, for the example it reports."""
    calls = []

    @settings(max_examples=30, database=None, derandomize=True)
    @given(st.integers(0, 1000))
    def failing(n):
        with probes.explained(lambda: calls.append(n)):
            if n > 10:
                raise Mismatch(f"wrong at {n}")
    with pytest.raises(Mismatch):
        failing()
    assert len(calls) == 1, calls


# --- views ---------------------------------------------------------------------------------------

def add_reading_y_dense(x, y):
    """x + y, y read as if it were contiguous (its strides ignored)."""
    flat = torch.as_strided(y, (y.numel(),), (1,), y.storage_offset())
    return x + flat.view(y.shape)


def add_reference(x, y):
    return x.double() + y.double()


def test_strides_names_the_view_when_dense_values_are_right():
    x, base = torch.randn(50, generator=gen(1)), torch.randn(100, generator=gen(2))
    y = base[::2]
    found = probes.strides(verifier(add_reading_y_dense, add_reference), (x, y), ("x", "y"))()
    assert found.cause.startswith("the output is wrong when `y` is a strided view (shape (50,), "
                                  "strides (2,)), every other input (`x`) contiguous"), found
    assert "`x`'s" not in found.cause and found.seen.startswith("the same values in dense")
    off = base[3:53]
    assert probes.view_cause((x, off), ("x", "y")).startswith(
        "`y` was a dense view starting 3 elements (12 bytes) into its memory")
    # wrong on dense inputs too: not the view
    wrong = lambda a, b: add_reading_y_dense(a, b) + 1
    assert probes.strides(verifier(wrong, add_reference), (x, y), ("x", "y"))() is None


# --- a variant of the reference: the scale -------------------------------------------------------

def attention(q, k, v, scale):
    return torch.softmax((q.double() @ k.double().T) * scale, -1) @ v.double()


@pytest.mark.parametrize("factor, said", [(0.125, "applied twice"), (8.0, "not applied"),
                                          (1.1, None)])
def test_scale_matches_a_variant_or_says_nothing(factor, said):
    q, k, v = (torch.randn(9, 64, generator=gen(i)) for i in range(3))
    got = attention(q, k, v, 0.125 * factor).float()  # factor 0.125: the scale twice
    found = probes.scale(got, check, lambda s: attention(q, k, v, s), 0.125)()
    if said is None:
        assert found is None
    else:
        assert said in found.cause and "the output matches the reference at scale" in found.seen


# --- eps -----------------------------------------------------------------------------------------

def rms(x, eps, where="inside"):
    x64 = x.double()
    ms = x64.square().mean(-1, keepdim=True)
    rstd = {"inside": 1 / (ms + eps).sqrt(), "outside": 1 / (ms.sqrt() + eps),
            "ignored": 1 / ms.sqrt(), "wrong": 1.01 / (ms + eps).sqrt()}[where]
    return x64 * rstd


@pytest.mark.parametrize("where, found", [("outside", True), ("ignored", True),
                                          ("wrong", False)])
def test_eps_placement(where, found):
    x = torch.randn(6, 40, generator=gen(4))
    verify = verifier(lambda a, eps: rms(a, eps, where).float(), lambda a, eps: rms(a, eps))
    evidence = probes.eps_placement(verify, (x, 1e-2), eps_at=1, formula="1/sqrt(ms + eps)")()
    assert (evidence is not None) == found, evidence
    if found:
        assert evidence.cause.startswith("eps does not enter as in 1/sqrt(ms + eps)")
        assert evidence.seen == "right at eps = 1e-12, wrong at eps = 0.5"


# --- 16-bit arithmetic ---------------------------------------------------------------------------

def sum_of_squares(x, acc):
    """x / sqrt(mean(x^2)), the squares summed in `acc`, one running sum (a loop's)."""
    s = torch.zeros(x.shape[:-1], dtype=acc)
    for j in range(x.shape[-1]):
        s = s + x[..., j].to(acc) ** 2
    return (x.double() / (s.double() / x.shape[-1]).sqrt()[..., None]).to(x.dtype)


def norm_reference(x):
    return sum_of_squares(x.double(), torch.float64)


def test_sixteen_bit_in_a_16_bit_dtype():
    x = (torch.randn(4, 300, generator=gen(5)) + 1).to(torch.bfloat16)
    in_input_dtype = lambda a: sum_of_squares(a, a.dtype)  # right when a is float32
    verify = verifier(in_input_dtype, norm_reference)
    with pytest.raises(Mismatch):
        verify(x)
    found = probes.sixteen_bit(in_input_dtype, norm_reference, verify, (x,))()
    assert found.cause.startswith("errors of the size of 16-bit rounding (normwise ")
    assert "is kept in bfloat16" in found.cause and "float32 tensors come out right" in found.seen
    # wrong in float32 too: not the 16-bit type
    off = lambda a: in_input_dtype(a) * 1.01
    assert probes.sixteen_bit(off, norm_reference, verifier(off, norm_reference), (x,))() is None


def test_sixteen_bit_inside_a_float32_op():
    x = torch.rand(4, 50, generator=gen(6)) + 1
    through_fp16 = lambda a: sum_of_squares(a.half().float(), torch.float16).float()
    verify = verifier(through_fp16, norm_reference)
    with pytest.raises(Mismatch):
        verify(x)
    found = probes.sixteen_bit(through_fp16, norm_reference, verify, (x,), fix="sum in fp32")()
    assert found.cause.startswith("errors of the size of 16-bit rounding") and \
        found.cause.endswith("inside the float32 op: sum in fp32"), found
    assert "in steps, not in proportion" in found.seen
    # a float32 op wrong by a smooth 0.1%: it follows the inputs, so no 16-bit evidence
    smooth = lambda a: sum_of_squares(a, torch.float32) * 1.001
    assert probes.sixteen_bit(smooth, norm_reference, verifier(smooth, norm_reference),
                              (x,))() is None


def test_in_float32_names_a_range_only_for_16_bit_inputs():
    def overflowing(a):  # squares in the input's dtype: 1e4^2 is inf in float16
        return (a / (a * a).mean(-1, keepdim=True).sqrt()).to(a.dtype)
    big = torch.randn(3, 30, generator=gen(7)) * 1e4
    verify = verifier(overflowing, lambda a: norm_reference(a.double()))
    found = probes.in_float32(verify, (big.half(),), "h*h overflows float16")()
    assert found.cause == "h*h overflows float16"
    assert probes.in_float32(verify, (big,), "h*h overflows float16")() is None


def test_fp16_range_names_an_add_through_float16_only_past_its_range():
    def through_fp16(a, b):  # bf16 holds 4e5; float16 makes it inf
        return (a.half() + b.half()).to(a.dtype)
    reference = lambda a, b: a.double() + b.double()
    verify = verifier(through_fp16, reference)
    x = (torch.randn(64, generator=gen(8)) * 3e5).bfloat16()
    y = torch.randn(64, generator=gen(9)).bfloat16()
    found = probes.fp16_range(through_fp16, verify, (x, y))()
    assert "past float16's largest (65504) become inf" in found.cause, found
    assert found.seen.startswith("the same inputs divided by 2^"), found
    # within float16's range the probe says nothing; an op wrong at every scale is not this
    assert probes.fp16_range(through_fp16, verify, (y, y))() is None
    # wrong, but no inf: not this cause
    halved = lambda a, b: ((a.double() + b.double()) / 2).to(a.dtype)
    assert probes.fp16_range(halved, verifier(halved, reference), (x, y))() is None


# --- the blocks of an online softmax, and the max's neutral value ----------------------------------

def online_softmax(x, block=16, rescale=True, pad=float("-inf")):
    """softmax over the last dim, a block of columns at a time (running max m and sum l), the
    row padded to whole blocks with `pad`."""
    n = x.shape[-1]
    xp = torch.nn.functional.pad(x.double(), (0, -n % block), value=pad)
    m = torch.full(x.shape[:-1], float("-inf"), dtype=torch.float64)
    l = torch.zeros_like(m)
    for j in range(0, xp.shape[-1], block):
        blk = xp[..., j:j + block]
        m_new = torch.maximum(m, blk.amax(-1))
        l = l * (torch.exp(m - m_new) if rescale else 1) + torch.exp(blk - m_new[..., None]).sum(-1)
        m = m_new
    return (torch.exp(x.double() - m[..., None]) / l[..., None]).float()


def softmax_reference(x):
    return torch.softmax(x.double(), -1)


def peaked(where):
    x = torch.randn(5, 50, generator=gen(8))
    x[:, 0 if where == "first" else -1] = 8.0
    return (x,)


def test_online_rescale():
    no_rescale = lambda a: online_softmax(a, rescale=False)
    found = probes.online_rescale(verifier(no_rescale, softmax_reference), peaked)()
    assert found.cause.startswith("the running sums are not rescaled when the max grows")
    assert found.seen == ("right when every row's max is in its first block, wrong when it is in "
                          "its last")
    everywhere = lambda a: online_softmax(a) * 1.01
    assert probes.online_rescale(verifier(everywhere, softmax_reference), peaked)() is None


def test_max_subtracted():
    rows = torch.randn(4, 77, generator=gen(11))
    shifted = lambda shift: (rows + shift,)
    raw = lambda a: (torch.exp(a) / torch.exp(a).sum(-1, keepdim=True)).float()  # no max: NaN
    found = probes.max_subtracted(verifier(raw, softmax_reference), shifted)()
    assert found.cause.startswith("exp overflows") and "subtract the row's running max" in \
        found.cause, found
    everywhere = lambda a: online_softmax(a) * 1.01
    assert probes.max_subtracted(verifier(everywhere, softmax_reference), shifted)() is None


def test_max_neutral():
    rows = torch.randn(4, 77, generator=gen(9))
    shifted = lambda sign: (rows + 30.0 * sign,)
    zero_padded = lambda a: online_softmax(a, pad=0.0)
    found = probes.max_neutral(verifier(zero_padded, softmax_reference), shifted)()
    assert found.cause.startswith("masked lanes take part as 0") and "-inf" in found.cause
    everywhere = lambda a: online_softmax(a) * 1.01
    assert probes.max_neutral(verifier(everywhere, softmax_reference), shifted)() is None


@pytest.mark.parametrize("n, found", [(17, True), (64, False)])
def test_partial_block(n, found):
    def cumsum_with_a_tail_bug(x):  # the last partial block of 16 dropped
        out = x.double().cumsum(-1)
        whole = x.shape[-1] // 16 * 16
        out[..., whole:] = 0
        return out.float()

    def verify_at(length):
        x = torch.randn(3, length, generator=gen(length))
        check(cumsum_with_a_tail_bug(x), x.double().cumsum(-1))
    evidence = probes.partial_block(verify_at, n, (32, 64))()
    assert (evidence is not None) == found
    if found:
        assert evidence.seen == "right at lengths 32, 64 (whole blocks), wrong at 17"


def test_is_view_and_dense():
    base = torch.randn(4, 6, generator=gen(10))
    assert probes.is_view(base[:, ::2]) and probes.is_view(base.reshape(-1)[1:])
    assert not probes.is_view(base) and not probes.is_view(base[:2])
    d = probes.dense(base[:, ::2])
    assert d.is_contiguous() and d.storage_offset() == 0 and torch.equal(d, base[:, ::2])
    assert math.isclose(probes.dense(2.5), 2.5)
