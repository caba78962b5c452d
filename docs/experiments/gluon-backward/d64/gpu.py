"""On the H200, from the repository root:   timeout -k 10 540 python3 .whl/g38b/gpu.py   (~1-3 min)

(0) a smoke run in a child process with a 120 s timeout: at (1,2,128,64) and (1,2,1024,64),
    causal and not, and the leaderboard shape (1,16,16384,64) causal, the three kernels launched
    one at a time with a synchronise and a line after each (so a hang names its kernel), then
    gluon_bwd.backward itself. A barrier bug shows up as a hang; the child is killed and nothing
    else runs on the GPU (the budget is not eaten). The parent also arms a watchdog
    (faulthandler, exits the process) for the steps after the smoke.
(a) correctness, D 64 causal (and not causal at one shape), bf16: o, lse2 from the solution's
    forward, then gluon_bwd.backward vs float64 math (normwise relative error of dq, dk, dv,
    bound 2e-2; and the worst (batch, head, 64-row block) relative error, bound 2x the
    solution's own worst block + 5e-3, which catches a wrong or missing tile that the normwise
    figure dilutes), vs the solution's _bwd_impl (relative difference printed), determinism (two
    runs bitwise equal, compared as int16 bit patterns).
(b) only if every check of (a) passed: the leaderboard case (1,16,16384,64) causal bf16:
    first gluon vs the solution there (no float64 reference at this size: normwise and
    worst-block relative differences, printed, flagged above 3e-2), then backward alone
    (gluon vs the solution's _bwd_impl) and forward+backward (solution fwd +
    gluon bwd; solution fwd + solution bwd; the solution's whole flash_attention autograd step;
    SDPA cuDNN), do_bench_cudagraph(rep=100), median of 3 repeats; ms and TFLOP/s (the
    README's useful flops: forward 4BHS²D/2, backward 2.5x that).
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
ROOT = HERE.parent.parent                      # .whl/g38b/ -> the repository root
T0 = time.time()
SMOKE = "--smoke" in sys.argv
SMOKE_TIMEOUT = 120      # s: a cold compile of all kernels fits well inside
WATCHDOG = 480           # s from start: the whole run (parent), well inside a 600 s device call


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
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--smoke"], capture_output=True, text=True,
                           timeout=SMOKE_TIMEOUT, cwd=str(ROOT))
        print(r.stdout[-4000:], r.stderr[-3000:], flush=True)
        if r.returncode != 0 or "SMOKE OK" not in r.stdout:
            # the child's own faulthandler watchdog fired: a hang, after the last line it printed
            hung = ", its watchdog fired: a HANG after its last line" if "Timeout (" in r.stderr else ""
            say(f"smoke run failed (rc {r.returncode}{hung}): stopping here")
            sys.exit(1)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(out[-4000:], flush=True)
        say("smoke run TIMED OUT (a hang: barrier/phase bug?): the child was killed; stopping here")
        sys.exit(1)
    say("smoke passed")
# a hang after the smoke (another shape): dump the Python stack and _exit, GIL or not
faulthandler.dump_traceback_later(
    (SMOKE_TIMEOUT - 10) if SMOKE else max(60.0, WATCHDOG - (time.time() - T0)), exit=True)

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
    import gluon_bwd as G  # noqa: E402
except Exception as e:  # noqa: BLE001
    err("import gluon_bwd", e)

SOL = None
try:
    spec = importlib.util.spec_from_file_location(
        "ex13_solution_fa", ROOT / "solutions/13_flash_attention/triton/flash_attention.py")
    SOL = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(SOL)
except Exception as e:  # noqa: BLE001
    err("import solution", e)
    SOL = None


def inputs(shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]


def staged(do, q, k, v, o, lse, causal, scale, tag):
    """gluon_bwd.backward's three launches one at a time, synchronised, with a line after each
    (the smoke's timeout then names the kernel that hung)."""
    B, H, S, D = q.shape
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    delta = torch.empty(B * H * S, dtype=torch.float32, device=q.device)
    G._delta_kernel[(B * H * S // 64,)](o, do, delta, HEAD_D=D, BLOCK_M=64, num_warps=4)
    torch.cuda.synchronize()
    say(f"{tag}: delta kernel done")
    d = G.make_descs(q, k, v, do, dq, dk, dv, lse, delta)
    grid = (B * H * (S // (2 * G.BLK)),)
    ce = G._constexprs(D, causal)
    say(f"{tag}: launching dK/dV kernel (grid {grid[0]})")
    G._dkdv_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"], d["lse"], d["delta"],
                         scale * G.LOG2E, scale, S, B * H, **ce, num_warps=4)
    torch.cuda.synchronize()
    say(f"{tag}: dK/dV kernel done")
    G._dq_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta,
                       scale * G.LOG2E, scale, S, B * H, **ce, num_warps=4)
    torch.cuda.synchronize()
    say(f"{tag}: dQ kernel done")
    return dq, dk, dv


if SMOKE:
    ok = G is not None and SOL is not None
    for shape, causal in [((1, 2, 128, 64), True), ((1, 2, 128, 64), False),
                          ((1, 2, 1024, 64), True), ((1, 2, 1024, 64), False),
                          ((1, 16, 16384, 64), True)]:
        if not ok:
            break
        try:
            q, k, v, do = inputs(shape)
            scale = 1.0 / math.sqrt(shape[-1])
            o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
            torch.cuda.synchronize()
            staged(do, q, k, v, o, lse, causal, scale, f"{shape} causal={causal}")
            dq, dk, dv = G.backward(do, q, k, v, o, lse, causal, scale)
            torch.cuda.synchronize()
            say(f"{shape} causal={causal}: ran, finite: "
                f"{all(bool(torch.isfinite(t).all()) for t in (dq, dk, dv))}")
        except Exception as e:  # noqa: BLE001
            err(f"smoke {shape} causal={causal}", e)
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
            dv = p.T @ dd
            dp = dd @ vv.T
            ds = p * (dp - (dp * p).sum(-1, keepdim=True))
            out[0][b, h] = scale * ds @ kk
            out[1][b, h] = scale * ds.T @ qq
            out[2][b, h] = dv
    return out


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def block_rel(a, b, blk=64):
    """The worst relative error over (batch, head, 64-row block) tiles of [B, H, S, D] tensors:
    a wrong or missing tile shows here even where the normwise figure dilutes it. NaN -> nan."""
    B, H, S, D = b.shape
    num = (a.double() - b.double()).reshape(B, H, S // blk, blk * D).norm(dim=-1)
    den = b.double().reshape(B, H, S // blk, blk * D).norm(dim=-1).clamp_min(1e-30)
    r = num / den
    return float("nan") if bool(torch.isnan(r).any()) else r.max().item()


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


# ---------------------------------------------------------------------------------------------
# (a) correctness
# ---------------------------------------------------------------------------------------------
all_pass = G is not None and SOL is not None
CASES = [((1, 2, 128, 64), True), ((1, 2, 1024, 64), True), ((2, 3, 2048, 64), True),
         ((1, 2, 1024, 64), False)]
for shape, causal in CASES:
    if not all_pass:
        break
    try:
        q, k, v, do = inputs(shape)
        scale = 1.0 / math.sqrt(shape[-1])
        say(f"case {shape} {'causal' if causal else 'not causal'} bf16")
        o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
        ref = reference(q, k, v, do, causal, scale)
        got = G.backward(do, q, k, v, o, lse, causal, scale)
        again = G.backward(do, q, k, v, o, lse, causal, scale)
        sol = SOL._bwd_impl(do, q, k, v, o, lse, causal, scale, SOL._direct)
        torch.cuda.synchronize()
        for name, g_, a_, s_, r_ in zip(("dq", "dk", "dv"), got, again, sol, ref):
            shape_ok = tuple(g_.shape) == tuple(q.shape) and g_.dtype == q.dtype
            e = rel(g_, r_)
            es = rel(s_, r_)
            d = rel(g_, s_)
            eb = block_rel(g_, r_)
            esb = block_rel(s_, r_)
            bound_b = 2 * esb + 5e-3 if math.isfinite(esb) else 2e-2
            same = bits_equal(g_, a_)
            ok = (shape_ok and math.isfinite(e) and e < 2e-2 and math.isfinite(eb)
                  and eb < bound_b and same)
            say(f"  {name}: gluon rel err {e:.3e} (<2e-2)  solution {es:.3e}  worst block "
                f"{eb:.3e} (<{bound_b:.2e}; solution {esb:.3e})  gluon vs solution "
                f"{d:.3e}{' (bitwise equal)' if bits_equal(g_, s_) else ''}  deterministic "
                f"{same}  shape/dtype {'ok' if shape_ok else 'WRONG'}  {'PASS' if ok else 'FAIL'}")
            all_pass &= ok
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
        say(f"  {name:34s} {ms:.4f} ms  {flops / ms * 1e-9:7.1f} TFLOP/s  (runs "
            f"{', '.join('%.4f' % t for t in times)})")
        return ms
    except Exception as e:  # noqa: BLE001
        err(f"  bench {name}", e)
        return None


if all_pass:
    try:
        B, H, S, D = 1, 16, 16384, 64
        causal = True
        fwd_flops = 4.0 * B * H * S * S * D / 2
        bwd_flops = 2.5 * fwd_flops
        q, k, v, do = inputs((B, H, S, D), seed=2)
        scale = 1.0 / math.sqrt(D)
        o, lse = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
        say(f"(b) timing at B {B} H {H} S {S} D {D}, causal, bf16 (useful: forward "
            f"{fwd_flops / 1e12:.3f}, backward {bwd_flops / 1e12:.3f} TFLOP)")
        try:
            got = G.backward(do, q, k, v, o, lse, causal, scale)
            sol = SOL._bwd_impl(do, q, k, v, o, lse, causal, scale, SOL._direct)
            torch.cuda.synchronize()
            for name, g_, s_ in zip(("dq", "dk", "dv"), got, sol):
                d, db = rel(g_, s_), block_rel(g_, s_)
                flag = "ok" if math.isfinite(d) and math.isfinite(db) and db < 3e-2 else \
                    "MISMATCH (not a float64 check; compare with (a))"
                say(f"  leaderboard {name}: gluon vs solution rel {d:.3e}, worst block {db:.3e}  {flag}")
            del got, sol
        except Exception as e:  # noqa: BLE001
            err("  leaderboard check", e)
        say(" backward alone:")
        bench("gluon backward", lambda: G.backward(do, q, k, v, o, lse, causal, scale), bwd_flops)
        bench("solution _bwd_impl", lambda: SOL._bwd_impl(do, q, k, v, o, lse, causal, scale,
                                                           SOL._direct), bwd_flops)
        # the kernels one by one (where the time goes)
        try:
            dq, dk, dv = (torch.empty_like(q) for _ in range(3))
            delta = torch.empty(B * H * S, dtype=torch.float32, device=q.device)
            d = G.make_descs(q, k, v, do, dq, dk, dv, lse, delta)
            grid = (B * H * (S // (2 * G.BLK)),)
            ce = G._constexprs(D, causal)
            bench("  gluon delta kernel", lambda: G._delta_kernel[(B * H * S // 64,)](
                o, do, delta, HEAD_D=D, BLOCK_M=64, num_warps=4), bwd_flops)
            bench("  gluon dK/dV kernel (4/7 of flops)", lambda: G._dkdv_kernel[grid](
                d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"], d["lse"], d["delta"],
                scale * G.LOG2E, scale, S, B * H, **ce, num_warps=4), bwd_flops * 4 / 7)
            bench("  gluon dQ kernel (3/7 of flops)", lambda: G._dq_kernel[grid](
                d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta,
                scale * G.LOG2E, scale, S, B * H, **ce, num_warps=4), bwd_flops * 3 / 7)
        except Exception as e:  # noqa: BLE001
            err("  per-kernel timing", e)

        say(" forward + backward:")
        both = fwd_flops + bwd_flops

        def sol_fwd_gluon_bwd():
            o_, lse_ = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
            return G.backward(do, q, k, v, o_, lse_, causal, scale)

        def sol_fwd_sol_bwd():
            o_, lse_ = SOL._fwd_impl(q, k, v, causal, scale, SOL._direct)
            return SOL._bwd_impl(do, q, k, v, o_, lse_, causal, scale, SOL._direct)

        bench("solution fwd + gluon bwd", sol_fwd_gluon_bwd, both)
        bench("solution fwd + solution bwd (impl)", sol_fwd_sol_bwd, both)
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))

        def sol_autograd():
            out = SOL.flash_attention(qq, kk, vv, causal, scale)
            torch.autograd.grad(out, (qq, kk, vv), do)

        bench("solution flash_attention autograd", sol_autograd, both)
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            F = torch.nn.functional

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, scale=scale)
                torch.autograd.grad(out, (qq, kk, vv), do)

            bench("SDPA cuDNN autograd", cudnn, both)
        except Exception as e:  # noqa: BLE001
            err("  cudnn sdpa", e)
    except Exception as e:  # noqa: BLE001
        err("(b) timing", e)
else:
    say("(b) timing skipped: (a) did not pass")
say("done")
