"""Benchmark: time a track against its baselines, hold it to this GPU's measured ceilings.

How (ANCHORS.md, "How to measure"): `triton.testing.do_bench` warms up, flushes L2 before every
repetition and times with CUDA events; we keep the median and the 20th-80th percentile spread.
The ceilings (device copy bandwidth; bf16 and fp32 matmul rates) are measured once per GPU and
cached. Two guards keep a timing honest:
  - after timing, the op runs on fresh inputs and its output is checked against the float64
    reference (a cached or deferred result fails here);
  - wall-clock time of back-to-back calls ending in a device-wide synchronize must agree with
    the event time: work left running on a side stream "escapes" the events, not the wall clock.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from grader.discover import Exercise, Track
from grader.reference import load_reference
from grader.score import credit, threshold_value

CEILING_NAMES = {"bandwidth": ("copy bandwidth", "GB/s"),
                 "matmul_bf16": ("bf16 matmul rate", "TFLOP/s"),
                 "matmul_fp32": ("fp32 matmul rate", "TFLOP/s")}
QUANTILES = (0.2, 0.5, 0.8)
ESCAPE_RATIO, ESCAPE_SLACK_MS = 1.3, 0.05


# --- arithmetic (pure: tested on the CPU) ------------------------------------------------------

def rate(model: dict, ms: float, ceiling: str) -> float:
    """GB/s (bandwidth ceiling) or TFLOP/s (matmul ceilings) achieved in `ms` milliseconds."""
    seconds = ms * 1e-3
    return model["bytes"] / seconds / 1e9 if ceiling == "bandwidth" else model["flops"] / seconds / 1e12


def escaped(event_ms: float, wall_ms: float) -> bool:
    """Did work escape the timed events (wall time per call well above the event time)?"""
    return wall_ms > ESCAPE_RATIO * event_ms + ESCAPE_SLACK_MS


def stats(quantiles: list[float]) -> dict:
    p20, p50, p80 = quantiles
    return {"ms": p50, "p20": p20, "p80": p80}


def ceiling_cache_path(cache_dir: Path, device_name: str, torch_version: str) -> Path:
    safe = "".join(c if c.isalnum() else "-" for c in f"{device_name}-{torch_version}")
    return cache_dir / "ceilings" / f"{safe}.json"


# --- timing (GPU) ------------------------------------------------------------------------------

def time_fn(fn, *, grad_to_none=None, rep_ms: int = 200, warmup_ms: int = 50) -> dict:
    """The one timing helper: median and spread of `fn` in ms, L2 flushed between runs."""
    import triton.testing
    fn()  # first call outside the timing: compilation, autotuning, lazy init
    q = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none,
                                quantiles=list(QUANTILES))
    return stats(q)


def wall_ms(fn, *, budget_ms: float, event_ms: float, grad_to_none=None) -> float:
    """Wall-clock ms per call over back-to-back calls, ending in a device-wide synchronize.
    Gradients are reset as do_bench does (accumulating them would add a pass per call)."""
    import torch
    n = max(3, min(200, int(budget_ms / max(event_ms, 1e-3))))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        for t in grad_to_none or ():
            t.grad = None
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / n


def measure_ceilings(cache_dir: Path) -> dict:
    """This GPU's copy bandwidth and matmul rates, measured once and cached per device."""
    import torch
    name = torch.cuda.get_device_name()
    path = ceiling_cache_path(cache_dir, name, torch.__version__)
    if path.exists():
        return json.loads(path.read_text())
    src = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB, far past L2
    dst = torch.empty_like(src)
    copy = time_fn(lambda: dst.copy_(src))
    src = dst = None  # free 2 GiB before the matmuls
    out = {"device": name, "torch": torch.__version__,
           "bandwidth": rate({"bytes": 2 * (1 << 30)}, copy["ms"], "bandwidth")}
    n = 8192
    for key, dtype in (("matmul_bf16", torch.bfloat16), ("matmul_fp32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32: what CUDA cores can do
        t = time_fn(lambda: a @ b, rep_ms=300)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        out[key] = rate({"flops": 2 * n ** 3}, t["ms"], key)
        a = b = None
    torch.cuda.empty_cache()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    return out


def baseline_fns(exercise: Exercise, ref) -> dict:
    """name -> callable, or name -> an error string for a baseline that cannot run here."""
    import torch
    torch._dynamo.config.cache_size_limit = 64  # one compile per swept shape
    fns = {}
    b = exercise.benchmark
    for name in b.baselines + b.peers:
        if name == "eager":
            fns[name] = ref.reference
        elif name == "compile":
            # static shapes: one specialized compile per swept shape (measure() resets dynamo
            # per case), not the slower dynamic-shape kernels dynamo switches to by itself
            fns[name] = torch.compile(ref.reference, dynamic=False)
        elif hasattr(ref, name):
            fns[name] = getattr(ref, name)
        else:
            fns[name] = f"reference.py defines no function {name!r}"
    return fns


class Case:
    """One benchmark case: fresh inputs, and a step function per mode."""

    def __init__(self, exercise: Exercise, ref, case: dict, seed: int = 0):
        import torch
        b = exercise.benchmark
        self.b, self.ref, self.case = b, ref, case
        self.dtype = getattr(torch, b.dtype)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.args = ref.bench_inputs(case, self.dtype, "cuda", gen)
        self.dy = None

    def step(self, fn, mode: str):
        """A zero-argument callable running `fn` once in `mode`, and the grads to reset."""
        import torch
        if mode == "forward":
            args = self.args
            return (lambda: fn(*args)), None
        args = list(self.args)
        leaves = []
        for i in self.b.grad_args:
            args[i] = args[i].detach().requires_grad_(True)
            leaves.append(args[i])
        if self.dy is None:
            with torch.no_grad():
                out = fn(*self.args)
            first = out[0] if isinstance(out, (tuple, list)) else out
            self.dy = torch.randn_like(first)

        def run():
            out = fn(*args)
            first = out[0] if isinstance(out, (tuple, list)) else out
            first.backward(self.dy)
        return run, leaves


def _time_impl(case: Case, fn, mode: str, *, graded: bool) -> dict:
    run, leaves = case.step(fn, mode)
    t = time_fn(run, grad_to_none=leaves, rep_ms=200 if graded else 100)
    if graded:  # the sweep only draws the curve; the graded case is also cross-checked
        t["wall_ms"] = wall_ms(run, budget_ms=200, event_ms=t["ms"], grad_to_none=leaves)
    return t


def check_after_timing(exercise: Exercise, case: Case, fn, seed: int) -> str | None:
    """Run `fn` on fresh inputs; None if it matches the float64 reference, else why not."""
    import torch
    from grader.check import Mismatch, assert_close
    fresh = Case(exercise, case.ref, case.case, seed=seed)
    out = fn(*fresh.args)  # no synchronize: a result deferred to a side stream shows as wrong
    args64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in fresh.args]
    with torch.no_grad():
        expected = case.ref.reference(*args64)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    exps = expected if isinstance(expected, (tuple, list)) else (expected,)
    tol = exercise.tolerance[exercise.benchmark.dtype]
    try:
        for o, e in zip(outs, exps):
            if e.is_floating_point():
                assert_close(o, e, tol=tol, dtype=o.dtype, what="output after timing")
    except Mismatch as m:
        return str(m)
    finally:
        del fresh, out, expected, args64
    return None


def measure(exercise: Exercise, ref, impls: dict, case: dict, *, ceilings: dict,
            baselines: dict | None = None, check_seed: int | None = 1) -> dict:
    """Time each named implementation (and the baselines) at `case`, in every mode. With a
    check_seed (the graded case) it is cross-checked and its output re-checked after timing."""
    graded = check_seed is not None
    import torch
    b = exercise.benchmark
    bench_case = Case(exercise, ref, case)
    torch._dynamo.reset()  # each case compiles afresh: no cache or guard state from the last one
    figures = {}
    for mode in b.modes:
        model = ref.traffic(case, bench_case.dtype, mode)
        row = {"model": model, "impls": {}, "baselines": {}}
        for name, fn in impls.items():
            t = _time_impl(bench_case, fn, mode, graded=graded)
            t["rate"] = rate(model, t["ms"], b.ceiling)
            t["fraction"] = t["rate"] / ceilings[b.ceiling]
            t["escaped"] = graded and escaped(t["ms"], t["wall_ms"])
            row["impls"][name] = t
        for name, fn in (baselines or {}).items():
            if isinstance(fn, str):
                row["baselines"][name] = {"error": fn}
                continue
            try:
                t = _time_impl(bench_case, fn, mode, graded=graded)
                t["rate"] = rate(model, t["ms"], b.ceiling)
                row["baselines"][name] = t
            except ImportError as e:
                row["baselines"][name] = {"error": f"not installed ({e})"}
            except Exception as e:  # a baseline that fails is reported; the run goes on
                row["baselines"][name] = {"error": f"failed: {type(e).__name__}: {str(e)[:200]}"}
        figures[mode] = row
        torch.cuda.synchronize()
    checks = {}
    if check_seed is not None:
        for name, fn in impls.items():
            checks[name] = check_after_timing(exercise, bench_case, fn, seed=check_seed)
    del bench_case
    torch.cuda.empty_cache()
    return {"case": case, "figures": figures, "checks": checks}


# --- grading one track (called by the worker) --------------------------------------------------

def grade_performance(exercise: Exercise, track: Track, impl, record) -> None:
    """Time one track at the graded case against the baselines; record the performance event."""
    import torch
    from grader.build import CACHE
    if exercise.benchmark is None:
        return
    if not torch.cuda.is_available():
        record(event="performance", status="needs a GPU")
        return
    ceilings = measure_ceilings(CACHE)
    ref = load_reference(exercise)
    m = measure(exercise, ref, {"yours": getattr(impl, exercise.benchmark.call)},
                exercise.benchmark.case, ceilings=ceilings, baselines=baseline_fns(exercise, ref))
    record(event="performance", **summarize(exercise, m, ceilings))


def summarize(exercise: Exercise, m: dict, ceilings: dict, name: str = "yours") -> dict:
    """The performance event: figures for `name`, speedups, thresholds and credit."""
    b = exercise.benchmark
    label, unit = CEILING_NAMES[b.ceiling]
    figures, warnings = {}, []
    for mode, row in m["figures"].items():
        t = dict(row["impls"][name])
        if t.get("escaped"):
            warnings.append(f"{mode}: wall-clock {t['wall_ms'] * 1e3:.0f} us per call vs "
                            f"{t['ms'] * 1e3:.0f} us by events: work escaped the timed region "
                            f"(a side stream?); the wall-clock time is used")
            t["ms"] = t["wall_ms"]
            t["rate"] = rate(row["model"], t["ms"], b.ceiling)
            t["fraction"] = t["rate"] / ceilings[b.ceiling]
        t["baselines"] = row["baselines"]
        t["speedup"] = {bn: bt["ms"] / t["ms"] for bn, bt in row["baselines"].items() if "ms" in bt}
        figures[mode] = t
    problem = m["checks"].get(name)
    thresholds, credits = [], []
    for th in b.thresholds:
        value = None if problem else threshold_value(th, figures)
        c = credit(value, th.pass_at, th.full_at)
        credits.append(c)
        text = "n/a" if value is None else (f"{100 * value:.1f}% of {label}" if th.metric ==
                                            "fraction_of_ceiling" else f"{value:.2f}x")
        thresholds.append({"label": f"{th.mode} " + ("fraction of " + label if th.metric ==
                                                     "fraction_of_ceiling" else
                                                     f"speedup over {th.baseline}"),
                           "value": value, "value_text": text, "pass": th.pass_at,
                           "full": th.full_at, "credit": c})
    out = {"status": "measured", "case": m["case"], "dtype": b.dtype, "ceiling_name": label,
           "ceiling_unit": unit, "ceiling_value": ceilings[b.ceiling], "figures": figures,
           "thresholds": thresholds, "credit": sum(credits) / len(credits) if credits else None,
           "warnings": warnings}
    if problem:
        out["warnings"].append("the output after timing did not match the reference, so no "
                               "performance credit: " + problem.splitlines()[0])
    return out


# --- make bench: the side-by-side sweep --------------------------------------------------------

def bench_command(exercises, tree: Path, out_dir: Path) -> int:
    """Run each exercise's sweep in a worker of its own, then write JSON, Markdown and a plot."""
    import subprocess
    import sys
    import torch
    from grader.discover import ROOT
    if not torch.cuda.is_available():
        print("make bench needs a GPU: there is none here (nothing to time).")
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for ex in exercises:
        if ex.benchmark is None:
            continue
        part = out_dir / f"{ex.id}.json"
        print(f"benchmarking {ex.id} ...", flush=True)
        code = subprocess.call([sys.executable, "-m", "grader.benchmark", str(tree), ex.id,
                                str(part)], cwd=ROOT)
        if code != 0 or not part.exists():
            results.append({"exercise": ex.id, "error": f"the benchmark worker exited with {code}"})
        else:
            results.append(json.loads(part.read_text()))
            part.unlink()
        md = _write_bench(out_dir, tree, results)  # after each exercise: a cut-off run keeps some
    print(md)
    print(f"wrote {out_dir}/bench.json, bench.md, bench.png")
    return 0


def _write_bench(out_dir: Path, tree: Path, results: list) -> str:
    import torch
    from grader.report import bench_markdown, bench_plot
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "tree": str(tree.name)}
    data = {"meta": meta, "exercises": results}
    (out_dir / "bench.json").write_text(json.dumps(data, indent=2) + "\n")
    md = bench_markdown(data)
    (out_dir / "bench.md").write_text(md)
    bench_plot(data, out_dir / "bench.png")
    return md


def bench_exercise(tree: Path, exercise: Exercise) -> dict:
    """The sweep for one exercise: every track of `tree`, the baselines and peers."""
    from grader.build import CACHE
    from grader.loader import load_track
    ceilings = measure_ceilings(CACHE)
    ref = load_reference(exercise)
    b = exercise.benchmark
    impls, errors = {}, {}
    for track in exercise.tracks.values():
        try:
            impls[track.name] = getattr(load_track(tree, exercise, track), b.call)
        except Exception as e:
            errors[track.name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    baselines = baseline_fns(exercise, ref)
    cases = []
    for case in list(b.sweep) or [b.case]:
        cases.append(measure(exercise, ref, impls, case, ceilings=ceilings, baselines=baselines,
                             check_seed=None))
    graded = [measure(exercise, ref, impls, b.case, ceilings=ceilings, baselines=baselines)
              for _ in range(2)]  # twice: the repeatability of the medians, shown
    return {"exercise": exercise.id, "ceiling": b.ceiling, "ceiling_value": ceilings[b.ceiling],
            "ceilings": ceilings, "dtype": b.dtype, "graded_case": b.case, "sweep": cases,
            "graded": graded, "load_errors": errors}


if __name__ == "__main__":
    import sys
    from grader.discover import EXERCISES, load_exercise
    tree_arg, exercise_id, out = sys.argv[1:4]
    res = bench_exercise(Path(tree_arg).resolve(), load_exercise(EXERCISES / exercise_id))
    Path(out).write_text(json.dumps(res, indent=2))
