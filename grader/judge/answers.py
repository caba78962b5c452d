"""Answers: the inputs of a timing's validated calls and the float64 answers they are held to
(grader.judge.measure), drawn at the timing's turn or ahead of it (Drawn: while the judge warms
up before its gate, the checks sharing the GPU and nothing timed).

A reference declares how its answer is computed where the plain one will not do (expect):
`matching(args, output)` where the call's output decides the answer (dropout's mask, a ReLU's
kink), `validating` where the plain reference does not fit in the GPU's memory at the benchmark
case (13's S x S matrices).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grader.common.seam import tree_map
from grader.common.settings import current
from grader.judge.cases import dy_for, fresh_seed, make_inputs, nbytes
from grader.judge.testing import expected_grads, float64

BATCH_BYTES = 12 << 30      # input + output memory one validated batch may use
# QUICK's validated batch: the fewest input sets that still run back to back and are each proved
# alone. Validating 8 was 4.1 of the 6 s that timed 13 under QUICK (an H200, 2026-11-30); the
# full grade keeps up to 8
QUICK_SETS = 2
# normwise relative error a timed output may have against float64 (the checks hold values
# elementwise; here the point is that each timed call computed this call's answer)
REL_BOUND = {"float64": 1e-9, "float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2, "int8": 1e-2}


def expect(exercise, ref, args, mode, dy=None, first=None) -> list:
    """The float64 answer to one call: its outputs (forward), or its first output and the
    gradients (forward+backward). A reference may declare, as functions like `reference`:
    - `matching(args, output)`, the answer to a call whose output is `output`, for an op whose
      answer the output decides (dropout's mask; a ReLU's kink): `first` is that output;
    - `validating`, the same math in less memory, where the plain reference does not fit in the
      GPU's at the benchmark case (13's S x S matrices)."""
    b = exercise.benchmark
    fn = ref.matching(args, first) if hasattr(ref, "matching") else \
        getattr(ref, "validating", ref.reference)
    if mode == "forward":
        with torch.no_grad():
            want = fn(*float64(args))
        return list(want) if isinstance(want, (tuple, list)) else [want]
    outs, grads = expected_grads(fn, *args, wrt=b.grad_args, dy=dy)
    return list(outs[:1]) + list(grads)


def validate(exercise, ref, args, mode, got, dy=None, want=None) -> str | None:
    """None if this call's outputs (and gradients) are this input's answer; else why not.
    `want`: the answer, where it was computed ahead (expect)."""
    if want is None:
        want = expect(exercise, ref, args, mode, dy, got[0])
    for k, (g, w) in enumerate(zip(got, want)):
        if g is None or w is None:
            continue
        g64, w64 = g.double(), w.double()
        if not bool(torch.isfinite(g64).all()) and bool(torch.isfinite(w64).all()):
            return f"timed output {k} has NaN or inf where the reference is finite"
        err = (torch.linalg.vector_norm(g64 - w64) /
               torch.linalg.vector_norm(w64).clamp_min(1e-30)).item()
        bound = REL_BOUND.get(str(g.dtype).removeprefix("torch."), 1e-2)
        if not err <= bound:
            return (f"timed output {k} is not this call's answer (relative error {err:.3g}, "
                    f"bound {bound:g}): a cached or deferred result, or a special case for the "
                    f"benchmark size")
    return None


@dataclass
class Call:
    """One validated call's arguments (and incoming gradient), with its float64 answer."""
    args: tuple
    dy: object
    want: list | None  # None: computed once the call has answered


@dataclass
class Drawn:
    """A timing's input sets, drawn ahead while the judge warms up before its gate (checks share
    the GPU then; nothing is timed), so that at its turn the validation only compares: the
    float64 answers were most of QUICK's timing of 13 (0.27 s of the forward's 0.6 s, 0.69 s of
    forward+backward's 1.2 s, on an H200, 2026-11-30), and the GPU is one track's at a time
    then. Per mode, per set of the first validated batch: the inputs staged (a graph captured on
    them), the values written into them before the timed run, and those of its call run alone,
    each from a fresh seed drawn in this process (the submission's sees none of them before its
    call), the last two with their answers. Taken once: a second try draws its own, then."""
    sets: dict = field(default_factory=dict)  # mode -> [(staged, Call written, Call alone)]
    bytes: int = 0

    def take(self, mode: str) -> list:
        return self.sets.pop(mode, [])


def batch_size(one) -> int:
    """Input sets in a validated batch, for sets like `one` (the arguments at the case)."""
    per_set = nbytes(one) * 2 + 1
    return max(2, min(QUICK_SETS if current().quick else 8, BATCH_BYTES // per_set))


def scalars_of(args):
    """What a captured call holds fixed (its scalars): `args` less its tensors."""
    return tree_map(lambda v: None if isinstance(v, torch.Tensor) else v, args)


def make_call(exercise, ref, mode, args, *, answer: bool = True) -> Call:
    """A call's arguments, its incoming gradient (forward+backward), and (`answer`) its
    float64 answer."""
    dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
    return Call(args, dy, expect(exercise, ref, args, mode, dy) if answer else None)


def fresh_call(exercise, ref, mode, case, fixed, *, answer: bool = True) -> Call:
    """A call on new values from a fresh seed at `case`, holding `fixed`'s scalars (what a
    captured call holds fixed: scalars_of)."""
    args = with_fixed(fixed, make_inputs(exercise, ref, case, fresh_seed()))
    return make_call(exercise, ref, mode, args, answer=answer)


def draw(exercise, ref, mode, k, budget, stop) -> tuple[list, int]:
    """Up to `k` of a batch's sets for Drawn, within `budget` bytes; fewer when `stop()` (the
    grade is about to time a track) or the budget says so. Returns (sets, bytes)."""
    out, used = [], 0
    for _ in range(k):
        if stop():
            break
        case = exercise.benchmark.case
        staged = make_inputs(exercise, ref, case, fresh_seed())
        written, alone = (fresh_call(exercise, ref, mode, case, scalars_of(staged))
                          for _ in range(2))
        size = nbytes((staged, written.args, written.dy, written.want, alone.args, alone.dy,
                       alone.want))
        if used + size > budget:
            break
        out.append((staged, written, alone))
        used += size
    return out, used


def with_fixed(fixed, fresh):
    """`fresh`'s tensors with `fixed`'s other arguments (same structure)."""
    if isinstance(fresh, torch.Tensor):
        return fresh
    if isinstance(fresh, (tuple, list)):
        return type(fresh)(with_fixed(a, b) for a, b in zip(fixed, fresh))
    return fixed


def refill(sent, fresh):
    """Write `fresh`'s tensors into the shared tensors of `sent` (same structure), keeping
    `sent`'s other arguments (a scalar, a seed: a captured graph holds them fixed). Returns the
    arguments as the judge computes the expectation from: fresh values, the same scalars."""
    if isinstance(sent, torch.Tensor):
        sent.copy_(fresh)
        return fresh
    if isinstance(sent, (tuple, list)):
        return type(sent)(refill(s, f) for s, f in zip(sent, fresh))
    return sent
