"""Probes: the evidence behind a diagnosis. A check's failure says what differs; its "likely
cause" is printed only when a probe has confirmed that cause on the learner's own op.

A probe is a function of no arguments that returns `Evidence` or None. It runs the learner's op
(through `impl`: each call crosses to the submission's process, as the check's own calls do) on
inputs made for the question, or compares the failing output with a variant of the reference,
and answers one question (is it the views? eps? the scale? 16-bit arithmetic?). A check declares
the probes that fit its op around its comparison:

    with explained(eps_placement(verify, args, eps_at=3, formula="1/sqrt(mean(h²) + eps)"),
                   sixteen_bit(run, reference, verify, args)):
        verify(*args)

On a Mismatch the probes run in turn, and the first that finds evidence adds its cause and what
it saw; none finding any leaves the failure as it was. Probes only ever add words to a failure:
they never fail a check, and a probe that cannot run (the op refuses its inputs, raises) proves
nothing. Their building blocks:

    verify(*args)     runs the op on args and compares with the reference as the check does:
                      raises Mismatch when wrong
    run(*args)        the op's output for args (the output the check compares)
    reference(*args)  its float64 expectation
    check(got, want)  the check's comparison of one output (raises Mismatch)
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Callable

import torch
from hypothesis.control import current_build_context, currently_in_test_context

from grader.judge.check import Mismatch

Probe = Callable[[], "Evidence | None"]


@dataclass(frozen=True)
class Evidence:
    cause: str   # what is wrong and how to fix it: "likely cause: ..."
    seen: str    # what the probe saw on the learner's op


@contextlib.contextmanager
def explained(*probes: Probe, hint_on_evidence: bool = False):
    """Around a comparison: on a Mismatch, the first probe with evidence adds its cause.
    `hint_on_evidence`: the check's hint (exercise.toml) is about what these probes test, so it
    is shown only when one of them confirms it (grader.judge.testing.off_topic otherwise)."""
    try:
        yield
    except Mismatch as e:
        found = _first_evidence(probes)
        if found is not None:
            raise with_cause(e, found) from None
        if hint_on_evidence:
            e.grader_off_topic = True
        raise


def with_cause(e: Mismatch, found: Evidence) -> Mismatch:
    """`e` with the cause and what the probe saw (its other attributes kept). The probe's cause
    goes before a cause the comparison read off the values (NaN or inf computed where the
    reference is finite): that one is a symptom, often of the fault the probe confirmed."""
    text, cause = str(e), f"  likely cause: {found.cause}\n    seen on your op: {found.seen}"
    head, sep, symptom = text.partition("\n  likely cause: ")
    out = Mismatch(f"{head}\n{cause}\n  the values also show: {symptom}" if sep
                   else f"{text}\n{cause}")
    out.__dict__.update(e.__dict__)
    return out


def _first_evidence(probes) -> Evidence | None:
    # hypothesis replays a failing example many times while it shrinks: the probes run on the
    # example it reports (its final run) only
    if currently_in_test_context() and not current_build_context().is_final:
        return None
    for probe in probes:
        try:
            found = probe()
        except Exception:  # the op refused or broke on the probe's inputs: no evidence (the
            continue       # submission's process dying is no Exception: the check reports it)
        if found is not None:
            return found
    return None


def right(verify, *args) -> bool:
    """Does the op pass the check's comparison on `args`?"""
    try:
        verify(*args)
    except Mismatch:
        return False
    return True


def _fmt(v: float) -> str:
    return f"{v:.2g}"


# --- views ---------------------------------------------------------------------------------------

def is_view(t) -> bool:
    """A tensor that is not dense row-major from the start of its memory."""
    return isinstance(t, torch.Tensor) and t.numel() > 1 and (
        not t.is_contiguous() or t.storage_offset() != 0)


def dense(t):
    """The same values in fresh row-major memory (a tensor), `t` itself otherwise."""
    if not isinstance(t, torch.Tensor):
        return t
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t.detach())
    return out.requires_grad_(t.requires_grad)


def view_cause(args, names) -> str:
    """What a view among `args` asks of the op, naming it and the arguments that were dense."""
    views = [(n, a) for n, a in zip(names, args) if is_view(a)]
    tensors = [n for n, a in zip(names, args) if isinstance(a, torch.Tensor)]
    name, t = views[0]
    others = [n for n in tensors if n not in {v for v, _ in views}]
    if len(views) > 1:
        rest = f" (so were {', '.join(f'`{v}`' for v, _ in views[1:])})"
    else:
        rest = (f", every other input ({', '.join(f'`{o}`' for o in others)}) contiguous"
                if others else "")
    if t.is_contiguous():
        off = t.storage_offset()
        return (f"`{name}` was a dense view starting {off} elements ({off * t.element_size()} "
                f"bytes) into its memory{rest}: use the tensor's own data pointer (it includes "
                f"the offset); a 16-byte vector load needs a 16-byte-aligned address: check the "
                f"alignment and fall back to a scalar path")
    return (f"the output is wrong when `{name}` is a strided view (shape {tuple(t.shape)}, "
            f"strides {t.stride()}){rest}: index each tensor with its own strides (`{name}`'s "
            f"for `{name}`), or call .contiguous() on it before the launch (one more pass over "
            f"memory), or refuse it with a message naming `{name}`")


def view_evidence(args, names) -> Evidence:
    """The evidence of a view's fault, once the same values in dense tensors came out right."""
    return Evidence(view_cause(args, names), "the same values in dense tensors come out right")


def strides(verify, args, names) -> Probe:
    """The views are the cause when the same values, every view made dense, come out right."""
    def probe():
        if not any(is_view(a) for a in args) or not right(verify, *map(dense, args)):
            return None
        return view_evidence(args, names)
    return probe


# --- a variant of the reference ------------------------------------------------------------------

def variants(got, check, cases) -> Probe:
    """`got` matches a variant of the reference: `cases` is [(what the variant is, its
    expectation (a function: computed only when asked), the cause)], tried in turn."""
    def probe():
        for what, expected, cause in cases:
            if right(check, got, expected()):
                return Evidence(cause, f"the output matches {what}")
        return None
    return probe


def scale(got, check, reference_at, value: float) -> Probe:
    """The op's scale applied twice (it matches the reference at scale²) or not at all (at 1)."""
    return variants(got, check, [
        (f"the reference at scale² = {value * value:.4g} instead of {value:.4g}",
         lambda: reference_at(value * value),
         "the scale is applied twice (e.g. to the scores, and again to the exponent or to q): "
         "apply it once"),
        (f"the reference at scale 1 instead of {value:.4g}", lambda: reference_at(1.0),
         "the scale is not applied: multiply the scores by it (once)"),
    ])


# --- eps -----------------------------------------------------------------------------------------

SMALL_EPS, LARGE_EPS = 1e-12, 0.5


def eps_placement(verify, args, *, eps_at: int, formula: str) -> Probe:
    """eps is misplaced when the op is right as eps -> 0 and wrong at a large eps: `args[eps_at]`
    is replaced by each (inputs of mean square ~1, so eps = 0.5 moves the result by ~20%)."""
    def at(eps):
        return tuple(eps if i == eps_at else a for i, a in enumerate(args))

    def probe():
        if right(verify, *at(SMALL_EPS)) and not right(verify, *at(LARGE_EPS)):
            return Evidence(f"eps does not enter as in {formula}: the error grows with eps and "
                            f"vanishes as eps -> 0; add eps where the formula has it",
                            f"right at eps = {SMALL_EPS:g}, wrong at eps = {LARGE_EPS:g}")
        return None
    return probe


# --- 16-bit arithmetic ---------------------------------------------------------------------------

SIXTEEN = (torch.float16, torch.bfloat16)
FP16_MAX = torch.finfo(torch.float16).max  # 65504
# a float32 input moved by this much (relative) moves a float32 result ~2^7 of its units, and
# a value rounded to 16 bits (half-units of 2^-11 at best) hardly ever
NUDGE = 2.0 ** -16
# errors larger than this many units of a dtype's rounding are not its rounding
ROUNDING_UNITS = 64


def _normwise(got, want) -> float:
    g, w = got.detach().double(), want.detach().double().to(got.device)
    den = w.norm().item()
    return (g - w).norm().item() / den if den > 0 else math.inf


def _float_args(args, fn):
    return tuple(fn(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for a in args)


def sixteen_bit(run, reference, verify, args, *, fix: str = "compute in float32") -> Probe:
    """Values rounded to 16 bits where the reference keeps float32. In a 16-bit dtype: the error
    is of the size of that dtype's rounding and the same values in float32 come out right. In
    float32: the error is of the size of 16-bit rounding and the output moves in steps, not in
    proportion, when the inputs move by NUDGE (a float32 computation's output follows them).
    `fix`: what to do, in the exercise's words, for a float32 op."""
    def probe():
        got = run(*args)
        err = _normwise(got, reference(*args))
        size = f"errors of the size of 16-bit rounding (normwise {_fmt(err)}"
        if got.dtype in SIXTEEN:
            name = str(got.dtype).removeprefix("torch.")
            u = torch.finfo(got.dtype).eps / 2
            if not err <= ROUNDING_UNITS * u:
                return None
            return in_float32(verify, args, f"{size}; {name} rounds at {_fmt(u)}): an "
                                            f"intermediate (a square, a sum, an accumulator) is "
                                            f"kept in {name}: load as float32, compute in "
                                            f"float32, round once when storing")()
        if got.dtype != torch.float32 or not err <= ROUNDING_UNITS * 2.0 ** -8 \
                or not _moves_in_steps(run, args):
            return None
        return Evidence(f"{size}): the values pass through a type of 10 or fewer mantissa bits "
                        f"(float16, bfloat16, tf32) inside the float32 op: {fix}",
                        f"moved by {NUDGE:g} (relative) and by twice that, the inputs move the "
                        f"output in steps, not in proportion as float32 math does")
    return probe


def in_float32(verify, args, cause: str) -> Probe:
    """The 16-bit type is the cause (its rounding, or its range: `cause` says which the check
    is about) when the op is wrong in it and right on the same values as float32 tensors."""
    def probe():
        sixteen = any(isinstance(a, torch.Tensor) and a.dtype in SIXTEEN for a in args)
        if not sixteen or not right(verify, *_float_args(args, _float32)):
            return None
        return Evidence(cause, "the same values as float32 tensors come out right")
    return probe


def fp16_range(run, verify, args, *, fix: str = "compute in float32") -> Probe:
    """Values past float16's largest (65504) pass through float16 and come out inf. Evidence:
    finite inputs hold such values, the op's output holds inf, and the same inputs divided by
    one power of two (exact in every float type) into float16's range come out right. For an
    op whose output follows a common scale of its inputs (an add, a scale, a matmul): declared
    only where that holds."""
    def probe():
        big = max((float(a.detach().abs().max()) for a in args
                   if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel()),
                  default=0.0)
        if not (FP16_MAX < big < math.inf) or not bool(torch.isinf(run(*args)).any()):
            return None
        k = math.ceil(math.log2(big / 2.0 ** 14))  # the largest input under 2^14 after it
        scaled = _float_args(args, lambda t: (t.detach() / 2.0 ** k).requires_grad_(
            t.requires_grad))
        if not right(verify, *scaled):
            return None
        return Evidence(f"inputs up to {_fmt(big)} here: values past float16's largest "
                        f"(65504) become inf, so an intermediate is kept in float16: {fix}",
                        f"the same inputs divided by 2^{k} (all under 2^14, in float16's "
                        f"range) come out right")
    return probe


def _float32(t):
    return t.detach().to(torch.float32).requires_grad_(t.requires_grad)


def _moves_in_steps(run, args) -> bool:
    """run's float32 output nudged by NUDGE and 2 NUDGE (every floating input times 1 + d s, s a
    fixed random sign each): a float32 computation moves twice as far the second time (up to its
    own rounding, ~1% of the move); values rounded to 16 bits stay put or jump (or, rounded
    coarsely enough, none moves at all)."""
    def nudged(d):
        def one(t):
            g = torch.Generator().manual_seed(t.numel())
            s = torch.randint(0, 2, t.shape, generator=g).to(t.device, t.dtype) * 2 - 1
            return (t.detach() * (1 + d * s)).requires_grad_(t.requires_grad)
        return run(*_float_args(args, one)).detach().double()
    base, one, two = nudged(0.0), nudged(NUDGE), nudged(2 * NUDGE)
    moved = max((2 * (one - base)).norm().item(), (two - base).norm().item())
    return moved == 0 or not (two - base - 2 * (one - base)).norm().item() <= 0.5 * moved


# --- the blocks of an online softmax, and the max's neutral value --------------------------------

def online_rescale(verify, make) -> Probe:
    """The online softmax's rescale is missing when the op is right while the row's max sits in
    the first block and wrong when a later block raises it. `make(where)` gives the op's
    arguments, every row's max at its "first" or "last" element, the rows several blocks long."""
    def probe():
        if right(verify, *make("first")) and not right(verify, *make("last")):
            return Evidence("the running sums are not rescaled when the max grows: when a later "
                            "block raises a row's max from m_old to m_new, what was summed "
                            "before (the output accumulator and the sum l) must be multiplied "
                            "by exp(m_old - m_new)",
                            "right when every row's max is in its first block, wrong when it "
                            "is in its last")
        return None
    return probe


def max_subtracted(verify, make) -> Probe:
    """exp of the raw values overflows when the op is right on rows around 0 and wrong on the
    same rows shifted up by 100 (the max not subtracted: exp(100) is inf in float32). `make(shift)`
    gives the arguments, every value shifted by `shift`, for an op whose result does not change
    (softmax, attention: shift-invariant)."""
    def probe():
        if right(verify, *make(0)) and not right(verify, *make(100)):
            return Evidence("exp overflows: exp of a raw value passes float32's range (exp(89) is "
                            "inf): subtract the row's running max before exp, so that every "
                            "exponent is <= 0",
                            "right on rows around 0, wrong on the same rows shifted up by 100")
        return None
    return probe


def max_neutral(verify, make) -> Probe:
    """Masked lanes enter a max as 0 (instead of -inf) when the op is right on rows whose values
    are all well above 0 and wrong on rows all well below: `make(sign)` gives the arguments,
    every value shifted by sign * a large constant, the rows of a length that leaves masked
    lanes in their last block."""
    def probe():
        if right(verify, *make(1)) and not right(verify, *make(-1)):
            return Evidence("masked lanes take part as 0: where every real value is below 0, "
                            "a 0 wins the max (and adds to the sum); load masked lanes (or set "
                            "masked scores) to -inf, the max's neutral value",
                            "right when every value is well above 0, wrong when every value "
                            "is well below 0")
        return None
    return probe


def partial_block(verify_at, length: int, whole: tuple) -> Probe:
    """The partial last block is mishandled when the op is right at lengths that are a whole
    number of blocks (`whole`) and wrong at `length`. `verify_at(n)` runs and compares at n."""
    def probe():
        if all(right(verify_at, n) for n in whole) and not right(verify_at, length):
            return Evidence("the last, partial block is mishandled: mask the loads past the end "
                            "(other=0 where it is summed), what is computed from them, and the "
                            "stores past the end",
                            f"right at lengths {', '.join(map(str, whole))} (whole blocks), "
                            f"wrong at {length}")
        return None
    return probe
