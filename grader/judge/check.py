"""Check: the one comparison helper and the one checked call, used by every exercise's tests.

`assert_close` compares an output with a float64 reference under per-dtype tolerances and, on a
mismatch, says where, by how much, and what usually causes that pattern. `call_checked` calls an
entry point and verifies it left its inputs untouched and returned fresh memory.
"""
from __future__ import annotations

import math
import re

import torch

from grader.common.errors import Mismatch
from grader.common.seam import shares_memory

__all__ = ["Mismatch", "assert_close", "call_checked", "expect_refusal", "names_argument",
           "note_call"]

MAX_SHOWN = 5


# The tensor arguments of the op's latest call in this check (set by the proxy on each call,
# cleared when a check starts): (name, shape, strides, storage offset, element size). A wrong
# answer is explained by a view only when a view was given, by a per-column input only when the
# op has one.
_last_call: list[tuple[str, tuple, tuple, int, int]] = []


def note_call(args, names=None) -> None:
    """Remember the tensor arguments of the op's latest call (names, shapes, strides)."""
    names = list(names or [])
    _last_call[:] = [(names[i] if i < len(names) else f"argument {i}", tuple(a.shape), a.stride(),
                      a.storage_offset(), a.element_size())
                     for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


def _is_view(shape, stride, offset) -> bool:
    """Strided (not row-major dense) or starting past the storage's first element."""
    return _is_strided(shape, stride) or offset != 0


def _is_strided(shape, stride) -> bool:
    expected = 1
    for n, st in reversed(list(zip(shape, stride))):
        if n != 1 and st != expected:
            return True
        expected *= n
    return False


def _view_cause() -> str | None:
    """The argument given as a strided or offset view in this call, if any: the check's wrong
    answer came with it (the shared strategy makes one argument a view at a time)."""
    views = [(n, sh, st, off, size) for n, sh, st, off, size in _last_call
             if math.prod(sh) > 0 and _is_view(sh, st, off)]
    if not views:
        return None
    others = [n for n, *_ in _last_call if n not in {v[0] for v in views}]
    name, shape, stride, offset, size = views[0]
    if len(views) == 1:
        rest = (f", every other input ({', '.join(f'`{o}`' for o in others)}) contiguous"
                if others else "")
    else:
        rest = f" (so were {', '.join(f'`{v[0]}`' for v in views[1:])})"
    if not _is_strided(shape, stride):
        return (f"`{name}` was a dense view starting {offset} elements ({offset * size} bytes) "
                f"into its memory{rest}: use the tensor's own data pointer (it includes the "
                f"offset); a 16-byte vector load needs a 16-byte-aligned address: check the "
                f"alignment and fall back to a scalar path")
    return (f"the output is wrong when `{name}` is a strided view (shape {shape}, strides "
            f"{stride}){rest}: index each tensor with its own strides (`{name}`'s for "
            f"`{name}`), or call .contiguous() on it before the launch (one more pass over "
            f"memory), or refuse it with a message naming `{name}`")


# what a fresh output holds before anything is written (torch.empty under
# torch.utils.deterministic.fill_uninitialized_memory: the dtype's quiet NaN, positive). A NaN a
# kernel computes (inf/inf, 0*inf, inf-inf) is the CPU's default NaN (sign bit set) or the
# GPU's canonical 0x7FFFFFFF: another bit pattern.
_POISON_BITS = {torch.float32: (torch.int32, 0x7FC00000), torch.float16: (torch.int16, 0x7E00),
                torch.bfloat16: (torch.int16, 0x7FC0),
                torch.float64: (torch.int64, 0x7FF8000000000000)}


def _poisoned(got: torch.Tensor) -> torch.Tensor:
    """Flat bool mask (CPU): the elements still holding the poison bit pattern."""
    if got.dtype not in _POISON_BITS:
        return torch.isnan(got.detach().reshape(-1).to(torch.float64)).cpu()
    ity, pattern = _POISON_BITS[got.dtype]
    flat = got.detach().contiguous().reshape(-1).view(ity)
    return (flat == torch.tensor(pattern, dtype=torch.int64).to(ity)).cpu()


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
    # the poison and NaN evidence first, then a view the call was given, then the pattern
    hint = (_nan_cause(g, e, bad, _poisoned(got)) or _view_cause()
            or _pattern_cause(g, e, bad, shape, ok, got.dtype))
    if hint:
        lines.append(f"  likely cause: {hint}")
    raise Mismatch("\n".join(lines))


_U = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24,
      torch.float64: 2.0 ** -53}  # unit roundoff


def _representable(v: torch.Tensor, dtype) -> torch.Tensor:
    """Which float64 values are exactly numbers of `dtype` (NaN/inf excluded)."""
    with torch.no_grad():
        return (v.to(dtype).to(torch.float64) == v) & torch.isfinite(v)


def _nan_cause(g, e, bad, poisoned) -> str | None:
    """Unwritten elements (the poison survived), computed NaN, inf: or None."""
    n = g.numel()
    gb, eb = g[bad], e[bad]
    first = int(bad[0])
    tail = bad.numel() == n - first
    unwritten = poisoned[bad] & ~torch.isnan(eb)
    if bool(unwritten.all()):
        if tail and first > 0:
            return (f"elements from flat index {first} on were never written (they still hold "
                    f"the NaN fresh outputs start with): the grid does not cover the tail "
                    f"(round the block count up: triton.cdiv(n, BLOCK), (n + B - 1) / B in "
                    f"CUDA; n // BLOCK drops the tail), or the mask/bounds check cuts it off")
        if tail:
            return ("no element was written (each still holds the NaN fresh outputs start "
                    "with): is the kernel launched (a block count rounded down, n // BLOCK, is "
                    "0 when n < BLOCK: round it up), on the right tensor, and is the launch "
                    "error checked?")
        return ("some elements were never written (they still hold the NaN fresh outputs "
                "start with): check the index arithmetic and the stride between "
                "blocks/programs")
    if bool(unwritten.any()):
        at = int(bad[unwritten.nonzero()[0, 0]])
        return (f"{int(unwritten.sum())} elements were never written (first at flat index "
                f"{at}: still the NaN fresh outputs start with), and other elements are wrong "
                f"too: check which elements each program stores")
    computed_nan = torch.isnan(gb) & ~torch.isnan(eb)
    if bool(computed_nan.any()):
        return ("NaN computed where the reference is finite (inf/inf, inf - inf, 0 * inf or "
                "0/0): an overflow to inf first (exp of a large value, x*x in fp16/bf16: "
                "subtract the max before exp, square in float32), a sum whose every term "
                "underflowed to 0 (exp of values all below about -100), or a division by zero")
    if bool((torch.isinf(gb) & torch.isfinite(eb)).any()):
        return ("inf where the reference is finite: an overflow (exp of a large value, x*x or "
                "a sum in fp16/bf16: compute in float32), or a division by zero")
    return None


def _pattern_cause(g, e, bad, shape, ok, dtype) -> str | None:
    """What the positions and sizes of the wrong elements support, or None."""
    first = int(bad[0])
    tail = bad.numel() == g.numel() - first
    if tail and first > 0:
        return f"everything from flat index {first} on is wrong: a tail or a last block mishandled"
    if len(shape) >= 2 and shape[-1] > 1:
        hint = _column_or_row_cause(g, e, bad, shape, ok)
        if hint:
            return hint
    return _precision_cause(g, e, bad, shape, dtype)


def _column_or_row_cause(g, e, bad, shape, ok) -> str | None:
    n, cols_n = g.numel(), shape[-1]
    cols = torch.unique(bad % cols_n)
    rows = torch.unique(bad // cols_n)
    rows_n = n // cols_n
    # a column pattern is evidence only where the wrong elements fill those columns (most rows
    # of each): scattered rounding errors touch many rows and many columns, but sparsely
    dense = bad.numel() >= 0.9 * rows.numel() * cols.numel()
    if dense and cols.numel() < cols_n and rows.numel() >= max(2, min(rows_n, 2 * cols.numel())):
        where = (f"every row is wrong in the same {cols.numel()} of {cols_n} columns"
                 if rows.numel() == rows_n else
                 f"the wrong elements, in {rows.numel()} rows, all lie in {cols.numel()} of "
                 f"{cols_n} columns")
        c0 = int(cols[0])
        if c0 > 0 and int(cols[-1]) == cols_n - 1 and cols.numel() == cols_n - c0:
            return (f"{where}, the last ones (from column {c0} on): the row's tail (its last "
                    f"block) is mishandled: mask it by the row length")
        per_column = [name for name, sh, *_ in _last_call
                      if len(sh) == 1 and sh[0] == cols_n and cols_n != n]
        if per_column:
            names = " or ".join(f"`{p}`" for p in per_column)
            return (f"{where} (first {c0}): the per-column input {names} (one value per "
                    f"column) read at the wrong index?")
        return f"{where} (first {c0}): check the column index arithmetic"
    if rows.numel() < rows_n and bool(ok.view(-1, cols_n)[rows].logical_not().all()):
        return (f"{rows.numel()} whole rows are wrong (first {rows[0].item()}): the row index "
                f"or the row stride")
    if rows.numel() >= 1:
        factor = _row_factor(g, e, shape, rows)
        if factor:
            return factor
    return None


def _row_factor(g, e, shape, rows) -> str | None:
    """Each wrong row off by one common factor (g = c_r * e within the row): a row's shared
    term (sum, max, mean, scale) taken over the wrong elements."""
    cols_n = shape[-1]
    G, E = g.view(-1, cols_n)[rows], e.view(-1, cols_n)[rows]
    big = E.abs() > E.abs().amax(1, keepdim=True) * 1e-3
    ratio = torch.where(big, G / E.where(big, torch.ones_like(E)), torch.nan)
    if bool(torch.isnan(ratio).all(1).any()) or cols_n < 4:
        return None
    mid = ratio.nanmedian(1).values
    spread = (ratio - mid[:, None]).abs().nan_to_num(0).amax(1)
    off = (mid - 1).abs()
    if bool((spread * 20 < off).all()):
        k = int(off.argmax())
        return (f"each wrong row is off by one common factor (row {int(rows[k])}: "
                f"x{_fmt(float(mid[k]), 4)}): "
                f"a shared term of the row (its sum, max, mean or scale) taken over the wrong "
                f"elements (masked lanes loaded as 0 instead of a neutral value such as -inf "
                f"for a max?)")
    return None


def _precision_cause(g, e, bad, shape, dtype) -> str | None:
    gb, eb = g[bad], e[bad]
    rel = (gb - eb).abs() / eb.abs().clamp_min(1e-30)
    med, mx = rel.median().item(), rel.max().item()
    if dtype == torch.float64:
        if bool(_representable(gb, torch.float32).float().mean() > 0.9) and \
                not bool(_representable(eb, torch.float32).float().mean() > 0.5):
            return ("the wrong values are all exact float32 numbers: the float64 input was "
                    "computed in float32 (a .float() or a float32 accumulator/constant)")
        if med < 64 * _U[torch.float32]:
            return ("errors of the size of float32 rounding, in float64: computing (or passing "
                    "a scalar) in float32 instead of float64?")
        return None
    if dtype in (torch.float32, torch.float64) or dtype is None:
        for low in (torch.float16, torch.bfloat16):
            if bool(_representable(gb, low).float().mean() > 0.9) and \
                    not bool(_representable(eb, low).float().mean() > 0.5):
                name = str(low).removeprefix("torch.")
                return (f"the wrong values are all exact {name} numbers: the result went "
                        f"through {name} (a {name} load, intermediate or accumulator) before "
                        f"the {str(dtype).removeprefix('torch.')} store; compute in float32")
        if _U[torch.float16] / 4 <= med <= 4 * _U[torch.bfloat16] and mx <= 16 * _U[torch.bfloat16]:
            return (f"errors of the size of 16-bit rounding (median relative error "
                    f"{_fmt(med, 2)}; fp16 rounds at {_fmt(_U[torch.float16], 2)}, bf16 at "
                    f"{_fmt(_U[torch.bfloat16], 2)}): accumulating or computing in fp16/bf16 "
                    f"instead of float32?")
        return None
    u = _U.get(dtype)
    if u is not None and med <= 4 * u and mx <= 32 * u:
        name = str(dtype).removeprefix("torch.")
        return (f"errors of a few units of {name}'s rounding (median relative error "
                f"{_fmt(med, 2)}, {name} rounds at {_fmt(u, 2)}): intermediate results "
                f"rounded to {name}; compute in float32 and round once, on the store")
    return None


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
                if shares_memory(o, t):
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


def within(value, bound, *, what: str, why: str = "", unit: str = "", per: float = 1.0,
           nan: str | None = None, **ctx) -> None:
    """Pass when `value` <= `bound`; else raise Mismatch, written for the learner. NaN never
    passes: the test is `not value <= bound`, false for NaN, where `value > bound` (the raw
    comparison this replaces) is false for NaN too and lets it through.

    For every hand-written bound of a check (a normwise error, a statistic, a count, memory):
    `value` and `bound` are numbers or tensors (broadcast; every element must hold). The message
    reads "{what} {value}, allowed at most {bound} ({ctx}): {why}"; `unit` and `per` only shape
    how numbers print (unit=" MiB", per=2**20: bytes shown in MiB). `nan` says what a NaN means
    for this check (default: the usual ways an output comes to hold one). A NaN bound is the
    check's own bug, never the learner's: it raises ValueError."""
    v = torch.as_tensor(value).detach().to(torch.float64).cpu()
    b = torch.as_tensor(bound).detach().to(torch.float64).cpu()
    if bool(torch.isnan(b).any()):
        raise ValueError(f"{what}: the check's bound is NaN ({bound!r}): a bug in the check, "
                         f"not in the submission")
    ok = v <= b  # NaN <= anything is False: a NaN value fails
    if bool(ok.all()):
        return
    where = f" ({_context(ctx)})" if ctx else ""
    show = lambda x: f"{_fmt(x / per, 4)}{unit}"
    v, b, ok = torch.broadcast_tensors(v, b, ok)
    bad = (~ok).reshape(-1).nonzero().flatten()
    flat_v, flat_b = v.reshape(-1), b.reshape(-1)
    at = ""
    if v.dim() > 0:  # which element, and how many of them
        over = bad[torch.argmax((flat_v[bad] - flat_b[bad]).nan_to_num(math.inf))]
        index = [int(i) for i in torch.unravel_index(over, v.shape)]
        at = f" at {index} ({bad.numel()} of {v.numel()} over)"
        first = int(over)
    else:
        first = 0
    if bool(torch.isnan(flat_v[bad]).any()):
        nans = int(torch.isnan(flat_v).sum())
        count = f" ({nans} of {v.numel()} values)" if v.dim() > 0 else ""
        cause = nan or ("the result holds NaN where the expected values are finite: an element "
                        "never written (fresh outputs start as NaN here), or NaN computed "
                        "(inf - inf, 0 * inf, 0 / 0 after an overflow, or a division by zero)")
        raise Mismatch(f"{what} NaN{count}, allowed at most {show(float(flat_b[first]))}{where}: "
                       f"NaN passes no bound; {cause}")
    text = (f"{what} {show(float(flat_v[first]))}{at}, allowed at most "
            f"{show(float(flat_b[first]))}{where}")
    raise Mismatch(f"{text}: {why}" if why else text)
