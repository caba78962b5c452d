"""Flash attention tuning in one GPU call: each kernel of exercise 13's solution (forward, dK/dV, dQ) over a small set of candidate launches at both benchmark cases, checked against float64, timed alone, the winners written out; then (--ncu) Nsight Compute's reading of the winners. On a GPU machine (one H200), from the repository root: `python3 benchmarks/flash_attention_sweep.py [--budget 300] [--out DIR]`, then `python3 benchmarks/flash_attention.py --final --base --configs DIR/winners.json` and `python3 benchmarks/flash_attention_sweep.py --ncu DIR/winners.json`.

A candidate is the solution's `Cfg`: (own, step, warps, stages, hopper, tma): the rows each
program owns, the rows streamed past them per step, the launch's warps and pipelining stages,
the Hopper path (head-major program order, row tiles) and TMA descriptors for its tiles. The
first kernels (hopper False) are the solution's FlashAttention-2 kernels as they stand. The
candidates are few and chosen by napkin math (below); each is

1. compiled ahead by --jobs processes at once (Triton's cache on disk then holds it; FlexAttention
   is compiled there too, for benchmarks/flash_attention.py), under a deadline;
2. checked: a forward and backward at a modest shape with the same compile specialization as the
   case (B 1, H 16, S 1024, D 64 causal; B 1, H 32, S 512, D 128), the candidate in its kernel's
   place, against float64 (reference.exact): o, dq, dk, dv finite and normwise within 1e-2, the
   gradients the same bits twice; then at the case itself, its output within 1e-2 of the current
   config's (NaN-poisoned outputs);
3. timed alone at the case: `triton.testing.do_bench_cudagraph`, median of 3.

The winner of each kernel is the fastest, except that a simpler config (the first kernels, then
the Hopper path without TMA) within --simpler (2%) of it is chosen instead: it is the easier text.
A kernel timed alone is not yet a step: confirm a table with benchmarks/flash_attention.py
--final --configs winners.json before pasting it into CONFIGS. On 2026-11-28 (commit 8e9053e)
the sweep compared its candidates with a restructured copy of the first kernels, not with the
kernels as they stood; its leaderboard winners (TMA, head-major) were 3% slower inside a step
than the unchanged first kernels, which therefore stayed; the D 128 winners held (a step 21%
faster). Warp specialization (tl.range(..., warp_specialize=True) on the forward loop) compiled
on sm_90 with Triton 3.6 and ran within 0.3% of the same loop without it: not a candidate now.

Napkin math (H200: ~700 TFLOP/s bf16 dense measured, 4.3 TB/s copy, 60 MB L2). The leaderboard
case (B 1, H 16, S 16384, D 64, causal) is 0.55 TFLOP per 2 matmuls: forward 2, dK/dV 4, dQ 3
(7 in the deterministic backward), ~0.8 ms per 2 matmuls at 700. Per (batch, head) K and V are
2 x 2 MB; 16 heads fit in L2. The wide case (B 4, H 32, S 4096, D 128) is 1.1 TFLOP per 2
matmuls; per head K, V are 2 x 1 MB, but 128 heads' worth is 256 MB: a program order that runs
every head at once (block-major) re-reads them from memory once per program: 4096 forward
programs x 2 MB = 8 GB, ~2 ms at 4.3 TB/s, the size of the kernel itself. Head-major order
reads them about once. Registers: a BLOCK_M x D fp32 accumulator over 128 threads is
BLOCK_M x D / 128 registers per thread (128 x 128: 128, with the 128 x BLOCK_N scores beside it
too many: 8 warps there), dK/dV hold two (dk, dv).
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "solutions" / "13_flash_attention" / "triton" / "flash_attention.py"
REFERENCE = ROOT / "exercises" / "13_flash_attention" / "reference.py"
CASES = {64: dict(name="leaderboard", B=1, H=16, S=16384, D=64, causal=True),
         128: dict(name="wide", B=4, H=32, S=4096, D=128, causal=False)}
# the same compile specialization as the case (H, S and every stride divisible by 16), small
MODEST = {64: dict(B=1, H=16, S=1024, D=64, causal=True),
          128: dict(B=1, H=32, S=512, D=128, causal=False)}
KERNELS = ("fwd", "dkdv", "dq")

# (own, step, warps, stages, hopper, tma), most likely first: the current table, the first
# kernels and the Hopper path at the same tiles, then tiles and pipelining depths around them
# (2026-11-26: 65 configs of the first kernels found nothing faster than today's table).
C = lambda *a: tuple(a) + (False, False)[len(a) - 4:]  # noqa: E731
CANDIDATES = {
    ("fwd", 64): [C(128, 64, 8, 3), C(128, 64, 8, 3, True), C(128, 64, 8, 3, True, True),
                  C(128, 64, 4, 3, True, True), C(128, 128, 8, 3, True, True),
                  C(128, 64, 8, 4, True, True)],
    ("fwd", 128): [C(128, 128, 8, 3, True, True), C(128, 128, 8, 3), C(128, 128, 8, 3, True),
                   C(128, 64, 8, 3, True, True), C(128, 128, 8, 2, True, True),
                   C(128, 64, 4, 3, True, True), C(128, 64, 8, 3, True),
                   C(128, 64, 8, 4, True, True)],
    ("dkdv", 64): [C(64, 64, 4, 3), C(64, 64, 4, 3, True), C(64, 64, 4, 3, True, True),
                   C(128, 64, 8, 3, True, True), C(128, 64, 8, 2, True, True),
                   C(64, 64, 4, 4, True, True), C(64, 32, 4, 4, True, True)],
    ("dkdv", 128): [C(64, 64, 4, 2, True, True), C(64, 64, 4, 2), C(64, 64, 4, 2, True),
                    C(64, 64, 4, 3, True, True), C(128, 64, 8, 2, True, True),
                    C(64, 32, 4, 3, True, True)],
    ("dq", 64): [C(128, 64, 8, 3), C(128, 64, 8, 3, True), C(128, 64, 8, 3, True, True),
                 C(128, 64, 8, 4, True, True), C(128, 32, 4, 4, True, True),
                 C(128, 128, 8, 2, True, True)],
    ("dq", 128): [C(128, 64, 8, 3, True), C(128, 64, 8, 3), C(128, 64, 8, 3, True, True),
                  C(128, 64, 8, 2, True, True), C(128, 128, 8, 2, True, True),
                  C(128, 32, 4, 3, True, True)],
}
# a sound first kernel: the first kernels untuned, 64 x 64 tiles
FIRST = C(64, 64, 4, 2)
# the chosen tables at shapes the cases do not have (each its own compile, done in parallel):
# S not a multiple of any block, S = 1, q, k, v as views of a [B, S, 3, H, D] tensor (TMA
# descriptors over strided rows), causal D 128, fp16: (D, shape, causal, layout, dtype)
AWKWARD = [(64, (1, 2, 1000, 64), True, "dense", "bfloat16"),
           (64, (2, 3, 333, 64), False, "bshd", "bfloat16"),
           (64, (1, 2, 1, 64), True, "dense", "bfloat16"),
           (64, (1, 2, 4096, 64), True, "dense", "float16"),
           (128, (2, 3, 333, 128), False, "dense", "bfloat16"),
           (128, (1, 2, 77, 128), True, "bshd", "bfloat16"),
           (128, (1, 1, 4096, 128), True, "dense", "bfloat16")]

OUT = Path(os.environ.get("OUT", "."))
LOGFILE = None
# FA_SWEEP_SELFTEST=1: the whole sweep on the CPU through Triton's interpreter, tiny shapes (a
# dry run of this script's own logic before a GPU call; the figures mean nothing)
SELFTEST = os.environ.get("FA_SWEEP_SELFTEST") == "1"
DEVICE = "cpu" if SELFTEST else "cuda"
DTYPE = "float16" if SELFTEST else "bfloat16"  # the interpreter's bf16 arithmetic is broken
if SELFTEST:
    os.environ["TRITON_INTERPRET"] = "1"
    CASES = {64: dict(name="leaderboard", B=1, H=2, S=64, D=64, causal=True),
             128: dict(name="wide", B=1, H=2, S=48, D=128, causal=False)}
    MODEST = {64: dict(B=1, H=2, S=32, D=64, causal=True),
              128: dict(B=1, H=2, S=32, D=128, causal=False)}
    _small = lambda c: (16, 16, 1, 1) + tuple(c[4:])  # noqa: E731
    CANDIDATES = {k: list(dict.fromkeys(_small(c) for c in v))[:3] for k, v in CANDIDATES.items()}
    FIRST = (16, 16, 1, 1, False, False)
    AWKWARD = [(64, (1, 2, 21, 64), True, "dense", "float16"),
               (128, (1, 2, 19, 128), False, "bshd", "float16"),
               (64, (1, 1, 1, 64), True, "dense", "float16")]


def sync():
    import torch
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def log(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOGFILE:
        with open(LOGFILE, "a") as f:  # line by line: a run cut off by its limit keeps its log
            f.write(line + "\n")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_solution(path=SOLUTION, name="fa13"):
    fa = load(path, name)
    if SELFTEST:  # the interpreter's tiles, and CONFIGS used for CPU tensors too
        fa.CONFIGS = {D: {k: fa.Cfg(16, 16, 1, 1) for k in KERNELS} for D in CASES}
        fa._config = lambda q: fa.CONFIGS[int(q.shape[-1])]
    return fa


def cfg_text(c) -> str:
    own, step, warps, stages, hopper, tma = c
    return (f"({own},{step},{warps}w,{stages}s" + (",hopper" if hopper else "")
            + (",tma" if tma else "") + ")")


# --- one case's tensors and one kernel's launch ---------------------------------------------------

class Case:
    """The inputs of one case and what the backward kernels read (o, lse, delta): from the
    solution's current forward, or (compile_only) made up, finite, when only a compile is wanted."""

    def __init__(self, fa, case: dict, seed: int = 0, compile_only: bool = False):
        import torch
        self.fa, self.case = fa, case
        shape = (case["B"], case["H"], case["S"], case["D"])
        g = torch.Generator(device=DEVICE).manual_seed(seed)
        self.q, self.k, self.v, self.do = (
            torch.randn(shape, device=DEVICE, generator=g).to(getattr(torch, DTYPE))
            for _ in range(4))
        self.causal, self.scale = case["causal"], 1 / math.sqrt(case["D"])
        if compile_only:
            self.o = torch.randn_like(self.q)
            self.lse = torch.full(shape[:3], 10.0, device=DEVICE)
        else:
            self.o, self.lse = fa._fwd_impl(self.q, self.k, self.v, self.causal, self.scale,
                                            fa._direct)
        self.delta = (self.o.float() * self.do.float()).sum(-1)  # what the delta kernel makes
        self.o2, self.lse2 = torch.empty_like(self.o), torch.empty_like(self.lse)
        self.dq, self.dk, self.dv = (torch.empty_like(self.q) for _ in range(3))

    def launch(self, kernel: str, cfg):
        """A zero-argument call running `kernel` alone with `cfg`; returns what it wrote."""
        fa, c = self.fa, self
        cfg = fa.Cfg(*cfg)
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
        for t in (self.o2, self.lse2, self.dq, self.dk, self.dv):
            t.fill_(float("nan"))


def with_table(fa, D: int, table: dict):
    """Context: fa.CONFIGS[D] = table (Cfg tuples) for the duration."""
    class _W:
        def __enter__(self):
            self.saved = fa.CONFIGS[D]
            fa.CONFIGS[D] = {k: fa.Cfg(*v) for k, v in table.items()}

        def __exit__(self, *a):
            fa.CONFIGS[D] = self.saved
    return _W()


def step_errors(fa, ref, D: int, table: dict, shape: tuple, causal: bool, layout="dense",
                dtype=None, seed=1) -> tuple[list[float], bool]:
    """Forward + backward of flash_attention with `table` at `shape` against float64: the
    normwise errors of (o, dq, dk, dv) (inf where not finite), and whether a second backward
    gave the same gradients bit for bit."""
    import torch
    dt = getattr(torch, dtype or DTYPE)
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    B, H, S, Dh = shape
    if layout == "bshd":  # q, k, v as views of one [B, S, 3, H, D] tensor (a Linear's output)
        qkv = torch.randn(B, S, 3, H, Dh, device=DEVICE, generator=g).to(dt)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    else:
        q, k, v = (torch.randn(shape, device=DEVICE, generator=g).to(dt) for _ in range(3))
    do = torch.randn(shape, device=DEVICE, generator=g).to(dt)
    with with_table(fa, D, table):
        lv = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        o = fa.flash_attention(*lv, causal)
        o.backward(do)
        lv2 = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        fa.flash_attention(*lv2, causal).backward(do)
    same = all(torch.equal(a.grad, b.grad) for a, b in zip(lv, lv2))
    e = [t.detach().double().clone().requires_grad_() for t in (q, k, v)]
    oe = ref.exact(*e, causal)
    oe.backward(do.double())
    errs = []
    for got, want in zip([o] + [t.grad for t in lv], [oe] + [t.grad for t in e]):
        got, want = got.double(), want.double()
        n = want.numel() ** 0.5
        # an exact zero (dq and dk at S = 1: softmax over one key): the RMS of what came out
        scale = want.norm().item() if want.norm().item() > 1e-6 * n else n
        errs.append((got - want).norm().item() / scale
                    if bool(torch.isfinite(got).all()) else float("inf"))
    return errs, same


# --- precompiling in worker processes -------------------------------------------------------------

_WORKER: dict = {}


def _job(job):
    """In a worker process: run one thing once so that Triton (or Inductor) compiles it into its
    cache on disk. Nothing is timed here."""
    import torch
    began = time.time()
    try:
        kind = job[0]
        if kind == "kernel":
            _, D, kernel, cfg = job
            fa = _WORKER.get("fa") or _WORKER.setdefault("fa", load_solution())
            key = ("case", D)
            case = _WORKER.get(key) or _WORKER.setdefault(key, Case(fa, CASES[D],
                                                                     compile_only=True))
            case.launch(kernel, cfg)()
        elif kind == "old":  # the solution before this sweep, at one case: fwd and bwd
            _, D, path = job
            old = load(path, "fa13_old")
            c = CASES[D]
            shape = (c["B"], c["H"], c["S"], c["D"])
            q, k, v, do = (torch.randn(shape, device=DEVICE).to(getattr(torch, DTYPE))
                           for _ in range(4))
            q, k, v = (t.requires_grad_() for t in (q, k, v))
            old.flash_attention(q, k, v, c["causal"]).backward(do)
        elif kind == "awkward":  # one shape's check of the chosen tables (its own compile)
            _, D, shape, causal, layout, dtype, table = job
            fa = load_solution()
            errs, same = step_errors(fa, load(REFERENCE, "ref13"), D, dict(table), shape,
                                     causal, layout, dtype)
            sync()
            return job, None, time.time() - began, (errs, same)
        elif kind == "flex":  # reference.flex as benchmarks/flash_attention.py calls it
            _, D = job
            ref = load(REFERENCE, "ref13")
            c = CASES[D]
            g = torch.Generator(device=DEVICE).manual_seed(0)
            q, k, v, causal, scale = ref.bench_inputs(c, getattr(torch, DTYPE), DEVICE, g)
            ref.flex(q, k, v, causal, None)
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            ref.flex(q, k, v, causal, None).backward(torch.randn_like(q))
        sync()
        return job, None, time.time() - began, None
    except Exception as e:
        return job, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", \
            time.time() - began, None


def in_workers(jobs: list, workers: int, deadline: float, what="precompiled") -> dict:
    """Run the jobs in `workers` fresh processes until the deadline: {job: (error, payload)}."""
    import multiprocessing
    began = time.time()
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    done, results = 0, {}
    try:
        futures = [pool.submit(_job, j) for j in jobs]
        for f in as_completed(futures, timeout=max(5, deadline - time.time())):
            job, err, secs, payload = f.result()
            results[job] = (err, payload)
            done += 1
            if err or secs > 60:
                log(f"  {what} {job[:4]}: {err or 'ok'} ({secs:.0f} s)")
    except Exception as e:  # a timeout: what is missing compiles in the timing process
        log(f"  precompile stopped at the deadline ({type(e).__name__}); {done}/{len(jobs)} done")
    finally:
        for p in list(getattr(pool, "_processes", {}).values()):  # our own workers, by object
            try:
                p.kill()
            except Exception:
                pass
        pool.shutdown(wait=False, cancel_futures=True)
    log(f"{what} {done}/{len(jobs)} jobs with {workers} processes in "
        f"{time.time() - began:.0f} s")
    return results


# --- the sweep ------------------------------------------------------------------------------------

def close(a, b) -> bool:
    import torch
    for x, y in zip(a, b):
        x, y = x.double(), y.double()
        if not bool(torch.isfinite(x).all()) or (x - y).norm() > 1e-2 * y.norm():
            return False
    return True


def bench(run, rep_ms: int, reps: int = 3, grads=None) -> tuple[float, float]:
    """(median over `reps` of do_bench_cudagraph's median, spread (max - min) / median), in us."""
    from triton.testing import do_bench_cudagraph
    out = []
    for _ in range(reps):
        if SELFTEST:
            t0 = time.perf_counter()
            run()
            out.append((time.perf_counter() - t0) * 1e6)
            continue
        t = do_bench_cudagraph(run, rep=rep_ms, grad_to_none=grads, quantiles=[0.5])
        out.append((t[0] if isinstance(t, (list, tuple)) else t) * 1e3)
    out.sort()
    med = out[len(out) // 2]
    return med, (out[-1] - out[0]) / med


def check_candidates(fa, ref, compiled: set, deadline: float) -> dict:
    """Each candidate in its kernel's place at the modest shape: {(kernel, D, cfg): ok}. Only
    what compiled ahead: a compile that failed or hung there is not retried here."""
    ok = {}
    for D in CASES:
        m = MODEST[D]
        base = {k: tuple(v) for k, v in fa.CONFIGS[D].items()}
        for kernel in KERNELS:
            for cfg in CANDIDATES[(kernel, D)]:
                if (D, kernel, cfg) not in compiled:
                    log(f"  check {kernel} D{D} {cfg_text(cfg)}: did not compile ahead, skipped")
                    continue
                if time.time() > deadline:
                    log(f"  check {kernel} D{D} {cfg_text(cfg)}: out of time, not checked")
                    continue
                try:
                    errs, same = step_errors(fa, ref, D, base | {kernel: cfg},
                                             (m["B"], m["H"], m["S"], D), m["causal"])
                    good = max(errs) < 1e-2 and same
                except Exception as e:
                    errs, same, good = [], False, False
                    log(f"  check {kernel} D{D} {cfg_text(cfg)}: failed {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200] if str(e) else ''}")
                ok[(kernel, D, cfg)] = good
                log(f"  check {kernel} D{D} {cfg_text(cfg)}: o dq dk dv "
                    + " ".join(f"{x:.1e}" for x in errs) + f", deterministic {same}"
                    + ("" if good else "  REJECTED"))
    return ok


def sweep_case(fa, D: int, ok: dict, compiled: set, deadline: float, rep_ms: int,
               simpler: float) -> dict:
    import torch
    case = Case(fa, CASES[D])
    current = {k: tuple(v) for k, v in fa.CONFIGS[D].items()}
    name = CASES[D]["name"]
    best, times = {}, {}
    for kernel in KERNELS:
        case.poison()
        want = [t.clone() for t in case.launch(kernel, current[kernel])()]
        results = []
        for cfg in CANDIDATES[(kernel, D)] + ([FIRST] if FIRST not in CANDIDATES[(kernel, D)]
                                               else []):
            if time.time() > deadline:
                log(f"  {name} {kernel} {cfg_text(cfg)}: out of time, not timed")
                continue
            if not (ok.get((kernel, D, cfg)) or (cfg == FIRST and (D, kernel, cfg) in compiled)):
                continue
            try:
                run = case.launch(kernel, cfg)
                case.poison()
                got = run()
                sync()
                if not close(got, want):
                    log(f"  {name} {kernel} {cfg_text(cfg)}: WRONG ANSWER at the case, dropped")
                    continue
                us, spread = bench(run, rep_ms)
            except Exception as e:
                log(f"  {name} {kernel} {cfg_text(cfg)}: failed {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:200] if str(e) else ''}")
                continue
            times[(kernel, cfg)] = us
            if cfg != FIRST:
                results.append((us, cfg))
            log(f"  {name} {kernel} {cfg_text(cfg)}: {us:.1f} us (spread {spread:.1%})"
                + ("  (current table)" if cfg == current[kernel] else "")
                + ("  (first kernel)" if cfg == FIRST else ""))
        if not results:
            best[kernel] = current[kernel]
            continue
        results.sort()
        pick = results[0]
        for us, cfg in results:  # the simplest within `simpler` of the fastest: fewer lines read
            if us <= results[0][0] * (1 + simpler) and cfg[4] + cfg[5] < pick[1][4] + pick[1][5]:
                pick = (us, cfg)
        best[kernel] = pick[1]
        log(f"{name} {kernel}: fastest {cfg_text(results[0][1])} {results[0][0]:.1f} us; "
            f"chosen {cfg_text(pick[1])} {pick[0]:.1f} us")
    del case
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return {"best": best, "times": {f"{k} {cfg_text(c)}": us for (k, c), us in times.items()}}


def awkward_checks(tables: dict, workers: int, deadline: float) -> None:
    """The chosen tables at AWKWARD's shapes, one process each (their compiles in parallel)."""
    jobs = [("awkward", D, shape, causal, layout, dtype,
             tuple((k, tuple(v)) for k, v in tables[D].items()))
            for D, shape, causal, layout, dtype in AWKWARD]
    results = in_workers(jobs, min(workers, len(jobs)), deadline, "awkward check")
    for job in jobs:
        _, D, shape, causal, layout, dtype, _t = job
        err, payload = results.get(job, ("out of time: not checked", None))
        if payload is None:
            log(f"  awkward {shape} causal={causal} {layout} {dtype}: {err}  NOT CHECKED")
            continue
        errs, same = payload
        log(f"  awkward {shape} causal={causal} {layout} {dtype}: o dq dk dv "
            + " ".join(f"{x:.1e}" for x in errs) + f", deterministic {same}"
            + ("" if max(errs) < 1e-2 and same else "  FAILED"))


def sweep(a) -> int:
    import torch
    import triton
    start = time.time()
    deadline = start + a.budget
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (selftest)"
    log(f"device {name}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    log("command: " + " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    fa = load_solution()
    ref = load(REFERENCE, "ref13")
    jobs = [] if SELFTEST else [("flex", D) for D in CASES]
    if a.before:
        jobs += [("old", D, str(Path(a.before).resolve())) for D in CASES]
    jobs += [("kernel", D, k, cfg) for (k, D), cfgs in CANDIDATES.items() for cfg in cfgs]
    jobs += [("kernel", D, k, FIRST) for D in CASES for k in KERNELS
             if FIRST not in CANDIDATES[(k, D)]]
    pre = in_workers(jobs, a.jobs, start + a.budget * a.compile_share)
    compiled = {j[1:] for j, (err, _p) in pre.items() if j[0] == "kernel" and err is None}
    ok = check_candidates(fa, ref, compiled, start + a.budget * (a.compile_share + 0.12))
    tables, everything = {}, {}
    for i, D in enumerate(CASES):
        share = time.time() + (deadline - 60 - time.time()) / (len(CASES) - i)
        r = sweep_case(fa, D, ok, compiled, share, a.rep, a.simpler)
        tables[D], everything[D] = r["best"], r["times"]
    log(f"candidates done in {time.time() - start:.0f} s")
    out = {str(D): {k: list(v) for k, v in t.items()} for D, t in tables.items()}
    (Path(a.out) / "winners.json").write_text(json.dumps(out, indent=1))
    (Path(a.out) / "kernel_times.json").write_text(json.dumps(
        {str(D): t for D, t in everything.items()}, indent=1))
    log("\nCONFIGS = {" + ",\n           ".join(
        f"{D}: dict(" + ", ".join(f"{k}=Cfg{tuple(v)}" for k, v in t.items()) + ")"
        for D, t in tables.items()) + "}")
    awkward_checks(tables, a.jobs, deadline)
    log(f"done in {time.time() - start:.0f} s")
    return 0


# --- Nsight Compute -------------------------------------------------------------------------------

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats",
            "ComputeWorkloadAnalysis")


def ncu_child(configs: str, solution: str) -> None:
    """Inside ncu: per case one warm-up step (compiles), then one profiled forward+backward."""
    import torch
    fa = load(solution, "fa13")
    if configs:
        for D, t in json.loads(Path(configs).read_text()).items():
            fa.CONFIGS[int(D)] = {k: fa.Cfg(*v) for k, v in t.items()}
    for D, c in CASES.items():
        shape = (c["B"], c["H"], c["S"], c["D"])
        q, k, v, do = (torch.randn(shape, device=DEVICE).to(getattr(torch, DTYPE))
                       for _ in range(4))
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        fa.flash_attention(q, k, v, c["causal"]).backward(do)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fa.flash_attention(q, k, v, c["causal"]).backward(do)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del q, k, v, do
        torch.cuda.empty_cache()


def _num(row, key):
    try:
        return float(row.get(key, "").replace(",", ""))
    except ValueError:
        return None


GMMA = "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"


def ncu_readings(text: str) -> list[str]:
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(lines))
    data = [dict(zip(rows[0], r)) for r in rows[2:] if len(r) == len(rows[0])]
    out = []
    for i, row in enumerate(data):
        name = row.get("Kernel Name", "?")
        stalls = sorted(((k.split("stalled_")[1].split("_per_issue")[0], _num(row, k))
                         for k in row if k.startswith("smsp__average_warps_issue_stalled_")
                         and k.endswith("_per_issue_active.ratio") and _num(row, k)
                         and "selected" not in k), key=lambda s: -s[1])[:3]
        f = lambda v, u="%": "n/a" if v is None else f"{v:.1f}{u}"  # noqa: E731
        ns = _num(row, "gpu__time_duration.sum")
        smem = ((_num(row, "launch__shared_mem_per_block_dynamic") or 0)
                + (_num(row, "launch__shared_mem_per_block_static") or 0)) / 1024
        out.append(
            f"[{i}] {name[:40]}: {f(ns / 1e3 if ns else None, ' us')}; tensor pipe "
            f"{f(_num(row, 'sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active'))} "
            f"(wgmma issue {f(_num(row, GMMA))}); "
            f"SM {f(_num(row, 'sm__throughput.avg.pct_of_peak_sustained_elapsed'))}, DRAM "
            f"{f(_num(row, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'))}; occupancy "
            f"{f(_num(row, 'sm__warps_active.avg.pct_of_peak_sustained_active'))} of "
            f"{f(_num(row, 'sm__maximum_warps_per_active_cycle_pct'))}; "
            f"{f(_num(row, 'launch__registers_per_thread'), ' regs')}, {row.get('Block Size')} "
            f"threads, smem {smem:.0f} KiB; stalls " + ", ".join(f"{s} {v:.2f}" for s, v in stalls))
    return out


def ncu(a) -> int:
    solution = a.solution or str(SOLUTION)
    # the Triton kernels and the Gluon ones (_fwd_gluon_kernel, _dkdv_gluon_kernel, ...)
    kernels = "_fwd_kernel|_bwd_delta_kernel|_bwd_dkdv_kernel|_bwd_dq_kernel|_gluon_kernel"
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--target-processes",
           "all", "-k", "regex:" + kernels, "--csv", "--page", "raw", "--print-units", "base"]
    for s in SECTIONS:
        cmd += ["--section", s]
    cmd += ["--metrics", "gpu__time_duration.sum,launch__registers_per_thread"]
    cmd += [sys.executable, str(Path(__file__).resolve()), "--ncu-child", a.ncu or "",
            "--solution", solution]
    log("ncu: " + " ".join(cmd))
    began = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.budget)
    tag = a.tag or "ncu"
    (Path(a.out) / f"{tag}.csv").write_text(p.stdout)
    (Path(a.out) / f"{tag}.err").write_text(p.stderr[-20000:])
    log(f"ncu exit {p.returncode} in {time.time() - began:.0f} s; per case its kernels in "
        f"launch order: fwd, delta, dK/dV, dQ (Triton's or Gluon's; leaderboard, then wide)")
    for line in ncu_readings(p.stdout):
        log("  " + line)
    if p.returncode:
        log(p.stderr[-3000:] + p.stdout[-2000:])
    return p.returncode


def main(argv=None) -> int:
    global LOGFILE
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget", type=float, default=300,
                   help="seconds for compiling, checking and timing (default 300)")
    p.add_argument("--compile-share", type=float, default=0.45,
                   help="fraction of the budget the precompiling may take (0.45)")
    p.add_argument("--jobs", type=int, default=min(14, max(1, (os.cpu_count() or 2) - 2)),
                   help="processes compiling candidates ahead")
    p.add_argument("--rep", type=int, default=20, help="ms of replays per timing (3 timings)")
    p.add_argument("--simpler", type=float, default=0.02,
                   help="how much faster a TMA or warp-specialized config must be (0.02)")
    p.add_argument("--before", help="the solution file before this change: compiled ahead for "
                                    "benchmarks/flash_attention.py --before")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--ncu", metavar="WINNERS_JSON", help="Nsight Compute's reading of the "
                   "solution's kernels with these configs ('' for the file's own)")
    p.add_argument("--solution", help="the solution file for --ncu (default: the solution)")
    p.add_argument("--tag", help="--ncu: the name of its raw CSV under --out")
    p.add_argument("--ncu-child", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    a = p.parse_args(argv)
    if a.ncu_child is not None:
        ncu_child(a.ncu_child, a.solution or str(SOLUTION))
        return 0
    Path(a.out).mkdir(parents=True, exist_ok=True)
    LOGFILE = Path(a.out) / ("flash_attention_ncu.log" if a.ncu is not None
                             else "flash_attention_sweep.log")
    if a.dry_run:  # the plan: (own, step, warps, stages), +hopper, +tma
        fa = load_solution()
        text = lambda c: (f"({c[0]}, {c[1]}, {c[2]}, {c[3]})" + ("+hopper" if c[4] else "")  # noqa
                          + ("+tma" if c[5] else ""))
        for D, c in CASES.items():
            print(f"case {c['name']} (B={c['B']}, H={c['H']}, S={c['S']}, D={D}, "
                  f"causal={c['causal']}): CONFIGS[{D}] = {fa.CONFIGS[D]}")
            for k in KERNELS:
                cfgs = CANDIDATES[(k, D)]
                print(f"  {k}: {len(cfgs)} candidates: " + " ".join(map(text, cfgs)))
        print(f"{sum(map(len, CANDIDATES.values()))} candidates, first kernel {text(FIRST)}, "
              f"compiled by {a.jobs} processes, budget {a.budget:.0f} s")
        return 0
    if a.ncu is not None:
        return ncu(a)
    return sweep(a)


if __name__ == "__main__":
    sys.exit(main())
