"""The GPU side of issue 38's candidates (run.sh calls it; logs under $OUT/a38/).

    python3 benchmarks/attention_candidates/gpu.py check NAME     NAME: a cand.VARIANTS key or "sol" (the committed
                                           solution): bf16 forward + backward at modest shapes
                                           of both head dims against float64, deterministic;
                                           writes check_NAME.json (and fills Triton's cache)
    python3 benchmarks/attention_candidates/gpu.py time [--deadline UNIX_TIME]
                                           the solution, SDPA cuDNN and every variant whose
                                           check passed, both cases, fwd and fwd+bwd, timed by
                                           do_bench_cudagraph (median, 3 repeats); then "auto",
                                           the best kernel of each kind combined; a table last
"""
import argparse
import importlib.util
import json
import math
import os
import time
import traceback
from pathlib import Path

# A38_SELFTEST=1: the whole script on the CPU through Triton's interpreter, tiny shapes, fp16,
# wall-clock timing (a dry run of this script's logic; its figures mean nothing)
SELFTEST = os.environ.get("A38_SELFTEST") == "1"
if SELFTEST:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUTD = Path(os.environ.get("OUT", "/tmp/out")) / "a38"
OUTD.mkdir(parents=True, exist_ok=True)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cand = load(HERE / "cand.py", "cand")
ref = load(ROOT / "exercises/13_flash_attention/reference.py", "ref13")
sol = load(ROOT / "solutions/13_flash_attention/triton/flash_attention.py", "fa13")

CASES = {"LB": dict(B=1, H=16, S=16384, D=64, causal=True),
         "wide": dict(B=4, H=32, S=4096, D=128, causal=False)}
# modest shapes: the first has the case's compile specialization (H, S, strides divisible by
# 16), so the check compiles the kernels the timing uses; the second is awkward (S not a
# multiple of any block; D 128: q, k, v as views of a [B, S, 3, H, D] tensor)
MODEST = {64: [((1, 16, 1024, 64), True, "dense"), ((1, 2, 1000, 64), True, "dense")],
          128: [((1, 32, 512, 128), False, "dense"), ((2, 3, 333, 128), False, "bshd"),
                ((1, 2, 300, 128), True, "dense")]}
REP = int(os.environ.get("A38_REP_MS", "30"))
DEV, DT = "cuda", torch.bfloat16
if SELFTEST:
    DEV, DT = "cpu", torch.float16
    CASES = {"LB": dict(B=1, H=2, S=64, D=64, causal=True),
             "wide": dict(B=1, H=2, S=48, D=128, causal=False)}
    MODEST = {64: [((1, 2, 32, 64), True, "dense"), ((1, 2, 21, 64), True, "dense")],
              128: [((1, 2, 32, 128), False, "dense"), ((1, 2, 19, 128), False, "bshd")]}


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def device_name():
    return torch.cuda.get_device_name() if DEV == "cuda" else "cpu (selftest)"
LOGF = None


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if LOGF:
        with open(LOGF, "a") as f:
            f.write(line + "\n")


def impl(name):
    if name == "sol":
        return lambda q, k, v, c, s: sol.flash_attention(q, k, v, c, s)
    if name == "cudnn":
        return ref.reference if SELFTEST else ref.sdpa_cudnn
    return lambda q, k, v, c, s: cand.attention(q, k, v, c, s, name)


def modest_inputs(shape, layout, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    B, H, S, D = shape
    if layout == "bshd":
        qkv = torch.randn(B, S, 3, H, D, device=DEV, generator=g).to(DT)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    else:
        q, k, v = (torch.randn(shape, device=DEV, generator=g).to(DT) for _ in range(3))
    do = torch.randn(shape, device=DEV, generator=g).to(DT)
    return q, k, v, do


def fwd_bwd(f, q, k, v, do, causal):
    lv = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    o = f(*lv, causal, None)
    o.backward(do)
    sync()
    return [o.detach()] + [t.grad for t in lv]


def rel(a, b):
    a, b = a.double(), b.double()
    n = b.norm().item()
    return (a - b).norm().item() / n if n else (a - b).norm().item()


# --- check ---------------------------------------------------------------------------------------

def check(name):
    global LOGF
    LOGF = OUTD / f"check_{name}.log"
    f = impl(name)
    ok, lines, t0 = True, [], time.time()
    for D in (64, 128):
        for i, (shape, causal, layout) in enumerate(MODEST[D]):
            try:
                q, k, v, do = modest_inputs(shape, layout, 7 + i)
                got = fwd_bwd(f, q, k, v, do, causal)
                e = [t.detach().double().requires_grad_() for t in (q, k, v)]
                oe = ref.exact(*e, causal)
                oe.backward(do.double())
                want = [oe.detach()] + [t.grad for t in e]
                errs, good = [], True
                for nm, g_, w in zip(("o", "dq", "dk", "dv"), got, want):
                    fin = bool(torch.isfinite(g_).all())
                    r = rel(g_, w)
                    rms = w.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt().clamp_min(1e-30)
                    worst = ((g_.double() - w).abs() / rms).max().item()
                    good = good and fin and r <= 1e-2
                    errs.append(f"{nm} {r:.2e}/{worst:.3f}")
                again = fwd_bwd(f, q, k, v, do, causal)
                det = all(torch.equal(a, b) for a, b in zip(got, again))
                bits = ""
                if name not in ("sol", "base"):
                    base = fwd_bwd(impl("base"), q, k, v, do, causal)
                    same = [nm for nm, a, b in zip(("o", "dq", "dk", "dv"), got, base)
                            if torch.equal(a, b)]
                    bits = f" same bits as base: {','.join(same) or 'none'}"
                good = good and det
                ok = ok and good
                lines.append(f"{'ok  ' if good else 'FAIL'} {name} {shape} "
                             f"{'causal' if causal else 'full'} {layout}: {' '.join(errs)} "
                             f"(norm/maxrms) det={det}{bits}")
            except Exception as ex:
                ok = False
                lines.append(f"FAIL {name} {shape} {layout}: {type(ex).__name__}: "
                             f"{str(ex).splitlines()[0][:300] if str(ex) else ''}")
                log(traceback.format_exc()[-2500:])
            log(lines[-1])
    (OUTD / f"check_{name}.json").write_text(json.dumps(dict(name=name, ok=ok, lines=lines,
                                                             s=round(time.time() - t0, 1))))
    log(f"check {name}: {'PASS' if ok else 'FAIL'} in {time.time() - t0:.0f} s")


# --- time ----------------------------------------------------------------------------------------

def case_inputs(case, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q, k, v, causal, _ = ref.bench_inputs(case, DT, DEV, g)
    do = torch.randn(q.shape, device=DEV, generator=g).to(DT)
    return q, k, v, causal, do


def bench(fn, grads, reps=3):
    out = []
    for _ in range(reps):
        if SELFTEST:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
            continue
        t = do_bench_cudagraph(fn, rep=REP, grad_to_none=grads, quantiles=[0.5])
        out.append(t[0] if isinstance(t, (list, tuple)) else t)
    out.sort()
    return out[len(out) // 2], (out[-1] - out[0]) / out[len(out) // 2]


def time_all(deadline):
    global LOGF
    LOGF = OUTD / "time.log"
    log(f"device {device_name()}, torch {torch.__version__}, triton "
        f"{triton.__version__}, rep {REP} ms, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    checks = {}
    for p in sorted(OUTD.glob("check_*.json")):
        d = json.loads(p.read_text())
        checks[d["name"]] = d["ok"]
    # the most informative first: a deadline cuts the tail
    order = ["base", "pipe", "pipe_tma", "pipe4w", "regkv", "dqpipe", "bwdpipe", "persist",
             "pipe_persist", "regkv64", "tma6432"]
    order += [v for v in cand.VARIANTS if v not in order]
    variants = [v for v in order if checks.get(v)]
    skipped = [v for v in cand.VARIANTS if not checks.get(v)]
    log(f"checked ok: {variants}; not timed (check failed or missing): {skipped}")
    table, notes = {}, {}
    data = {c: case_inputs(case) for c, case in CASES.items()}
    want = {}
    for c, case in CASES.items():  # the solution's results at the case: the scale check
        q, k, v, causal, do = data[c]
        want[c] = fwd_bwd(impl("sol"), q, k, v, do, causal)

    def run_row(name, f, table_for_auto=None):
        for c, case in CASES.items():
            if time.time() > deadline - (4 if c == "wide" else 8):
                notes[name] = "deadline"
                log(f"{name} {c}: skipped (deadline)")
                return
            q, k, v, causal, do = data[c]
            try:
                if name not in ("sol", "cudnn"):
                    got = fwd_bwd(f, q, k, v, do, causal)
                    errs = [rel(a, b) for a, b in zip(got, want[c])]
                    same = all(torch.equal(a, b) for a, b in zip(got, want[c]))
                    log(f"{name} {c}: vs solution at the case: " + " ".join(
                        f"{nm} {e:.1e}" for nm, e in zip(("o", "dq", "dk", "dv"), errs))
                        + (" (same bits)" if same else ""))
                    if not all(math.isfinite(e) and e <= 1e-2 for e in errs):
                        notes[name] = f"WRONG at {c}"
                        log(f"{name} {c}: differs from the solution at the case: not timed")
                        continue
                    del got
                fn = lambda: f(q, k, v, causal, None)  # noqa: E731
                fn()
                sync()
                table[(name, c, "fwd")] = bench(fn, None)
                lv = [t.detach().clone().requires_grad_() for t in (q, k, v)]
                fb = lambda: f(*lv, causal, None).backward(do)  # noqa: E731
                fb()
                sync()
                table[(name, c, "fwd+bwd")] = bench(fb, lv)
                log(f"time {name} {c}: fwd {table[(name, c, 'fwd')][0]:.4f} ms "
                    f"({table[(name, c, 'fwd')][1]:.1%}), fwd+bwd "
                    f"{table[(name, c, 'fwd+bwd')][0]:.4f} ms "
                    f"({table[(name, c, 'fwd+bwd')][1]:.1%})")
            except Exception as ex:
                notes[name] = f"error {type(ex).__name__}"
                log(f"{name} {c}: {type(ex).__name__}: "
                    f"{str(ex).splitlines()[0][:300] if str(ex) else ''}")
                log(traceback.format_exc()[-2000:])
            if DEV == "cuda":
                torch.cuda.empty_cache()

    run_row("sol", impl("sol"))
    run_row("cudnn", impl("cudnn"))
    for v in variants:
        run_row(v, impl(v))
    auto = pick_auto(table, variants)
    if auto is not None:
        cand.VARIANTS["auto"] = auto
        log("auto = " + repr({D: {k: tuple(c) for k, c in t.items()} for D, t in auto.items()}))
        run_row("auto", impl("auto"))
    run_row("sol-again", impl("sol"))
    summary(table, notes, checks, variants + (["auto"] if auto else []))


def pick_auto(table, variants):
    """Per case: the fastest forward among the variants (by fwd), and the backward kernels of
    the variant with the fastest backward (fwd+bwd minus fwd), or the best dK/dV-only and
    dQ-only changes combined where their gains add up to more."""
    out = {}
    for c, D in (("LB", 64), ("wide", 128)):
        base = cand.VARIANTS["base"][D]
        have = [v for v in variants if (v, c, "fwd") in table and (v, c, "fwd+bwd") in table]
        if "base" not in have:
            return None
        fwd_best = min(have, key=lambda v: table[(v, c, "fwd")][0])
        bwd = {v: table[(v, c, "fwd+bwd")][0] - table[(v, c, "fwd")][0] for v in have}
        gain = {v: bwd["base"] - bwd[v] for v in have}
        t = dict(base, fwd=cand.VARIANTS[fwd_best][D]["fwd"])
        best_pair = max(have, key=lambda v: gain[v])
        only = lambda kind: [v for v in have if cand.VARIANTS[v][D][kind] != base[kind] and  # noqa
                             all(cand.VARIANTS[v][D][o] == base[o] for o in ("dkdv", "dq")
                                 if o != kind)]
        dk = max(only("dkdv"), key=lambda v: gain[v], default=None)
        dq = max(only("dq"), key=lambda v: gain[v], default=None)
        combo = (gain[dk] if dk and gain[dk] > 0 else 0) + (gain[dq] if dq and gain[dq] > 0 else 0)
        if combo > gain[best_pair]:
            if dk and gain[dk] > 0:
                t["dkdv"] = cand.VARIANTS[dk][D]["dkdv"]
            if dq and gain[dq] > 0:
                t["dq"] = cand.VARIANTS[dq][D]["dq"]
        elif gain[best_pair] > 0:
            t["dkdv"] = cand.VARIANTS[best_pair][D]["dkdv"]
            t["dq"] = cand.VARIANTS[best_pair][D]["dq"]
        out[D] = t
    return out


def summary(table, notes, checks, rows):
    def cell(name, c, mode):
        t = table.get((name, c, mode))
        if not t:
            return f"{notes.get(name, '-'):>22s}"
        s = table.get(("sol", c, mode))
        d = f"{100 * (t[0] / s[0] - 1):+.1f}%" if s and name != "sol" else ""
        return f"{t[0]:7.3f} ({100 * t[1]:3.1f}%){d:>7s}"
    log("")
    log(f"== issue 38 candidates, {device_name()}, bf16, do_bench_cudagraph "
        f"median of 3 (rep {REP} ms), ms; (spread = (max-min)/median); % vs sol in this run")
    log(f"{'row':13s}| {'LB fwd':22s}| {'LB fwd+bwd':22s}| {'wide fwd':22s}| "
        f"{'wide fwd+bwd':22s}| check")
    for name in ["sol", "cudnn"] + rows + ["sol-again"]:
        chk = "" if name in ("sol", "cudnn", "sol-again", "auto") else (
            "ok" if checks.get(name) else "FAIL")
        log(f"{name:13s}| " + "| ".join(cell(name, c, m) for c in CASES for m in
                                         ("fwd", "fwd+bwd")) + f"| {chk}")
    log("targets: LB fwd+bwd <= 4.4 ms; wide fwd <= 2.0 ms; wide fwd+bwd <= 8.0 ms "
        "(issue 38); cuDNN row = the peer")
    for c in CASES:
        for m in ("fwd", "fwd+bwd"):
            have = [(table[(n, c, m)][0], n) for n in rows if (n, c, m) in table]
            if have:
                t, n = min(have)
                log(f"best {c} {m}: {n} {t:.3f} ms")
    (OUTD / "table.json").write_text(json.dumps({"|".join(k): v for k, v in table.items()}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["check", "time"])
    p.add_argument("name", nargs="?")
    p.add_argument("--deadline", type=float, default=time.time() + 150)
    a = p.parse_args()
    if a.what == "check":
        check(a.name)
    else:
        time_all(a.deadline)


if __name__ == "__main__":
    main()
