"""Checks for exercise 04 (reduce_sum). Run through the grader: `make exercise-04`.

Every expectation is the reference (reference.py) evaluated in float64 on the same input values.
A sum is not judged with a flat tolerance: rounding errors of a float32 sum grow with the size of
what is summed and with its length, so each result may be off by at most
grader.judge.testing.sum_bound(sum |x|, n): 4 * sqrt(n) * 2^-24 * sum |x| (Higham & Mary's
probabilistic bound; any order of additions that keeps its running sums in float32 stays inside
it, and a tree does far better). A 16-bit running sum (2^-9 or 2^-12 per add instead of 2^-24)
does not, which test_all_positive_needs_float32_accumulators makes sure of.
"""
import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.judge.strategies import dtypes, lengths, matrices, randn, seeds
from grader.judge.testing import compiled_matches, new_contents_same_shapes, opcheck_samples, sum_bound

DTYPES = ["float32", "float16", "bfloat16", "float64"]
GIB = 1 << 30


def _result_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _ns(track):
    return f"ex04_{track.name}"


def _name(dtype):
    return str(dtype).removeprefix("torch.")


def _bound(abs_sum, terms, dtype):
    return sum_bound(abs_sum, terms, acc=_result_dtype(dtype))


def _expected(ref, x, rows):
    """(the float64 sum, sum |x|) per row, or for the whole tensor."""
    xd = x.double()
    if rows:
        return ref.reference_rows(xd), xd.abs().sum(-1)
    return ref.reference(xd), xd.abs().sum()


def assert_sums_close(got, want, bound, *, dtype, what, hint=None, small_hint=None, unit=None,
                      **ctx):
    """`got` (the submission's sums) against `want` (float64), each within `bound`. `hint`
    replaces the likely cause; `small_hint` does when the relative error is small (< 5%);
    `unit`: every element has this value, so an error of whole units means elements missed."""
    ctx = {"dtype": _name(dtype), **ctx}
    where = " (" + ", ".join(f"{k}={v}" for k, v in ctx.items()) + ")"
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what}: expected a tensor, got {type(got).__name__}{where}")
    if tuple(got.shape) != tuple(want.shape):
        raise Mismatch(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}: "
                       f"reduce_sum returns a 0-d tensor (at::empty({{}}, ...)), reduce_sum_rows "
                       f"one value per row{where}")
    rdt = _result_dtype(dtype)
    if got.dtype != rdt:
        raise Mismatch(f"{what}: dtype {got.dtype}, expected {rdt}: the sum of {_name(dtype)} "
                       f"values is returned in {_name(rdt)}, the type it was accumulated in "
                       f"(rounding it back to 16 bits would throw away what the float32 sum "
                       f"kept){where}")
    if got.device != want.device:
        raise Mismatch(f"{what}: on {got.device}, expected on {want.device} (allocate the output "
                       f"on x's device){where}")
    g = got.detach().double().reshape(-1)
    w = want.reshape(-1)
    b = torch.as_tensor(bound, dtype=torch.float64).to(g.device).reshape(-1).expand(w.shape)
    err = (g - w).abs()
    ok = err <= b  # NaN is never ok
    if bool(ok.all()):
        return
    g, w, b, err, ok = g.cpu(), w.cpu(), b.cpu(), err.cpu(), ok.cpu()
    bad = (~ok).nonzero().flatten()
    lines = [f"{what}: {bad.numel()} of {g.numel()} sums are off by more than the float32 "
             f"rounding bound{where}", "  first mismatches (row: got vs expected, allowed error):"]
    for i in bad[:5].tolist():
        lines.append(f"    {i}: {g[i].item():.9g} vs {w[i].item():.9g}, off by "
                     f"{err[i].item():.3g} (allowed {b[i].item():.3g})")
    if bool(torch.isnan(g[bad]).any()):
        cause = ("NaN: outputs start as NaN here, so a sum that was never stored (a row without "
                 "a block, a final store that never ran) shows as NaN")
    elif bool(torch.isinf(g[bad]).any()):
        cause = ("inf: a 16-bit running sum overflows (float16 stops at 65504): widen each "
                 "element to float32 and add in float32")
    else:
        rel = (err[bad] / w[bad].abs().clamp_min(1e-30)).median().item()
        missed = ("elements missed or counted twice: the grid or the chunks do not cover the "
                  "tail, an index wraps around (int instead of int64_t), or the block reduction "
                  "reads shared memory before every thread wrote it (a missing __syncthreads)")
        if dtype in (torch.float16, torch.bfloat16):
            cause = (f"a relative error of {rel:.2g}: running sums kept in {_name(dtype)} (widen "
                     f"every element and add in float32), or {missed}")
        elif dtype == torch.float64:
            cause = (f"a relative error of {rel:.2g}: {missed}; or float64 input summed in "
                     f"float32 (keep double)")
        else:
            cause = f"a relative error of {rel:.2g}: {missed}"
        k = err[bad[0]].item() / unit if unit else 0.0
        if unit and k > 0.5 and abs(k - round(k)) < 1e-3:
            cause = (f"off by {round(k)} x {unit:g}, the value of every element: {round(k)} "
                     f"{missed}")
        elif small_hint and rel < 5e-2:
            cause = f"a relative error of {rel:.2g}: {small_hint}"
    lines.append(f"  likely cause: {hint or cause}")
    raise Mismatch("\n".join(lines))


def _check_sum(impl, ref, x, *, what="reduce_sum(x)", hint=None, small_hint=None, unit=None,
               **ctx):
    got = call_checked(impl.reduce_sum, x, names=("x",))
    want, abs_sum = _expected(ref, x, rows=False)
    assert_sums_close(got, want, _bound(abs_sum, x.numel(), x.dtype), dtype=x.dtype, what=what,
                      hint=hint, small_hint=small_hint, unit=unit, shape=tuple(x.shape), **ctx)


def _check_rows(impl, ref, x, *, what="reduce_sum_rows(x)", hint=None, small_hint=None,
                unit=None, **ctx):
    got = call_checked(impl.reduce_sum_rows, x, names=("x",))
    want, abs_sum = _expected(ref, x, rows=True)
    assert_sums_close(got, want, _bound(abs_sum, x.shape[1], x.dtype), dtype=x.dtype, what=what,
                      hint=hint, small_hint=small_hint, unit=unit, shape=tuple(x.shape), **ctx)


# --- values ------------------------------------------------------------------------------------

@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_sum_matches_reference(impl, ref, device, data, dtype, seed):
    """Any shape, treated as one flat run of elements."""
    n = data.draw(lengths(device), label="n")
    layout = data.draw(st.sampled_from(["flat", "2-D", "3-D"]), label="layout")
    shape = {"flat": (n,), "2-D": (1, n) if n % 3 else (3, n // 3), "3-D": (1, 1, n)}[layout]
    x = randn(shape, seed=seed, dtype=dtype, device=device)
    _check_sum(impl, ref, x, seed=seed)


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_rows_match_reference(impl, ref, device, data, dtype, seed):
    m, n = data.draw(matrices(device), label="(M, N)")
    x = randn((m, n), seed=seed, dtype=dtype, device=device)
    _check_rows(impl, ref, x, seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=_name)
def test_awkward_sizes(impl, ref, device, dtype):
    """Empty, one element, 0-d, primes, one past a vector and past a block; millions on a GPU."""
    sizes = [0, 1, 2, 3, 7, 8, 9, 31, 127, 257, 1021, 4099, 65537]
    if device == "cuda":
        sizes += [1_000_003, (1 << 22) + 5, 16_777_259]
    for i, n in enumerate(sizes):
        _check_sum(impl, ref, randn(n, seed=10 + i, dtype=dtype, device=device), n=n)
    _check_sum(impl, ref, randn((), seed=9, dtype=dtype, device=device), what="reduce_sum(0-d x)")
    _check_sum(impl, ref, randn((0, 5), seed=9, dtype=dtype, device=device))
    for i, shape in enumerate([(1, 1), (5, 1), (1, 65537), (3, 0), (0, 4), (129, 8), (7, 4099)]):
        _check_rows(impl, ref, randn(shape, seed=40 + i, dtype=dtype, device=device))


def test_misaligned_view(impl, ref, device):
    """x = base[1:] starts 2 bytes into a bf16 buffer: contiguous, but not 16-byte aligned."""
    base = randn(65537 + 1, seed=5, dtype=torch.bfloat16, device=device)
    _check_sum(impl, ref, base[1:], what="reduce_sum(base[1:])",
               hint="a misaligned 16-byte load faults; check the pointer before using vectors")
    rows = randn(7 * 1000 + 1, seed=6, dtype=torch.bfloat16, device=device)[1:].view(7, 1000)
    _check_rows(impl, ref, rows, what="reduce_sum_rows(base[1:].view(7, 1000))")


# --- every tensor argument as a view (the shared check: grader.judge.strategies.each_view) ----------
from grader.judge.testing import views_handled_or_refused as _views


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_sum_rows"])
def test_every_argument_as_a_view(impl, ref, device, op):
    """x as a strided view and as a view one element into its memory: the strided one refused
    naming x (the kernels walk memory with stride 1: test_refuses_non_contiguous_x), the other,
    dense but not 16-byte aligned, summed right."""
    rows = op == "reduce_sum_rows"
    x = randn((7, 1031), seed=51, dtype=torch.float32, device=device)
    want, abs_sum = _expected(ref, x, rows=rows)
    terms = x.shape[1] if rows else x.numel()

    def compare(outs):
        assert_sums_close(outs[0], want, _bound(abs_sum, terms, x.dtype), dtype=x.dtype,
                          what=f"{op}(x)", shape=tuple(x.shape))
    _views(getattr(impl, op), (x,), ("x",), compare, seed=51)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=_name)
def test_all_positive_needs_float32_accumulators(impl, ref, device, dtype):
    """Every element the same positive value: the rounding errors of a 16-bit running sum then
    all lean the same way instead of cancelling out, and the sum drifts far outside the bound
    (a float32 sum of these values is exact or nearly so). In float16, values of 1000 also
    overflow any partial sum past 65504."""
    sizes = [4099, 65537] + ([(1 << 20) + 7] if device == "cuda" else [])
    shapes = [(7, 4099), (5, 65537)] + ([(33, (1 << 20) + 3)] if device == "cuda" else [])
    # 1.7: its multiples need more bits than 16-bit formats have from the 5th add on, and the
    # roundings lean one way (a float32 sum of thousands of them is exact)
    values = [1.7] + ([1000.0] if dtype == torch.float16 else [])
    small = ("a sum of identical positive values drifts: the running sums are kept in "
            f"{_name(dtype)}; widen each element to float32 and add in float32")
    for c in values:
        for n in sizes:
            x = torch.full((n,), c, dtype=dtype, device=device)
            _check_sum(impl, ref, x, small_hint=small, unit=x[0].item(), value=c)
        for shape in shapes:
            x = torch.full(shape, c, dtype=dtype, device=device)
            _check_rows(impl, ref, x, small_hint=small, unit=x[0, 0].item(), value=c)


# --- determinism -------------------------------------------------------------------------------

def _bits(t):
    return t.detach().cpu().contiguous().numpy().tobytes()


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_sum_rows"])
def test_deterministic_over_ten_calls(impl, ref, device, op):
    """The same input gives the same bits, call after call.

    Float addition is not associative: (a + b) + c and a + (b + c) can differ in the last bit. A
    sum whose order changes from call to call (atomicAdd of floats: blocks add their totals in
    whatever order they finish) changes its last bits too. Mixed signs make it show.
    """
    on_gpu = device == "cuda"
    if op == "reduce_sum":
        shape = ((1 << 24) + 3,) if on_gpu else (100_003,)
    else:
        shape = (8, (1 << 20) + 3) if on_gpu else (8, 5003)
    fn = getattr(impl, op)
    for dtype in (torch.float32, torch.bfloat16):
        x = randn(shape, seed=77, dtype=dtype, device=device)
        first = fn(x)
        if op == "reduce_sum":
            _check_sum(impl, ref, x, what="reduce_sum(x), first call")
        else:
            _check_rows(impl, ref, x, what="reduce_sum_rows(x), first call")
        for k in range(2, 11):
            again = fn(x)
            if _bits(again) != _bits(first):
                a, b = first.double().reshape(-1), again.double().reshape(-1)
                i = int((a != b).nonzero()[0]) if bool((a != b).any()) else 0
                raise Mismatch(
                    f"{op}(x) is not deterministic (dtype={_name(dtype)}, shape={shape}): call "
                    f"{k} gave {b[i].item():.17g} where call 1 gave {a[i].item():.17g} (element "
                    f"{i}): the same input must give the same bits on every call. Float "
                    f"addition is not associative, so the order of the additions must be fixed: "
                    f"no atomicAdd of floats into the result; write one partial sum per block "
                    f"and add the partials in index order (a second small kernel)")


# --- a second call on the same buffers, new values in between (the shared check) ----------------

@pytest.mark.parametrize("op", ["reduce_sum", "reduce_sum_rows"])
def test_new_contents_same_shapes(impl, ref, device, op):
    """Called twice on the same buffer, new values written into it in between: both sums right
    (a result kept from the first call, by shape or by pointer, is wrong the second time)."""
    rows = op == "reduce_sum_rows"
    x = randn((7, 1031), seed=81, dtype=torch.float32, device=device)
    terms = x.shape[1] if rows else x.numel()

    def compare(outs, want):
        value, abs_sum = want
        assert_sums_close(outs[0], value, _bound(abs_sum, terms, x.dtype), dtype=x.dtype,
                          what=f"{op}(x)", shape=tuple(x.shape))
    new_contents_same_shapes(getattr(impl, op), (x,), ("x",),
                             lambda a: _expected(ref, a[0], rows=rows), compare, seed=82)


# --- refused inputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("int_dtype", [torch.int32, torch.int64, torch.bool], ids=_name)
def test_refuses_integer_x(impl, device, int_dtype):
    x = torch.ones(100, dtype=int_dtype, device=device)
    impl.reduce_sum(randn(100, seed=1, dtype=torch.float32, device=device))  # a stub fails here
    expect_refusal(impl.reduce_sum, x, argument="x")
    expect_refusal(impl.reduce_sum_rows, x.view(10, 10), argument="x")


@pytest.mark.parametrize("layout", ["every other column", "transposed", "every other element"])
def test_refuses_non_contiguous_x(impl, device, layout):
    """The kernels walk memory with stride 1: a strided view would be summed in the wrong places.
    Refused, naming x (a hidden .contiguous() would be a whole extra pass over memory)."""
    impl.reduce_sum(randn(100, seed=1, dtype=torch.float32, device=device))  # a stub fails here
    if layout == "every other column":
        x = randn((33, 2 * 130), seed=2, dtype=torch.float32, device=device)[:, ::2]
    elif layout == "transposed":
        x = randn((130, 33), seed=2, dtype=torch.float32, device=device).t()
    else:
        x = randn(2 * 4099, seed=2, dtype=torch.float32, device=device)[::2]
    expect_refusal(impl.reduce_sum, x, argument="x")
    if x.dim() == 2:
        expect_refusal(impl.reduce_sum_rows, x, argument="x")


def test_rows_refuses_x_that_is_not_2d(impl, device):
    impl.reduce_sum_rows(randn((3, 5), seed=1, dtype=torch.float32, device=device))  # a stub fails
    for shape in [(12,), (2, 3, 4)]:
        expect_refusal(impl.reduce_sum_rows, randn(shape, seed=3, dtype=torch.float32,
                                                   device=device), argument="x")


def test_cpu_x_handled_or_refused(impl, ref):
    """A CPU tensor: summed right by a track with a CPU path, otherwise refused naming x."""
    x = randn(1001, seed=4, dtype=torch.float32, device="cpu")
    try:
        got = impl.reduce_sum(x)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x
    want, abs_sum = _expected(ref, x, rows=False)
    assert_sums_close(got, want, _bound(abs_sum, x.numel(), x.dtype), dtype=x.dtype,
                      what="reduce_sum(x on the CPU)")


# --- registration: opcheck, torch.compile ------------------------------------------------------

def test_opcheck(impl, track, device):
    """torch.library.opcheck: schema, fake (meta) kernel, dispatch under AOT autograd."""
    impl.reduce_sum(randn(10, seed=1, dtype=torch.float32, device=device))  # a stub fails here
    samples = [randn(shape, seed=30 + i, dtype=dtype, device=device) for i, (shape, dtype) in
               enumerate([((5, 7), torch.float32), ((1000,), torch.bfloat16),
                          ((3, 4, 5), torch.float64), ((), torch.float16)])]
    opcheck_samples(impl, track, device, f"{_ns(track)}::reduce_sum", [((x,), None)
                                                                        for x in samples])
    rows = [randn(shape, seed=40 + i, dtype=dtype, device=device) for i, (shape, dtype) in
            enumerate([((6, 33), torch.float32), ((3, 1000), torch.bfloat16),
                       ((4, 9), torch.float64)])]
    opcheck_samples(impl, track, device, f"{_ns(track)}::reduce_sum_rows", [((x,), None)
                                                                             for x in rows])


def test_torch_compile_without_graph_breaks(impl, ref, track, device):
    """torch.compile(fullgraph=True) of each entry point: no graph break, the same sums."""
    x = randn((37, 129), seed=51, dtype=torch.float32, device=device)
    impl.reduce_sum(x)  # a stub fails here, with its own message
    want, abs_sum = _expected(ref, x, rows=False)
    tol = {"atol": float(_bound(abs_sum, x.numel(), x.dtype)), "rtol": 0.0}
    compiled_matches(impl, track, device, "reduce_sum", (x,), expected=(want,), tol=tol,
                     names=["compiled reduce_sum(x)"])
    want, abs_sum = _expected(ref, x, rows=True)
    tol = {"atol": float(_bound(abs_sum.max(), x.shape[1], x.dtype)), "rtol": 0.0}
    compiled_matches(impl, track, device, "reduce_sum_rows", (x,), expected=(want,), tol=tol,
                     names=["compiled reduce_sum_rows(x)"])


# --- past 2^31: int64 indexing (GPU only: 2-4.3 GB inputs) -------------------------------------

def _needs_gpu_memory(gib):
    """x (up to 4.3 GB), the copy the seam hands the submission, and float64 chunks."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: a 2-4 GB input, summed on the GPU")
    free, _ = torch.cuda.mem_get_info()
    if free < gib * GIB:
        pytest.skip(f"needs a GPU with {gib} GiB free (has {free / GIB:.1f})")


def _big(shape, dtype):
    """Zeros, with random values at the start, in the middle, and at the very end: the last 4096
    elements of each row lie past 2^31 elements (bf16) or 2^31 bytes (float32) of the tensor,
    where an int index or byte offset has wrapped around. Not zeros alone: every region counts."""
    g = torch.Generator(device="cuda").manual_seed(2024)
    x = torch.zeros(shape, dtype=dtype, device="cuda")
    rows = x.view(-1, shape[-1])
    head = 1 << 20
    for r in range(rows.shape[0]):
        rows[r, :head] = torch.randn(head, device="cuda", generator=g).to(dtype)
        mid = shape[-1] // 2
        rows[r, mid:mid + head] = torch.randn(head, device="cuda", generator=g).to(dtype)
        rows[r, -4096:] = (32 + 32 * torch.rand(4096, device="cuda", generator=g)).to(dtype)
    return x


def _chunked_sums(x2d):
    """Per-row float64 sums and sums of |x|, 2^26 elements at a time (no 17 GB float64 copy)."""
    sums, abs_sums = [], []
    step = 1 << 26
    for row in x2d:
        s = a = 0.0
        for i in range(0, row.numel(), step):
            c = row[i:i + step].double()
            s += c.sum().item()
            a += c.abs().sum().item()
        sums.append(s)
        abs_sums.append(a)
    return (torch.tensor(sums, dtype=torch.float64, device=x2d.device),
            torch.tensor(abs_sums, dtype=torch.float64))


@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, (1 << 31) + 37),
                                     (torch.float32, (1 << 29) + 37)], ids=["bf16", "fp32"])
def test_sum_past_int32_indexing(impl, dtype, n):
    """2^31 + 37 bf16 elements (4.3 GB): past the largest int; 2^29 + 37 float32 elements: past
    2^31 bytes. Indices and offsets must be int64_t."""
    _needs_gpu_memory(12)
    x = _big((n,), dtype)
    try:
        got = impl.reduce_sum(x)
        sums, abs_sums = _chunked_sums(x.view(1, -1))
        assert_sums_close(got, sums.reshape(()), sum_bound(abs_sums[0].item(), n), dtype=dtype,
                          what="reduce_sum(x) past 2^31", n=n,
                          hint="the elements past 2^31 (the large ones at the end) are missing "
                               "or wrong: an int index or offset wrapped around; use int64_t")
    finally:
        del x
        torch.cuda.empty_cache()


def test_rows_past_int32_indexing(impl):
    """Two rows of 2^30 + 19 bf16 (4.3 GB): row 1 ends past element 2^31 of the tensor, although
    every column index fits in an int: the row offset row * N must be int64_t."""
    _needs_gpu_memory(12)
    shape = (2, (1 << 30) + 19)
    x = _big(shape, torch.bfloat16)
    try:
        got = impl.reduce_sum_rows(x)
        sums, abs_sums = _chunked_sums(x)
        bound = torch.tensor([sum_bound(a, shape[1]) for a in abs_sums.tolist()])
        assert_sums_close(got, sums, bound, dtype=torch.bfloat16,
                          what="reduce_sum_rows(x) past 2^31", shape=shape,
                          hint="row 1 is wrong: its offset row * N passes 2^31; use int64_t")
    finally:
        del x
        torch.cuda.empty_cache()
