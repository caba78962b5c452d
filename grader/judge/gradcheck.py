"""Gradcheck: torch.autograd.gradcheck of a submission's op, with a message a learner can act on.

    from grader.judge.gradcheck import gradcheck_checked

The forward is checked in float64 first (a forward computed in float32 makes gradcheck's finite
differences noise, and the backward would be blamed for it); a failure is located (which input,
which output, the largest difference, its index, the numerical and the analytical value there)
instead of gradcheck's printed Jacobians.
"""
from __future__ import annotations

import contextlib
import math
import re
import sys

import torch
import torch.autograd.gradcheck  # noqa: F401 (the module, not the function torch.autograd has)
from torch.autograd.gradcheck import GradcheckError

from grader.judge.check import Mismatch
from grader.judge.testing import as_tuple, backward_stage, leaf

# gradcheck's largest relative error of a forward computed in float64 is ~1e-15; one computed in
# float32 is off by ~1e-7 relative: 1e-10 separates them with room on both sides
_FLOAT64_REL = 1e-10
_LOCATED = 64  # input elements probed by finite differences when locating a gradcheck failure
# Up to this many input elements, gradcheck compares the whole Jacobian (2 forwards per element);
# above, a projection of it (fast mode: v^T J u for random u, v, a few forwards in all). Every
# call of the op crosses to the submission's process, ~0.1 s each on Triton's interpreter: 13's
# (1, 1, 5, 64) q, k, v are 960 elements, 2000 forwards. A wrong backward changes v^T J u for
# random u, v with probability one; each element of the gradient is also held to the float64
# reference by the exercise's value checks.
FULL_JACOBIAN_MAX = 48


def gradcheck_checked(fn, inputs, *, names, outputs=None, reference=None, eps=1e-6, atol=1e-5,
                      rtol=1e-4, fast_mode=None, hint=None) -> None:
    """torch.autograd.gradcheck of `fn(*inputs)` (float64 leaves), with a message a learner can
    act on instead of gradcheck's printed Jacobians: which input, which output, the largest
    difference, its index, the numerical and the analytical value there, and a hint.

    First the forward alone, in float64: it must return float64 and, when `reference` (the
    float64 reference, same arguments) is given, match it to float64 precision. A forward that
    computes in float32 makes gradcheck's finite differences (steps of `eps`) noise, and the
    backward would be blamed for it. `names`: the inputs' names, `outputs`: the outputs'; `hint`:
    a line appended to a backward mismatch (e.g. the gradient formulas). `fast_mode`: None
    chooses by the inputs' size (FULL_JACOBIAN_MAX)."""
    if fast_mode is None:
        fast_mode = sum(a.numel() for a in inputs if isinstance(a, torch.Tensor)
                        and a.requires_grad) > FULL_JACOBIAN_MAX
    outputs = list(outputs or [])
    args = [a.detach() if isinstance(a, torch.Tensor) else a for a in inputs]
    with torch.no_grad():
        got = as_tuple(fn(*args))
    out_name = lambda i: (outputs[i] if i < len(outputs) else
                          "y" if len(got) == 1 else f"output {i}")
    for i, g in enumerate(got):
        if isinstance(g, torch.Tensor) and g.dtype != torch.float64:
            raise Mismatch(f"{out_name(i)} came back as {g.dtype} for float64 inputs: return the "
                           f"inputs' dtype (gradcheck runs in float64)")
    if reference is not None:
        with torch.no_grad():
            want = as_tuple(reference(*args))
        for i, (g, w) in enumerate(zip(got, want)):
            if not isinstance(g, torch.Tensor) or not g.numel():
                continue
            err = (g - w).abs()
            worst = float(err.nan_to_num(math.inf).max())
            rel = worst / max(1.0, float(w.abs().max()))
            if rel <= _FLOAT64_REL:
                continue
            at = tuple(int(k) for k in torch.unravel_index(err.nan_to_num(math.inf).argmax(),
                                                           g.shape))
            where = (f"{out_name(i)}{list(at)} = {float(g[at]):.17g}, the float64 reference "
                     f"{float(w[at]):.17g}")
            if rel < 1e-3:
                raise Mismatch(f"the forward ignores float64: {where} (off by {worst:.1e}, the "
                               f"size of float32 rounding; float64 math is good to ~1e-15): it "
                               f"computes in float32. Load, compute and store in the input's "
                               f"dtype when it is float64 (an accumulator fixed at tl.float32 "
                               f"or `float` does not): gradcheck's finite differences (steps of "
                               f"{eps:g}) need float64 precision")
            raise Mismatch(f"the forward is wrong in float64 (before any gradient): {where}: "
                           f"fix the forward first (its own checks say more)")
    try:
        with backward_stage(), _no_slow_mode_wording():
            torch.autograd.gradcheck(fn, tuple(inputs), eps=eps, atol=atol, rtol=rtol,
                                     fast_mode=fast_mode)
    except GradcheckError as e:
        diff_pos = [k for k, a in enumerate(inputs)
                    if isinstance(a, torch.Tensor) and a.requires_grad]
        raise Mismatch(_gradcheck_explained(fn, args, diff_pos, str(e), names=names,
                                            out_name=out_name,
                                            eps=eps, atol=atol, rtol=rtol, hint=hint)) from None


@contextlib.contextmanager
def _no_slow_mode_wording():
    """gradcheck's fast mode, once it has failed, recomputes both full Jacobians only to print
    them (2 forwards and 1 backward per input element: 60 s for 05's 1200-element row on the
    interpreter, after the verdict). The message below locates the failure instead
    (_gradcheck_explained), so that recomputation is skipped: the verdict is gradcheck's as
    ever. A torch without this function is left as it is (slower to fail, same verdict)."""
    module = sys.modules["torch.autograd.gradcheck"]
    slow = getattr(module, "_run_slow_mode_and_get_error", None)
    if slow is None:
        yield
        return
    module._run_slow_mode_and_get_error = lambda *a, **k: ""
    try:
        yield
    finally:
        module._run_slow_mode_and_get_error = slow


def _gradcheck_explained(fn, args, diff_pos, text, *, names, out_name, eps, atol, rtol,
                         hint) -> str:
    """gradcheck's failure, located: d<input> of <v, output> (v a fixed random dy) by central
    differences at up to _LOCATED elements of the input, against the backward's value there.
    gradcheck numbers its inputs among those that require grad: `diff_pos` maps them back."""
    first = text.strip().splitlines()[0] if text.strip() else "gradcheck failed"
    m = re.search(r"output (\d+) with respect to input (\d+)", text)
    rerun = "\n  (gradcheck's full Jacobians are left out: the REPRO line reruns this check)"
    if not m:
        return f"gradcheck: {first}{rerun}"
    o, j = int(m.group(1)), int(m.group(2))
    pos = diff_pos[j] if j < len(diff_pos) else j
    name = names[pos] if pos < len(names) else f"input {pos}"
    out = out_name(o)
    x = args[pos]
    with torch.no_grad():
        y = as_tuple(fn(*args))[o]
    v = torch.randn(y.shape, generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64).to(y.device)

    def project(a):
        with torch.no_grad():
            return float((as_tuple(fn(*a))[o] * v).sum())

    leaves = list(args)
    leaves[pos] = leaf(x)
    try:
        (analytical,) = torch.autograd.grad((as_tuple(fn(*leaves))[o] * v).sum(), leaves[pos],
                                            allow_unused=True)
    except RuntimeError as err:
        return (f"gradcheck: {first}; the backward of {out} for `{name}` raised: "
                f"{str(err).splitlines()[0] if str(err) else type(err).__name__}{rerun}")
    head = (f"gradcheck: d{name} is wrong (the Jacobian of {out} with respect to `{name}` "
            f"differs from finite differences of your forward, steps of {eps:g})")
    if analytical is None:
        return f"{head}: no gradient reached `{name}` from {out}{rerun}"
    n = x.numel()
    probe = range(n) if n <= _LOCATED else torch.linspace(0, n - 1, _LOCATED).long().tolist()
    worst = None
    for k in probe:
        at = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), x.shape))
        hi, lo = x.clone(), x.clone()
        hi[at] += eps
        lo[at] -= eps
        a_hi, a_lo = list(args), list(args)
        a_hi[pos], a_lo[pos] = hi, lo
        num = (project(a_hi) - project(a_lo)) / (2 * eps)
        ana = float(analytical[at])
        diff = abs(num - ana) if math.isfinite(ana) else math.inf
        if worst is None or diff > worst[0]:
            worst = (diff, at, num, ana)
    diff, at, num, ana = worst
    sampled = "" if n <= _LOCATED else f" (of {_LOCATED} elements probed, of {n})"
    if diff <= atol + rtol * abs(num):
        where = (f"; at the elements probed{sampled} the backward agrees with finite differences "
                 f"for a random dy: gradcheck's own projection differed ({first})")
    else:
        where = (f": the largest difference{sampled}, {diff:.3g}, is at {name}{list(at)}: "
                 f"numerical {num:.6g}, analytical (your backward) {ana:.6g}, for a random dy "
                 f"of {out}")
    fix = f"\n  check the backward's formula for d{name}" + (f": {hint}" if hint else "")
    return f"{head}{where}{fix}{rerun}"
