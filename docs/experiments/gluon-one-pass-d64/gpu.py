"""Issue 38, experiment c, on the H200: the one-pass (five-matmul) Gluon backward of one_pass.py
against exercise 13's solution and SDPA cuDNN.

    cd /work/main && python3 /path/to/exp38c/gpu.py            (add --out FILE.json to keep it)

Stages, each in a subprocess with a timeout (a hang, e.g. ORDERED's semaphore, costs that stage
only, is reported, and its variant is dropped from the later stages):
  warm   12 tiny runs in parallel (one-pass bf16/fp16 x causal/not x unordered/ordered, the
         solution's backward bf16/fp16 x causal/not) at the checks' and the leaderboard's
         specialization (B*H = 16): compiles everything into Triton's cache, and smoke-tests
         that each one-pass variant terminates;
  check  correctness, B 2, H 8, S in {128, 1000, 4096}, D 64, causal and not, bf16 and fp16,
         unordered (one stage) and ordered (another): dq, dk, dv against a float64 reference
         (plain PyTorch math on the same 16-bit inputs) and against the solution's;
  det    the leaderboard case (B 1, H 16, S 16384, D 64, causal, bf16): 5 backward runs,
         bitwise against the first, unordered (one stage) and ordered (another); ordered also
         at B 1, H 16, S 4096 not causal; one-pass vs the solution at the case;
  time   the leaderboard case, do_bench_cudagraph(rep=100 ms, median), 3 repeats interleaved
         round-robin, the median of the 3: backward alone (solution: delta + 2 kernels;
         one-pass unordered and ordered: delta + zeroing + kernel + finish), forward alone
         (solution, cuDNN), forward + backward (solution direct and through its autograd door,
         one-pass, cuDNN through autograd), cuDNN's backward derived as step - forward (its
         backward alone cannot be graph-captured cleanly: autograd replays it on the forward's
         stream), and the one-pass's own extra work (zeroing dq_accum and the semaphores,
         the dq finish kernel).
One table at the end (and JSON with --out)."""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
LB = dict(B=1, H=16, S=16384, D=64, causal=True)
SHAPES = [128, 1000, 4096]
# EXP38C_MOCK=1: a CPU dry run of this script's plumbing (stages, timeouts, table) with
# mock_one_pass.py's plain-PyTorch stand-ins and tiny shapes; its numbers mean nothing
MOCK = os.environ.get("EXP38C_MOCK") == "1"
DEV = "cpu" if MOCK else "cuda"
if MOCK:
    LB = dict(B=1, H=16, S=256, D=64, causal=True)
    SHAPES = [128, 200]


def load_op():
    if MOCK:
        import mock_one_pass as op
    else:
        import one_pass as op
    return op


def sync():
    import torch
    if not MOCK:
        torch.cuda.synchronize()


def bench(fn, rep_ms):
    if MOCK:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench_cudagraph
    return do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")


def cudnn_backend():
    from torch.nn.attention import SDPBackend
    return SDPBackend.MATH if MOCK else SDPBackend.CUDNN_ATTENTION
TIMEOUT = dict(warm=120, check_u=90, check_o=60, det_u=40, det_o=40, time=90)


def emit(tag, obj):
    print("RESULT " + json.dumps(dict(tag=tag, **obj)), flush=True)


def inputs(B, H, S, D, dtype, seed=0):
    import torch
    g = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(B, H, S, D, device=DEV, generator=g).to(dtype) for _ in range(4)]


def reference(q, k, v, do, causal, scale):
    """float64, plain math: dq, dk, dv of softmax(scale q kᵀ + mask) v."""
    import torch
    q, k, v, do = (t.double() for t in (q, k, v, do))
    s = q @ k.transpose(-1, -2) * scale
    if causal:
        S = q.shape[2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.softmax(s, -1)
    del s
    o = p @ v
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdim=True))
    del p, dp
    return ds @ k * scale, ds.transpose(-1, -2) @ q * scale, dv


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


def maxabs(a, b):
    return (a.double() - b.double()).abs().max().item()


# --- stages --------------------------------------------------------------------------------------

def stage_warm1(kind, dtype_name, causal, ordered):
    import torch
    op = load_op()
    dtype = getattr(torch, dtype_name)
    # B*H 16: the later stages' specialization; the solution also at S 1000 (its Triton kernels
    # at a length not a multiple of 16, as the checks call them)
    # the one-pass at S 512: 4 key blocks, so ORDERED's semaphore waits happen
    for S in ((512,) if kind == "op" else (128, 1000)):
        q, k, v, do = inputs(2, 8, S, 64, dtype)
        scale = 0.125
        o, lse = op.forward(q, k, v, causal, scale)
        if kind == "op":
            g = op.backward(q, k, v, o, do, lse, None, causal, scale, ordered)
        else:
            g = op.fa._bwd_impl(do, q, k, v, o, lse, causal, scale, op.fa._direct)
        sync()
        assert all(bool(torch.isfinite(x).all()) for x in g)


def stage_check(ordered):
    import torch
    op = load_op()
    fa = op.fa
    for dtype in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            for S in SHAPES:
                tag = f"{str(dtype)[6:]} S{S} {'causal' if causal else 'full'}"
                try:
                    q, k, v, do = inputs(2, 8, S, 64, dtype, seed=S + causal)
                    scale = 1 / math.sqrt(64)
                    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
                    ours = op.backward(q, k, v, o, do, lse, None, causal, scale, ordered)
                    sol = fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct)
                    ref = reference(q, k, v, do, causal, scale)
                    sync()
                    r = dict(case=tag, ordered=ordered)
                    ok = True
                    for name, a, s_, f in zip(("dq", "dk", "dv"), ours, sol, ref):
                        e_ours, e_sol = rel(a, f), rel(s_, f)
                        fin = bool(torch.isfinite(a).all())
                        good = fin and a.shape == f.shape and a.dtype == dtype and \
                            e_ours <= max(2 * e_sol, 1e-3) and e_ours < 3e-2
                        ok &= good
                        r[name] = dict(rel_ref=e_ours, sol_rel_ref=e_sol, maxabs_ref=maxabs(a, f),
                                       rel_sol=rel(a, s_), maxabs_sol=maxabs(a, s_),
                                       bitwise_sol=bool(torch.equal(a, s_)), ok=good)
                    r["ok"] = ok
                    print(f"check {'ordered' if ordered else 'unordered'} {tag}: " + "; ".join(
                        f"{n} rel {r[n]['rel_ref']:.2e} (sol {r[n]['sol_rel_ref']:.2e}, "
                        f"vs sol {r[n]['rel_sol']:.1e}{' =bits' if r[n]['bitwise_sol'] else ''})"
                        for n in ("dq", "dk", "dv")) + f" -> {'ok' if ok else 'FAIL'}", flush=True)
                    emit("check", r)
                    del ref
                except Exception as e:
                    print(f"check {tag} ordered={ordered}: {type(e).__name__}: {str(e)[-800:]}",
                          flush=True)
                    emit("check", dict(case=tag, ordered=ordered, ok=False,
                                       error=f"{type(e).__name__}: {str(e)[-300:]}"))


def _det(ordered, B, H, S, causal, n=5, vs_solution=False):
    import torch
    op = load_op()
    fa = op.fa
    q, k, v, do = inputs(B, H, S, 64, torch.bfloat16, seed=1)
    scale = 0.125
    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
    first = op.backward(q, k, v, o, do, lse, None, causal, scale, ordered)
    differ = dict(dq=0, dk=0, dv=0)
    worst = dict(dq=0.0, dk=0.0, dv=0.0)
    for _ in range(n - 1):
        again = op.backward(q, k, v, o, do, lse, None, causal, scale, ordered)
        for name, a, b in zip(("dq", "dk", "dv"), first, again):
            if not torch.equal(a, b):
                differ[name] += 1
                worst[name] = max(worst[name], maxabs(a, b))
    sync()
    r = dict(case=f"B{B} H{H} S{S} {'causal' if causal else 'full'}", ordered=ordered, runs=n,
             differ=differ, worst=worst)
    if vs_solution:
        sol = fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct)
        r["vs_sol"] = {name: dict(rel=rel(a, s_), maxabs=maxabs(a, s_), bitwise=bool(torch.equal(a, s_)))
                       for name, a, s_ in zip(("dq", "dk", "dv"), first, sol)}
    print(f"det {'ordered' if ordered else 'unordered'} {r['case']}: of {n - 1} runs after the "
          f"first, differing bitwise: " + ", ".join(f"{k} {differ[k]} (max {worst[k]:.2g})"
                                                   for k in differ)
          + (("; vs solution: " + ", ".join(f"{k} rel {x['rel']:.2e}{' =bits' if x['bitwise'] else ''}"
                                             for k, x in r["vs_sol"].items())) if vs_solution else ""),
          flush=True)
    emit("det", r)


def stage_det(ordered):
    _det(ordered, LB["B"], LB["H"], LB["S"], True, vs_solution=True)
    if ordered:
        _det(ordered, 1, 16, 4096 if not MOCK else 256, False)


def stage_time(with_ordered, rep_ms=100, repeats=3):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    op = load_op()
    fa = op.fa
    q, k, v, do = inputs(LB["B"], LB["H"], LB["S"], LB["D"], torch.bfloat16)
    c = LB["causal"]
    scale = 1 / math.sqrt(LB["D"])
    o, lse = fa._fwd_impl(q, k, v, c, scale, fa._direct)
    fns = {}
    fns["bwd: solution (2 kernels, 7 mm)"] = lambda: fa._bwd_impl(do, q, k, v, o, lse, c, scale, fa._direct)
    fns["bwd: one-pass unordered"] = lambda: op.backward(q, k, v, o, do, lse, None, c, scale, False)
    if with_ordered:
        fns["bwd: one-pass ordered"] = lambda: op.backward(q, k, v, o, do, lse, None, c, scale, True)
    qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))

    def fwd_cudnn():
        with sdpa_kernel(cudnn_backend()):
            return F.scaled_dot_product_attention(q, k, v, is_causal=c, scale=scale)
    fns["fwd: solution"] = lambda: fa._fwd_impl(q, k, v, c, scale, fa._direct)
    fns["fwd: SDPA cuDNN"] = fwd_cudnn

    def extra():
        B, H, S, D = q.shape
        a = torch.zeros(B * H * S, D, dtype=torch.float32, device=DEV)
        torch.zeros(B * H * (S // 64), dtype=torch.int32, device=DEV)
        dq = torch.empty_like(q)
        op._dq_finish_kernel[(a.numel() // 4096,)](a, dq, a.numel(), *fa._split(scale), BLOCK=4096,
                                                   num_warps=4)
    fns["  (one-pass extra: zero dq_accum + sem, finish)"] = extra

    def step_sol():
        o_, l_ = fa._fwd_impl(q, k, v, c, scale, fa._direct)
        return fa._bwd_impl(do, q, k, v, o_, l_, c, scale, fa._direct)

    def step_op(ordered):
        def f():
            o_, l_ = fa._fwd_impl(q, k, v, c, scale, fa._direct)
            return op.backward(q, k, v, o_, do, l_, None, c, scale, ordered)
        return f

    def step_cudnn():
        with sdpa_kernel(cudnn_backend()):
            o_ = F.scaled_dot_product_attention(qc, kc, vc, is_causal=c, scale=scale)
        return torch.autograd.grad(o_, (qc, kc, vc), do)

    fns["step: solution"] = step_sol
    fns["step: solution (autograd door)"] = lambda: torch.autograd.grad(
        fa.flash_attention(qc, kc, vc, c, scale), (qc, kc, vc), do)
    fns["step: one-pass unordered"] = step_op(False)
    if with_ordered:
        fns["step: one-pass ordered"] = step_op(True)
    fns["step: SDPA cuDNN"] = step_cudnn
    times = {n: [] for n in fns}
    for n, f in list(fns.items()):   # one untimed call each: compile/load outside the timing
        try:
            f()
            sync()
        except Exception as e:
            print(f"time {n}: {type(e).__name__}: {str(e)[-600:]} (dropped)", flush=True)
            del fns[n]
            times.pop(n)
    for _ in range(repeats):
        for n, f in fns.items():
            try:
                times[n].append(bench(f, rep_ms))
            except Exception as e:
                print(f"time {n}: {type(e).__name__}: {str(e)[-600:]}", flush=True)
    for n, ts in times.items():
        if ts:
            s = sorted(ts)
            emit("time", dict(name=n, ms=s[len(s) // 2], all=ts))
            print(f"time {n}: {s[len(s) // 2]:.3f} ms  ({', '.join(f'{t:.3f}' for t in ts)})",
                  flush=True)


# --- the driver ----------------------------------------------------------------------------------

def run_stage(args, timeout):
    t0 = time.time()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        rc = "TIMEOUT"
    results = []
    for line in out.splitlines():
        if line.startswith("RESULT "):
            results.append(json.loads(line[7:]))
        else:
            print(f"  [{' '.join(args[1:]) or args[0]}] {line}", flush=True)
    return rc, results, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default=None)
    ap.add_argument("rest", nargs="*")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.stage == "warm1":
        kind, dt, causal, ordered = a.rest
        stage_warm1(kind, dt, causal == "1", ordered == "1")
        return
    if a.stage == "check":
        stage_check(a.rest[0] == "1")
        return
    if a.stage == "det":
        stage_det(a.rest[0] == "1")
        return
    if a.stage == "time":
        stage_time(a.rest[0] == "1")
        return

    t0 = time.time()
    import torch
    import triton
    env = dict(device="mock (cpu)" if MOCK else torch.cuda.get_device_name(), torch=torch.__version__,
               triton=triton.__version__, date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    print(json.dumps(env), flush=True)
    report = dict(env=env, stages={}, warm={}, check=[], det=[], time=[])

    # 1. warm: parallel tiny runs (compile + smoke test)
    jobs = {}
    for kind in ("op", "sol"):
        for dt in ("bfloat16", "float16"):
            for causal in ("0", "1"):
                for ordered in (("0", "1") if kind == "op" else ("0",)):
                    name = f"{kind} {dt} causal{causal}" + (f" ordered{ordered}" if kind == "op" else "")
                    jobs[name] = subprocess.Popen(
                        [sys.executable, os.path.abspath(__file__), "--stage", "warm1", kind, dt,
                         causal, ordered], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, p in jobs.items():
        try:
            out, _ = p.communicate(timeout=max(5, TIMEOUT["warm"] - (time.time() - t0)))
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            rc = "TIMEOUT"
        report["warm"][name] = rc
        if rc != 0:
            print(f"warm {name}: rc {rc}: {out[-2000:]}", flush=True)
    print(f"warm: {report['warm']} ({time.time() - t0:.0f} s)", flush=True)
    ordered_ok = all(rc == 0 for n, rc in report["warm"].items() if n.startswith("op") and n.endswith("ordered1"))
    unordered_ok = any(rc == 0 for n, rc in report["warm"].items() if n.startswith("op") and n.endswith("ordered0"))

    def stage(key, args):
        rc, res, dt = run_stage(args, TIMEOUT[key])
        report["stages"][key] = dict(rc=rc, seconds=round(dt, 1))
        print(f"stage {key}: rc {rc}, {dt:.0f} s", flush=True)
        return rc, res

    if unordered_ok:
        rc, res = stage("check_u", ["--stage", "check", "0"])
        report["check"] += res
        rc, res = stage("det_u", ["--stage", "det", "0"])
        report["det"] += res
    if ordered_ok:
        rc, res = stage("check_o", ["--stage", "check", "1"])
        report["check"] += res
        rc, res = stage("det_o", ["--stage", "det", "1"])
        report["det"] += res
        ordered_ok = rc == 0
    rc, res = stage("time", ["--stage", "time", "1" if ordered_ok else "0"])
    report["time"] += res

    # the table
    print("\n== exp38c: one-pass (5-matmul) Gluon backward, D 64 ==")
    print(f"{env['device']}, torch {env['torch']}, triton {env['triton']}, {env['date']}")
    print(f"stages: {report['stages']}")
    n_ok = sum(1 for r in report["check"] if r.get("ok"))
    print(f"correctness: {n_ok}/{len(report['check'])} cases ok"
          + "".join(f"\n  FAIL {r['case']} ordered={r['ordered']}: {r.get('error', '')}"
                    for r in report["check"] if not r.get("ok")))
    for r in report["check"]:
        if r.get("ok") and "dq" in r:
            pass
    worst = {}
    for r in report["check"]:
        for n in ("dq", "dk", "dv"):
            if n in r:
                key = (r["ordered"], n)
                worst[key] = max(worst.get(key, (0, 0)), (r[n]["rel_ref"], r[n]["sol_rel_ref"]))
    for (o_, n), (e, es) in sorted(worst.items()):
        print(f"  worst normwise error vs float64, {'ordered' if o_ else 'unordered'} {n}: {e:.2e} "
              f"(solution, same case: {es:.2e})")
    for r in report["det"]:
        print(f"determinism {'ordered' if r['ordered'] else 'unordered'} {r['case']}: runs differing "
              f"from the first (of {r['runs'] - 1}): {r['differ']}")
    print("\n| leaderboard case (B1 H16 S16384 D64 causal bf16) | ms (median of 3) | vs solution |")
    print("|---|---|---|")
    ref = {"bwd": None, "step": None}
    for r in report["time"]:
        if r["name"].startswith("bwd: solution"):
            ref["bwd"] = r["ms"]
        if r["name"] == "step: solution":
            ref["step"] = r["ms"]
    ms = {r["name"]: r["ms"] for r in report["time"]}
    if "step: SDPA cuDNN" in ms and "fwd: SDPA cuDNN" in ms:
        report["time"].append(dict(name="bwd: SDPA cuDNN (step - fwd, derived)",
                                   ms=ms["step: SDPA cuDNN"] - ms["fwd: SDPA cuDNN"]))
    for r in sorted(report["time"], key=lambda r: (r["name"].lstrip()[:4], r["name"])):
        base = ref["step" if r["name"].startswith("step") else "bwd"]
        rel_ = f"{r['ms'] / base:.3f}x" if base and r["name"][:4] in ("step", "bwd:") else ""
        print(f"| {r['name']} | {r['ms']:.3f} | {rel_} |")
    print(f"\ntotal {time.time() - t0:.0f} s")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
