"""On the H200, from the repository root:  python3 benchmarks/attention_gluon/gpu.py   (about 1 minute)

(a) correctness of gluon_fa.forward (and, for comparison, the solution's _fwd_impl) against
    float64 math on the GPU: normwise relative error of o (bound 1e-2), max abs error of lse2
    (bound 1e-2);
(b) only if every case of (a) passed: timing at B 4, H 32, S 4096, D 128, not causal, of
    gluon_fa.forward, the solution's forward and cuDNN SDPA; do_bench_cudagraph(rep=100), median
    of 3 repeats.
Every step catches its own exceptions and prints their first lines.
"""
import importlib.util
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True                 # no __pycache__ next to the solution module
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent                      # the repository root (benchmarks/attention_gluon/ -> ./)
T0 = time.time()


def say(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def err(step, e):
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    text = "".join(lines).strip().splitlines()
    say(f"{step}: EXCEPTION {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    for ln in text[-8:]:
        print("    " + ln[:300])


import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

say(f"torch {torch.__version__}, triton {triton.__version__}, "
    f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO GPU'}")
if triton.__version__ != "3.6.0":
    say("WARNING: the kernel was written against Triton 3.6.0 exactly")

G = None
try:
    sys.path.insert(0, str(HERE))
    import gluon_fa as G  # noqa: E402
except Exception as e:  # noqa: BLE001
    err("import gluon_fa", e)

SOL = None
try:
    spec = importlib.util.spec_from_file_location(
        "ex13_solution_fa", ROOT / "solutions/13_flash_attention/triton/flash_attention.py")
    SOL = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(SOL)
except Exception as e:  # noqa: BLE001
    err("import solution", e)
    SOL = None


def sol_fwd(q, k, v, scale):
    # the eager door of the solution: launch = _direct (as _FlashAttentionEager.forward does)
    return SOL._fwd_impl(q, k, v, False, scale, SOL._direct)


def reference(q, k, v, scale):
    """o and lse2 = log2(sum_j exp(scale q·k_j)) in float64, per (b, h) to bound memory."""
    B, H, S, D = q.shape
    o = torch.empty(B, H, S, D, dtype=torch.float64, device=q.device)
    lse2 = torch.empty(B, H, S, dtype=torch.float64, device=q.device)
    for b in range(B):
        for h in range(H):
            qq, kk, vv = (t[b, h].double() for t in (q, k, v))
            s = (qq @ kk.T) * scale
            lse = torch.logsumexp(s, dim=-1)
            o[b, h] = torch.exp(s - lse[:, None]) @ vv
            lse2[b, h] = lse / math.log(2.0)
    return o, lse2


def check(name, fn, q, k, v, scale, ref):
    o_ref, lse_ref = ref
    try:
        o, lse = fn(q, k, v, scale)
        torch.cuda.synchronize()
        shape_ok = (tuple(o.shape) == tuple(q.shape) and o.dtype == q.dtype
                    and tuple(lse.shape) == tuple(q.shape[:3]) and lse.dtype == torch.float32)
        rel = ((o.double() - o_ref).norm() / o_ref.norm()).item()
        lse_err = (lse.double() - lse_ref).abs().max().item()
        ok = shape_ok and rel < 1e-2 and lse_err < 1e-2 and math.isfinite(rel) and math.isfinite(lse_err)
        say(f"  {name:9s} o rel err {rel:.3e} (<1e-2)  lse2 max abs err {lse_err:.3e} (<1e-2)  "
            f"shapes/dtypes {'ok' if shape_ok else 'WRONG: o %s %s lse %s %s' % (tuple(o.shape), o.dtype, tuple(lse.shape), lse.dtype)}"
            f"  {'PASS' if ok else 'FAIL'}")
        return ok, o
    except Exception as e:  # noqa: BLE001
        err(f"  {name} forward", e)
        return False, None


# ---------------------------------------------------------------------------------------------
# (a) correctness
# ---------------------------------------------------------------------------------------------
all_pass = G is not None
CASES = [((1, 2, 128, 128), 1.0), ((1, 2, 1024, 128), 1.0), ((2, 3, 4096, 128), 1.0),
         ((1, 2, 1024, 128), 4.0)]     # the last: q x 4, peaky rows (exercises the rescale)
for shape, qmul in CASES:
    if G is None:
        break
    try:
        torch.manual_seed(0)
        q = (torch.randn(shape, device="cuda") * qmul).to(torch.bfloat16)
        k = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        scale = 1.0 / math.sqrt(shape[-1])
        ref = reference(q, k, v, scale)
        say(f"case {shape} bf16{' q x %g' % qmul if qmul != 1 else ''}")
        ok, o_g = check("gluon", lambda a, b, c, s: G.forward(a, b, c, s), q, k, v, scale, ref)
        all_pass &= ok
        if SOL is not None:
            _, o_s = check("solution", sol_fwd, q, k, v, scale, ref)
            if o_g is not None and o_s is not None:
                d = ((o_g.float() - o_s.float()).norm() / o_s.float().norm()).item()
                say(f"  gluon vs solution: o rel diff {d:.3e}")
        del ref
        torch.cuda.empty_cache()
    except Exception as e:  # noqa: BLE001
        err(f"case {shape}", e)
        all_pass = False
say(f"(a) correctness: {'ALL PASS' if all_pass else 'NOT ALL PASS'}")

# ---------------------------------------------------------------------------------------------
# (b) timing
# ---------------------------------------------------------------------------------------------


def bench(name, fn, flops):
    try:
        fn()
        torch.cuda.synchronize()
        how = "do_bench_cudagraph"
        times = []
        for _ in range(3):
            try:
                if how == "do_bench_cudagraph":
                    t = triton.testing.do_bench_cudagraph(fn, rep=100)
                else:
                    t = triton.testing.do_bench(fn, rep=100)
            except Exception as e:  # noqa: BLE001
                if how != "do_bench_cudagraph":
                    raise
                say(f"  {name}: CUDA graph capture failed ({type(e).__name__}: "
                    f"{str(e).splitlines()[0][:160] if str(e) else ''}); falling back to do_bench")
                how = "do_bench"
                t = triton.testing.do_bench(fn, rep=100)
            times.append(t)
        ms = statistics.median(times)
        say(f"  {name:10s} {ms:.4f} ms  {flops / ms * 1e-9:7.1f} TFLOP/s  ({how}, runs "
            f"{', '.join('%.4f' % t for t in times)})")
        return ms
    except Exception as e:  # noqa: BLE001
        err(f"  bench {name}", e)
        return None


if all_pass:
    try:
        B, H, S, D = 4, 32, 4096, 128
        flops = 4.0 * B * H * S * S * D
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        scale = 1.0 / math.sqrt(D)
        say(f"(b) timing at B {B} H {H} S {S} D {D}, not causal, bf16 ({flops / 1e12:.3f} TFLOP per call)")
        bench("gluon", lambda: G.forward(q, k, v, scale), flops)
        if SOL is not None:
            bench("solution", lambda: sol_fwd(q, k, v, scale), flops)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            F = torch.nn.functional

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, scale=scale)
            bench("cudnn sdpa", cudnn, flops)
        except Exception as e:  # noqa: BLE001
            err("  cudnn sdpa", e)
    except Exception as e:  # noqa: BLE001
        err("(b) timing", e)
else:
    say("(b) timing skipped: (a) did not pass")
say("done")
