"""Flash attention: exercise 13's solution at scale against float64, and the solution against every baseline, timed by CUDA-graph replay. On a GPU machine, from the repository root: `python3 benchmarks/flash_attention.py --check --final --base`.

    python3 benchmarks/flash_attention.py [--check] [--base] [--final] [--slow] [--out DIR]
                                          [--configs WINNERS_JSON] [--before OLD_SOLUTION]
                                          [--baselines sdpa_flash,sdpa_cudnn,flex]

--check     the solution against the float64 reference (reference.exact) at large shapes
--base      the baselines: each SDPA backend and FlexAttention (a peer: PyTorch's generated
            Triton attention); --slow adds torch.compile of the reference and the eager one
--final     the solution's configs and a "first kernel" config (its first kernels untuned: 64 x 64
            tiles, 4 warps, 2 stages, no Hopper path), three repeats each, and the bf16 matmul
            ceiling
--configs   the solution with these CONFIGS instead of the file's (benchmarks/
            flash_attention_sweep.py writes them): measure a table before pasting it
--before    an earlier solution file timed beside (three repeats): before and after in one run
Everything is `triton.testing.do_bench_cudagraph` (median over the replays, L2 not flushed:
graph replay of one fwd or fwd+bwd step), repeated; forward+backward includes the forward;
the spread is (max - min) / median over the repeats. The block configs are tuned by
benchmarks/flash_attention_sweep.py.
"""
import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
from triton.testing import do_bench_cudagraph

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fa = load(ROOT / "solutions/13_flash_attention/triton/flash_attention.py", "fa13")
ref = load(ROOT / "exercises/13_flash_attention/reference.py", "ref13")
CASES = {"leaderboard": dict(B=1, H=16, S=16384, D=64, causal=True),
         "wide": dict(B=4, H=32, S=4096, D=128, causal=False)}
LOG = []
LOGFILE = Path(os.environ.get("OUT", ".")) / f"ex13-{int(time.time())}.log"


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.append(line)
    with open(LOGFILE, "a") as f:  # line by line: a run cut off by its time limit keeps its log
        f.write(line + "\n")


def inputs(case, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, causal, scale = ref.bench_inputs(case, dtype, "cuda", g)
    do = torch.randn(q.shape, device="cuda", generator=g).to(dtype)
    return q, k, v, causal, do


def bench(fn, grads=None, reps=3, rep_ms=60):
    out = []
    for _ in range(reps):
        t = do_bench_cudagraph(fn, rep=rep_ms, grad_to_none=grads, quantiles=[0.5])
        out.append(t[0] if isinstance(t, (list, tuple)) else t)
    out.sort()
    return out[len(out) // 2], (out[-1] - out[0]) / out[len(out) // 2]


def step(f, case, mode, seed=0):
    q, k, v, causal, do = inputs(case, seed)
    if mode == "fwd":
        return (lambda: f(q, k, v, causal, None)), None
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    return (lambda: f(q, k, v, causal, None).backward(do)), [q, k, v]


def tflops(case, mode, ms):
    m = ref.flops(case, torch.bfloat16, "forward" if mode == "fwd" else "forward_backward")
    return m["flops"] / (ms * 1e-3) / 1e12


# --- correctness ---------------------------------------------------------------------------------

def check():
    shapes = [((1, 2, 1000, 64), True, torch.bfloat16), ((1, 2, 1000, 64), False, torch.bfloat16),
              ((2, 3, 333, 128), True, torch.float16), ((2, 3, 333, 128), False, torch.bfloat16),
              ((1, 2, 1, 64), True, torch.bfloat16), ((1, 1, 16384, 64), True, torch.bfloat16),
              ((1, 2, 4096, 128), False, torch.bfloat16), ((1, 2, 77, 64), True, torch.float32),
              ((1, 2, 77, 128), False, torch.float64)]
    for shape, causal, dtype in shapes:
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, do = (torch.randn(shape, device="cuda", generator=g).to(dtype) for _ in range(4))
        lv = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        o = fa.flash_attention(*lv, causal)
        o.backward(do)
        e = [t.detach().double().clone().requires_grad_() for t in (q, k, v)]
        oe = ref.exact(*e, causal)
        oe.backward(do.double())
        errs = []
        for name, got, want in zip(("o", "dq", "dk", "dv"), [o] + [t.grad for t in lv],
                                   [oe] + [t.grad for t in e]):
            got, want = got.double(), want.double()
            norm = ((got - want).norm() / want.norm()).item()
            rms = want.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt()
            worst = ((got - want).abs() / rms.clamp_min(1e-30)).max().item()
            errs.append(f"{name} norm {norm:.2e} max/rms {worst:.2e}")
        log(f"check {shape} causal={causal} {str(dtype)[6:]}: " + "; ".join(errs))
        # determinism: the same gradients bit for bit
        lv2 = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        fa.flash_attention(*lv2, causal).backward(do)
        same = all(torch.equal(a.grad, b.grad) for a, b in zip(lv, lv2))
        log(f"  deterministic: {same}")


# --- baselines and final -------------------------------------------------------------------------

def solution(q, k, v, causal, scale):
    return fa.flash_attention(q, k, v, causal, scale)


BASELINES = {"sdpa_flash": ref.sdpa_flash, "sdpa_efficient": ref.sdpa_efficient,
             "sdpa_cudnn": ref.sdpa_cudnn, "flex": ref.flex}
# a sound first kernel: the solution's first kernels untuned (no Hopper path)
FIRST = fa.Cfg(64, 64, 4, 2)


def run_rows(rows, table, reps=3):
    for name, f in rows.items():
        for cname, case in CASES.items():
            for mode in ("fwd", "fwd+bwd"):
                try:
                    fn, grads = step(f, case, mode)
                    fn()
                    torch.cuda.synchronize()
                    ms, spread = bench(fn, grads, reps=reps)
                    table[(name, cname, mode)] = (ms, spread)
                    log(f"time {name} {cname} {mode}: {ms * 1e3:.1f} us (spread {spread:.1%}) "
                        f"{tflops(case, mode, ms):.0f} TFLOP/s")
                except Exception as e:
                    table[(name, cname, mode)] = None
                    log(f"time {name} {cname} {mode}: failed {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:300] if str(e) else ''}")
                torch.cuda.empty_cache()


def grade(limit):
    import subprocess
    r = subprocess.run([sys.executable, "-m", "grader", "grade", "--exercise", "13", "--impl",
                        "solutions", "--no-bench"], cwd=ROOT, capture_output=True, text=True,
                       timeout=limit)
    log("grade:\n" + (r.stdout + r.stderr)[-8000:])


def matmul_rate():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms, spread = bench(lambda: a @ b, reps=3, rep_ms=100)
    return 2 * 8192 ** 3 / (ms * 1e-3) / 1e12, spread


def main():
    p = argparse.ArgumentParser()
    for f in ("check", "base", "final", "slow"):
        p.add_argument(f"--{f}", action="store_true")
    p.add_argument("--grade", type=float, default=0, help="run the grader's checks, this long")
    p.add_argument("--configs", help="CONFIGS as JSON {D: {kernel: [Cfg fields]}}")
    p.add_argument("--before", help="an earlier solution file, timed beside")
    p.add_argument("--baselines", default=",".join(BASELINES),
                   help="which --base rows (default: all)")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args()
    log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    log("command: " + " ".join(sys.argv))
    if a.configs:
        for D, t in json.loads(Path(a.configs).read_text()).items():
            fa.CONFIGS[int(D)] = {k: fa.Cfg(*v) for k, v in t.items()}
    log("CONFIGS: " + repr(fa.CONFIGS))
    table = {}
    def guarded(f, *args):
        try:
            return f(*args)
        except Exception:
            log(traceback.format_exc()[-3000:])
    try:
        if a.check:
            guarded(check)
        if a.final:
            rate, spread = matmul_rate()
            log(f"bf16 matmul 8192^3: {rate:.0f} TFLOP/s (spread {spread:.1%})")
            guarded(run_rows, {"solution": solution}, table)
            if a.before:
                old = load(Path(a.before).resolve(), "fa13_before")
                guarded(run_rows, {"before": lambda *args: old.flash_attention(*args)}, table)
            saved = {k: dict(v) for k, v in fa.CONFIGS.items()}
            for key in fa.CONFIGS:
                fa.CONFIGS[key] = dict(fwd=FIRST, dkdv=FIRST, dq=FIRST)
            guarded(run_rows, {"first": solution}, table, 1)
            fa.CONFIGS.update(saved)
        if a.base:
            guarded(run_rows, {k: BASELINES[k] for k in a.baselines.split(",")}, table)
        if a.grade:
            guarded(grade, a.grade)
        if a.slow:
            torch._dynamo.config.cache_size_limit = 64
            guarded(run_rows, {"compile": torch.compile(ref.reference, dynamic=False),
                               "eager": ref.reference}, table, 1)
    except Exception:
        log(traceback.format_exc())
    log("\n| row | case | mode | us | TFLOP/s |\n|---|---|---|---|---|")
    for (name, cname, mode), t in table.items():
        if t:
            log(f"| {name} | {cname} | {mode} | {t[0] * 1e3:.1f} ({t[1]:.1%}) | "
                f"{tflops(CASES[cname], mode, t[0]):.0f} |")
        else:
            log(f"| {name} | {cname} | {mode} | failed | |")


if __name__ == "__main__":
    main()
