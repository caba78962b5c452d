"""exp38's GPU benchmark: FlashAttention-4's softmax tricks as variants of exercise 13's Triton
forward (variants.py beside this file), against the unmodified solution and SDPA cuDNN.

    python3 .whl/exp38/bench.py --out $OUT/exp38.json      (from the repository root, or any cwd)

Cases (bf16): D128 = B 4, H 32, S 4096, D 128, not causal; LB = B 1, H 16, S 16384, D 64, causal.
1. warm-up: one subprocess per kernel variant compiles it at the cases' specialization in
   parallel (fills Triton's cache: the timed process then loads, not compiles);
2. per case, each variant's forward (o and lse2) checked against the solution's at the case
   (normwise o error < 5e-3), a failing one skipped and said so;
3. forward only, do_bench_cudagraph (median of 10 replays), 3 repeats interleaved round-robin
   over all implementations (median of the 3, spread = (max - min) / median);
4. forward + backward (o, then autograd.grad of q, k, v with a fixed dO) for the solution,
   cuDNN and the two fastest variants by forward at that case, the same way.
A markdown table on stdout, everything in JSON at --out."""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

# EXP38_SELFTEST=1: a dry run of this script's logic on the CPU (Triton's interpreter, tiny shapes,
# wall-clock timing, SDPA's math backend for cuDNN); its figures mean nothing
SELFTEST = os.environ.get("EXP38_SELFTEST") == "1"
if SELFTEST:
    os.environ["TRITON_INTERPRET"] = "1"
DEV = "cpu" if SELFTEST else "cuda"

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]                      # .whl/exp38/bench.py -> the repository root
SOL_PATH = ROOT / "solutions/13_flash_attention/triton/flash_attention.py"
VAR_PATH = HERE / "variants.py"

CASES = {"D128": dict(B=4, H=32, S=4096, D=128, causal=False),
         "LB": dict(B=1, H=16, S=16384, D=64, causal=True)}
# the warm-up's shapes: the cases' compile specialization (H, S, strides divisible by 16)
WARM = {"D128": dict(B=1, H=32, S=512, D=128, causal=False),
        "LB": dict(B=1, H=16, S=1024, D=64, causal=True)}
if SELFTEST:
    CASES = {"D128": dict(B=1, H=2, S=48, D=128, causal=False),
             "LB": dict(B=1, H=2, S=64, D=64, causal=True)}
    WARM = CASES
VARIANTS = ["base", "poly4", "poly2", "lazy", "lazy_poly4", "lazy_poly2"]
DESCR = {"sol": "the solution, unmodified", "cudnn": "SDPA cuDNN",
         "base": "variants.py, both switches off (a control: the solution's code in another file)",
         "poly4": "polyexp 1/4 (a quarter of each tile's exp2 by the polynomial)",
         "poly2": "polyexp 1/2", "lazy": "lazy rescaling (TAU = 8)",
         "lazy_poly4": "lazy + polyexp 1/4", "lazy_poly2": "lazy + polyexp 1/2"}


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inputs(case, seed=0):
    import torch
    g = torch.Generator(device=DEV).manual_seed(seed)
    shape = (case["B"], case["H"], case["S"], case["D"])
    dt = torch.float16 if SELFTEST else torch.bfloat16
    return [torch.randn(shape, device=DEV, generator=g).to(dt) for _ in range(4)]


def sync():
    import torch
    if DEV == "cuda":
        torch.cuda.synchronize()


def forward_fn(name, sol, V):
    import torch
    import torch.nn.functional as F
    if name == "sol":
        return lambda q, k, v, c: sol.flash_attention(q, k, v, c)
    if name == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def f(q, k, v, c):
            with sdpa_kernel(SDPBackend.MATH if SELFTEST else SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=c)
        return f
    poly, lazy = V.VARIANTS[name]
    return lambda q, k, v, c: V.flash_attention(q, k, v, c, poly=poly, lazy=lazy)


def warm(name):
    """Subprocess: compile one implementation's kernels at both cases' specialization."""
    import torch
    sol = load(SOL_PATH, "sol13")
    V = load(VAR_PATH, "variants")
    f = forward_fn(name, sol, V)
    for cname, case in WARM.items():
        q, k, v, do = inputs(case)
        f(q, k, v, case["causal"])
        if name in ("sol", "base"):   # the backward kernels (the same source in both files)
            lv = [t.clone().requires_grad_() for t in (q, k, v)]
            torch.autograd.grad(f(*lv, case["causal"]), lv, do)
    sync()


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="exp38.json")
    ap.add_argument("--warm", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rep-ms", type=int, default=30)
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="fwd+bwd timing is cut (said so) when this much wall time has passed")
    a = ap.parse_args()
    if a.warm:
        warm(a.warm)
        return
    t0 = time.time()
    names = ["sol"] + VARIANTS
    if not a.no_warm and not SELFTEST:   # parallel compiles
        procs = {n: subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--warm", n],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for n in names}
        for n, p in procs.items():
            try:
                out, _ = p.communicate(timeout=max(10, 150 - (time.time() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
            if p.returncode:
                print(f"warm-up {n}: rc {p.returncode}: {out[-1500:]}", flush=True)
        print(f"warm-up (parallel compiles) done in {time.time() - t0:.0f} s", flush=True)

    import torch
    import triton
    from triton.testing import do_bench_cudagraph
    sol = load(SOL_PATH, "sol13")
    V = load(VAR_PATH, "variants")
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"],
                                capture_output=True, text=True).stdout.strip()
    except Exception:
        commit = "?"
    env = dict(device="cpu (selftest)" if SELFTEST else torch.cuda.get_device_name(), torch=torch.__version__,
               triton=triton.__version__, commit=commit, rep_ms=a.rep_ms,
               date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()))
    print(json.dumps(env), flush=True)
    res = dict(env=env, cases=CASES, descr=DESCR, check={}, fwd={}, fwdbwd={}, skipped={})

    def bench(fn):
        if SELFTEST:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        return do_bench_cudagraph(fn, rep=a.rep_ms, return_mode="median")

    def summarize(ts):
        s = sorted(ts)
        med = s[len(s) // 2]
        return dict(ms=med, spread=(s[-1] - s[0]) / med, all=ts)

    for cname, case in CASES.items():
        c = case["causal"]
        q, k, v, do = inputs(case)
        # checks against the solution at the case
        o_sol, lse_sol = sol._fwd_impl(q, k, v, c, 1 / math.sqrt(case["D"]), sol._direct)
        ok_names = ["sol", "cudnn"]
        res["check"][cname] = {}
        o_cud = forward_fn("cudnn", sol, V)(q, k, v, c)
        res["check"][cname]["cudnn"] = dict(o_rel_vs_sol=rel(o_cud, o_sol))
        for n in VARIANTS:
            try:
                o, lse = V.forward_lse(q, k, v, c, None, n)
                o2 = forward_fn(n, sol, V)(q, k, v, c)
                sync()
                e = rel(o, o_sol)
                dl = (lse - lse_sol).abs().max().item()
                fin = bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all())
                same = torch.equal(o, o2)
                good = fin and same and e < 5e-3 and dl < 1e-2
                res["check"][cname][n] = dict(o_rel_vs_sol=e, lse_maxdiff=dl, finite=fin,
                                              deterministic=same, ok=good)
                print(f"check {cname} {n}: o vs solution {e:.2e}, lse2 max diff {dl:.1e}, "
                      f"finite {fin}, same bits twice {same} -> {'ok' if good else 'SKIPPED'}",
                      flush=True)
                if good:
                    ok_names.append(n)
                else:
                    res["skipped"].setdefault(cname, []).append(n)
            except Exception as ex:
                print(f"check {cname} {n}: {type(ex).__name__}: {str(ex)[-1500:]} -> SKIPPED",
                      flush=True)
                res["skipped"].setdefault(cname, []).append(n)
        del o_sol, lse_sol
        # forward, interleaved
        fns = {n: (lambda f=forward_fn(n, sol, V): f(q, k, v, c)) for n in ok_names}
        ts = {n: [] for n in ok_names}
        for r in range(3):
            for n in ok_names:
                ts[n].append(bench(fns[n]))
        res["fwd"][cname] = {n: summarize(t) for n, t in ts.items()}
        for n in ok_names:
            d = res["fwd"][cname][n]
            print(f"fwd {cname} {n:11s} {d['ms'] * 1e3:8.1f} us ({d['spread'] * 100:.1f}%)",
                  flush=True)
        # forward + backward: the solution, cuDNN, the two fastest variants at this case
        ranked = sorted((n for n in ok_names if n in VARIANTS and n != "base"),
                        key=lambda n: res["fwd"][cname][n]["ms"])
        fb_names = ["sol", "cudnn"] + ranked[:2]
        if time.time() - t0 > a.budget_s:
            print(f"fwd+bwd {cname}: cut, {time.time() - t0:.0f} s passed", flush=True)
            continue
        lv = [t.detach().clone().requires_grad_() for t in (q, k, v)]

        def step(f):
            def run():
                o = f(*lv, c)
                return torch.autograd.grad(o, lv, do)
            return run
        fbs = {n: step(forward_fn(n, sol, V)) for n in fb_names}
        ts = {n: [] for n in fb_names}
        for r in range(3):
            for n in fb_names:
                ts[n].append(bench(fbs[n]))
        res["fwdbwd"][cname] = {n: summarize(t) for n, t in ts.items()}
        for n in fb_names:
            d = res["fwdbwd"][cname][n]
            print(f"fwd+bwd {cname} {n:11s} {d['ms'] * 1e3:8.1f} us ({d['spread'] * 100:.1f}%)",
                  flush=True)
        del q, k, v, do, lv
        if DEV == "cuda":
            torch.cuda.empty_cache()
    res["wall_s"] = time.time() - t0

    # the table
    cols = [("LB", "fwd"), ("LB", "fwdbwd"), ("D128", "fwd"), ("D128", "fwdbwd")]
    head = {"fwd": "fwd", "fwdbwd": "fwd+bwd"}
    print(f"\n{env['device']}, torch {env['torch']}, triton {env['triton']}, {env['date']}; "
          f"do_bench_cudagraph median of 3 interleaved repeats ({a.rep_ms} ms windows), µs "
          f"(spread; change vs the solution in this run)\n")
    print("| | " + " | ".join(f"{c} {head[m]}" for c, m in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for n in ["sol", "cudnn"] + VARIANTS:
        cells = []
        for cname, m in cols:
            d = res[m].get(cname, {}).get(n)
            if d is None:
                cells.append("skipped" if n in res["skipped"].get(cname, []) else "")
                continue
            s = res[m][cname]["sol"]["ms"]
            ch = "" if n == "sol" else f"; {(d['ms'] / s - 1) * 100:+.1f}%"
            cells.append(f"{d['ms'] * 1e3:.1f} ({d['spread'] * 100:.1f}%{ch})")
        print(f"| {n}: {DESCR[n]} | " + " | ".join(cells) + " |")
    for cname, sk in res["skipped"].items():
        print(f"skipped at {cname} (check against the solution failed): {', '.join(sk)}")
    print(f"\nwall {res['wall_s']:.0f} s")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
