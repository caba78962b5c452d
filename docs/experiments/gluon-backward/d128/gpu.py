"""On the H200, from the repository root:   timeout -k 10 300 python3 .whl/g38c/gpu.py   (~2-3 min)

(.whl/ is git-ignored: the device call must carry .whl/g38c, and .whl/g38 for the forward+
backward line with the Gluon forward; without .whl/g38 that line is skipped.)

(0) a smoke run in a child process with a 120 s timeout (its own faulthandler watchdog at 110 s
    dumps its stack and exits): the delta, dK/dV and dQ kernels launched one at a time with a
    synchronise and a line after each (a hang names its kernel), at (1,2,128,128) and
    (1,2,1024,128), causal and not, at the benchmark shape (4,32,4096,128) not causal, and
    every variant (CONFIG switches) that (a) and (b) use, at (1,2,1024,128) not causal. A barrier
    bug shows up as a hang: the child is killed and nothing else runs on the GPU.
    The parent arms its own watchdog (faulthandler, exits) at 285 s from the start.
(a) correctness, bf16, D 128: o, lse2 from the solution's forward, then gluon_bwd128.backward
    vs float64 math: normwise relative error of dq, dk, dv (< 2e-2) and the worst (batch, head,
    64-row block) relative error (< 2x the solution's own worst block + 5e-3: a wrong or
    missing 64 x 64 tile shows there even where the normwise figure dilutes it); determinism
    (two runs bitwise equal as int16 bit patterns); the difference from the solution's
    _bwd_impl (printed, and whether bitwise equal: same tile products and summation order).
    Then every variant at (1,2,1024,128), causal and not: its own float64 check and whether
    its bits equal the default's.
(b) only if (a) all passed: timing at (4,32,4096,128) not causal bf16 (do_bench_cudagraph,
    rep 100 ms, median of 3): first gluon vs the solution there (no float64 at that size:
    normwise and worst block, printed, flagged above 3e-2); then the backward (gluon, the
    solution's _bwd_impl), the kernels one by one (delta; dK/dV and dQ per variant, and the
    solution's dK/dV and dQ kernels), the best variant pair as a whole backward, and forward +
    backward: the Gluon forward of .whl/g38 + this backward (the <= 8.0 ms target), the
    solution's forward + backward, cuDNN SDPA forward alone and forward + backward.
    It ends with the CONFIG that timed best.
Every step catches its own exceptions and prints their first lines.
"""
import faulthandler
import importlib.util
import math
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.dont_write_bytecode = True                 # no __pycache__ next to the solution module
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent                      # .whl/g38c/ -> the repository root
T0 = time.time()
SMOKE = "--smoke" in sys.argv
SMOKE_TIMEOUT = 120      # s: cold compiles of all kernels and variants (~20) fit inside
WATCHDOG = 285           # s from start: the whole run, inside `timeout -k 10 300`


def say(*a):
    print(f"[{time.time() - T0:6.1f}s]" + ("[smoke]" if SMOKE else ""), *a, flush=True)


def err(step, e):
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).strip().splitlines()
    say(f"{step}: EXCEPTION {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    for ln in text[-10:]:
        print("    " + ln[:300], flush=True)


if not SMOKE:
    say(f"(0) smoke run in a child process (timeout {SMOKE_TIMEOUT} s)")
    try:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--smoke"],
                           capture_output=True, text=True, timeout=SMOKE_TIMEOUT, cwd=str(ROOT))
        print(r.stdout[-5000:], r.stderr[-3000:], flush=True)
        if r.returncode != 0 or "SMOKE OK" not in r.stdout:
            hung = ", its watchdog fired: a HANG after its last line" if "Timeout (" in r.stderr else ""
            say(f"smoke run failed (rc {r.returncode}{hung}): stopping here")
            sys.exit(1)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(out[-5000:], flush=True)
        say("smoke run TIMED OUT (a hang: barrier/phase bug?): the child was killed; stopping here")
        sys.exit(1)
    say("smoke passed")
# a hang after this point: dump the Python stack and _exit, GIL or not
faulthandler.dump_traceback_later(
    (SMOKE_TIMEOUT - 10) if SMOKE else max(30.0, WATCHDOG - (time.time() - T0)), exit=True)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

say(f"torch {torch.__version__}, triton {triton.__version__}, "
    f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'NO GPU'}")
if triton.__version__ != "3.6.0":
    say("WARNING: the kernels were written against Triton 3.6.0 exactly")

G = None
try:
    sys.path.insert(0, str(HERE))
    import gluon_bwd128 as G  # noqa: E402
except Exception as e:  # noqa: BLE001
    err("import gluon_bwd128", e)

SOL = None
try:
    spec = importlib.util.spec_from_file_location(
        "ex13_solution_fa", ROOT / "solutions/13_flash_attention/triton/flash_attention.py")
    SOL = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(SOL)
except Exception as e:  # noqa: BLE001
    err("import solution", e)
    SOL = None

# the variants (CONFIG overrides) checked and timed; offline.txt: all compile with 0 spills and
# no C7512 (DKDV_KREG does not fit and is left out)
DKDV_VARIANTS = {"default": {}, "defer": dict(DKDV_DEFER=True),
                 "no_overlap": dict(DKDV_OVERLAP=False), "stages3": dict(DKDV_STAGES=3)}
DQ_VARIANTS = {"default": {}, "defer": dict(DQ_DEFER=True), "do_smem": dict(DQ_DOREG=False),
               "do_smem_defer": dict(DQ_DOREG=False, DQ_DEFER=True), "stages3": dict(DQ_STAGES=3)}
VARIANTS = {f"dkdv {k}": v for k, v in DKDV_VARIANTS.items() if v}
VARIANTS.update({f"dq {k}": v for k, v in DQ_VARIANTS.items() if v})


def inputs(shape, seed=0, q_mul=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(4))
    return (q * q_mul).to(torch.bfloat16), k, v, do


def prepare(do, q, k, v, o, lse):
    B, H, S, D = q.shape
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    delta = torch.empty(B * H * S, dtype=torch.float32, device=q.device)
    d = G.make_descs(q, k, v, do, dq, dk, dv, lse, delta)
    return dq, dk, dv, delta, d


def staged(do, q, k, v, o, lse, causal, scale, tag, cfg=None):
    """backward's three launches one at a time, synchronised, a line after each."""
    B, H, S, D = q.shape
    dq, dk, dv, delta, d = prepare(do, q, k, v, o, lse)
    G.launch_delta(o, do, delta)
    torch.cuda.synchronize()
    say(f"{tag}: delta kernel done")
    say(f"{tag}: launching dK/dV kernel (grid {B * H * S // 128})")
    G.launch_dkdv(d, S, B * H, causal, scale, cfg)
    torch.cuda.synchronize()
    say(f"{tag}: dK/dV kernel done")
    G.launch_dq(d, lse, delta, S, B * H, causal, scale, cfg)
    torch.cuda.synchronize()
    say(f"{tag}: dQ kernel done")
    return dq, dk, dv


if SMOKE:
    ok = G is not None and SOL is not None
    runs = [((1, 2, 128, 128), True, None), ((1, 2, 128, 128), False, None),
            ((1, 2, 1024, 128), True, None), ((1, 2, 1024, 128), False, None),
            ((4, 32, 4096, 128), False, None)]
    runs += [((1, 2, 1024, 128), c, cfg) for cfg in VARIANTS.values() for c in (False, True)]
    for shape, causal, cfg in runs:
        if not ok:
            break
        try:
            q, k, v, do = inputs(shape)
            scale = 1.0 / math.sqrt(shape[-1])
            o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
            torch.cuda.synchronize()
            tag = f"{shape} causal={causal} {cfg or 'default'}"
            staged(do, q, k, v, o, lse, causal, scale, tag, cfg)
            dq, dk, dv = G.backward(do, q, k, v, o, lse, causal, scale, cfg)
            torch.cuda.synchronize()
            say(f"{tag}: backward() ran, finite: "
                f"{all(bool(torch.isfinite(t).all()) for t in (dq, dk, dv))}")
        except Exception as e:  # noqa: BLE001
            err(f"smoke {shape} causal={causal} {cfg}", e)
            ok = False
    print("SMOKE OK" if ok else "SMOKE FAILED", flush=True)
    sys.exit(0 if ok else 1)


def reference(q, k, v, do, causal, scale):
    """dq, dk, dv in float64, per (b, h)."""
    B, H, S, D = q.shape
    out = [torch.empty(B, H, S, D, dtype=torch.float64, device=q.device) for _ in range(3)]
    mask = torch.ones(S, S, dtype=torch.bool, device=q.device).tril() if causal else None
    for b in range(B):
        for h in range(H):
            qq, kk, vv, dd = (t[b, h].double() for t in (q, k, v, do))
            s = (qq @ kk.T) * scale
            if causal:
                s = s.masked_fill(~mask, float("-inf"))
            p = torch.softmax(s, dim=-1)
            dp = dd @ vv.T
            ds = p * (dp - (dp * p).sum(-1, keepdim=True))
            out[0][b, h] = scale * ds @ kk
            out[1][b, h] = scale * ds.T @ qq
            out[2][b, h] = p.T @ dd
    return out


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def block_rel(a, b, blk=64):
    """The worst relative error over (batch, head, 64-row block) tiles; NaN -> nan."""
    B, H, S, D = b.shape
    num = (a.double() - b.double()).reshape(B, H, S // blk, blk * D).norm(dim=-1)
    den = b.double().reshape(B, H, S // blk, blk * D).norm(dim=-1).clamp_min(1e-30)
    r = num / den
    return float("nan") if bool(torch.isnan(r).any()) else r.max().item()


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def check(name, g_, r_, s_, again=None, default=None):
    """One gradient against float64 (and the solution's own error there)."""
    shape_ok = tuple(g_.shape) == tuple(s_.shape) and g_.dtype == s_.dtype
    e, es, d = rel(g_, r_), rel(s_, r_), rel(g_, s_)
    eb, esb = block_rel(g_, r_), block_rel(s_, r_)
    bound_b = 2 * esb + 5e-3 if math.isfinite(esb) else 2e-2
    ok = shape_ok and math.isfinite(e) and e < 2e-2 and math.isfinite(eb) and eb < bound_b
    extra = ""
    if again is not None:
        same = bits_equal(g_, again)
        ok &= same
        extra += f"  deterministic {same}"
    if default is not None:
        extra += f"  bits = default's: {bits_equal(g_, default)}"
    say(f"  {name}: rel err {e:.3e} (<2e-2; solution {es:.3e})  worst block {eb:.3e} "
        f"(<{bound_b:.2e}; solution {esb:.3e})  vs solution {d:.3e}"
        f"{' (bitwise equal)' if bits_equal(g_, s_) else ''}{extra}  "
        f"{'ok' if shape_ok else 'SHAPE/DTYPE WRONG'}  {'PASS' if ok else 'FAIL'}")
    return ok


# ---------------------------------------------------------------------------------------------
# (a) correctness
# ---------------------------------------------------------------------------------------------
all_pass = G is not None and SOL is not None
CASES = [((1, 2, 128, 128), False, 1.0), ((1, 2, 128, 128), True, 1.0),
         ((1, 2, 1024, 128), False, 1.0), ((2, 3, 2048, 128), False, 1.0),
         ((1, 2, 1024, 128), True, 1.0), ((1, 2, 1024, 128), False, 4.0)]
for shape, causal, q_mul in CASES:
    if not all_pass:
        break
    try:
        q, k, v, do = inputs(shape, q_mul=q_mul)
        scale = 1.0 / math.sqrt(shape[-1])
        say(f"case {shape} {'causal' if causal else 'not causal'}{' q x4' if q_mul != 1 else ''}")
        o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
        ref = reference(q, k, v, do, causal, scale)
        got = G.backward(do, q, k, v, o, lse, causal, scale)
        again = G.backward(do, q, k, v, o, lse, causal, scale)
        sol = SOL._bwd_impl(do, q, k, v, o, lse, causal, scale, SOL._direct)
        torch.cuda.synchronize()
        for name, g_, a_, s_, r_ in zip(("dq", "dk", "dv"), got, again, sol, ref):
            all_pass &= check(name, g_, r_, s_, again=a_)
        if shape == (1, 2, 1024, 128) and q_mul == 1.0:
            for vname, cfg in VARIANTS.items():
                say(f" variant {vname} {cfg}")
                vg = G.backward(do, q, k, v, o, lse, causal, scale, cfg)
                torch.cuda.synchronize()
                for name, g_, s_, r_, d_ in zip(("dq", "dk", "dv"), vg, sol, ref, got):
                    all_pass &= check(name, g_, r_, s_, default=d_)
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
        times = [triton.testing.do_bench_cudagraph(fn, rep=100) for _ in range(3)]
        ms = statistics.median(times)
        rate = f"{flops / ms * 1e-9:7.1f} TFLOP/s" if flops else "              "
        say(f"  {name:44s} {ms:.4f} ms  {rate}  (runs "
            f"{', '.join('%.4f' % t for t in times)})")
        return ms
    except Exception as e:  # noqa: BLE001
        err(f"  bench {name}", e)
        return None


if all_pass:
    try:
        B, H, S, D = 4, 32, 4096, 128
        causal = False
        fwd_flops = 4.0 * B * H * S * S * D
        bwd_flops = 2.5 * fwd_flops                  # the README's useful flops (5 products)
        mm_flops = 2.0 * B * H * S * S * D           # one S x S x D product
        q, k, v, do = inputs((B, H, S, D), seed=2)
        scale = 1.0 / math.sqrt(D)
        o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
        say(f"(b) timing at B {B} H {H} S {S} D {D}, not causal, bf16 (useful: forward "
            f"{fwd_flops / 1e12:.3f}, backward {bwd_flops / 1e12:.3f} TFLOP; the two-kernel "
            f"backward executes 7 products = {7 * mm_flops / 1e12:.3f} TFLOP; the TFLOP/s of the "
            f"kernel lines below count the products each kernel executes)")
        try:
            got = G.backward(do, q, k, v, o, lse, causal, scale)
            again = G.backward(do, q, k, v, o, lse, causal, scale)
            sol = SOL._bwd_impl(do, q, k, v, o, lse, causal, scale, SOL._direct)
            torch.cuda.synchronize()
            for name, g_, a_, s_ in zip(("dq", "dk", "dv"), got, again, sol):
                d, db = rel(g_, s_), block_rel(g_, s_)
                flag = "ok" if math.isfinite(d) and math.isfinite(db) and db < 3e-2 else \
                    "MISMATCH (not a float64 check; compare with (a))"
                say(f"  {name}: gluon vs solution rel {d:.3e}, worst block {db:.3e}"
                    f"{' (bitwise equal)' if bits_equal(g_, s_) else ''}; deterministic "
                    f"{bits_equal(g_, a_)}  {flag}")
            del got, again, sol
        except Exception as e:  # noqa: BLE001
            err("  benchmark-shape check", e)

        say(" backward alone (useful TFLOP/s):")
        t_gluon = bench("gluon backward (CONFIG)", lambda: G.backward(do, q, k, v, o, lse, causal,
                                                                      scale), bwd_flops)
        t_sol = bench("solution _bwd_impl", lambda: SOL._bwd_impl(do, q, k, v, o, lse, causal,
                                                                  scale, SOL._direct), bwd_flops)

        say(" the kernels one by one (TFLOP/s of the products each executes):")
        dq, dk, dv, delta, d = prepare(do, q, k, v, o, lse)
        G.launch_delta(o, do, delta)
        bench("gluon delta kernel", lambda: G.launch_delta(o, do, delta), 0.0)
        t_dkdv, t_dq = {}, {}
        for vname, cfg in DKDV_VARIANTS.items():
            t_dkdv[vname] = bench(f"gluon dK/dV {vname}", lambda cfg=cfg: G.launch_dkdv(
                d, S, B * H, causal, scale, cfg), 4 * mm_flops)
        for vname, cfg in DQ_VARIANTS.items():
            t_dq[vname] = bench(f"gluon dQ {vname}", lambda cfg=cfg: G.launch_dq(
                d, lse, delta, S, B * H, causal, scale, cfg), 3 * mm_flops)
        try:
            scfg = SOL._config(q)
            lse_c = lse.contiguous()
            delta_s = delta.view(B, H, S)
            sdq, sdk, sdv = (torch.empty_like(q) for _ in range(3))
            bench("solution dK/dV kernel", lambda: SOL._dkdv(
                q, k, v, do, lse_c, delta_s, sdk, sdv, causal, scale, SOL._direct, scfg["dkdv"]),
                4 * mm_flops)
            bench("solution dQ kernel", lambda: SOL._dq(
                q, k, v, do, lse_c, delta_s, sdq, causal, scale, SOL._direct, scfg["dq"]),
                3 * mm_flops)
        except Exception as e:  # noqa: BLE001
            err("  solution kernels", e)

        best = {}
        ok_dkdv = {n: t for n, t in t_dkdv.items() if t is not None}
        ok_dq = {n: t for n, t in t_dq.items() if t is not None}
        if ok_dkdv and ok_dq:
            bd = min(ok_dkdv, key=ok_dkdv.get)
            bq = min(ok_dq, key=ok_dq.get)
            best = dict(DKDV_VARIANTS[bd], **DQ_VARIANTS[bq])
            t_best = bench(f"gluon backward, best pair ({bd} + {bq})",
                           lambda: G.backward(do, q, k, v, o, lse, causal, scale, best), bwd_flops)
            conc = dict(best, CONCURRENT=True)
            t_conc = bench("  the same, dQ on a side stream (CONCURRENT)",
                           lambda: G.backward(do, q, k, v, o, lse, causal, scale, conc), bwd_flops)
            if t_best is not None and t_conc is not None and t_conc < t_best:
                best = conc

        say(" forward + backward (useful TFLOP/s):")
        both = fwd_flops + bwd_flops
        FWD = None
        try:
            sys.path.insert(0, str(ROOT / ".whl/g38"))
            import gluon_fa as FWD  # noqa: E402
        except Exception as e:  # noqa: BLE001
            err("  import .whl/g38/gluon_fa (carry .whl/g38 for this line)", e)
        if FWD is not None:
            def gluon_both(cfg=None):
                o_, lse_ = FWD.forward(q, k, v, scale)
                return G.backward(do, q, k, v, o_, lse_, causal, scale, cfg)

            bench("gluon fwd (.whl/g38) + gluon bwd (CONFIG)", gluon_both, both)
            if best:
                bench("gluon fwd + gluon bwd (best pair)", lambda: gluon_both(best), both)
            bench("gluon fwd alone", lambda: FWD.forward(q, k, v, scale), fwd_flops)

        def sol_both():
            o_, lse_ = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
            return SOL._bwd_impl(do, q, k, v, o_, lse_, causal, scale, SOL._direct)

        bench("solution fwd + solution bwd", sol_both, both)
        bench("solution fwd alone", lambda: SOL._fwd_impl(q, k, v, causal, scale, SOL._direct),
              fwd_flops)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            F = torch.nn.functional
            qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))

            def cudnn_fwd():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(qq, kk, vv, is_causal=False, scale=scale)

            def cudnn_both():
                out = cudnn_fwd()
                torch.autograd.grad(out, (qq, kk, vv), do)

            bench("SDPA cuDNN fwd + bwd (autograd)", cudnn_both, both)
            with torch.no_grad():
                bench("SDPA cuDNN fwd alone (no grad)", cudnn_fwd, fwd_flops)
        except Exception as e:  # noqa: BLE001
            err("  cudnn sdpa", e)
        say(f"best CONFIG overrides: {best}  (gluon_bwd128.CONFIG now: {G.CONFIG})")
    except Exception as e:  # noqa: BLE001
        err("(b) timing", e)
else:
    say("(b) timing skipped: (a) did not pass")
say("done")
