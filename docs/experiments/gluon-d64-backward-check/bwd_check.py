"""Next session, on the H200: branch wip-38-d64 (13's Gluon backward for D 64 and 128, causal or
not), its tree extracted at $WT (default /tmp/wt64). From /work/main with .whl carried:
    WT=/tmp/wt64 python3 .whl/s19/bwd_check.py        (~2 minutes)
1. _bwd_impl through the Gluon backward against the Triton kernels (the same bits expected) and
   against float64, at D 64 and 128, causal and not, several shapes (q x 4 once), the public
   entry's fwd+bwd too; the fallbacks (expanded dO, S 1000, fp16) take no Gluon backward.
2. Timing (do_bench_cudagraph, rep 100 ms, median of 3): the leaderboard case (1, 16, 16384, 64,
   causal) and the wide case (4, 32, 4096, 128): backward Gluon / Triton, forward+backward of
   the solution (Gluon on / off) and of SDPA cuDNN.
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

WT = Path(os.environ.get("WT", "/tmp/wt64"))
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
        say(f"FAIL {name}: EXCEPTION {type(e).__name__}: {str(e)[:300]}")
        print("".join(traceback.format_exception(type(e), e, e.__traceback__))[-3000:])
        FAILS.append(name)


spec = importlib.util.spec_from_file_location(
    "ex13_wt64", WT / "solutions/13_flash_attention/triton/flash_attention.py")
fa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fa)
say(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}; "
    f"GLUON={fa.GLUON}")
COUNT = {"bwd": 0}
_bwd = fa._bwd_gluon


def counted(*a, **kw):
    COUNT["bwd"] += 1
    return _bwd(*a, **kw)


fa._bwd_gluon = counted


def set_gluon(D, on):
    c = fa.CONFIGS[D]
    c["dkdv"] = c["dkdv"]._replace(gluon=on)
    if D == 128:
        c["fwd"] = c["fwd"]._replace(gluon=on)


def same(a, b):
    if torch.equal(a, b):
        return True, "same bits"
    d = (a.double() - b.double()).abs()
    return False, f"DIFFER: {int((a != b).sum())} of {a.numel()}, max |diff| {d.max().item():.3e}"


def inputs(shape, seed, qmul=1.0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = (torch.randn(shape, device="cuda", generator=g) * qmul).to(dtype)
    k, v, do = (torch.randn(shape, device="cuda", generator=g).to(dtype) for _ in range(3))
    return q, k, v, do


def bits(shape, causal, qmul=1.0):
    D = shape[-1]
    q, k, v, do = inputs(shape, sum(shape) + causal, qmul)
    scale = 1.0 / math.sqrt(D)
    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
    got = []
    for on in (True, False):
        set_gluon(D, on)
        before = COUNT["bwd"]
        got.append(fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct))
        torch.cuda.synchronize()
        verdict(f"{shape} causal={causal} x{qmul} gluon={on}: launches as asked",
                COUNT["bwd"] == before + on)
    set_gluon(D, True)
    for name, a, b in zip(("dq", "dk", "dv"), *got):
        ok, why = same(a, b)
        verdict(f"{shape} causal={causal} x{qmul}: {name} Gluon against Triton", ok, why)
        verdict(f"{shape} causal={causal} x{qmul}: {name} finite", bool(torch.isfinite(a).all()))
    B, H, S, _ = shape
    if B * H * S <= 2 * 3 * 2048:
        ex = [t.double().requires_grad_() for t in (q, k, v)]
        s = ex[0] @ ex[1].transpose(-2, -1) * scale
        if causal:
            s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device="cuda").triu(1),
                              float("-inf"))
        (torch.softmax(s, -1) @ ex[2]).backward(do.double())
        for name, g, t in zip(("dq", "dk", "dv"), got[0], ex):
            err = ((g.double() - t.grad).norm() / t.grad.norm()).item()
            verdict(f"{shape} causal={causal} x{qmul}: {name} against float64", err < 1e-2,
                    f"normwise {err:.3e}")


for D in (64, 128):
    for causal in (True, False):
        for S in (128, 1024, 2048):
            shape = (2, 3, S, D) if S == 2048 else (1, 2, S, D)
            guarded(f"bits {shape} {causal}", lambda: bits(shape, causal))
        guarded(f"bits q x4 D {D} {causal}", lambda: bits((1, 2, 1024, D), causal, 4.0))
        torch.cuda.empty_cache()
guarded("bits leaderboard", lambda: bits((1, 16, 16384, 64), True))
guarded("bits wide", lambda: bits((4, 32, 4096, 128), False))


def public():
    for D, causal in ((64, True), (128, False)):
        q, k, v, do = inputs((1, 2, 1024, D), 5)
        outs = []
        for on in (True, False):
            set_gluon(D, on)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            o = fa.flash_attention(*leaves, causal=causal)
            o.backward(do)
            outs.append([o.detach()] + [t.grad for t in leaves])
        set_gluon(D, True)
        for name, a, b in zip(("o", "dq", "dk", "dv"), *outs):
            ok, why = same(a, b)
            verdict(f"public D {D} causal={causal}: {name} Gluon on/off", ok, why)


guarded("public", public)


def fallbacks():
    before = COUNT["bwd"]
    q, k, v, _ = inputs((1, 2, 1024, 64), 9)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fa.flash_attention(*leaves, causal=True).sum().backward()        # expanded dO
    q, k, v, do = inputs((1, 2, 1000, 64), 10)                        # S 1000
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fa.flash_attention(*leaves, causal=True).backward(do)
    q, k, v, do = inputs((1, 2, 1024, 64), 11, dtype=torch.float16)   # fp16
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fa.flash_attention(*leaves, causal=True).backward(do)
    torch.cuda.synchronize()
    verdict("fallbacks (expanded dO, S 1000, fp16): no Gluon backward", COUNT["bwd"] == before)


guarded("fallbacks", fallbacks)


def bench(name, fn, flops):
    fn()
    torch.cuda.synchronize()
    times = [triton.testing.do_bench_cudagraph(fn, rep=100) for _ in range(3)]
    ms = statistics.median(times)
    say(f"  {name:34s} {ms:.4f} ms  {flops / ms * 1e-9:6.1f} TFLOP/s  (runs "
        f"{', '.join('%.4f' % t for t in times)})")


def timing():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for shape, causal in (((1, 16, 16384, 64), True), ((4, 32, 4096, 128), False)):
        B, H, S, D = shape
        f = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        q, k, v, do = inputs(shape, 0)
        scale = 1.0 / math.sqrt(D)
        say(f"timing {shape} causal={causal} (useful TFLOP: fwd {f * 1e-12:.3f})")
        o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
        for on in (True, False):
            set_gluon(D, on)
            bench(f"backward, {'Gluon' if on else 'Triton'}",
                  lambda: fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct), 2.5 * f)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        for on in (True, False):
            set_gluon(D, on)
            bench(f"fwd+bwd solution, Gluon {'on' if on else 'off'}",
                  lambda: torch.autograd.grad(fa.flash_attention(*leaves, causal=causal),
                                              leaves, do), 3.5 * f)
        set_gluon(D, True)

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    *leaves, is_causal=causal, scale=scale)
            torch.autograd.grad(out, leaves, do)
        bench("fwd+bwd SDPA cuDNN", cudnn, 3.5 * f)


guarded("timing", timing)
say("ALL PASS" if not FAILS else f"NOT ALL PASS: {FAILS}")
sys.exit(1 if FAILS else 0)
