"""Issue 38 on the H200, step (a) of gpu38.sh: the solution's Gluon forward and backward as the branch
wip-38-gluon integrates it (its tree extracted at $WT, default /tmp/wt38).

    python3 gpu38_check.py        (about a minute; prints PASS/FAIL lines and a last ALL PASS)

1. Correctness of `_fwd_impl(q, k, v, False, scale, _direct)` (the eager door's forward) at
   (1,2,128,128), (1,2,1024,128), (2,3,4096,128) and a peaky (1,2,1024,128) with q x 4, bf16,
   not causal: it must take the Gluon path (counted), match float64 math (o normwise < 1e-2,
   lse2 max abs < 1e-2), and give the same bits as the Triton forward it replaces (`_fwd` with
   CONFIGS[128]["fwd"], the solution before the branch): o and lse2.
2. The public entry, eager, forward and backward through the Gluon forward against the same
   with the Triton forward (CONFIGS' gluon switched off): o, dq, dk, dv the same bits.
3. torch.compile(fullgraph=True) of flash_attention: no Gluon launch (the Triton kernels,
   which Inductor sees), o close to the eager one.
4. The dispatch falls back (no Gluon launch, the Triton forward runs, still correct) for causal,
   D 64, fp16, fp32, S 1000, a strided q, an unaligned v.
5. Timing at (4, 32, 4096, 128), not causal, bf16 (do_bench_cudagraph, rep 100 ms, median of 3):
   the Gluon forward, the Triton forward, cuDNN SDPA.
"""
import importlib.util
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.testing

sys.dont_write_bytecode = True
WT = Path(os.environ.get("WT", "/tmp/wt38"))
T0 = time.time()
FAILS = []


def say(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def verdict(name, ok, detail=""):
    say(f"{'PASS' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        FAILS.append(name)


def guarded(name, fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        lines = traceback.format_exception(type(e), e, e.__traceback__)
        say(f"FAIL {name}: EXCEPTION {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
        for ln in "".join(lines).strip().splitlines()[-12:]:
            print("    " + ln[:300])
        FAILS.append(name)


spec = importlib.util.spec_from_file_location(
    "ex13_wt38", WT / "solutions/13_flash_attention/triton/flash_attention.py")
fa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fa)
say(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}, "
    f"capability {torch.cuda.get_device_capability()}; solution from {WT}; GLUON={fa.GLUON}")
verdict("gluon available and sm_90a", fa.GLUON and torch.cuda.get_device_capability() == (9, 0))

COUNT = {"gluon": 0, "triton": 0}
_gluon, _triton = fa._fwd_gluon, fa._fwd


def counted_gluon(*a, **kw):
    COUNT["gluon"] += 1
    return _gluon(*a, **kw)


def counted_triton(*a, **kw):
    COUNT["triton"] += 1
    return _triton(*a, **kw)


fa._fwd_gluon, fa._fwd = counted_gluon, counted_triton
COUNT["gluon_bwd"] = 0
_gluon_bwd = fa._bwd_gluon


def counted_gluon_bwd(*a, **kw):
    COUNT["gluon_bwd"] += 1
    return _gluon_bwd(*a, **kw)


fa._bwd_gluon = counted_gluon_bwd


def set_gluon(on):
    """The Gluon kernels (forward; backward: dkdv's switch) on or off: off is the solution
    before the branch, the Triton kernels at the D 128 config."""
    c = fa.CONFIGS[128]
    c["fwd"], c["dkdv"] = c["fwd"]._replace(gluon=on), c["dkdv"]._replace(gluon=on)


def triton_forward(q, k, v, scale, causal=False):
    """The forward before the branch: the Triton kernel at the D's config, the eager door."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    _triton(q, k, v, o, lse, causal, scale, fa._direct, fa._config(q)["fwd"])
    return o, lse


def reference(q, k, v, scale):
    """o and lse2 in float64, per (b, h)."""
    B, H, S, D = q.shape
    o = torch.empty(B, H, S, D, dtype=torch.float64, device=q.device)
    lse2 = torch.empty(B, H, S, dtype=torch.float64, device=q.device)
    for b in range(B):
        for h in range(H):
            s = (q[b, h].double() @ k[b, h].double().T) * scale
            lse = torch.logsumexp(s, dim=-1)
            o[b, h] = torch.exp(s - lse[:, None]) @ v[b, h].double()
            lse2[b, h] = lse / math.log(2.0)
    return o, lse2


def inputs(shape, seed, dtype=torch.bfloat16, qmul=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(shape, device="cuda", generator=g) * qmul).to(dtype)
    k, v = (torch.randn(shape, device="cuda", generator=g).to(dtype) for _ in range(2))
    return q, k, v


def same(a, b):
    if torch.equal(a, b):
        return True, "same bits"
    d = (a.double() - b.double()).abs()
    return False, f"DIFFER: {int((a != b).sum())} of {a.numel()} elements, max |diff| {d.max().item():.3e}"


# 1. correctness and the same bits as the Triton forward ------------------------------------------

def correctness(shape, qmul):
    q, k, v = inputs(shape, sum(shape), qmul=qmul)
    scale = 1.0 / math.sqrt(shape[-1])
    before = COUNT["gluon"]
    o, lse = fa._fwd_impl(q, k, v, False, scale, fa._direct)
    torch.cuda.synchronize()
    name = f"{shape}{' q x %g' % qmul if qmul != 1 else ''}"
    verdict(f"{name}: Gluon path taken", COUNT["gluon"] == before + 1)
    verdict(f"{name}: shapes/dtypes", (o.shape, o.dtype, lse.shape, lse.dtype)
            == (q.shape, q.dtype, q.shape[:3], torch.float32))
    o_ref, lse_ref = reference(q, k, v, scale)
    rel = ((o.double() - o_ref).norm() / o_ref.norm()).item()
    lerr = (lse.double() - lse_ref).abs().max().item()
    verdict(f"{name}: against float64", rel < 1e-2 and lerr < 1e-2,
            f"o normwise {rel:.3e} (< 1e-2), lse2 max abs {lerr:.3e} (< 1e-2)")
    o_t, lse_t = triton_forward(q, k, v, scale)
    torch.cuda.synchronize()
    ok, why = same(o, o_t)
    verdict(f"{name}: o against the Triton forward", ok, why)
    ok, why = same(lse, lse_t)
    verdict(f"{name}: lse2 against the Triton forward", ok, why)


for shape, qmul in (((1, 2, 128, 128), 1.0), ((1, 2, 1024, 128), 1.0), ((2, 3, 4096, 128), 1.0),
                    ((1, 2, 1024, 128), 4.0)):
    guarded(f"correctness {shape}", lambda: correctness(shape, qmul))
    torch.cuda.empty_cache()


# 2. the public entry, forward and backward --------------------------------------------------------

def fwd_bwd(shape):
    q, k, v = inputs(shape, 7)
    do = torch.randn(shape, device="cuda").to(torch.bfloat16)
    outs = []
    for gluon in (True, False):
        set_gluon(gluon)
        before, before_b = COUNT["gluon"], COUNT["gluon_bwd"]
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        o = fa.flash_attention(*leaves)
        o.backward(do)
        torch.cuda.synchronize()
        verdict(f"fwd+bwd {shape} gluon={gluon}: Gluon launches as asked",
                COUNT["gluon"] == before + gluon and COUNT["gluon_bwd"] == before_b + gluon)
        outs.append([o.detach()] + [t.grad for t in leaves])
    set_gluon(True)
    for name, a, b in zip(("o", "dq", "dk", "dv"), *outs):
        ok, why = same(a, b)
        verdict(f"fwd+bwd {shape}: {name}, Gluon kernels against Triton kernels", ok, why)
    # the gradients against float64 autograd (bound as the grade's checks: normwise < 1e-2)
    exact = [t.double().requires_grad_() for t in (q, k, v)]
    s = exact[0] @ exact[1].transpose(-2, -1) / math.sqrt(shape[-1])
    want = torch.softmax(s, dim=-1) @ exact[2]
    want.backward(do.double())
    for name, got, w in zip(("o", "dq", "dk", "dv"), outs[0], [want] + [t.grad for t in exact]):
        err = ((got.double() - w).norm() / w.norm()).item()
        verdict(f"fwd+bwd {shape}: {name} against float64", err < 1e-2, f"normwise {err:.3e}")


guarded("fwd+bwd", lambda: fwd_bwd((1, 2, 1024, 128)))
set_gluon(True)


def backward_bits(shape, qmul):
    """_bwd_impl through the Gluon backward against the Triton kernels' (the same bits) and
    against float64 (normwise < 1e-2), from the solution's own forward."""
    q, k, v = inputs(shape, 100 + sum(shape), qmul=qmul)
    do = torch.randn(shape, device="cuda").to(torch.bfloat16)
    scale = 1.0 / math.sqrt(shape[-1])
    o, lse = fa._fwd_impl(q, k, v, False, scale, fa._direct)
    got = []
    for gluon in (True, False):
        set_gluon(gluon)
        before = COUNT["gluon_bwd"]
        got.append(fa._bwd_impl(do, q, k, v, o, lse, False, scale, fa._direct))
        torch.cuda.synchronize()
        verdict(f"backward {shape} x{qmul} gluon={gluon}: launches as asked",
                COUNT["gluon_bwd"] == before + gluon)
    set_gluon(True)
    for name, a, b in zip(("dq", "dk", "dv"), *got):
        ok, why = same(a, b)
        verdict(f"backward {shape} x{qmul}: {name} Gluon against Triton", ok, why)
        verdict(f"backward {shape} x{qmul}: {name} finite", bool(torch.isfinite(a).all()))
    if shape[0] * shape[1] * shape[2] <= 2 * 3 * 2048:
        exact = [t.double().requires_grad_() for t in (q, k, v)]
        s_ = exact[0] @ exact[1].transpose(-2, -1) * scale
        (torch.softmax(s_, dim=-1) @ exact[2]).backward(do.double())
        for name, g, t in zip(("dq", "dk", "dv"), got[0], exact):
            err = ((g.double() - t.grad).norm() / t.grad.norm()).item()
            verdict(f"backward {shape} x{qmul}: {name} against float64", err < 1e-2,
                    f"normwise {err:.3e}")


for shape, qmul in (((1, 2, 128, 128), 1.0), ((1, 2, 1024, 128), 1.0), ((2, 3, 2048, 128), 1.0),
                    ((1, 2, 1024, 128), 4.0), ((4, 32, 4096, 128), 1.0)):
    guarded(f"backward {shape}", lambda: backward_bits(shape, qmul))
    torch.cuda.empty_cache()


def backward_fallbacks():
    """A strided dO (o.sum()'s gradient is an expanded view) and a causal call: the Triton
    kernels, no Gluon backward."""
    q, k, v = inputs((1, 2, 1024, 128), 31)
    before = COUNT["gluon_bwd"]
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fa.flash_attention(*leaves).sum().backward()
    fa.flash_attention(*leaves, causal=True).backward(torch.randn_like(q))
    torch.cuda.synchronize()
    verdict("backward fallbacks (expanded dO, causal): no Gluon backward",
            COUNT["gluon_bwd"] == before, f"({COUNT['gluon_bwd'] - before} launches)")


guarded("backward fallbacks", backward_fallbacks)


# 3. torch.compile: the Triton kernels ---------------------------------------------------------------

def compiled():
    q, k, v = inputs((1, 2, 1024, 128), 11)
    eager = fa.flash_attention(q, k, v)
    before = dict(COUNT)
    torch._dynamo.reset()
    got = torch.compile(fa.flash_attention, fullgraph=True)(q, k, v)
    torch.cuda.synchronize()
    verdict("torch.compile: no Gluon launch", COUNT["gluon"] == before["gluon"],
            f"(gluon {COUNT['gluon'] - before['gluon']}, Triton forward traced "
            f"{COUNT['triton'] - before['triton']} time(s))")
    rel = ((got.double() - eager.double()).norm() / eager.double().norm()).item()
    ok, why = same(got, eager)
    verdict("torch.compile: o close to the eager (Gluon) one", rel < 1e-2,
            f"normwise {rel:.3e}; {why}")


guarded("torch.compile", compiled)


# 4. the fallbacks -------------------------------------------------------------------------------------

def fallback(name, q, k, v, causal):
    scale = 1.0 / math.sqrt(q.shape[-1])
    before = dict(COUNT)
    ok_gate = not fa._gluon_ok(q, k, v, causal, fa._direct)
    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
    torch.cuda.synchronize()
    took = (COUNT["gluon"] - before["gluon"], COUNT["triton"] - before["triton"])
    qd, kd, vd = (t.double() for t in (q, k, v))
    s = qd @ kd.transpose(-2, -1) * scale
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1), float("-inf"))
    want = torch.softmax(s, dim=-1) @ vd
    rel = ((o.double() - want).norm() / want.norm()).item()
    verdict(f"fallback {name}", ok_gate and took == (0, 1) and rel < 1e-2,
            f"(gate refused {ok_gate}; gluon/triton launches {took}; o normwise {rel:.3e})")


def fallbacks():
    q, k, v = inputs((1, 2, 1024, 128), 21)
    fallback("causal", q, k, v, True)
    fallback("D 64", *inputs((1, 2, 1024, 64), 22), False)
    fallback("fp16", *inputs((1, 2, 1024, 128), 23, torch.float16), False)
    fallback("fp32", *inputs((1, 2, 256, 128), 24, torch.float32), False)
    fallback("S 1000", *inputs((1, 2, 1000, 128), 25), False)
    qs = torch.randn(1, 1024, 2, 128, device="cuda").to(torch.bfloat16).transpose(1, 2)
    fallback("strided q", qs, k, v, False)
    raw = torch.empty(v.numel() + 1, dtype=v.dtype, device="cuda")
    vu = raw[1:].view(v.shape)
    vu.copy_(v)
    fallback("unaligned v", q, k, vu, False)


guarded("fallbacks", fallbacks)


# 5. timing --------------------------------------------------------------------------------------------

def bench(name, fn, flops):
    fn()
    torch.cuda.synchronize()
    times = [triton.testing.do_bench_cudagraph(fn, rep=100) for _ in range(3)]
    ms = statistics.median(times)
    say(f"  {name:26s} {ms:.4f} ms  {flops / ms * 1e-9:6.1f} TFLOP/s  (runs "
        f"{', '.join('%.4f' % t for t in times)})")


def timing():
    B, H, S, D = 4, 32, 4096, 128
    q, k, v = inputs((B, H, S, D), 0)
    scale = 1.0 / math.sqrt(D)
    flops = 4.0 * B * H * S * S * D
    say(f"timing at {(B, H, S, D)}, not causal, bf16: do_bench_cudagraph rep 100 ms, median of 3")
    bench("solution (Gluon)", lambda: fa._fwd_impl(q, k, v, False, scale, fa._direct), flops)
    bench("Triton forward", lambda: triton_forward(q, k, v, scale), flops)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)
    bench("SDPA cuDNN", cudnn, flops)
    do = torch.randn_like(q)
    o, lse = fa._fwd_impl(q, k, v, False, scale, fa._direct)
    bflops = 2.5 * flops
    bench("backward, Gluon", lambda: fa._bwd_impl(do, q, k, v, o, lse, False, scale, fa._direct),
          bflops)
    set_gluon(False)
    bench("backward, Triton", lambda: fa._bwd_impl(do, q, k, v, o, lse, False, scale,
                                                   fa._direct), bflops)
    set_gluon(True)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def step_(f):
        def run():
            torch.autograd.grad(f(*leaves), leaves, do)
        return run
    bench("fwd+bwd solution (Gluon)", step_(fa.flash_attention), 3.5 * flops)
    set_gluon(False)
    bench("fwd+bwd solution (Triton)", step_(fa.flash_attention), 3.5 * flops)
    set_gluon(True)

    def cudnn_fb(q_, k_, v_):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q_, k_, v_, scale=scale)
    bench("fwd+bwd SDPA cuDNN", step_(cudnn_fb), 3.5 * flops)


guarded("timing", timing)
say("ALL PASS" if not FAILS else f"NOT ALL PASS: {FAILS}")
sys.exit(1 if FAILS else 0)
