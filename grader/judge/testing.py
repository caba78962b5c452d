"""Testing: the helpers every op exercise's checks need, written once.

    from grader.judge.testing import value_and_grads, expected_grads, assert_all_close, sum_tol, ...

- `value_and_grads(fn, *args, wrt=(0, 1), dy=...)`: run an op (the submission's, through `impl`,
  or the reference) and backpropagate `dy`; returns the outputs and the gradients of the inputs
  in `wrt`, failing with a message that names what is missing (no grad_fn, no gradient).
- `expected_grads(ref_fn, ...)`: the same on float64 copies: the expectation.
- `sum_tol(tol, terms, dtype)`: a tolerance that grows with the length of a sum (dw, db, GEMMs).
- `sum_bound(abs_sum, terms)`: the absolute error bound of a float32 sum (reductions).
- `opcheck_samples(impl, ...)`: torch.library.opcheck over sample inputs, in the submission's
  process (extension-cpp's `sample_inputs` + opcheck).
- `compiled_matches(impl, ...)`: torch.compile(fullgraph=True) of the op (or of a small model
  built around it by reference.py), compared against eager values.
- `gradcheck_checked` (grader.judge.gradcheck): torch.autograd.gradcheck with the forward
  checked in float64 first and a failure located instead of printed.
- `skip_on_interpreter(...)`: Triton's CPU interpreter cannot run opcheck or torch.compile.

Everything calls the submission only through `impl`: `impl.<entry>(...)`, `impl.op("ns::name")`,
`impl.opcheck(...)`, `impl.compiled(...)`. Nothing here imports a submission.
"""
from __future__ import annotations

import contextlib
import math
import re

import pytest
import torch

from grader.common.settings import current
from grader.judge import check, probes
from grader.judge.check import Mismatch
from grader.judge.strategies import each_view, generator

INTERPRETER = ("needs a GPU: Triton's CPU interpreter reads the data pointer of every tensor a "
               "kernel gets, and {what} runs the op on FakeTensors, which have none")


# opcheck's tests that decide on the interpreter what they decide on a GPU (opcheck_samples)
INTERPRETER_OPCHECK = ("test_schema", "test_autograd_registration", "test_faketensor")


def on_interpreter(track, device) -> bool:
    """A Python (Triton) track running on CPU tensors: Triton's interpreter."""
    return device == "cpu" and not track.sources


def skip_on_interpreter(track, device, what: str) -> None:
    if on_interpreter(track, device):
        pytest.skip(INTERPRETER.format(what=what))


QUICK = "QUICK=1 leaves {what} out (seconds of compiling per check): run without QUICK for it"


def skip_under_quick(what: str) -> None:
    """The edit loop (QUICK=1) checks the op's values, one example per property: the dispatcher
    checks (opcheck, torch.compile), which compile for seconds, wait for a full grade."""
    if current().quick:
        pytest.skip(QUICK.format(what=what))


def leaf(t: torch.Tensor) -> torch.Tensor:
    """A fresh leaf that requires grad, with `t`'s own strides (clone() would make a gapped view
    like x[:, ::2] dense, and the strided-input checks would test nothing)."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t.detach()).requires_grad_()


def as_tuple(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


@contextlib.contextmanager
def backward_stage():
    """Around a backward whose forward already ran: a backward the learner has not written yet
    ("... not implemented yet", as NotImplementedError from Python or RuntimeError from C++) is
    reported as the next stage to start, not as a failure of the forward the check also tests."""
    try:
        yield
    except (NotImplementedError, RuntimeError) as e:
        msg = str(e).strip()
        # PyTorch's own words for an autograd.Function without a backward, too
        unwritten = "not implemented yet" in msg or "must implement either the backward" in msg
        if not unwritten or msg.startswith("start the backward"):
            raise
        raise off_topic(NotImplementedError(f"start the backward: {msg.splitlines()[0]} (the "
                                            f"forward ran; this check also needs the "
                                            f"gradients)")) from None


# A backward that returns gradients it never wrote: said once, as the backward stage's state
# (the checks of the backward after it are not run: grader.judge.plugin), and with no other
# cause, since every comparison of such gradients fails and each would guess one
WRITES_NOTHING = ("the backward writes nothing yet: every gradient it returned still holds the "
                  "NaN fresh outputs start with (its kernels are not launched, or store nothing)")
AWAITS_BACKWARD = "not checked until the backward writes its gradients"


def value_and_grads(fn, *args, wrt=(0,), dy):
    """(outputs, grads): `fn(*args)` with the inputs in `wrt` as fresh leaves, then backward.

    `dy` is the incoming gradient: a tensor for a one-output op, a tuple (None where an output
    gets no gradient) for several. Outputs are returned detached, as a tuple.
    """
    args = list(args)
    for i in wrt:
        args[i] = leaf(args[i])
    outs = as_tuple(fn(*args))
    dys = as_tuple(dy)
    if len(outs) < len(dys):
        raise Mismatch(f"the op returned {len(outs)} output(s) where {len(dys)} are expected "
                       f"(each gets its own gradient): return them all")
    pairs = [(o, d) for o, d in zip(outs, dys) if d is not None]
    for k, (o, _) in enumerate(pairs):
        if not isinstance(o, torch.Tensor) or not o.requires_grad:
            raise Mismatch(f"output {k} does not require grad although its inputs do: is the "
                           f"backward registered (autograd.Function / register_autograd) and does "
                           f"the entry point call the op that has it?")
    with backward_stage():
        torch.autograd.backward([o for o, _ in pairs], [d for _, d in pairs])
    grads = []
    for i in wrt:
        if args[i].grad is None:
            raise Mismatch(f"no gradient reached argument {i}: the backward must return a "
                           f"gradient for every input that requires one")
        grads.append(args[i].grad)
    written = [g for g in grads if g.numel()]
    if written and all(check.all_poisoned(g) for g in written):
        e = off_topic(Mismatch(WRITES_NOTHING))
        e.grader_blocks_backward = AWAITS_BACKWARD
        raise e
    return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in outs), tuple(grads)


def float64(v):
    """Floating tensors (in tuples too) as float64; everything else unchanged."""
    if isinstance(v, torch.Tensor):
        return v.detach().double() if v.is_floating_point() else v
    if isinstance(v, (tuple, list)):
        return type(v)(float64(x) for x in v)
    return v


def expected_grads(ref_fn, *args, wrt=(0,), dy):
    """The expectation: `value_and_grads` of the reference on float64 copies of everything."""
    return value_and_grads(ref_fn, *float64(args), wrt=wrt, dy=float64(dy))


def rstd_scale(h, eps: float, *, centered: bool) -> tuple:
    """The atol_scale (grader.judge.check.assert_close) of a norm's dx: (max(1, rstd) of each row of
    h, float64, shape [..., 1]; its description). rstd is 1/sqrt(mean(h^2) + eps) for an RMS
    norm, 1/sqrt(var(h) + eps) for a layer norm (`centered`).

    A norm's dx = rstd * (g - ...), g = dy * w: the bracket holds O(|g|) terms, each rounded,
    whose absolute error the dtype's atol covers. The last step multiplies it by rstd, which is
    not O(1) when a row's mean square (or variance) is small next to eps: rows of one element,
    of equal values, of tiny values, up to 1/sqrt(eps) = 1000. Exact dx can be small there (0
    for a layer norm's constant row), so only the atol can absorb that rounding (on an H100,
    2026-11-25, a correct float32 rmsnorm dx was off by 2.0e-5 in a row of one element with
    rstd ~700). Its rtol is unchanged: |dx| itself carries the factor rstd."""
    hd = h.detach().to(torch.float64)
    m = hd.var(-1, unbiased=False, keepdim=True) if centered else hd.square().mean(-1, keepdim=True)
    return (m + eps).rsqrt().clamp_min(1.0), "max(1, rstd) of its row"


def sum_tol(tol: dict, terms: int, dtype) -> dict:
    """A tolerance for outputs that are sums over `terms` rows (dw, db, dB of a GEMM, ...).

    Each term carries the rounding of its own computation (relative ~u of the dtype it is
    computed or stored in: an implementation may round each term to the storage dtype before an
    fp32 sum, as Hugging Face's Llama RMSNorm and Liger's default do), and with random signs
    those errors add up like a random walk: ~sqrt(terms) times one term's. So the absolute bound
    grows with sqrt(terms), for every dtype: float32 too (on an H100, 2026-11-25, a correct
    float32 dw over 425 rows was off by 1.8e-5 against an atol of 1e-5: 06/10's terms are
    products of values each rounded in fp32). Accumulating in 16 bits instead rounds the running
    sum (~sqrt(terms) in size) at every step, an error growing like `terms`: far outside this
    bound once terms >> 1 (a check with all-positive terms shows it).
    """
    out = dict(tol)
    out["atol"] = out["atol"] * max(1.0, math.sqrt(terms))
    return out


def sum_bound(abs_sum: float, terms: int, acc=torch.float32, lam: float = 4.0) -> float:
    """Absolute error bound for a sum of `terms` values accumulated in `acc` (a reduction).

    Rounding errors of a sum in any order that keeps running sums in `acc` stay below
    lam * sqrt(terms) * u * sum(|x_i|) with overwhelming probability (Higham & Mary, "A new
    approach to probabilistic rounding error analysis", 2019), u the unit roundoff of `acc`
    (2^-24 for float32). A tree or blocked order does better still. A 16-bit accumulator has
    u = 2^-11 (fp16) or 2^-8 (bf16): thousands of times this bound on a long sum.
    """
    u = torch.finfo(acc).eps / 2
    return lam * math.sqrt(max(terms, 1)) * u * abs_sum + torch.finfo(acc).tiny


def assert_all_close(got, want, *, tols, names, atol_scales=None, **ctx):
    """Compare tuples of tensors; `tols` is one tolerance dict or one per tensor;
    `atol_scales`: one grader.judge.check.assert_close atol_scale (or None) per tensor."""
    tols = tols if isinstance(tols, (tuple, list)) else [tols] * len(names)
    scales = atol_scales or [None] * len(names)
    for g, w, tol, name, scale in zip(got, want, tols, names, scales):
        check.assert_close(g, w, tol=tol, dtype=g.dtype if isinstance(g, torch.Tensor) else None,
                           what=name, atol_scale=scale, **ctx)


def opcheck_samples(impl, track, device, qualname: str, samples) -> None:
    """torch.library.opcheck(qualname) over sample inputs: [(args, kwargs or None), ...].

    opcheck runs the op's schema, fake (meta) kernel, autograd registration and AOT dispatch
    tests. It runs in the submission's process (it must call the registered op there). On
    Triton's CPU interpreter three of them run, each deciding there what it decides on a GPU:
    the schema test (it calls the op on real tensors, and fails an op that writes into an input
    its schema does not declare mutated), the autograd registration test, and the fake-tensor
    test (the fake kernel's output shapes, dtypes and strides against the real outputs'; a
    triton_op's launches on FakeTensors do nothing there, as on the GPU: grader.submission.interp). The
    AOT dispatch tests need a GPU: they trace the op, and under the interpreter torch's
    wrap_triton hands back the interpreted kernel itself, which a trace cannot record.
    """
    skip_under_quick("opcheck")
    utils = INTERPRETER_OPCHECK if on_interpreter(track, device) else None
    for args, kwargs in samples:
        try:
            impl.opcheck(qualname, tuple(args), dict(kwargs or {}), test_utils=utils)
        except AssertionError as e:  # the submission's Mismatch, by its name
            said = Mismatch(_opcheck_said(str(e)))
            said.__dict__.update(e.__dict__)  # where it was raised
            raise said from None


def _opcheck_said(text: str) -> str:
    """opcheck's failure as a learner can act on it: without its "(scroll up for stack trace)"
    (the stack trace stays in the submission's process), and an undeclared mutation explained."""
    text = text.replace(" (scroll up for stack trace)", "")
    m = re.search(r"Argument (\w+) is not defined as mutable but was mutated", text)
    if m:
        text += (f"\n  the op writes into `{m.group(1)}`, and its schema says it does not: "
                 f"declare it (mutates_args=(\"{m.group(1)}\",)), so that the dispatcher, "
                 f"torch.compile and autograd know")
    return text


def compiled_matches(impl, track, device, entry: str, args, *, expected, tol, wrap=None,
                     wrt=(), dy=None, names=None):
    """torch.compile(fullgraph=True) of the entry point (or of `reference.<wrap>(entry)`, a small
    model around it) runs without a graph break, and its outputs (and gradients of `wrt`) match
    `expected` (values computed in this process, e.g. the float64 reference)."""
    skip_under_quick("torch.compile")
    skip_on_interpreter(track, device, "torch.compile")
    fn = lambda *a: impl.compiled(entry, *a, wrap=wrap)
    if wrt:
        outs, grads = value_and_grads(fn, *args, wrt=wrt, dy=dy)
        got = outs + grads
    else:
        got = as_tuple(fn(*args))
    names = names or [f"compiled output {i}" for i in range(len(got))]
    for g, e, name in zip(got, expected, names):
        check.assert_close(g, e, tol=tol, dtype=g.dtype, what=name)


def views_handled_or_refused(fn, args, names, check_outputs, *, seed: int = 0,
                             refuse_offset: bool = False) -> None:
    """Every tensor argument in turn as a strided and as an offset (misaligned) view
    (grader.judge.strategies.each_view), the others dense: the outputs pass `check_outputs(outs)`
    (values are the same as `args`', so one expectation serves), or the op refuses a strided
    view with a message naming that argument. An offset view is dense (x[1:]): .contiguous()
    returns it unchanged, so it must be handled, not refused (unless `refuse_offset`)."""
    for name, kind, vargs in each_view(args, names, seed=seed):
        view = f"`{name}` given as {'an' if kind[0] in 'aeiou' else 'a'} {kind} view"
        try:
            outs = check.call_checked(fn, *vargs, names=names)
        except IndexError as e:  # an out-of-bounds access (the interpreter's): on which view
            e.add_note(f"(with {view}, every other input dense)")
            raise
        except (RuntimeError, ValueError, TypeError) as e:
            msg = str(e)
            if "not implemented yet" in msg:
                raise
            if (kind == "strided" or refuse_offset) and check.names_argument(msg, name):
                continue  # refused, naming the argument: fine
            if kind == "offset":
                raise Mismatch(f"`{name}` given as a dense view one element into its memory "
                               f"(like x[1:]) was refused: {msg.splitlines()[0] if msg else ''}"
                               f"\n  such a view is contiguous (.contiguous() returns it as it "
                               f"is): handle it; a 16-byte vector path needs an alignment check "
                               f"and a scalar fallback") from None
            raise Mismatch(f"`{name}` given as a strided view raised an error that does not "
                           f"name `{name}`: {msg.splitlines()[0] if msg else type(e).__name__}"
                           f"\n  read it through its strides, or refuse it naming `{name}`") \
                from None
        try:
            check_outputs(as_tuple(outs))
        except Mismatch as e:
            # the view explains it only if the same values, every input dense, come out right
            try:
                check_outputs(as_tuple(check.call_checked(fn, *args, names=names)))
            except Mismatch as dense:
                raise off_topic(Mismatch(f"wrong with every input dense too, so not because of "
                                         f"{view}:\n{dense}")) from None
            raise probes.with_cause(Mismatch(f"with {view}:\n{e}"),
                                    probes.view_evidence(vargs, names)) from None


def off_topic(e: BaseException) -> BaseException:
    """Mark a failure as not this check's own subject (the op is wrong on plain inputs, or a
    stage is not written yet): the check's hint from exercise.toml, about its subject, is then
    left out (grader.judge.plugin), as it would point at the wrong thing."""
    e.grader_off_topic = True
    return e


def _first_call(check_outputs, outs, expected) -> None:
    try:
        check_outputs(outs, expected)
    except Mismatch as e:
        raise off_topic(Mismatch(f"the first call is wrong already (nothing kept from an "
                                 f"earlier call yet):\n{e}")) from None


def new_contents_same_shapes(fn, args, names, expected_of, check_outputs, *, seed: int) -> None:
    """The op called twice with the same shapes and dtypes, the floating inputs refilled with new
    values in between: the second outputs are right for the new values, and the first outputs
    (an op that caches its result by shape, or keeps state between calls, fails).

    `expected_of(args)` gives the expectation, `check_outputs(outs, expected)` compares.
    For the submission's entry points both calls run in its process on the same tensors (the
    second after the new values were written into them: grader.judge.proxy._Entry.twice), so a result
    cached by pointer is caught too."""
    refill, gens = [], {}
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel():
            # drawn where it is used (strategies.generator), one generator per device
            if a.device not in gens:
                gens[a.device] = generator(a.device, seed)
            fresh = torch.randn(a.shape, generator=gens[a.device], dtype=torch.float64,
                                device=a.device)
            scale = a.double().std().clamp_min(0.1).nan_to_num(1.0).item()
            refill.append(torch.empty_like(a).copy_(fresh * scale +
                                                    a.double().mean().nan_to_num(0.0).item()))
        else:
            refill.append(a.clone() if isinstance(a, torch.Tensor) else a)
    if hasattr(fn, "twice"):  # the submission's entry: both calls on the same buffers there
        first, second = (as_tuple(o) for o in fn.twice(args, refill))
        _first_call(check_outputs, first, expected_of(args))
        with torch.no_grad():
            for a, r in zip(args, refill):
                if isinstance(a, torch.Tensor):
                    a.copy_(r)
    else:
        first = as_tuple(check.call_checked(fn, *args, names=names))
        _first_call(check_outputs, first, expected_of(args))
        with torch.no_grad():
            for a, r in zip(args, refill):
                if isinstance(a, torch.Tensor):
                    a.copy_(r)
        second = as_tuple(check.call_checked(fn, *args, names=names))
    try:
        check_outputs(second, expected_of(args))
    except Mismatch as e:
        raise Mismatch(f"the second call, same shapes, new input values, is wrong (the first was "
                       f"right): an output or a result kept from the previous call?\n{e}") \
            from None


def kept_per_call(impl, forward, *, forbidden_elements: int, allowed: int, what: str, fix: str,
                  element_bits: int = 8) -> list:
    """What the op keeps alive between its forward and its backward, per call, measured where
    the submission's process cannot change the figure nor hide it in a cache.

    The figure is the process's GPU memory as the driver counts it (NVML, read by the judge:
    `impl.footprint()`), after the process gave its cached blocks back, before and after K
    forwards whose graphs all stay alive (`forward(k)` runs the k-th, on fresh inputs, and
    returns what keeps its graph alive: its output).

    What must not be kept is given as its number of elements (`forbidden_elements`: an S x S
    matrix per head, a mask of the input's size), and its bytes are counted at the smallest
    element it could be stored in, `element_bits` (8 by default: one byte, so P kept as uint8 or
    fp8 counts as much as the rule allows for, and bf16 or fp32 twice or four times that; 1 for
    a mask, which packs into bits): a rule set at the bytes of a bf16 matrix let the same matrix
    in one byte through. A submission that reserved memory first, to keep what it must not in
    it, cannot hide K of them there: K is chosen so that K times the forbidden bytes is twice
    the whole footprint before the calls, so at least half of them must be new memory. Fails
    when the growth per call is over `allowed` (what the op may keep: its output and a few
    numbers per row) + half the forbidden bytes. Returns the outputs (their graphs are still
    alive: the caller may run each backward and validate it)."""
    forbidden = forbidden_elements * element_bits / 8
    before = impl.footprint()
    if before is None:
        pytest.skip("needs a GPU with NVML's per-process memory figures (pynvml)")
    k = max(8, math.ceil(2 * before / forbidden))
    live = [forward(i) for i in range(k)]
    grown = impl.footprint() - before
    check.within(grown / k, allowed + forbidden / 2, unit=" MiB", per=2**20,
                 what="each forward keeps, alive until its backward,", forwards_kept_alive=k,
                 why=f"the process's GPU memory as the driver counts it grew by "
                     f"{grown / 2**20:.0f} MiB, where the output and a few numbers per row "
                     f"take {allowed / 2**20:.1f} MiB a call: that is {what} "
                     f"({forbidden / 2**20:.1f} MiB each at {element_bits} bits an element, "
                     f"the least it can be). {fix}")
    return live
