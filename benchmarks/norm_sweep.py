"""Norm sweep: the launch configurations of the 06, 08 and 10 Triton solutions (the CONFIG table at the top of each), timed forward, backward and forward+backward at the graded case by CUDA-graph replay, against a copy of the same bytes. On a GPU machine, from the repository root: `python3 benchmarks/norm_sweep.py [--exercise 06,08,10] [--only NAME,...] [--out DIR]`.

A candidate is a named set of changes to a solution's CONFIG (CANDIDATES below; "solution" is
the table as committed). For each exercise, at its graded case (exercise.toml [benchmark]):

1. the copy ceiling: `dst.copy_(src)` moving as many bytes (read + written) as the exercise's
   traffic model counts for the forward, the backward and both;
2. each candidate's outputs and gradients, compared with the committed configuration's
   (grader.judge.check.assert_close at the exercise's bf16 tolerances, dw/db at the tolerance of a
   sum over the rows; for 10 the dropout mask must be identical): a candidate that computes
   something else is reported and not timed;
3. its forward (when it changes a forward setting), its backward alone (the forward run once,
   then torch.autograd.grad with retain_graph) and its forward+backward (grader.common.timing's
   make_step: autograd.grad with a fixed dy), each as many steps captured in one CUDA graph
   and replayed (triton.testing.do_bench_cudagraph's method; here with the capture on the
   stream that ran the forward, which autograd's backward-only replay needs). L2 is not
   flushed: every tensor is ~5x the L2.

Columns: µs per step, GB/s by the traffic model, % of copy (the copy's time for the same bytes
over the candidate's), and fwd+bwd against "solution". Then, with --kernels, each kernel's GPU
time (torch.profiler, eager steps) for "solution" and the fastest candidate, and the table to
paste into the solution. About 90 s per exercise on an H200 for every candidate; --budget
(seconds for the whole run, default 330) drops the last candidates when time runs out.

Selection: --only NAME,... or the environment variable NORM_SWEEP=NAME,...; --set k=v,...
times one more candidate "custom" (e.g. --set bwd_prefetch=true,bwd_per_thread=8).
--cuda07 4x4,1x2 adds 07's CUDA solution built with its backward's shape set at build time
(-DEX07_BWD_VECS=K -DEX07_BWD_BLOCKS=B: K 16-byte vectors per thread, B blocks per SM; 4x4 is
the committed one), each variant built and timed in a process of its own (the library
registers its ops once per process), after a check against the float64 reference. The builds
(~1 min) start first, all at once, and run while the Triton candidates are timed.
--baselines adds the exercise's baselines and peers (torch.compile, Liger, ...), forward+backward
by the same replay, for the "at least as fast as" target (not in the --budget).
--dry-run (or DRY_RUN=1; the default without a GPU) prints the plan and runs every selected
candidate on the CPU interpreter at two small float32 shapes against the committed
configuration, so that a broken candidate is found before GPU time is spent on it.
Writes its log and a JSON of the figures under --out (default: $OUT when set).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the grader's public helpers, when run as a script

EXERCISES = {  # number -> (folder, the Triton solution, its entry point)
    "06": ("06_rmsnorm", "triton/rmsnorm.py", "rmsnorm"),
    "08": ("08_add_rmsnorm", "triton/add_rmsnorm.py", "add_rmsnorm"),
    "10": ("10_layernorm_dropout", "triton/layernorm_dropout.py", "layernorm_dropout"),
}

# name -> changes to the solution's CONFIG, most promising first: a --budget cut drops the last
# ones. A candidate equal to an exercise's committed table, or setting a key its table does not
# have, is skipped there. The keys: *_per_thread (elements of a row per thread: num_warps =
# BLOCK / 32 / this), bwd_programs_per_sm (persistent backward programs, and dw partial rows,
# per SM), bwd_prefetch (the next row's loads in flight during this row's reduction),
# bwd_stages (Triton's own software pipelining of the row loop, through shared memory),
# bwd_evict (eviction_policy of the streamed loads), reduce_* (the dw/db reduction's tile),
# *_maxnreg (10: a register cap per thread, so that more programs fit an SM).
CANDIDATES = {
    "solution": {},
    # 16 warps of 8 elements (the 06 CUDA backward's shape: 512 threads, ~64 registers, 2
    # programs per SM) with the next row prefetched
    "pf-pt8": {"bwd_prefetch": True, "bwd_per_thread": 8},
    # 10 only (its table has maxnreg): the prefetching 16-warp backward held to 64 registers,
    # 2 programs per SM instead of 1; the forward at 8 programs of 4 warps per SM instead of 6-7
    "pf-pt8-r64": {"bwd_prefetch": True, "bwd_per_thread": 8, "bwd_maxnreg": 64},
    "fwd-r64": {"fwd_maxnreg": 64},
    "pt8": {"bwd_per_thread": 8},
    "pf": {"bwd_prefetch": True},
    "pf-pt8-pps2": {"bwd_prefetch": True, "bwd_per_thread": 8, "bwd_programs_per_sm": 2},
    "pt8-pps2": {"bwd_per_thread": 8, "bwd_programs_per_sm": 2},
    "st2-pt8": {"bwd_stages": 2, "bwd_per_thread": 8},
    "st2": {"bwd_stages": 2},
    "st3": {"bwd_stages": 3},
    "pf-pt8-ev": {"bwd_prefetch": True, "bwd_per_thread": 8, "bwd_evict": "evict_first"},
    "ev": {"bwd_evict": "evict_first"},
    "pps2": {"bwd_programs_per_sm": 2},
    "fwd-pt8": {"fwd_per_thread": 8},
    "fwd-pt16": {"fwd_per_thread": 16},
    "fwd-pt32": {"fwd_per_thread": 32},
    "red-64x32w4": {"reduce_rows": 64, "reduce_cols": 32, "reduce_warps": 4},
    "red-128x32w8": {"reduce_rows": 128, "reduce_cols": 32, "reduce_warps": 8},
    "red-512x8w8": {"reduce_rows": 512, "reduce_cols": 8, "reduce_warps": 8},
    "red-1024x4w8": {"reduce_rows": 1024, "reduce_cols": 4, "reduce_warps": 8},
}
# two small shapes per exercise for the CPU check: a row length that is not a power of two
# (masked columns), one that is (10's unmasked EVEN path); rows that the CPU's 4 backward
# programs share unevenly
SMALL = {"06": [{"B": 3, "S": 13, "N": 200}, {"B": 1, "S": 37, "N": 256}],
         "08": [{"M": 39, "N": 200}, {"M": 37, "N": 256}],
         "10": [{"M": 39, "N": 200, "p": 0.25}, {"M": 37, "N": 256, "p": 0.1}]}
LOG: list[str] = []


def log(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.append(line)


def parse_set(text: str) -> dict:
    """--set k=v,k=v: ints, true/false, none, and strings (bwd_evict) as written."""
    out = {}
    for item in filter(None, text.split(",")):
        k, _, v = item.partition("=")
        if v.lower() in ("true", "false"):
            out[k] = v.lower() == "true"
        elif v.lower() == "none":
            out[k] = None
        elif v.lstrip("-").isdigit():
            out[k] = int(v)
        else:
            out[k] = v
    return out


def select(only: str | None, custom: dict | None) -> dict:
    cands = dict(CANDIDATES)
    if custom:
        cands["custom"] = custom
    names = only or os.environ.get("NORM_SWEEP")
    if names:
        wanted = ["solution"] + [n for n in names.split(",") if n and n != "solution"]
        if custom and "custom" not in wanted:
            wanted.append("custom")
        unknown = [n for n in wanted if n not in cands]
        if unknown:
            raise SystemExit(f"norm_sweep.py: unknown candidate(s) {unknown}; known: "
                             f"{', '.join(cands)}")
        cands = {n: cands[n] for n in wanted}
    return cands


@functools.lru_cache(maxsize=None)  # once per process: 06 and 08 register their triton_ops
def load(number: str):
    """(exercise, reference module, solution module, entry point) of one exercise."""
    from grader.common.discover import discover
    from grader.common.pyfile import import_file
    from grader.common.reference import load_reference
    folder, path, entry = EXERCISES[number]
    ex = discover(only=number)[0]
    mod = import_file(ROOT / "solutions" / folder / path, f"norm_sweep_{number}")
    return ex, load_reference(ex), mod, getattr(mod, entry)


def plan(mod, cands: dict) -> list[tuple[str, dict, set]]:
    """(name, full config, modes to time) per candidate that differs from the others."""
    base = dict(mod.CONFIG)
    out, seen = [], set()
    for name, changes in cands.items():
        bad = set(changes) - set(base)
        if bad and name == "custom":
            raise SystemExit(f"norm_sweep.py: --set {sorted(bad)}: the CONFIG of {mod.__name__} "
                             f"does not have them ({sorted(base)}); pick --exercise")
        if bad:  # a setting of another exercise's table (maxnreg: 10 only)
            continue
        cfg = {**base, **changes}
        key = tuple(sorted(cfg.items()))
        if key in seen:
            continue
        seen.add(key)
        changed = {k for k in changes if changes[k] != base[k]}
        modes = {"forward_backward"}
        if name == "solution" or any(k.startswith("fwd_") for k in changed):
            modes.add("forward")
        if name == "solution" or any(not k.startswith("fwd_") for k in changed):
            modes.add("backward")
        out.append((name, cfg, modes))
    return out


def outputs_match(ex, got, want, *, what: str, dropout: bool) -> str | None:
    """None, or why `got` (a step's outputs: first output, then gradients) is not `want`."""
    import torch
    from grader.judge import check
    from grader.judge.testing import sum_tol
    first = want[0]
    rows = first.numel() // first.shape[-1]
    tol = ex.tolerance[str(first.dtype).removeprefix("torch.")]
    names = ["output"] + [f"gradient {i}" for i in range(1, len(want))]
    if dropout and not torch.equal(got[0] == 0, want[0] == 0):
        return f"{what}: another dropout mask (the mask must not depend on the configuration)"
    for name, g, w in zip(names, got, want):
        if w is None:
            continue
        t = sum_tol(tol, rows, w.dtype) if w.dim() == 1 else tol  # dw, db: sums over the rows
        try:
            check.assert_close(g, w.double(), tol=t, dtype=w.dtype, what=f"{what} {name}")
        except check.Mismatch as e:
            return str(e).splitlines()[0]
    return None


def cpu_check(numbers: list[str], cands: dict) -> int:
    """Every candidate on the interpreter at SMALL shapes (float32), against "solution"."""
    import torch
    from grader.submission import interp
    from grader.judge.cases import dy_for
    from grader.common.timing import make_step
    interp.install()
    bad = 0
    for number in numbers:
        ex, ref, mod, fn = load(number)
        base = dict(mod.CONFIG)
        entries = plan(mod, cands)
        for case in SMALL[number]:
            gen = torch.Generator().manual_seed(0)
            args = tuple(getattr(ref, ex.benchmark.inputs)(case, torch.float32, "cpu", gen))
            dy = dy_for(ref, args, ex)
            want = None
            for name, cfg, _modes in entries:
                mod.CONFIG.clear()
                mod.CONFIG.update(cfg)
                got = make_step(fn, args, "forward_backward", ex.benchmark.grad_args, dy)()
                if want is None:
                    want = got
                    continue
                why = outputs_match(ex, got, want, what=f"{number} {name} {case}",
                                    dropout=number == "10")
                log(f"cpu {number} {name:14s} {case}: {why or 'matches the solution'}")
                bad += why is not None
        mod.CONFIG.clear()
        mod.CONFIG.update(base)
    return bad


def replay_ms(step, *, rep_ms: float = 60.0) -> float:
    """GPU ms per call of `step`: calls captured back to back in one CUDA graph, the graph
    replayed 10 times, the median (triton.testing.do_bench_cudagraph's method). Everything,
    the first calls included, runs on one side stream, and the capture is on it too: a
    backward-only step's kernels run on the stream of its forward (autograd's rule), which
    must be the capturing one."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(3):
            step()
        end.record()
        torch.cuda.synchronize()
        n = max(2, min(500, int(rep_ms / max(start.elapsed_time(end) / 3, 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(n):
                step()
        torch.cuda.synchronize()
        times = []
        for _ in range(10):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n)
    del graph
    return statistics.median(times)


def steps(fn, args, grad_args, dy):
    """forward, backward-only and forward+backward steps of `fn` (each a zero-argument call)."""
    import torch
    from grader.common.timing import make_step
    fwd = make_step(fn, args, "forward", grad_args, dy)
    fb = make_step(fn, args, "forward_backward", grad_args, dy)
    held = {}

    def bwd():
        if not held:  # the forward, once, on the stream the replay captures (replay_ms)
            a = list(args)
            leaves = [a[i].detach().requires_grad_(True) for i in grad_args]
            for i, leaf in zip(grad_args, leaves):
                a[i] = leaf
            out = fn(*a)
            held["first"] = out[0] if isinstance(out, (tuple, list)) else out
            held["leaves"] = leaves
        return torch.autograd.grad(held["first"], held["leaves"], dy, retain_graph=True,
                                   allow_unused=True)
    return {"forward": fwd, "backward": bwd, "forward_backward": fb}


def copy_ms(nbytes: int) -> float:
    """The copy of the same bytes: read nbytes / 2, write nbytes / 2 (bf16 elements)."""
    import torch
    src = torch.randn(nbytes // 4, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return replay_ms(lambda: dst.copy_(src))


def kernel_times(step, calls: int = 5) -> list[tuple[str, float]]:
    """(kernel name, GPU us per step) from torch.profiler over `calls` eager steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    out = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0.0)
        if us > 0:
            out.append((e.key, us / calls))
    return sorted(out, key=lambda kv: -kv[1])


def sweep(number: str, cands: dict, deadline: float, kernels: bool,
          baselines: bool) -> dict:
    import torch
    from grader.judge.cases import dy_for, make_inputs
    ex, ref, mod, fn = load(number)
    b = ex.benchmark
    base = dict(mod.CONFIG)
    dtype = getattr(torch, b.dtype)
    fwd_bytes = ref.traffic(b.case, dtype, "forward")["bytes"]
    fb_bytes = ref.traffic(b.case, dtype, "forward_backward")["bytes"]
    nbytes = {"forward": fwd_bytes, "backward": fb_bytes - fwd_bytes, "forward_backward": fb_bytes}
    ceiling = {mode: copy_ms(n) for mode, n in nbytes.items()}
    log(f"\n## {ex.id} (Triton) at {b.case} {b.dtype}: traffic model "
        + ", ".join(f"{m} {n / 1e6:.0f} MB" for m, n in nbytes.items()))
    log("copy of the same bytes: " + ", ".join(
        f"{m} {ms * 1e3:.1f} us ({nbytes[m] / ms / 1e6:.0f} GB/s)" for m, ms in ceiling.items()))
    args = make_inputs(ex, ref, b.case, 1234)
    dy = dy_for(ref, args, ex)
    rows, want, result = [], None, {"exercise": ex.id, "case": b.case, "bytes": nbytes,
                                    "copy_us": {m: v * 1e3 for m, v in ceiling.items()},
                                    "base_config": base, "candidates": {}}
    log("| candidate | fwd us | fwd % copy | bwd us | bwd % copy | fwd+bwd us | GB/s | "
        "% copy | vs solution |")
    log("|---|---|---|---|---|---|---|---|---|")
    solution_fb = None
    for name, cfg, modes in plan(mod, cands):
        if time.perf_counter() > deadline and name != "solution":
            log(f"| {name} | (skipped: --budget reached) |")
            continue
        mod.CONFIG.clear()
        mod.CONFIG.update(cfg)
        entry = {"config": cfg}
        try:
            run = steps(fn, args, b.grad_args, dy)
            got = run["forward_backward"]()
            torch.cuda.synchronize()
            if want is None:
                want = tuple(g.clone() if g is not None else None for g in got)
            else:
                why = outputs_match(ex, got, want, what=name, dropout=number == "10")
                if why:
                    log(f"| {name} | WRONG: {why[:160]} |")
                    result["candidates"][name] = {**entry, "wrong": why}
                    continue
            del got
            us = {m: replay_ms(run[m]) * 1e3 for m in ("forward", "backward", "forward_backward")
                  if m in modes}
        except Exception as e:  # a candidate that does not compile or run: said, not fatal
            log(f"| {name} | FAILED: {type(e).__name__}: {str(e).splitlines()[0][:160]} |")
            result["candidates"][name] = {**entry, "error": f"{type(e).__name__}: {e}"}
            torch.cuda.synchronize()
            if name == "solution":  # nothing to compare the others with
                break
            continue
        if name == "solution":
            solution_fb = us["forward_backward"]

        def cell(m):
            if m not in us:
                return "", ""
            return f"{us[m]:.1f}", f"{100 * ceiling[m] * 1e3 / us[m]:.1f}%"
        f_us, f_pc = cell("forward")
        b_us, b_pc = cell("backward")
        fb = us["forward_backward"]
        log(f"| {name} | {f_us} | {f_pc} | {b_us} | {b_pc} | {fb:.1f} | "
            f"{nbytes['forward_backward'] / fb / 1e3:.0f} | "
            f"{100 * ceiling['forward_backward'] * 1e3 / fb:.1f}% | "
            f"{solution_fb / fb:.3f}x |")
        result["candidates"][name] = {**entry, "us": us}
        rows.append((fb, name, cfg))
    if baselines and solution_fb:
        from grader.judge.baselines import baseline_fns
        from grader.common.timing import make_step
        for bname, bfn in baseline_fns(ex, ref).items():
            if isinstance(bfn, str):
                log(f"| {bname} (baseline) | {bfn} |")
                continue
            try:
                fb = replay_ms(make_step(bfn, args, "forward_backward", b.grad_args, dy)) * 1e3
            except Exception as e:  # a peer not installed, a baseline that fails: said
                log(f"| {bname} (baseline) | FAILED: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:120]} |")
                continue
            log(f"| {bname} (baseline) | | | | | {fb:.1f} | "
                f"{nbytes['forward_backward'] / fb / 1e3:.0f} | "
                f"{100 * ceiling['forward_backward'] * 1e3 / fb:.1f}% | {solution_fb / fb:.3f}x |")
            result.setdefault("baselines_us", {})[bname] = fb
            torch.cuda.synchronize()
    best_fb, best, best_cfg = min(rows) if rows else (None, None, None)
    if kernels and rows:
        for name, cfg in dict.fromkeys([("solution", tuple(base.items())),
                                        (best, tuple(best_cfg.items()))]):
            mod.CONFIG.clear()
            mod.CONFIG.update(dict(cfg))
            per = kernel_times(steps(fn, args, b.grad_args, dy)["forward_backward"])
            log(f"kernels of one fwd+bwd step, {name} (torch.profiler, eager): " + "; ".join(
                f"{k[:60]} {v:.1f} us" for k, v in per[:8]))
            result["candidates"][name]["kernels_us"] = dict(per)
    mod.CONFIG.clear()
    mod.CONFIG.update(base)
    if best is not None:
        log(f"fastest fwd+bwd: {best} ({best_fb:.1f} us, "
            f"{100 * ceiling['forward_backward'] * 1e3 / best_fb:.1f}% of copy); its table:")
        log("CONFIG = {\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in best_cfg.items()) + "}")
        result["best"] = best
    del args, dy, want
    torch.cuda.empty_cache()
    return result


def cuda07_worker(variant: str) -> int:
    """One build of 07's CUDA track with its backward's shape set (KxB), timed as a candidate;
    prints one line RESULT {json} for the parent (cuda07). "KxB:build" builds only (the parent
    starts those first, all at once, while it times the Triton candidates)."""
    variant, _, build_only = variant.partition(":")
    import tempfile
    import torch
    from grader.judge import check
    from grader.submission.build import toolchain_env, track_options
    from grader.judge.cases import dy_for, make_inputs
    from grader.common.discover import discover
    from grader.common.pyfile import import_file
    from grader.common.reference import load_reference
    from grader.judge.testing import expected_grads, sum_tol
    k, nblocks = (int(v) for v in variant.split("x"))
    ex = discover(only="07")[0]
    track, b, ref = ex.tracks["cuda"], ex.benchmark, load_reference(ex)
    includes = toolchain_env()  # before cpp_extension reads CUDA_HOME
    extra_includes, flags = track_options(track)
    from torch.utils import cpp_extension
    folder = ROOT / "solutions" / ex.id / "cuda"
    out = Path(tempfile.gettempdir()) / f"norm_sweep_07_{k}x{nblocks}"
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    cpp_extension.load(name=f"ex07_sweep_{k}x{nblocks}",
                       sources=[str(folder / f) for f in track.sources],
                       build_directory=str(out), extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", "-lineinfo", f"-DEX07_BWD_VECS={k}",
                                          f"-DEX07_BWD_BLOCKS={nblocks}"] + flags,
                       extra_include_paths=[str(ROOT / "include")] + includes + extra_includes,
                       is_python_module=False, verbose=False)
    built = time.perf_counter() - started
    if build_only:
        print(f"BUILT {variant} in {built:.0f} s", flush=True)
        return 0
    fn = getattr(import_file(folder / track.module, "norm_sweep_07"), b.call)
    dtype = getattr(torch, b.dtype)
    fwd_bytes = ref.traffic(b.case, dtype, "forward")["bytes"]
    fb_bytes = ref.traffic(b.case, dtype, "forward_backward")["bytes"]
    nbytes = {"forward": fwd_bytes, "backward": fb_bytes - fwd_bytes, "forward_backward": fb_bytes}
    args = make_inputs(ex, ref, b.case, 1234)
    dy = dy_for(ref, args, ex)
    run = steps(fn, args, b.grad_args, dy)
    got = run["forward_backward"]()
    (want_y,), want = expected_grads(ref.reference, *args, wrt=b.grad_args, dy=dy)
    tol = ex.tolerance[b.dtype]
    rows = got[0].numel() // got[0].shape[-1]
    wrong = None
    for name, g, w in zip(("y", "dx", "dw", "db"), got, (want_y, *want)):
        try:
            check.assert_close(g, w, tol=sum_tol(tol, rows, dtype) if w.dim() == 1 else tol,
                               dtype=dtype, what=name)
        except check.Mismatch as e:
            wrong = str(e).splitlines()[0]
            break
    del got, want_y, want
    result = {"variant": variant, "build_s": built, "wrong": wrong}
    if not wrong:
        result["us"] = {m: replay_ms(run[m]) * 1e3 for m in run}
        result["copy_us"] = {m: copy_ms(n) * 1e3 for m, n in nbytes.items()}
        result["bytes"] = nbytes
        result["kernels_us"] = dict(kernel_times(run["forward_backward"]))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def cuda07_builds(variants: list[str]) -> list:
    """Start every variant's build at once, each in a process of its own (cuda07_worker)."""
    import subprocess
    return [subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--cuda07-worker",
                              f"{v}:build"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for v in variants]


def cuda07(variants: list[str], builds: list) -> dict:
    """Each variant in a process of its own (cuda07_worker); one table row each."""
    import subprocess
    for v, proc in zip(variants, builds):
        out, err = proc.communicate(timeout=900)
        log(out.strip() or f"build of {v} failed (rc {proc.returncode}): "
            f"{(err.strip().splitlines() or ['?'])[-1][:300]}")
    log("\n## 07_layernorm (CUDA), the backward's shape set at build time "
        "(K vectors per thread x B blocks per SM; 4x4 is the committed one)")
    log("| variant | build s | fwd us | bwd us | bwd % copy | fwd+bwd us | % copy | "
        "kernels of one fwd+bwd step |")
    log("|---|---|---|---|---|---|---|---|")
    results = {}
    for v in variants:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--cuda07-worker", v],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")]
        if r.returncode or not line:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            log(f"| {v} | FAILED (rc {r.returncode}): {tail[:200]} |")
            results[v] = {"error": r.stderr[-4000:]}
            continue
        res = json.loads(line[-1][len("RESULT "):])
        results[v] = res
        if res["wrong"]:
            log(f"| {v} | {res['build_s']:.0f} | WRONG: {res['wrong'][:160]} |")
            continue
        us, cp = res["us"], res["copy_us"]
        kern = "; ".join(f"{k[:40]} {t:.1f}" for k, t in list(res["kernels_us"].items())[:5])
        log(f"| {v} | {res['build_s']:.0f} | {us['forward']:.1f} | {us['backward']:.1f} | "
            f"{100 * cp['backward'] / us['backward']:.1f}% | {us['forward_backward']:.1f} | "
            f"{100 * cp['forward_backward'] / us['forward_backward']:.1f}% | {kern} |")
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exercise", default="06,08,10",
                   help="some of 06, 08, 10 (default all); none: only --cuda07")
    p.add_argument("--only", help="candidates by name, comma-separated (solution always runs)")
    p.add_argument("--set", dest="custom", type=parse_set, default=None,
                   help="one more candidate, 'custom': k=v,k=v changes to CONFIG")
    p.add_argument("--budget", type=float, default=330.0,
                   help="seconds for the whole run: the last candidates are dropped past it")
    p.add_argument("--baselines", action="store_true",
                   help="also time the exercise's baselines and peers (eager, torch.compile, "
                        "Liger...) forward+backward; torch.compile adds ~1 min per exercise")
    p.add_argument("--no-kernels", dest="kernels", action="store_false",
                   help="skip the per-kernel times (torch.profiler)")
    p.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT")
                   else None, help="folder for norm_sweep.txt and norm_sweep.json")
    p.add_argument("--cuda07", help="07 CUDA backward shapes KxB to build and time, e.g. 4x4,1x2")
    p.add_argument("--cuda07-worker", help=argparse.SUPPRESS)
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan and check the candidates on the CPU interpreter")
    a = p.parse_args(argv)
    if a.cuda07_worker:
        return cuda07_worker(a.cuda07_worker)
    variants = [v.strip() for v in (a.cuda07 or "").split(",") if v.strip()]
    if [v for v in variants if not all(x.isdigit() for x in v.split("x")) or v.count("x") != 1]:
        p.error("--cuda07: variants as KxB, e.g. 4x4,1x2")
    numbers = [n.strip() for n in a.exercise.split(",") if n.strip() and n.strip() != "none"]
    if [n for n in numbers if n not in EXERCISES]:
        p.error(f"--exercise: some of {', '.join(EXERCISES)}")
    cands = select(a.only, a.custom)
    import torch
    dry = a.dry_run or os.environ.get("DRY_RUN") or not torch.cuda.is_available()
    if dry:
        # the interpreter, before anything imports triton (the solutions do)
        os.environ.setdefault("TRITON_INTERPRET", "1")
        for number in numbers:
            _ex, _ref, mod, _fn = load(number)
            for name, cfg, modes in plan(mod, cands):
                changes = {k: v for k, v in cfg.items() if v != mod.CONFIG[k]}
                log(f"plan {number} {name:14s} times {', '.join(sorted(modes))}: "
                    f"{changes or 'the committed CONFIG'}")
        log("+ python3 benchmarks/norm_sweep.py --exercise " + (",".join(numbers) or "none")
            + (f" --only {a.only}" if a.only else "")
            + (f" --cuda07 {','.join(variants)}" if variants else ""))
        for v in variants:
            k, nblocks = v.split("x")
            log(f"plan 07 cuda {v}: built with -DEX07_BWD_VECS={k} -DEX07_BWD_BLOCKS={nblocks}, "
                f"times backward, forward, forward_backward (needs a GPU: not run here)")
        bad = cpu_check(numbers, cands)
        log("cpu check: " + (f"{bad} candidate(s) WRONG" if bad
                             else "every candidate computes what the solution does"))
        return 1 if bad else 0
    started = time.perf_counter()
    builds = cuda07_builds(variants)  # nvcc on the CPU while the GPU times the Triton ones
    log(f"# norm sweep on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"candidates: {', '.join(cands)}")
    results = []
    for i, number in enumerate(numbers):
        # each exercise gets an equal share of what is left of the budget
        left = a.budget - (time.perf_counter() - started)
        deadline = time.perf_counter() + left / (len(numbers) - i)
        results.append(sweep(number, cands, deadline, a.kernels, a.baselines))
    if variants:
        results.append({"exercise": "07_layernorm", "track": "cuda",
                        "variants": cuda07(variants, builds)})
    log(f"\n({time.perf_counter() - started:.0f} s)")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "norm_sweep.txt").write_text("\n".join(LOG) + "\n")
        (a.out / "norm_sweep.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
