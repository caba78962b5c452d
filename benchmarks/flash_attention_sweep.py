"""Flash attention tuning: each kernel of exercise 13's solution (forward, dK/dV, dQ) timed alone over candidate block configs at both benchmark cases, printed as a ready-to-paste CONFIGS table. On a GPU machine (one H200: about 5 minutes), from the repository root: `python3 benchmarks/flash_attention_sweep.py [--budget 330] [--jobs 8]`.

Every candidate is (BLOCK_M, BLOCK_N, warps, stages) as the solution's CONFIGS holds it (dkdv:
(BLOCK_N key rows, BLOCK_M query step, ...)); only shapes the kernels accept are tried (fwd and
dq: BLOCK_M a multiple of BLOCK_N; dkdv: BLOCK_N a multiple of BLOCK_M). The candidates are
compiled first by --jobs processes at once (Triton's cache on disk then holds them, and the
timing process loads them instead of compiling one after another); then each is run once, its
output compared with the current config's (a config that computes something else is dropped,
not timed), and timed by `triton.testing.do_bench_cudagraph` (median of the replays of a CUDA
graph of the one kernel, L2 not flushed). At the end the step (forward + backward through
`flash_attention`) is timed with the current table and with the winners.

Cases: the leaderboard (B 1, H 16, S 16384, D 64, causal) picks CONFIGS[64]; the wide case
(B 4, H 32, S 4096, D 128, not causal) picks CONFIGS[128]. The log goes to $OUT (or .) line by
line. --dry-run prints the cases and candidates and runs nothing (no GPU needed).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "13_flash_attention" / "triton" / "flash_attention.py"
CASES = {64: dict(name="leaderboard", B=1, H=16, S=16384, D=64, causal=True),
         128: dict(name="wide", B=4, H=32, S=4096, D=128, causal=False)}
KERNELS = ("fwd", "dkdv", "dq")

# Candidates per (kernel, head dim), most likely first (a run out of budget keeps the best so
# far). From the first sweep (benchmarks/flash_attention.py's, 2026-11-26), the Triton
# tutorial's fused attention (backward: 32-row query steps against 128-key blocks, 4 warps,
# 5 stages) and FlashAttention-2's (forward 128 x 64/128, 4-8 warps).
CANDIDATES = {
    ("fwd", 64): [(128, 64, 8, 3), (128, 64, 4, 3), (128, 64, 8, 4), (128, 64, 4, 4),
                  (128, 128, 8, 3), (128, 128, 8, 2), (128, 32, 4, 4), (64, 64, 4, 3),
                  (64, 64, 4, 4), (256, 64, 8, 3), (128, 64, 8, 5), (64, 32, 4, 4)],
    ("fwd", 128): [(128, 128, 8, 3), (128, 128, 8, 2), (128, 64, 8, 3), (128, 64, 8, 4),
                   (128, 64, 4, 3), (128, 128, 4, 2), (64, 64, 4, 3),
                   (128, 32, 4, 3), (256, 64, 8, 3), (64, 64, 4, 4)],
    ("dkdv", 64): [(64, 64, 4, 3), (128, 32, 4, 5), (128, 32, 4, 4), (128, 32, 8, 3),
                   (128, 64, 8, 3), (128, 64, 8, 2), (64, 64, 4, 2), (64, 64, 8, 3),
                   (64, 32, 4, 3), (64, 32, 4, 4), (128, 128, 8, 2), (128, 16, 4, 5)],
    ("dkdv", 128): [(64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 32, 4, 3),
                    (128, 64, 8, 2), (64, 32, 4, 3), (64, 64, 8, 2), (128, 32, 8, 2),
                    (64, 32, 4, 2), (128, 16, 4, 4)],
    ("dq", 64): [(128, 64, 8, 3), (128, 32, 4, 5), (128, 32, 4, 3), (128, 64, 4, 3),
                 (128, 64, 8, 2), (128, 64, 8, 4), (128, 32, 8, 4), (64, 64, 4, 3),
                 (64, 32, 4, 3), (128, 128, 8, 2), (256, 64, 8, 3)],
    ("dq", 128): [(128, 64, 8, 3), (128, 64, 8, 2), (128, 32, 4, 3), (128, 32, 8, 3),
                  (128, 32, 4, 4), (64, 64, 4, 3), (64, 32, 4, 3), (128, 64, 4, 3),
                  (64, 64, 4, 2), (128, 128, 8, 2)],
}

LOGFILE = Path(os.environ.get("OUT", ".")) / "flash_attention_sweep.log"


def log(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    with open(LOGFILE, "a") as f:  # line by line: a run cut off by its time limit keeps its log
        f.write(line + "\n")


def load_solution():
    spec = importlib.util.spec_from_file_location("fa13_sweep", SOLUTION)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def valid(kernel: str, cfg: tuple) -> bool:
    """Shapes the kernels accept: the causal diagonal is walked in steps of the inner block."""
    outer, inner = cfg[0], cfg[1]
    return outer % inner == 0


def candidates(kernel: str, D: int, current: tuple) -> list[tuple]:
    out = [current] + [c for c in CANDIDATES[(kernel, D)] if c != current]
    return [c for c in out if valid(kernel, c)]


# --- one case's tensors and one kernel's launch ----------------------------------------------------

class Case:
    """The inputs of one benchmark case and what the backward kernels read (o, lse, delta),
    made once with the solution's current configs."""

    def __init__(self, fa, case: dict, seed: int = 0):
        import torch
        self.fa, self.case = fa, case
        shape = (case["B"], case["H"], case["S"], case["D"])
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.q, self.k, self.v, self.do = (
            torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
        self.causal, self.scale = case["causal"], 1 / math.sqrt(case["D"])
        self.o, self.lse = fa._fwd_impl(self.q, self.k, self.v, self.causal, self.scale,
                                        fa._direct)
        self.delta = (self.o.float() * self.do.float()).sum(-1)  # what the delta kernel makes
        # what the timed kernels write: the forward's own o and lse (the backward reads the
        # case's), and the gradients
        self.o2, self.lse2 = torch.empty_like(self.o), torch.empty_like(self.lse)
        self.dq, self.dk, self.dv = (torch.empty_like(self.q) for _ in range(3))

    def launch(self, kernel: str, cfg: tuple):
        """A zero-argument call running `kernel` alone with `cfg`; returns what it wrote."""
        fa, c = self.fa, self
        if kernel == "fwd":
            def run():
                fa._fwd(c.q, c.k, c.v, c.o2, c.lse2, c.causal, c.scale, fa._direct, cfg)
                return c.o2, c.lse2
        elif kernel == "dkdv":
            def run():
                fa._dkdv(c.q, c.k, c.v, c.do, c.lse, c.delta, c.dk, c.dv, c.causal, c.scale,
                         fa._direct, cfg)
                return c.dk, c.dv
        else:
            def run():
                fa._dq(c.q, c.k, c.v, c.do, c.lse, c.delta, c.dq, c.causal, c.scale, fa._direct,
                       cfg)
                return (c.dq,)
        return run

    def poison(self) -> None:
        """NaN in every output: a config that leaves part of one unwritten shows."""
        for t in (self.o2, self.lse2, self.dq, self.dk, self.dv):
            t.fill_(float("nan"))


def _compile_one(job):
    """In a worker process: run one candidate once, so that Triton compiles it into its cache
    on disk (nothing is timed here)."""
    D, kernel, cfg = job
    try:
        import torch
        fa = _WORKER.get("fa") or _WORKER.setdefault("fa", load_solution())
        case = _WORKER.get(D) or _WORKER.setdefault(D, Case(fa, CASES[D]))
        case.launch(kernel, cfg)()
        torch.cuda.synchronize()
        return job, None
    except Exception as e:  # reported by the timing process, which tries it again
        return job, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


_WORKER: dict = {}


def precompile(jobs: list, workers: int, deadline: float) -> None:
    if workers <= 1 or not jobs:
        return
    import multiprocessing
    began = time.time()
    # spawn: CUDA in each worker, no fork
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        for job, err in pool.map(_compile_one, jobs, timeout=max(10, deadline - time.time())):
            if err:
                log(f"  compile {job}: {err}")
    except Exception as e:  # the timing compiles what is missing itself
        log(f"precompile stopped ({type(e).__name__}: {e}); the rest compiles while timing")
    finally:
        # the jobs in flight finish (a few seconds) before any timing: nothing else on the GPU
        pool.shutdown(wait=True, cancel_futures=True)
    log(f"precompiled {len(jobs)} candidates with {workers} processes in "
        f"{time.time() - began:.0f} s")


# --- the sweep -------------------------------------------------------------------------------------

def close(a, b) -> bool:
    """The same answer as the current config's, to bf16 rounding (another block order sums in
    another order)."""
    import torch
    for x, y in zip(a, b):
        x, y = x.double(), y.double()
        if not bool(torch.isfinite(x).all()) or (x - y).norm() > 1e-2 * y.norm():
            return False
    return True


def time_kernel(run, rep_ms: int) -> float:
    from triton.testing import do_bench_cudagraph
    t = do_bench_cudagraph(run, rep=rep_ms, quantiles=[0.5])
    return (t[0] if isinstance(t, (list, tuple)) else t) * 1e3  # us


def sweep_case(fa, D: int, deadline: float, rep_ms: int, margin: float) -> dict:
    import torch
    case = Case(fa, CASES[D])
    current = fa.CONFIGS[D]
    name = CASES[D]["name"]
    best = {}
    for kernel in KERNELS:
        best[kernel] = current[kernel]
        case.poison()
        want = [t.clone() for t in case.launch(kernel, current[kernel])()]
        results = []
        for cfg in candidates(kernel, D, current[kernel]):
            if time.time() > deadline:
                log(f"  {name} {kernel}: out of time, {cfg} and after not tried")
                break
            try:
                run = case.launch(kernel, cfg)
                case.poison()
                got = run()
                torch.cuda.synchronize()
                if not close(got, want):
                    log(f"  {name} {kernel} {cfg}: WRONG ANSWER, dropped")
                    continue
                us = time_kernel(run, rep_ms)
            except Exception as e:
                log(f"  {name} {kernel} {cfg}: failed {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:160] if str(e) else ''}")
                continue
            results.append((us, cfg))
            log(f"  {name} {kernel} {cfg}: {us:.1f} us"
                + ("  (current)" if cfg == current[kernel] else ""))
        if not results:
            continue
        results.sort()
        now = next((us for us, c in results if c == current[kernel]), None)
        # a winner within `margin` of the current config is noise: the table stays
        if now is None or results[0][0] < now * (1 - margin):
            best[kernel] = results[0][1]
        log(f"{name} {kernel}: fastest {results[0][1]} {results[0][0]:.1f} us, current "
            f"{current[kernel]} " + (f"{now:.1f} us" if now else "not timed")
            + f": keep {best[kernel]}")
    del case
    torch.cuda.empty_cache()
    return best


def time_step(fa, D: int, table: dict, rep_ms: int) -> tuple[float, float]:
    """(forward, forward + backward) of flash_attention at the case with `table` as
    CONFIGS[D], in us."""
    import torch
    from triton.testing import do_bench_cudagraph
    c = CASES[D]
    saved = fa.CONFIGS[D]
    fa.CONFIGS[D] = table
    try:
        g = torch.Generator(device="cuda").manual_seed(1)
        shape = (c["B"], c["H"], c["S"], c["D"])
        q, k, v, do = (torch.randn(shape, device="cuda", generator=g).to(torch.bfloat16)
                       for _ in range(4))
        fwd = do_bench_cudagraph(lambda: fa.flash_attention(q, k, v, c["causal"]), rep=rep_ms)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        step = do_bench_cudagraph(lambda: fa.flash_attention(q, k, v, c["causal"]).backward(do),
                                  rep=rep_ms, grad_to_none=[q, k, v])
        return fwd * 1e3, step * 1e3
    finally:
        fa.CONFIGS[D] = saved


def table_text(best: dict) -> str:
    rows = [f"{D}: dict(fwd={b['fwd']}, dkdv={b['dkdv']}, dq={b['dq']})"
            for D, b in sorted(best.items())]
    return "CONFIGS = {" + ",\n           ".join(rows) + "}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=330,
                   help="seconds for compiling and timing the candidates (default 330); the "
                        "final step timings come after")
    p.add_argument("--jobs", type=int, default=min(8, max(1, (os.cpu_count() or 2) - 2)),
                   help="processes compiling candidates ahead (1: compile while timing)")
    p.add_argument("--rep", type=int, default=40, help="ms of replays per timing")
    p.add_argument("--margin", type=float, default=0.01,
                   help="a config replaces the current one only when this much faster (0.01)")
    p.add_argument("--case", choices=["64", "128"], action="append",
                   help="only this head dim's case (repeatable; default both)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    a = p.parse_args(argv)
    dims = [int(d) for d in (a.case or ["64", "128"])]
    fa = load_solution()
    plan = {(k, D): candidates(k, D, fa.CONFIGS[D][k]) for D in dims for k in KERNELS}
    if a.dry_run or os.environ.get("DRY_RUN") == "1":
        for D in dims:
            c = CASES[D]
            print(f"case {c['name']} (B={c['B']}, H={c['H']}, S={c['S']}, D={D}, "
                  f"causal={c['causal']}): CONFIGS[{D}] = {fa.CONFIGS[D]}")
            for k in KERNELS:
                print(f"  {k}: {len(plan[(k, D)])} candidates: {plan[(k, D)]}")
        print(f"{sum(map(len, plan.values()))} candidates, compiled by {a.jobs} processes, "
              f"budget {a.budget:.0f} s")
        return 0
    import torch
    import triton
    if not torch.cuda.is_available():
        print("flash_attention_sweep: needs a GPU", file=sys.stderr)
        return 1
    start = time.time()
    deadline = start + a.budget
    log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    log("command: " + " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    jobs = [(D, k, cfg) for (k, D), cfgs in plan.items() for cfg in cfgs]
    precompile(jobs, a.jobs, start + a.budget * 0.6)
    best = {}
    for i, D in enumerate(dims):
        # the budget left, shared by the cases left
        share = time.time() + (deadline - time.time()) / (len(dims) - i)
        best[D] = sweep_case(fa, D, share, a.rep, a.margin)
    log(f"candidates done in {time.time() - start:.0f} s")
    for D in dims:
        now_f, now_s = time_step(fa, D, fa.CONFIGS[D], a.rep)
        new_f, new_s = time_step(fa, D, best[D], a.rep)
        log(f"{CASES[D]['name']}: forward {now_f:.1f} -> {new_f:.1f} us, forward+backward "
            f"{now_s:.1f} -> {new_s:.1f} us (current table -> the winners)")
    for D in fa.CONFIGS:
        best.setdefault(D, fa.CONFIGS[D])
    log("\n" + table_text(best))
    log(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
