"""grader/submission/interp.py: bf16 on Triton's CPU interpreter computes on values, as on the GPU.

The kernels below run once, in a child process started with TRITON_INTERPRET=1 (it has to be
set before Triton is imported, and this process may have imported Triton already): the child
is this file run as a script; it runs every case and saves inputs and outputs. Each test then
compares one case against PyTorch computing on float32 values and rounding to bf16 (which is
what the GPU does for a bf16 op): bit for bit where the rounding is exact, within one bf16 unit
for exp/log/sqrt of a bf16 value cast to fp32 (Triton refuses them on bf16, on the GPU too;
numpy's and PyTorch's float32 may differ in the last bit) and within the bf16 error bound of a
pairwise sum for tl.sum. The seed-style kernels (a bf16 add and a softmax
with no casts) are here too, and one test grades the 01 solution with its casts removed.
"""
import json
import os
import sys

if __name__ == "__main__":  # the child: the interpreter, before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import math
import subprocess
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def bits(t):
    return t.view(torch.int16).to(torch.int32) & 0xFFFF


def randn(*shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)


SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 3e38, -3e38, 1e-38]


def with_specials(t):
    t = t.clone()
    t[:len(SPECIAL)] = torch.tensor(SPECIAL, dtype=torch.bfloat16)
    return t


# kernels --------------------------------------------------------------------------------------

@triton.jit
def _binary(x, y, add, sub, mul, div, rem, mn, mx, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    a = tl.load(x + i, mask=m)
    b = tl.load(y + i, mask=m)
    tl.store(add + i, a + b, mask=m)
    tl.store(sub + i, a - b, mask=m)
    tl.store(mul + i, a * b, mask=m)
    tl.store(div + i, a / b, mask=m)
    tl.store(rem + i, a % b, mask=m)
    tl.store(mn + i, tl.minimum(a, b), mask=m)
    tl.store(mx + i, tl.maximum(a, b), mask=m)


@triton.jit
def _compare(x, y, lt, le, eq, ne, gt, where, n, B: tl.constexpr):
    i = tl.arange(0, B)
    m = i < n
    a = tl.load(x + i, mask=m)
    b = tl.load(y + i, mask=m)
    tl.store(lt + i, (a < b).to(tl.int8), mask=m)
    tl.store(le + i, (a <= b).to(tl.int8), mask=m)
    tl.store(eq + i, (a == b).to(tl.int8), mask=m)
    tl.store(ne + i, (a != b).to(tl.int8), mask=m)
    tl.store(gt + i, (a > b).to(tl.int8), mask=m)
    tl.store(where + i, tl.where(a > 0, a, b), mask=m)


@triton.jit
def _unary(x, neg, abs_, exp, log, sqrt, n, B: tl.constexpr):
    i = tl.arange(0, B)
    m = i < n
    a = tl.load(x + i, mask=m)
    tl.store(neg + i, -a, mask=m)
    tl.store(abs_ + i, tl.abs(a), mask=m)
    f = a.to(tl.float32)  # tl.exp & co. refuse bf16 (Triton's rule, on the GPU too)
    tl.store(exp + i, tl.exp(f), mask=m)
    tl.store(log + i, tl.log(f), mask=m)
    tl.store(sqrt + i, tl.sqrt(f), mask=m)


@triton.jit
def _exp_of_bf16(x, out, B: tl.constexpr):
    tl.store(out + tl.arange(0, B), tl.exp(tl.load(x + tl.arange(0, B))))


@triton.jit
def _fma(x, y, z, out, n, B: tl.constexpr):
    i = tl.arange(0, B)
    m = i < n
    a, b, c = tl.load(x + i, mask=m), tl.load(y + i, mask=m), tl.load(z + i, mask=m)
    tl.store(out + i, tl.fma(a, b, c), mask=m)


@triton.jit
def _dot(a, b, c, out32, out32_acc, out16, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)[:, None]
    rn = tl.arange(0, N)[None, :]
    rk = tl.arange(0, K)
    x = tl.load(a + rm * K + rk[None, :])
    y = tl.load(b + rk[:, None] * N + rn)
    acc = tl.load(c + rm * N + rn)  # float32
    d = tl.dot(x, y)
    tl.store(out32 + rm * N + rn, d)
    tl.store(out32_acc + rm * N + rn, tl.dot(x, y, acc))
    tl.store(out16 + rm * N + rn, d.to(tl.bfloat16))


@triton.jit
def _reduce(x, s, mx, mn, amx, amn, s_all, s_keep, s_own, mx_bf16, N: tl.constexpr):
    r = tl.program_id(0)
    v = tl.load(x + r * N + tl.arange(0, N))
    tl.store(s + r, tl.sum(v, axis=0))
    tl.store(mx + r, tl.max(v, axis=0))
    tl.store(mn + r, tl.min(v, axis=0))
    tl.store(amx + r, tl.argmax(v, axis=0))
    tl.store(amn + r, tl.argmin(v, axis=0))
    tl.store(s_all + r, tl.sum(v))
    tl.store(s_keep + r + tl.arange(0, 1), tl.sum(v, axis=0, keep_dims=True))
    tl.store(s_own + r, tl.reduce(v, 0, _add_combine))  # your own combine: each step rounded
    # tl.max promotes bf16 to fp32 first; the built-in combine on bf16 itself (what tl.max
    # would do if Triton stopped promoting) must compare values too
    tl.store(mx_bf16 + r, tl.reduce(v, 0, tl.standard._elementwise_max))


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def _reduce_2d(x, s, R: tl.constexpr, N: tl.constexpr):
    v = tl.load(x + tl.arange(0, R)[:, None] * N + tl.arange(0, N)[None, :])
    tl.store(s + tl.arange(0, N), tl.sum(v, axis=0))


@triton.jit
def _cumsum(x, out, out_bf16, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out + i, tl.cumsum(tl.load(x + i), axis=0))
    # the built-in combine on bf16 itself (tl.cumsum promotes to fp32 first): each step rounded
    tl.store(out_bf16 + i, tl.associative_scan(tl.load(x + i), 0, tl.standard._sum_combine))


@triton.jit
def _cast(x16, x32, xh, xi, to32, to16, from_h, to_h, from_i, to_i, rtz, n, B: tl.constexpr):
    i = tl.arange(0, B)
    m = i < n
    b = tl.load(x16 + i, mask=m)
    f = tl.load(x32 + i, mask=m)
    tl.store(to32 + i, b.to(tl.float32), mask=m)
    tl.store(to16 + i, f.to(tl.bfloat16), mask=m)
    tl.store(from_h + i, tl.load(xh + i, mask=m).to(tl.bfloat16), mask=m)
    tl.store(to_h + i, b.to(tl.float16), mask=m)
    tl.store(from_i + i, tl.load(xi + i, mask=m).to(tl.bfloat16), mask=m)
    tl.store(to_i + i, b.to(tl.int32), mask=m)
    tl.store(rtz + i, f.to(tl.bfloat16, fp_downcast_rounding="rtz"), mask=m)


@triton.jit
def _store_f32(x, out, n, B: tl.constexpr):  # a float32 value stored to a bf16 tensor
    i = tl.arange(0, B)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m).to(out.dtype.element_ty), mask=m)


@triton.jit
def _constants(x, full, scaled, ninf, B: tl.constexpr):
    i = tl.arange(0, B)
    tl.store(full + i, tl.full((B,), 1.5, tl.bfloat16))
    tl.store(scaled + i, tl.load(x + i) * 0.1)  # 0.1 becomes a bf16 constant, rounded
    tl.store(ninf + i, tl.full((B,), float("-inf"), tl.bfloat16))


@triton.jit
def _atomic_add(x, out, B: tl.constexpr):
    tl.atomic_add(out + tl.arange(0, B) * 0, tl.load(x + tl.arange(0, B)))


@triton.jit
def _print(x, B: tl.constexpr):
    tl.device_print("v", tl.load(x + tl.arange(0, B)))


# the seed-style kernels: no casts anywhere

@triton.jit
def seed_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def seed_softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def seed_softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dot = tl.sum(y * dy, axis=0)
    tl.store(dx_ptr + row * n_cols + cols, y * (dy - dot), mask=mask)


# the cases (run in the child) -----------------------------------------------------------------

def _empty(like, n, dtype=torch.bfloat16):
    return [torch.full_like(like, float("nan"), dtype=dtype) for _ in range(n)]


@case
def binary():
    n = 300
    x = with_specials(randn(n, seed=1, scale=4))
    y = randn(n, seed=2, scale=4)
    y[:len(SPECIAL)] = torch.tensor([1.0, 2.0, -0.0, float("nan"), float("inf"), 1.0, 1.0, 3e38,
                                     -3e38, 1e-38], dtype=torch.bfloat16)
    # ties: 1 + 2^-8 and (1 + 2^-7) + 2^-8 are halfway between two bf16 values
    x[10:12] = torch.tensor([1.0, 1.0 + 2 ** -7], dtype=torch.bfloat16)
    y[10:12] = torch.tensor([2 ** -8, 2 ** -8], dtype=torch.bfloat16)
    outs = _empty(x, 7)
    _binary[(triton.cdiv(n, 128),)](x, y, *outs, n, B=128)
    return dict(x=x, y=y, outs=outs)


@case
def compare():
    n = 200
    x = with_specials(randn(n, seed=3))
    y = randn(n, seed=4)
    y[100:150] = x[100:150]  # equal values
    y[:len(SPECIAL)] = torch.tensor([-0.0, 0.0, -1.0, 1.0, 1.0, float("-inf"), 0.0, 3e38, 1.0,
                                     float("nan")], dtype=torch.bfloat16)
    outs = [torch.full((n,), -1, dtype=torch.int8) for _ in range(5)] + _empty(x, 1)
    _compare[(1,)](x, y, *outs, n, B=256)
    return dict(x=x, y=y, outs=outs)


@case
def unary():
    n = 200
    x = with_specials(randn(n, seed=5, scale=3))
    outs = _empty(x, 5)
    _unary[(1,)](x, *outs, n, B=256)
    try:
        _exp_of_bf16[(1,)](x, outs[0].clone(), B=8)
        refused = ""
    except Exception as e:  # noqa: BLE001
        refused = str(e)
    return dict(x=x, outs=outs, refused=refused)


@case
def fma():
    n = 100
    x, y, z = randn(n, seed=6), randn(n, seed=7), randn(n, seed=8)
    # one rounding: 1.5 * (1 + 2^-7) = 1.51171875 is halfway between two bf16 values; z = -2^-30
    # puts the exact result just below it: bf16 1.5078125 (rounding to float32 first would make
    # it a tie, and the tie would go to the even 1.515625)
    x[0], y[0], z[0] = 1.5, 1.0 + 2 ** -7, -(2 ** -30)
    x[1], y[1], z[1] = float("inf"), 0.0, 1.0  # inf * 0: NaN
    x[2], y[2], z[2] = 3e38, 3e38, 1.0  # overflow: inf
    out = _empty(x, 1)[0]
    _fma[(1,)](x, y, z, out, n, B=128)
    return dict(x=x, y=y, z=z, out=out)


@case
def dot():
    M = N = K = 16
    a, b = randn(M, K, seed=9), randn(K, N, seed=10)
    c = torch.randn(M, N, generator=torch.Generator().manual_seed(11))
    out32, out32_acc = torch.empty(M, N), torch.empty(M, N)
    out16 = torch.empty(M, N, dtype=torch.bfloat16)
    _dot[(1,)](a, b, c, out32, out32_acc, out16, M=M, N=N, K=K)
    return dict(a=a, b=b, c=c, out32=out32, out32_acc=out32_acc, out16=out16)


@case
def reduce():
    R, N = 6, 64
    x = randn(R, N, seed=12, scale=3)
    x[1, 5] = float("inf")
    x[2, 7] = float("nan")
    x[3] = x[3].abs() + 1  # all positive: a sum with no cancellation
    x[4] = -x[4].abs()  # all negative: max and argmax among negatives
    idx = [torch.empty(R, dtype=torch.int32) for _ in range(2)]
    outs = _empty(x[:, 0], 3) + idx + _empty(x[:, 0], 4)
    _reduce[(R,)](x, *outs, N=N)
    x2 = randn(8, 32, seed=13)
    s2 = _empty(x2[0], 1)[0]
    _reduce_2d[(1,)](x2, s2, R=8, N=32)
    return dict(x=x, outs=outs, x2=x2, s2=s2)


@case
def cumsum():
    x = randn(32, seed=14)
    out, out_bf16 = _empty(x, 2)
    _cumsum[(1,)](x, out, out_bf16, N=32)
    return dict(x=x, out=out, out_bf16=out_bf16)


def tie_floats():
    """float32 values exactly halfway between two bf16 values (and just either side of
    halfway), for even and odd bf16 neighbours, both signs, and the edges."""
    lows = torch.tensor([0x3F80, 0x3F81, 0x4049, 0x404A, 0x0001, 0x7F7E, 0x7F7F], dtype=torch.int64)
    tails = torch.tensor([0x8000, 0x7FFF, 0x8001], dtype=torch.int64)
    u = (lows[:, None] << 16 | tails[None, :]).flatten()
    u = torch.cat([u, u | (1 << 31)])
    u = torch.cat([u, torch.tensor([0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0x7F7FFFFF,
                                    0x00000001, 0x80000000])])
    return u.to(torch.int32).view(torch.float32)


@case
def cast():
    f = tie_floats()
    n = f.numel()
    x16 = with_specials(randn(n, seed=15, scale=100))
    xh = (torch.randn(n, generator=torch.Generator().manual_seed(16)) * 1000).to(torch.float16)
    xh[0] = 65504.0
    xi = torch.randint(-3000, 3000, (n,), generator=torch.Generator().manual_seed(17),
                       dtype=torch.int32)
    xi[0] = 257  # between 256 and 258: a tie, to even
    xi[1] = 259  # a tie, to even 260
    outs = ([torch.empty(n)] + _empty(x16, 2) + [torch.empty(n, dtype=torch.float16)]
            + _empty(x16, 1) + [torch.empty(n, dtype=torch.int32)] + _empty(x16, 1))
    # to int32: only values that fit (NaN, inf and 3e38 have no int32 value on either machine)
    finite16 = torch.where(torch.isfinite(x16), x16, torch.zeros_like(x16)).clamp(-1e9, 1e9)
    _cast[(1,)](finite16, f, xh, xi, *outs, n, B=64)
    stored = _empty(f, 1)[0]
    _store_f32[(1,)](f, stored, n, B=64)
    return dict(x16=finite16, f=f, xh=xh, xi=xi, outs=outs, stored=stored)


@case
def constants():
    x = randn(16, seed=18)
    outs = _empty(x, 3)
    _constants[(1,)](x, *outs, B=16)
    return dict(x=x, outs=outs)


@case
def atomic_add():
    x = randn(16, seed=19)
    out = torch.zeros(1, dtype=torch.bfloat16)
    _atomic_add[(1,)](x, out, B=16)
    return dict(x=x, out=out)


@case
def device_print():
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _print[(1,)](torch.tensor([1.5, -2.0], dtype=torch.bfloat16), B=2)
    return dict(text=buf.getvalue())


@case
def seed_add():
    n = 1000
    x, y = randn(n, seed=20, scale=10), randn(n, seed=21)
    out = _empty(x, 1)[0]
    seed_add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return dict(x=x, y=y, out=out)


@case
def seed_softmax():
    M, N = 8, 300
    x = randn(M, N, seed=22, scale=4)
    x[1] *= 30  # large magnitudes: exp overflows unless the max is subtracted
    dy = randn(M, N, seed=23)
    y, dx = _empty(x, 2)
    seed_softmax_kernel[(M,)](x, y, N, BLOCK=512)
    seed_softmax_bwd_kernel[(M,)](y, dy, dx, N, BLOCK=512)
    return dict(x=x, y=y, dy=dy, dx=dx)


def child(out_path: str) -> None:
    from triton.runtime.interpreter import InterpreterBuilder

    import grader.submission.interp
    results = {}
    # the interpreter alone first: how a plain bf16 add comes out without the shim
    for name, fn in (("unpatched_add", seed_add), ("unpatched_softmax", seed_softmax)):
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001 - recorded, judged in the parent
            results[name] = f"{type(e).__name__}: {e}"
    first = grader.submission.interp.install()
    wrapped = InterpreterBuilder.binary_op
    results["install"] = dict(first=first, second=grader.submission.interp.install(),
                              same=InterpreterBuilder.binary_op is wrapped)
    for name, fn in CASES.items():
        try:
            results[name] = fn()
        except Exception as e:  # noqa: BLE001
            import traceback
            results[name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"
    torch.save(results, out_path)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    child(sys.argv[1])
    sys.exit(0)


# the tests (in the parent) ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def got(tmp_path_factory):
    path = tmp_path_factory.mktemp("interp") / "results.pt"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    run = subprocess.run([sys.executable, __file__, str(path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and path.exists(), \
        f"child failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    results = torch.load(path, weights_only=False)

    def get(name):
        r = results[name]
        assert not isinstance(r, str), f"case {name} raised in the interpreter: {r}"
        return r
    return get


def rounded(t):
    """What the GPU stores for a bf16 op: the float32 result rounded to bf16."""
    return t.to(torch.bfloat16)


def assert_same_bf16(out, ref, what=""):
    """Bit for bit, except that any NaN matches any NaN."""
    nan = torch.isnan(ref.float())
    assert torch.equal(torch.isnan(out.float()), nan), f"{what}: NaN in different places"
    bad = (bits(out) != bits(ref)) & ~nan
    assert not bad.any(), (f"{what}: {int(bad.sum())} differ, e.g. got {out[bad][:4].tolist()} "
                           f"want {ref[bad][:4].tolist()}")


def assert_within_ulp(out, ref, what=""):
    """Within one bf16 unit in the last place (exp, log: the last float32 bit may differ)."""
    o, r = out.float(), ref.float()
    assert torch.equal(torch.isnan(o), torch.isnan(r)), f"{what}: NaN in different places"
    ok = torch.isnan(r) | (o == r) | ((o - r).abs() <= r.abs() * 2 ** -7)
    assert ok.all(), f"{what}: got {o[~ok][:4].tolist()} want {r[~ok][:4].tolist()}"


def test_install_is_idempotent_and_only_for_the_interpreter(got):
    from grader.submission.interp import install
    r = got("install")
    assert r == dict(first=True, second=True, same=True), r
    before = os.environ.pop("TRITON_INTERPRET", None)
    try:
        assert install() is False  # not on the interpreter: nothing to do
    finally:
        if before is not None:
            os.environ["TRITON_INTERPRET"] = before


def test_interpreter_alone_gets_bf16_wrong(got):
    """Why the shim exists. If this starts to skip, Triton fixed bf16 itself: the shim may go."""
    add, softmax = got("unpatched_add"), got("unpatched_softmax")
    add_right = torch.equal(bits(add["out"]), bits(rounded(add["x"].float() + add["y"].float())))
    bwd_finite = bool(torch.isfinite(softmax["dx"].float()).all())
    if add_right and bwd_finite:
        pytest.skip("Triton's interpreter now gets bf16 right by itself: grader/submission/interp.py may go")
    assert not add_right and not bwd_finite  # the adds of bits, and y * dy summed as bits


def test_arithmetic(got):
    r = got("binary")
    x, y = r["x"].float(), r["y"].float()
    # tl.minimum/maximum default to propagate_nan=NONE: the number wins over a NaN, as fmin/fmax
    refs = [x + y, x - y, x * y, x / y, torch.fmod(x, y), torch.fmin(x, y), torch.fmax(x, y)]
    for name, out, ref in zip(["+", "-", "*", "/", "%", "minimum", "maximum"], r["outs"], refs):
        assert_same_bf16(out, rounded(ref), name)


def test_arithmetic_rounds_ties_to_even(got):
    add = got("binary")["outs"][0]
    assert bits(add[10:12]).tolist() == [0x3F80, 0x3F82]  # 1 + 2^-8 -> 1; 1+2^-7 + 2^-8 -> 1+2^-6


def test_nan_and_inf_propagate(got):
    r = got("binary")
    add, sub, mul, div = (o.float() for o in r["outs"][:4])
    # x: 0, -0, 1, -1, inf, -inf, nan, 3e38, -3e38; y: 1, 2, -0, nan, inf, 1, 1, 3e38, -3e38
    assert math.isinf(div[2]) and div[2] < 0  # 1 / -0
    assert math.isnan(add[3]) and math.isnan(mul[3])  # with a NaN
    assert add[4] == math.inf and math.isnan(sub[4])  # inf + inf, inf - inf
    assert add[5] == -math.inf and math.isnan(add[6])
    assert add[7] == math.inf and add[8] == -math.inf and sub[7] == 0  # overflow to inf
    assert mul[1] == 0 and bits(r["outs"][2][1]) == 0x8000  # -0 * 2 = -0


def test_comparisons_and_where(got):
    r = got("compare")
    x, y = r["x"].float(), r["y"].float()
    for name, out, ref in zip(["<", "<=", "==", "!=", ">"], r["outs"][:5],
                              [x < y, x <= y, x == y, x != y, x > y]):
        assert torch.equal(out.bool(), ref), f"{name}: got {out.tolist()} want {ref.tolist()}"
    assert_same_bf16(r["outs"][5], torch.where(x > 0, r["x"], r["y"]), "where")


def test_unary_math(got):
    r = got("unary")
    x = r["x"].float()
    neg, abs_, exp, log, sqrt = r["outs"]
    assert_same_bf16(neg, -r["x"], "neg")
    assert_same_bf16(abs_, r["x"].abs(), "abs")
    assert_within_ulp(exp, rounded(torch.exp(x)), "exp")
    assert_within_ulp(log, rounded(torch.log(x)), "log")
    assert_within_ulp(sqrt, rounded(torch.sqrt(x)), "sqrt")
    # tl.exp of a bf16 tensor is refused by Triton itself, on the GPU as here: not the shim's
    assert "Expected dtype ['fp32', 'fp64'] but got bf16" in r["refused"], r["refused"]


def test_fma_rounds_once(got):
    r = got("fma")
    ref = rounded((r["x"].double() * r["y"].double() + r["z"].double()).float())
    assert_same_bf16(r["out"][3:], ref[3:], "fma")
    assert bits(r["out"][0]) == 0x3FC1  # 1.5078125: one rounding, not two
    assert math.isnan(r["out"][1]) and r["out"][2] == math.inf


def test_dot_accumulates_in_float32(got):
    r = got("dot")
    a, b, c = r["a"].float(), r["b"].float(), r["c"]
    torch.testing.assert_close(r["out32"], a @ b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(r["out32_acc"], a @ b + c, rtol=1e-5, atol=1e-5)
    # fp32 stays fp32: not rounded to bf16 on the way
    assert not torch.equal(r["out32"], r["out32"].to(torch.bfloat16).float())
    assert_same_bf16(r["out16"], rounded(r["out32"]), "dot(...).to(bf16)")


def test_reductions(got):
    r = got("reduce")
    x = r["x"].float()
    s, mx, mn, amx, amn, s_all, s_keep, s_own, mx_bf16 = r["outs"]
    # a pairwise sum of 64 terms, each partial sum rounded to bf16: 6 levels + the inputs
    bound = 7 * 2 ** -8 * x.abs().sum(1)
    for name, out in (("sum", s), ("sum(axis=None)", s_all), ("sum(keep_dims)", s_keep)):
        o, ref = out.float(), x.sum(1)
        finite = torch.isfinite(ref)
        assert (o - ref)[finite].abs().le(bound[finite]).all(), f"{name}: {o.tolist()} vs {ref}"
        assert o[1] == math.inf and math.isnan(o[2]), f"{name}: inf and NaN rows: {o.tolist()}"
    own, ref = s_own.float(), x.sum(1)  # left to right: up to 64 roundings
    finite = torch.isfinite(ref)
    assert (own - ref)[finite].abs().le(64 * 2 ** -8 * x.abs().sum(1)[finite]).all(), own.tolist()
    assert own[1] == math.inf and math.isnan(own[2])
    clean = [0, 3, 4, 5]  # the rows without NaN (the interpreter's max/min skip NaN)
    assert_same_bf16(mx[clean], r["x"][clean].max(1).values, "max")
    assert_same_bf16(mn[clean], r["x"][clean].min(1).values, "min")
    assert_same_bf16(mx_bf16[clean], r["x"][clean].max(1).values, "max combine on bf16")
    assert torch.equal(amx[clean], x[clean].argmax(1).int()), "argmax"
    assert torch.equal(amn[clean], x[clean].argmin(1).int()), "argmin"
    x2 = r["x2"].float()
    o2 = r["s2"].float()
    assert (o2 - x2.sum(0)).abs().le(4 * 2 ** -8 * x2.abs().sum(0)).all(), "sum(axis=0) of 2-D"


def test_cumsum(got):
    """tl.cumsum promotes bf16 to fp32 (Triton's rule): one rounding, at the store."""
    r = got("cumsum")
    assert_same_bf16(r["out"], rounded(torch.cumsum(r["x"].float(), 0)), "cumsum")
    acc, want = torch.zeros((), dtype=torch.bfloat16), []
    for v in r["x"]:
        acc = rounded(acc.float() + v.float())
        want.append(acc)
    assert_same_bf16(r["out_bf16"], torch.stack(want), "scan with the sum combine on bf16")


def test_casts(got):
    r = got("cast")
    to32, to16, from_h, to_h, from_i, to_i, rtz = r["outs"]
    f = r["f"]
    assert torch.equal(to32, r["x16"].float())  # bf16 -> fp32: exact
    assert_same_bf16(to16, f.to(torch.bfloat16), "fp32 -> bf16 (ties to even)")
    assert_same_bf16(r["stored"], f.to(torch.bfloat16), "fp32 stored to bf16")
    assert_same_bf16(from_h, r["xh"].to(torch.bfloat16), "fp16 -> bf16")
    assert torch.equal(to_h, r["x16"].to(torch.float16)), "bf16 -> fp16"
    assert_same_bf16(from_i, r["xi"].to(torch.bfloat16), "int32 -> bf16")
    assert from_i[:2].tolist() == [256.0, 260.0]
    assert torch.equal(to_i, r["x16"].float().to(torch.int32)), "bf16 -> int32 (toward zero)"
    trunc = (f.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    trunc[torch.isnan(f)] = float("nan")  # a NaN whose payload is all in the low bits stays NaN
    assert_same_bf16(rtz, trunc, "fp32 -> bf16, rtz")


def test_rounding_ties_bits(got):
    """float32 values halfway between two bf16 values go to the even one, by the bits."""
    to16 = got("cast")["outs"][1]
    want = [0x3F80, 0x3F80, 0x3F81,  # 0x3F80 (even) + half: stays; just under/over
            0x3F82, 0x3F81, 0x3F82,  # 0x3F81 (odd) + half: up to even
            0x404A, 0x4049, 0x404A,
            0x404A, 0x404A, 0x404B,
            0x0002, 0x0001, 0x0002,  # subnormal
            0x7F7E, 0x7F7E, 0x7F7F,
            0x7F80, 0x7F7F, 0x7F80]  # max bf16 + half: to inf
    got_bits = bits(to16).tolist()
    assert got_bits[:21] == want
    assert got_bits[21:42] == [w | 0x8000 for w in want]
    assert got_bits[42:44] == [0x7F80, 0xFF80] and got_bits[44] & 0x7FC0 == 0x7FC0  # inf, -inf, NaN
    assert got_bits[45] & 0x7F80 == 0x7F80 and got_bits[45] & 0x7F  # a signalling NaN stays NaN
    assert got_bits[46:] == [0x7F80, 0x0000, 0x8000]  # f32 max rounds up to inf; tiny to 0


def test_constants(got):
    r = got("constants")
    full, scaled, ninf = r["outs"]
    assert full.eq(1.5).all() and ninf.eq(-math.inf).all()
    point_one = rounded(torch.tensor(0.1))  # rounded (0x3DCD), not truncated (0x3DCC)
    assert_same_bf16(scaled, rounded(r["x"].float() * point_one.float()), "x * 0.1")


def test_atomic_add(got):
    r = got("atomic_add")
    acc = torch.zeros((), dtype=torch.bfloat16)
    for v in r["x"]:
        acc = rounded(acc.float() + v.float())
    assert_same_bf16(r["out"], acc.reshape(1), "atomic_add")


def test_device_print_shows_values(got):
    text = got("device_print")["text"]
    assert "1.5" in text and "-2." in text, text


def test_seed_style_vector_add(got):
    """01's kernel as a tutorial writes it, `x + y` with no casts: right on the CPU as on a GPU."""
    r = got("seed_add")
    assert_same_bf16(r["out"], rounded(r["x"].float() + r["y"].float()), "x + y")


def test_seed_style_softmax(got):
    """One program per row, no casts: forward x - max, exp, / sum; backward
    y * (dy - sum(y * dy)) all in bf16. Within the grader's bf16 bounds."""
    r = got("seed_softmax")
    ref = torch.softmax(r["x"].float(), dim=-1)
    torch.testing.assert_close(r["y"].float(), ref, atol=8e-3, rtol=1.6e-2)
    y, dy = r["y"].float(), r["dy"].float()
    dref = y * (dy - (y * dy).sum(-1, keepdim=True))
    torch.testing.assert_close(r["dx"].float(), dref, atol=8e-3, rtol=1.6e-2)


def test_seed_style_01_passes_the_grader(variant, tmp_path):
    """The grader itself, on this machine: exercise 01's solution with its casts removed
    (`tl.store(out_ptr + offsets, x + y)`) passes the value checks, bf16 included. Through the
    judge and the submission's process (grader.submission calls grader.submission.interp.install()). The
    project's fixed examples (tests/conftest.py: the same every run), bf16 among them (without the shim this check fails
    with 1e38s where 2.2 is expected)."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the grader runs Triton compiled, not on the interpreter")
    tree = variant("01_vector_add", "triton", {"vector_add.py": [(
        "    out = x.to(tl.float32) + y.to(tl.float32)\n"
        "    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)",
        "    tl.store(out_ptr + offsets, x + y, mask=mask)")]})
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.judge.plugin",
         str(ROOT / "exercises" / "01_vector_add"),
         "--tree", str(tree), "--events", str(events), "-k", "test_matches_reference", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert '"outcome": "passed"' in events.read_text()


# out-of-bounds accesses and scalar arguments (their own child: a script run with the
# interpreter on, each case printing one line) ---------------------------------------------------

_BOUNDS_SCRIPT = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, sys.argv[1])
import torch, triton, triton.language as tl
from grader.submission.interp import install
from grader.submission.interp_bounds import OutOfBounds

# tensor descriptors: made in the kernel from a pointer, or on the host, each declaring a shape
# (ROWS rows: 28 reaches past x's 20)
@triton.jit
def desc_copy(x_ptr, out_ptr, M, N, ROWS, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[ROWS, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    i, j = tl.program_id(0), tl.program_id(1)
    dst.store([i * BM, j * BN], src.load([i * BM, j * BN]))

@triton.jit
def host_copy(src, dst, BM: tl.constexpr, BN: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    dst.store([i * BM, j * BN], src.load([i * BM, j * BN]))

def copied(rows, host):
    def go():
        x, out = torch.randn(20, 24), torch.zeros(20, 24)
        if host:
            from triton.tools.tensor_descriptor import TensorDescriptor
            host_copy[(3, 2)](TensorDescriptor(x, [rows, 24], [24, 1], [8, 16]),
                              TensorDescriptor.from_tensor(out, [8, 16]), BM=8, BN=16)
        else:
            desc_copy[(3, 2)](x, out, 20, 24, rows, BM=8, BN=16)
        assert torch.equal(out, x)
    return go

def supported(fn):
    try:
        fn()
        return True
    except Exception:
        return False

# what this Triton's interpreter runs by itself, before the shims go in
desc_support = (supported(copied(20, host=False)), supported(copied(20, host=True)))
install()

@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, B: tl.constexpr, MASK_LOAD: tl.constexpr,
        MASK_STORE: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    if MASK_LOAD:
        v = tl.load(x_ptr + o, mask=m) + tl.load(y_ptr + o, mask=m)
    else:
        v = tl.load(x_ptr + o, mask=m) + tl.load(y_ptr + o)
    if MASK_STORE:
        tl.store(out_ptr + o, v, mask=m)
    else:
        tl.store(out_ptr + o, v)

@triton.jit
def wild_masked(x_ptr, out_ptr, n, stride, B: tl.constexpr):
    o = tl.arange(0, B)
    m = o < n
    # masked-off lanes point far outside every tensor (and below it): never touched
    far = tl.where(m, o * stride, o * 1000003 - 50000000)
    tl.store(out_ptr + o, tl.load(x_ptr + far, mask=m, other=0.0), mask=m)

@triton.jit
def next_rows(x_ptr, out_ptr, rows, n, B: tl.constexpr):
    # each row's program also asks for the row after it (a prefetch): past the last row the
    # mask, a block mask and a scalar condition combined, is all off
    row = tl.program_id(0)
    o = tl.arange(0, B)
    m = o < n
    nxt = row + 1
    ahead = tl.load(x_ptr + nxt * n + o, mask=m & (nxt < rows), other=0.0)
    tl.store(out_ptr + row * n + o, tl.load(x_ptr + row * n + o, mask=m) + 0 * ahead, mask=m)

@triton.jit
def scaled(x_ptr, out_ptr, eps, n, B: tl.constexpr):
    o = tl.arange(0, B)
    m = o < n
    x = tl.load(x_ptr + o, mask=m).to(tl.float32)
    tl.store(out_ptr + o, (x * eps.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=m)

def case(name, fn):
    try:
        fn()
        print(name, "OK")
    except OutOfBounds as e:
        print(name, "OOB", str(e).replace("\n", " "))
    except Exception as e:
        print(name, "ERR", type(e).__name__, str(e).replace("\n", " ")[:300])

x, y = torch.randn(1000), torch.randn(1000)
out = torch.empty(1000)
case("load", lambda: add[(8,)](x, y, out, 1000, B=128, MASK_LOAD=False, MASK_STORE=True))
case("store", lambda: add[(8,)](x, y, out, 1000, B=128, MASK_LOAD=True, MASK_STORE=False))
def masked():
    add[(8,)](x, y, out, 1000, B=128, MASK_LOAD=True, MASK_STORE=True)
    assert torch.equal(out, x + y)
case("masked", masked)
def wild():
    base = torch.randn(50)
    view = base[3::3]  # an offset, strided view: its last element is the storage's 48th
    o = torch.empty(view.numel())
    wild_masked[(1,)](view, o, view.numel(), view.stride(0), B=32)
    assert torch.equal(o, view)
case("wild", wild)
def ahead():
    base = torch.randn(5, 6)
    o = torch.empty_like(base)
    next_rows[(5,)](base, o, 5, 6, B=8)
    assert torch.equal(o, base)
case("ahead", ahead)
def scalar():
    h = torch.randn(7).half()
    o = torch.empty_like(h)
    scaled[(1,)](h, o, 1e-3, 7, B=8)
    # the kernel multiplies in float32 by eps as a float32 and rounds once to half: the same
    # steps here give the same bits, whatever the draw (h * 1e-3 is often a half subnormal,
    # where a relative tolerance alone fails a correct kernel)
    want = (h.float() * torch.tensor(1e-3, dtype=torch.float32)).half()
    assert torch.equal(o, want), (o, want)
case("scalar", scalar)

for name, works in (("desc", desc_support[0]), ("host_desc", desc_support[1])):
    if works:
        case(name, copied(20, host=name == "host_desc"))
        case(f"{name}_past", copied(28, host=name == "host_desc"))
    else:  # this Triton's interpreter, without the shims, cannot run them either
        print(name, "SKIP")

from torch.library import triton_op, wrap_triton
@triton_op("grader_interp_test::add", mutates_args=())
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(add)[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), B=128, MASK_LOAD=True,
                                                    MASK_STORE=True)
    return out
def fake():
    torch.library.opcheck(add_op, (x, y), test_utils=("test_faketensor",))
case("fake", fake)
def traced():
    torch.library.opcheck(add_op, (x, y), test_utils=("test_aot_dispatch_static",))
case("traced", traced)
'''


@pytest.fixture(scope="module")
def bounds(tmp_path_factory):
    script = tmp_path_factory.mktemp("bounds") / "bounds.py"
    script.write_text(_BOUNDS_SCRIPT)
    run = subprocess.run([sys.executable, str(script), str(ROOT)], capture_output=True,
                         text=True, timeout=300)
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if " " in line)
    assert lines, run.stderr[-3000:]
    return lines


def test_unmasked_load_is_named_not_a_crash(bounds):
    msg = bounds["load"]
    assert msg.startswith("OOB"), msg
    assert "tl.load" in msg and "pointer argument `y_ptr`" in msg, msg
    assert "element offsets 1000..1023" in msg and "1000 elements" in msg, msg
    assert "outside 0..999" in msg and "mask it" in msg, msg


def test_unmasked_store_is_named(bounds):
    msg = bounds["store"]
    assert msg.startswith("OOB") and "tl.store" in msg and "`out_ptr`" in msg, msg


def test_masked_kernels_are_never_flagged(bounds):
    """Masked-off lanes may hold any address; an offset, strided view read in place is fine."""
    assert bounds["masked"] == "OK", bounds["masked"]
    assert bounds["wild"] == "OK", bounds["wild"]
    # the interpreter holds `block_mask & scalar_condition` as int32, not bool: a mask all off
    # must still leave every lane untouched (an int32 array used as an index picked lane 0)
    assert bounds["ahead"] == "OK", bounds["ahead"]


def test_tensor_descriptors_run_and_their_bounds_are_checked(bounds):
    """tl.make_tensor_descriptor in the kernel, and a host TensorDescriptor: their loads and
    stores run on the interpreter (a learner's 12 or 13 with TMA descriptors), and a descriptor
    whose shape reaches past its tensor is named, not read past silently."""
    cases = [(kind, name) for kind, name in (("desc", "pointer argument `x_ptr`"),
                                             ("host_desc", "descriptor argument `src`"))
             if bounds[kind] != "SKIP"]  # (what this Triton's interpreter has)
    if not cases:
        pytest.skip("this Triton's interpreter runs no tensor descriptors")
    for case, name in cases:
        assert bounds[case] == "OK", bounds[case]
        msg = bounds[f"{case}_past"]
        assert msg.startswith("OOB out-of-bounds desc.load") and name in msg, msg
        assert "at element offsets 480" in msg and "outside 0..479" in msg, msg
        assert "the descriptor's shape or strides reach past the tensor" in msg, msg
        assert "mask it" not in msg, msg


def test_a_float_argument_has_to_as_on_the_gpu(bounds):
    """`eps.to(tl.float32)` (Liger-Kernel's RMSNorm): compiled Triton passes a typed scalar;
    the interpreter passed a Python float ('float' object has no attribute 'to')."""
    assert bounds["scalar"] == "OK", bounds["scalar"]


def test_a_triton_ops_fake_is_tested_on_the_interpreter(bounds):
    """opcheck's fake-tensor test of a triton_op runs on the interpreter: its launches on
    FakeTensors do nothing, as on the GPU. AOT dispatch is another matter: it traces the launch
    itself (from FunctionalTensors), which the interpreter cannot record, so the launch is not
    skipped there and the test fails as it did (it needs a GPU: grader.judge.testing.opcheck_samples
    does not ask for it on the interpreter); never a traced graph without its kernel."""
    assert bounds["fake"] == "OK", bounds["fake"]
    assert bounds["traced"].startswith("ERR") and "data pointer" in bounds["traced"], \
        bounds["traced"]


def test_missing_mask_in_01_is_reported_with_the_fix(variant, tmp_path):
    """The first bug every Triton learner writes, through the grader: named, not a crash."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the grader runs Triton compiled, not on the interpreter")
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets)")]})
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.judge.plugin",
         str(ROOT / "exercises" / "01_vector_add"),
         "--tree", str(tree), "--events", str(events), "-k", "test_matches_reference", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    text = events.read_text()
    assert '"outcome": "failed"' in text, f"{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
    assert "pointer argument `x_ptr`" in text and "mask it" in text, text[-3000:]
    results = [json.loads(line) for line in text.splitlines()
               if json.loads(line)["event"] == "result"]
    assert not any(r["crashed"] for r in results), text[-3000:]
