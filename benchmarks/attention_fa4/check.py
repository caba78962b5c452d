"""exp38's correctness check on Triton's CPU interpreter: every variant of variants.py (and the
unmodified solution) against a float64 reference, forward o and lse2 and the backward (which
reads lse2), bf16 / fp16 / fp32, D 64 / 128, causal or not, S 1 / 17 / 40 / 130, plus
  - the Hopper path (head-major order, row tiles transposed in shared memory, and TMA
    descriptors: the interpreter emulates them) at 32 x 32 blocks, forced by CONFIG_OVERRIDE;
  - "spiky" inputs (q x 6, k's rows growing along S) where the running max grows by more than
    TAU = 8 after the first block (lazy's rescale branch taken and not) and many scores sit below
    2^-127 (the polynomial's clamp to exactly 0).
    /work/main/.venv/bin/python check.py [--jobs 2]     -> check.log
Pass: finite, o/dq/dk/dv normwise error <= 1.5 x the solution's at the same inputs + a floor
(bf16 1e-3, fp16 2e-4, fp32 1e-6) and (randn inputs) below an absolute bar (bf16 1.5e-2, fp16 3e-3, fp32 2e-5; spiky inputs'
gradients are ill-conditioned: the solution's own bf16 dq/dk errors reach 2e-2 there),
lse2 within 1.5 x the solution's max |error| + (16-bit: 3e-4, fp32: 2e-6); base: the solution's bits."""
import os
os.environ["TRITON_INTERPRET"] = "1"
import argparse, importlib.util, itertools, math, sys, time
from concurrent.futures import ProcessPoolExecutor
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch  # noqa: E402
import interp_bf16  # noqa: E402,F401  (the interpreter's bf16 tl.dot fix)

SOL = "/work/main/solutions/13_flash_attention/triton/flash_attention.py"


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


V = load(os.path.join(HERE, "variants.py"), "variants")
S13 = load(SOL, "sol13")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FLOOR = {"bf16": 1e-3, "fp16": 2e-4, "fp32": 1e-6}
BAR = {"bf16": 1.5e-2, "fp16": 3e-3, "fp32": 2e-5}
LSE_TOL = {"bf16": 3e-4, "fp16": 3e-4, "fp32": 2e-6}
HOPPER_CFG = dict(fwd=V.Cfg(32, 32, 1, 1, hopper=True, tma=True),
                  dkdv=V.Cfg(32, 32, 1, 1, hopper=True, tma=True),
                  dq=V.Cfg(32, 32, 1, 1, hopper=True, tma=True))


def inputs(B, H, S, D, dt, kind, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
    if kind == "spiky":
        q = q * 6
        k = k * torch.linspace(0.2, 3.0, S)[:, None]
    return [t.to(DT[dt]) for t in (q, k, v, do)]


def reference(q, k, v, do, causal):
    q, k, v, do = (t.double().requires_grad_() for t in (q, k, v, do))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    lse2 = torch.logsumexp(s, -1) / math.log(2)
    o = torch.softmax(s, -1) @ v
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do.detach())
    return [o.detach(), lse2.detach(), dq, dk, dv]


def run(mod, q, k, v, do, causal, variant):
    """o, lse2 (forward, no autograd) and dq, dk, dv (autograd through the eager door)."""
    poly, lazy = V.VARIANTS[variant]
    if mod is V:
        o, lse = V._fwd_impl(q, k, v, causal, 1 / math.sqrt(q.shape[-1]), V._direct, poly, lazy)
        lv = [t.clone().requires_grad_() for t in (q, k, v)]
        o2 = V.flash_attention(*lv, causal, poly=poly, lazy=lazy)
    else:
        o, lse = mod._fwd_impl(q, k, v, causal, 1 / math.sqrt(q.shape[-1]), mod._direct)
        lv = [t.clone().requires_grad_() for t in (q, k, v)]
        o2 = mod.flash_attention(*lv, causal)
    assert torch.equal(o, o2.detach())
    dq, dk, dv = torch.autograd.grad(o2, lv, do)
    return [o, lse, dq, dk, dv]


def rel(a, b):
    a, b = a.double(), b.double()
    n = b.norm().item()
    return (a - b).norm().item() / n if n else (a - b).norm().item()


def one(job):
    dt, D, causal, S, kind, path = job
    if path == "hopper":
        V.CONFIG_OVERRIDE = HOPPER_CFG
        # the solution itself on the same path: its module's _config / _tma patched alike
        S13._config = lambda q: HOPPER_CFG
        S13._tma = V._tma = lambda cfg, launch, *ts: bool(cfg.tma)
    t0 = time.time()
    q, k, v, do = inputs(1, 2, S, D, dt, kind, seed=S * 7 + D)
    want = reference(q, k, v, do, causal)
    sol = run(S13, q, k, v, do, causal, "base")
    esol = [rel(g, w) for g, w in zip(sol, want)]
    lines, ok_all = [], True
    head = f"{dt} D{D} {'causal' if causal else 'full  '} S{S:<4d} {kind:5s} {path:6s}"
    lse_sol = (sol[1].double() - want[1]).abs().max().item()
    lines.append(f"{head} solution   o {esol[0]:.2e} lse {lse_sol:.1e} "
                 f"dq {esol[2]:.2e} dk {esol[3]:.2e} dv {esol[4]:.2e}")
    for name in V.VARIANTS:
        got = run(V, q, k, v, do, causal, name)
        e = [rel(g, w) for g, w in zip(got, want)]
        lse_err = (got[1].double() - want[1]).abs().max().item()
        fin = all(bool(torch.isfinite(t).all()) for t in got)
        ok = fin and lse_err <= 1.5 * lse_sol + LSE_TOL[dt]
        for i in (0, 2, 3, 4):
            ok = ok and e[i] <= 1.5 * esol[i] + FLOOR[dt] and (kind == "spiky" or e[i] <= BAR[dt])
        note = ""
        if name == "base":
            same = all(torch.equal(a, b) for a, b in zip(got, sol))
            ok = ok and same
            note = " same bits as the solution" if same else " DIFFERS from the solution"
        ok_all = ok_all and ok
        lines.append(f"{head} {name:10s} o {e[0]:.2e} lse {lse_err:.1e} dq {e[2]:.2e} dk {e[3]:.2e} "
                     f"dv {e[4]:.2e} {'ok' if ok else 'FAIL'}{note}")
    return ok_all, lines, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    jobs = [(dt, D, c, S, "randn", "first") for dt, D, c, S in
            itertools.product(DT, (64, 128), (False, True), (1, 17, 40, 130))]
    jobs += [(dt, D, c, S, "spiky", "first") for dt, D, c, S in
             itertools.product(DT, (64, 128), (False, True), (40, 130))]
    jobs += [("bf16", D, c, S, kind, "hopper") for D, c, S, kind in
             itertools.product((64, 128), (False, True), (17, 130), ("randn", "spiky"))]
    jobs += [("fp16", 128, False, 130, "randn", "hopper")]
    if a.quick:
        jobs = jobs[:: max(1, len(jobs) // 6)]
    t0 = time.time()
    out = open(os.path.join(HERE, "check.log"), "w")
    hdr = (f"exp38 check on Triton's CPU interpreter (triton {__import__('triton').__version__}, "
           f"torch {torch.__version__}), {len(jobs)} input sets x (solution + {len(V.VARIANTS)} variants)\n"
           f"normwise relative error vs float64; lse: max |err| in log2 units; 'first': the CPU "
           f"config (16 x 16 blocks, block-major, pointers), 'hopper': 32 x 32 head-major + TMA "
           f"descriptors (interpreted)\n")
    out.write(hdr); print(hdr, end="")
    n_ok = 0
    with ProcessPoolExecutor(a.jobs) as ex:
        for ok, lines, s in ex.map(one, jobs):
            n_ok += ok
            for l in lines:
                out.write(l + "\n"); print(l)
            out.flush()
    tail = f"SUMMARY: {n_ok}/{len(jobs)} input sets pass for every variant ({time.time() - t0:.0f} s)\n"
    out.write(tail); print(tail, end="")


if __name__ == "__main__":
    main()
