"""Check: the one comparison helper and the one checked call, used by every exercise's tests.

`assert_close` compares an output with a float64 reference under per-dtype tolerances and, on a
mismatch, says where, by how much, and what usually causes that pattern. `call_checked` calls an
entry point and verifies it left its inputs untouched and returned fresh memory.
"""
from __future__ import annotations

import re

import torch

MAX_SHOWN = 5


class Mismatch(AssertionError):
    """A check failed; the message is written for the learner."""


# The non-contiguous tensors the op was last given in this check (set by the proxy on each call,
# cleared when a check starts): a wrong answer on a strided view is explained as that.
_strided: list[tuple[str, tuple, tuple]] = []


def note_call(args, names=None) -> None:
    """Remember which tensor arguments of the op's latest call were strided views."""
    names = list(names or [])
    _strided[:] = [(names[i] if i < len(names) else f"argument {i}", tuple(a.shape), a.stride())
                   for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor) and a.numel() > 1 and not a.is_contiguous()]


def _strided_cause() -> str | None:
    if not _strided:
        return None
    name, shape, stride = _strided[0]
    return (f"`{name}` was a strided view (shape {shape}, strides {stride}): a kernel that "
            f"indexes it as if contiguous reads the wrong elements. Pass its strides to the "
            f"kernel, or call .contiguous() before the launch (one more pass over memory), or "
            f"refuse it with a message naming `{name}`")


def _fmt(v: float, digits: int = 6) -> str:
    return f"{v:.{digits}g}"


def _context(ctx: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in ctx.items())


def assert_close(got, expected, *, tol: dict, dtype=None, what: str = "output",
                 atol_scale: tuple | None = None, **ctx):
    """`got` (any dtype) against `expected` (float64 reference) within atol + rtol*|expected|.

    `dtype` is the dtype `got` must have (default: keep whatever `expected` was computed for
    via ctx); `tol` is {"atol", "rtol"} for that dtype; `ctx` (shape, seed, ...) is printed so a
    failure can be reproduced. NaN in `got` never passes unless `expected` has NaN there too.
    `atol_scale`: (a float64 tensor broadcastable to `expected`, what it is): each element's
    atol is the dtype's times it, where the math itself amplifies a rounding error (a norm's
    backward multiplies by rstd, up to 1/sqrt(eps) for a row of one element).
    """
    if dtype is not None:
        ctx = {"dtype": str(dtype).removeprefix("torch."), **ctx}
    where = f" ({_context(ctx)})" if ctx else ""
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what}: expected a tensor, got {type(got).__name__}{where}")
    if tuple(got.shape) != tuple(expected.shape):
        raise Mismatch(f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}{where}")
    if dtype is not None and got.dtype != dtype:
        raise Mismatch(f"{what}: dtype {got.dtype}, expected {dtype} (the output keeps the "
                       f"input's dtype; compute in float32, then cast when storing){where}")
    if got.device != expected.device:
        raise Mismatch(f"{what}: on {got.device}, expected on {expected.device} (allocate the "
                       f"output on the input's device){where}")
    # compared where the data lives (a GPU compares 2^28 elements in milliseconds); only the
    # description of a mismatch comes back to the CPU
    g = got.detach().to(torch.float64).reshape(-1)
    e = expected.detach().to(torch.float64).reshape(-1)
    atol, rtol = tol["atol"], tol["rtol"]
    atols = atol
    if atol_scale is not None:
        atols = atol * atol_scale[0].to(e.device, torch.float64).expand(expected.shape).reshape(-1)
    both_nan = torch.isnan(g) & torch.isnan(e)
    same_inf = torch.isinf(g) & (g == e)
    ok = ((g - e).abs() <= atols + rtol * e.abs()) | both_nan | same_inf
    if bool(ok.all()):
        return
    g, e, ok = g.cpu(), e.cpu(), ok.cpu()
    bad = (~ok).nonzero().flatten()
    shape = tuple(got.shape)
    n = g.numel()
    idx = lambda i: list(torch.unravel_index(torch.tensor(i), shape)) if len(shape) > 1 else [i]
    lines = [f"{what}: {bad.numel()} of {n} elements differ ({100 * bad.numel() / n:.3g}%)"
             f"{where}", "  first mismatches (index: got vs expected):"]
    digits = 15 if got.dtype == torch.float64 else 6  # enough digits to see the difference
    for i in bad[:MAX_SHOWN].tolist():
        lines.append(f"    {[int(j) for j in idx(i)]}: {_fmt(g[i].item(), digits)} vs "
                     f"{_fmt(e[i].item(), digits)}")
    finite = ~(torch.isnan(g) | torch.isinf(g))
    abs_err = torch.where(finite, (g - e).abs(), torch.full_like(g, float("inf")))
    worst = int(abs_err.argmax())
    rel = (abs_err / e.abs().clamp_min(atol)).max().item()
    allowed = f"atol={atol:g}"
    if atol_scale is not None:
        allowed += (f" times {atol_scale[1]} (here up to {_fmt(atols.max().item(), 3)}; "
                    f"{_fmt(atols.cpu()[worst].item(), 3)} at the largest error)")
    lines.append(f"  max abs error {_fmt(abs_err[worst].item())} at {[int(j) for j in idx(worst)]}, "
                 f"max rel error {_fmt(rel)}; allowed: {allowed} rtol={rtol:g}")
    hint = _strided_cause() or _likely_cause(g, e, bad, shape, ok, got.dtype)
    if hint:
        lines.append(f"  likely cause: {hint}")
    raise Mismatch("\n".join(lines))


def _likely_cause(g, e, bad, shape, ok, dtype) -> str | None:
    n = g.numel()
    nan_bad = torch.isnan(g[bad]) & ~torch.isnan(e[bad])
    first = int(bad[0])
    tail = bad.numel() == n - first
    if bool(nan_bad.all()):
        if tail and first > 0:
            return (f"elements from flat index {first} on were never written (outputs start as "
                    f"NaN): the grid does not cover the tail, or the mask/bounds check cuts it off")
        if tail:
            return ("no element was written (outputs start as NaN): is the kernel launched, on "
                    "the right tensor, and is the launch error checked?")
        return ("some elements were never written (outputs start as NaN): check the index "
                "arithmetic and the stride between blocks/programs")
    if bool(torch.isnan(g[bad]).any()) or bool(torch.isinf(g[bad]).any()):
        return ("NaN/inf where the reference is finite: an overflow (exp or x*x in fp16/bf16?), "
                "a division by zero, or a read past the end of an input")
    if tail and first > 0:
        return f"everything from flat index {first} on is wrong: a tail or a last block mishandled"
    if len(shape) >= 2 and shape[-1] > 1:
        cols = torch.unique(bad % shape[-1])
        rows = torch.unique(bad // shape[-1])
        if cols.numel() < shape[-1] and rows.numel() == n // shape[-1]:
            return (f"every row is wrong in the same {cols.numel()} of {shape[-1]} columns "
                    f"(first {cols[0].item()}): a column tail or a per-column input (bias, "
                    f"weight) indexed wrongly")
        if cols.numel() < shape[-1] and rows.numel() >= max(2, 2 * cols.numel()):
            return (f"the wrong elements, in {rows.numel()} rows, all lie in {cols.numel()} of "
                    f"{shape[-1]} columns (first {cols[0].item()}): a column tail or a "
                    f"per-column input (bias, weight) indexed wrongly")
        if rows.numel() < n // shape[-1] and bool(ok.view(-1, shape[-1])[rows].logical_not().all()):
            return (f"{rows.numel()} whole rows are wrong (first {rows[0].item()}): the row "
                    f"index or the row stride")
    rel = ((g[bad] - e[bad]).abs() / e[bad].abs().clamp_min(1e-12)).median().item()
    if rel < 5e-2 and dtype == torch.float64:
        return ("small errors everywhere in float64: computing (or passing a scalar) in float32 "
                "instead of float64?")
    # fp16/bf16 math shows as relative errors of about their unit roundoff (5e-4 / 4e-3);
    # a normalizer taken over the wrong elements, as a few percent on every element of a row
    if rel < 5e-2 and (dtype in (torch.float16, torch.bfloat16) or rel < 5e-3):
        return ("small errors everywhere: accumulating or computing in a 16-bit type "
                "(fp16/bf16) instead of float32?")
    if rel < 5e-2:
        return ("close but off almost everywhere: a shared term (a row's sum, mean, max or "
                "scale) taken over the wrong elements (masked lanes loaded as 0 instead of a "
                "neutral value such as -inf for a max?), or math in a lower precision")
    return None


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()


def call_checked(fn, *args, names=None, **kwargs):
    """Call `fn`; fail if it changed any tensor input or returned memory shared with one."""
    names = list(names or [f"argument {i}" for i in range(len(args))])
    inputs = [(names[i], a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    inputs += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    before = [(name, t, t.detach().clone()) for name, t in inputs]
    out = fn(*args, **kwargs)
    for name, t, copy in before:
        same = torch.eq(t.detach(), copy) | (torch.isnan(copy) & torch.isnan(t.detach())) \
            if t.is_floating_point() else torch.eq(t.detach(), copy)
        if not bool(same.all()):
            changed = (~same).nonzero()
            raise Mismatch(f"input `{name}` was modified ({changed.shape[0]} elements, first at "
                           f"{changed[0].tolist()}): an op must not write to its inputs; write "
                           f"the result to a new tensor")
    outs = out if isinstance(out, (tuple, list)) else [out]
    for o in outs:
        if isinstance(o, torch.Tensor):
            for name, t, _ in before:
                if _shares_memory(o, t):
                    raise Mismatch(f"the output shares memory with input `{name}`: return a new "
                                   f"tensor (e.g. torch.empty_like) instead of the input or a "
                                   f"view of it")
    return out


def names_argument(message: str, argument: str) -> bool:
    """Does an error message name `argument` as a word (x, `x`, 'x', x.dtype)?"""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])", message) is not None


def expect_refusal(fn, *args, argument: str, error=(RuntimeError, ValueError, TypeError)):
    """`fn(*args)` must raise, and the message must name `argument` (e.g. 'x')."""
    try:
        fn(*args)
    except NotImplementedError:
        raise
    except error as e:
        msg = str(e)
        if "not implemented yet" in msg:
            raise
        if not names_argument(msg, argument):
            raise Mismatch(f"the input was refused, but the message does not name the argument "
                           f"`{argument}`: {msg.splitlines()[0] if msg else type(e).__name__!r}")
        return msg
    raise Mismatch(f"bad input `{argument}` was accepted: check it first and refuse it with a "
                   f"message naming `{argument}` (TORCH_CHECK(cond, \"{argument} must ...\"))")
