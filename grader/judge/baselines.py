"""Baselines: what a track is timed against, all trusted code timed in the judge's own process.

The eager reference, torch.compile of it, native ops and peers (Liger-Kernel, when installed):
functions of the exercise's reference.py named in its [benchmark] (grader.common.discover). Besides
making and timing them, two caches: the compiled baselines warmed ahead on this GPU
(`warm_baselines`, `warm_marker`), and their timings shared by the tracks of one grade, or kept
across runs under QUICK (`baseline_times`). The judge writes both; a submission cannot.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch
import triton

from grader.common.paths import BASELINES, warm_marker
from grader.common.reference import load_reference
from grader.common.settings import current
from grader.common.timing import host_ms, make_step, time_step
from grader.judge.alone import SETTLE_S, Watch, alone, shared_problem
from grader.judge.cases import dy_for, fresh_seed, make_inputs, warm_fake_tensors


def _compiled(fn):
    """A baseline under torch.compile: static shapes, one specialized compile per swept shape
    (dynamo is reset per case), not the slower dynamic-shape kernels dynamo switches to."""
    torch._dynamo.config.cache_size_limit = 64  # one compile per swept shape
    return torch.compile(fn, dynamic=False)


class _CompiledLater:
    """_compiled(fn), made at the first call. Making it imports dynamo and Inductor (~8 s on
    the GPU hosts): a QUICK timing whose baselines' times come from the cache never calls it,
    so never pays that."""

    def __init__(self, fn):
        self.fn, self.compiled = fn, None

    def __call__(self, *args, **kwargs):
        if self.compiled is None:
            self.compiled = _compiled(self.fn)
        return self.compiled(*args, **kwargs)


def baseline_fns(exercise, ref, *, lazy: bool = False) -> dict:
    """name -> callable, or name -> an error string for a baseline that cannot run here.
    `lazy`: the torch.compile'd ones are made at their first call (_CompiledLater)."""
    fns = {}
    b = exercise.benchmark
    for name in b.baselines + b.peers:
        if name == "eager":
            fns[name] = ref.reference
        elif name == "compile" or name.startswith("compile:"):
            what = name.partition(":")[2] or "reference"
            fns[name] = ((_CompiledLater if lazy else _compiled)(getattr(ref, what))
                         if hasattr(ref, what) else f"reference.py defines no function {what!r}")
        elif hasattr(ref, name):
            fns[name] = getattr(ref, name)
        else:
            fns[name] = f"reference.py defines no function {name!r}"
    return fns


def time_baselines(exercise, ref, case, mode, fns, *, graded=True) -> dict:
    """Each baseline's GPU time at `case` (timing.time_step: graph replay, as the submission's
    op; a baseline that cannot be captured is timed by events and says so), with its host time
    at the graded case."""
    b = exercise.benchmark
    args = make_inputs(exercise, ref, case, fresh_seed())
    dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
    out = {}
    for name, fn in fns.items():
        if isinstance(fn, str):
            out[name] = {"error": fn}
            continue
        began = time.perf_counter()
        try:
            run = make_step(fn, args, mode, b.grad_args, dy)
            t = time_step(run, rep_ms=200 if graded else 100)
            if "capture_error" in t:
                e = t.pop("capture_error")
                t["capture_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            if graded:
                t["host_ms"] = host_ms(run)
            out[name] = t
        except ImportError as e:
            out[name] = {"error": f"not installed ({e})"}
        except Exception as e:  # a baseline that fails is reported; the run goes on
            out[name] = {"error": f"failed: {type(e).__name__}: {str(e)[:200]}"}
        torch.cuda.synchronize()
        _trace(f"{mode} baseline {name} timed", began)
    return out


def _trace(what: str, began: float) -> None:
    """A line of the judge's timing trace (grader.judge.measure; Settings.keep_logs keeps it)."""
    print(f"[timing]     {what}: {time.perf_counter() - began:.2f} s", flush=True)


def warm_baselines(exercise) -> tuple[float, tuple | None]:
    """Compile the exercise's torch.compile baselines (Benchmark.compiles) at the graded case,
    once per mode, and run each once (the peers too): Inductor's on-disk caches (FX graphs,
    AOT autograd, Triton kernels) then hold them, and a later compile of the same code is a
    cache hit (seconds instead of tens of seconds). Nothing is timed here; it runs while other
    tracks' checks share the GPU. When all compiled, leaves warm_marker. Where this GPU keeps
    every mode's figures, only the peers run: the gate re-times what is kept, never a compiled
    baseline. Returns (the seconds it took, (reference, every baseline's callable, the compiled
    ones compiled in this process) for time_warmed_baselines, or None where there is nothing
    to time)."""
    start = time.perf_counter()
    b = exercise.benchmark
    if b is None or not torch.cuda.is_available():
        return 0.0, None
    ref = load_reference(exercise)
    lazy = baseline_fns(exercise, ref, lazy=True)
    # figures kept on this GPU for every mode: the gate re-times them (_revalidated), which
    # never re-times a compiled baseline, so compiling them here would be for nothing (the
    # again run: the warming judges were still compiling 29 s after the checks had ended);
    # one that must be timed afresh after all is compiled at its first call there
    kept = all((p := _cached_at(exercise, m, lazy, BASELINES)) is not None and p.is_file()
               for m in b.modes)
    fns = lazy if kept else baseline_fns(exercise, ref)
    torch._dynamo.reset()
    failed = not kept and any(isinstance(fn, str) for n, fn in fns.items() if b.compiles(n))
    for mode in b.modes:
        args = make_inputs(exercise, ref, b.case, fresh_seed())
        try:
            dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
        except Exception:  # its fallback runs the reference for real, beside the checks' memory
            failed = True  # (13's S x S may not fit): the timing phase compiles this mode's
            continue       # baselines at their first call
        for name, fn in fns.items():
            # the peers too: Liger-Kernel's first call JIT-compiles its Triton kernels (7-8 s on
            # the GPU host), better done beside the checks than at the timing's turn
            if isinstance(fn, str) or not ((b.compiles(name) and not kept) or name in b.peers):
                continue
            try:
                make_step(fn, args, mode, b.grad_args, dy)()
            except Exception:  # the timing phase reports a baseline that fails (a peer not
                failed = failed or b.compiles(name)  # installed is no reason to warm again)
        del args, dy
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if not failed and not kept:
        marker = warm_marker(exercise, torch.cuda.get_device_name())
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{time.perf_counter() - start:.1f} s\n")
    return round(time.perf_counter() - start, 1), (ref, fns)


def time_warmed_baselines(exercise, ref, fns) -> float:
    """At the warming judge's turn on the GPU (grader.run.grade opens its gate before the
    exercise's first timing): every baseline's figures, per mode, into this grade's run cache
    (baseline_times), with the callables warm_baselines compiled. The tracks' timing judges then
    read them there: a fresh judge compiling the baselines again (dynamo's trace, Inductor's
    cache read: 5-15 s a baseline and mode on the GPU host) was most of a cold grade's timing.
    Returns the seconds it took."""
    start = time.perf_counter()
    for mode in exercise.benchmark.modes:
        baseline_times(exercise, ref, mode, fns)
    return round(time.perf_counter() - start, 1)


REVALIDATE = 0.05  # a kept figure stands when a short re-timing on fresh inputs is this close
# The re-timing's replays (ms): a short look, and where it misses, one as long as the full
# timing's before timing again in full. On an H200 12's eager (a 1.7 ms bf16 matmul) looked
# 1703-1859 us over 20 ms against 1720-1737 us timed in full (docs/performance.md, Grading time,
# call 6): a miss from the look's own spread cost a full timing and its compiled ride-along.
RELOOK_MS = (20, 200)
LONG_STEP_MS = 50.0  # a kept step this long stands with the shorter ones' re-timing


def baseline_times(exercise, ref, mode, fns) -> dict:
    """The baselines' times at the graded case, from the nearest of three places:
    - this grade's (Settings.run_cache, a folder of the run's, or of a batch: the whole class
      on one GPU): the tracks of one exercise are held to the same figures, timed once;
    - this machine's (.cache/baselines/, keyed by the GPU, its driver, torch, Triton and
      reference.py: PyTorch's code does not change between a learner's runs, theirs does):
      each kept figure is re-timed shortly on fresh inputs and stands when within REVALIDATE of
      the new look (a longer one where the short one misses), else the baseline is timed
      again; QUICK takes them without the re-timing;
    - else timed here (time_baselines).
    A reused figure says so ("kept": when it was measured), on the scorecard too. The judge
    writes both caches; the submission's process cannot."""
    b = exercise.benchmark
    run = _cached_at(exercise, mode, fns, current().run_cache)
    if run is not None and (found := _read(run)) is not None:
        return found
    kept_path = _cached_at(exercise, mode, fns, BASELINES)
    kept = _read(kept_path) or {}
    if current().quick and kept and all(n in kept for n in fns):
        return {n: {**t, "kept": t.get("kept") or t.get("measured")} for n, t in kept.items()}
    out = _revalidated(exercise, ref, mode, fns, kept) if kept else {}
    missing = {n: f for n, f in fns.items() if n not in out}
    if missing:
        # this process's own kernels only: a submission's process (this judge's too) that ran
        # some meanwhile would make the baselines slow and every speedup against them large
        measured, shared = alone(lambda: time_baselines(exercise, ref, b.case, mode, missing),
                                 Watch({os.getpid()}),
                                 settle_s=SETTLE_S,
                                 trace=lambda what: print(f"[timing]     {what}", flush=True))
        if shared:  # no figure: no speedup against it is credited, and none is kept
            why = shared_problem(f"the {mode} baselines' timing", shared)
            return {**out, **{n: {"error": why, "shared": shared} for n in measured}}
        now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        out.update({n: {**t, "measured": now} for n, t in measured.items()})
    _write(kept_path, {n: {k: v for k, v in t.items() if k not in ("kept", "relooked_ms", "within")}
                       for n, t in out.items()})
    if run is not None:
        _write(run, out)
    return out


def _revalidated(exercise, ref, mode, fns, kept: dict) -> dict:
    """The kept figures that a short re-timing on fresh inputs confirms; the others are left
    out (timed again by the caller). A torch.compile'd baseline (Benchmark.compiles: "compile",
    or one its reference.py function compiles itself) is not re-timed: compiling it
    in the timing's process (its graph traced again, Inductor's cache read) was most of a
    timing's seconds. It stands with the exercise's other baselines: kept when each of them
    re-times within REVALIDATE (the machine has not changed under them), timed again otherwise.
    So does a step of LONG_STEP_MS or more where a shorter one is re-timed: a short look at it
    is still a dozen calls (the graph's capture and do_bench's estimate), 3.1 s of 13's eager
    forward and forward+backward (73 and 184 ms) on the GPU at the warming judge's turn."""
    b = exercise.benchmark
    args = make_inputs(exercise, ref, b.case, fresh_seed())
    dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
    short = any(not isinstance(fn, str) and not b.compiles(n) and
                (kept.get(n) or {}).get("ms", LONG_STEP_MS) < LONG_STEP_MS for n, fn in fns.items())
    out, riders = {}, []
    for name, fn in fns.items():
        old = kept.get(name) or {}
        if isinstance(fn, str) or "ms" not in old:
            continue
        if b.compiles(name) or (short and old["ms"] >= LONG_STEP_MS):
            riders.append(name)  # it rides on the others' re-timing
            continue
        began = time.perf_counter()
        try:
            step = make_step(fn, args, mode, b.grad_args, dy)
            look = time_step(step, rep_ms=RELOOK_MS[0])["ms"]
            if abs(look / old["ms"] - 1) > REVALIDATE:  # a short look's own spread, or the
                look = time_step(step, rep_ms=RELOOK_MS[1])["ms"]  # machine: a longer one says
        except Exception:  # reported by the full timing, which tries again
            continue
        finally:
            _trace(f"{mode} baseline {name} re-timed", began)
        if abs(look / old["ms"] - 1) <= REVALIDATE:
            out[name] = {**old, "kept": old.get("measured"), "relooked_ms": look,
                         "within": REVALIDATE}
        torch.cuda.synchronize()
    relooked = [n for n in fns if n not in riders and "ms" in (kept.get(n) or {})]
    if relooked and all(n in out for n in relooked):
        for name in riders:
            out[name] = {**kept[name], "kept": kept[name].get("measured"), "within": REVALIDATE,
                         "with": relooked}
    return out


def _read(path: Path | None) -> dict | None:
    try:
        return json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _driver() -> str:
    """The NVIDIA driver's version (a new driver can change the baselines' speed)."""
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "unknown driver"


def _cached_at(exercise, mode, names, folder) -> Path | None:
    """Where the figures of (exercise, mode) are kept in `folder` (None: nowhere)."""
    b = exercise.benchmark
    if not folder:
        return None
    key = json.dumps([torch.cuda.get_device_name(), _driver(), torch.__version__,
                      triton.__version__, exercise.id, b.case, mode, b.dtype, sorted(names),
                      hashlib.sha256((exercise.dir / "reference.py").read_bytes()).hexdigest()])
    return Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"


def prepare_performance(exercise) -> tuple:
    """What grade_performance needs that runs on the CPU alone: the reference and the baselines'
    callables (creating a torch.compile'd one imports dynamo and Inductor, seconds). A timing
    worker started ahead does this while another track's timing holds the GPU (nothing here
    launches a kernel)."""
    ref = load_reference(exercise)
    warm_fake_tensors()
    lazy = baseline_fns(exercise, ref, lazy=True)
    # a grade's run cache: the exercise's warming judge times the baselines into it before the
    # exercise's first timing (time_warmed_baselines); compiling here would be for nothing
    if current().quick or current().run_cache or all(
            any((p := _cached_at(exercise, m, lazy, folder)) is not None and p.is_file()
                for folder in (current().run_cache, BASELINES))
            for m in exercise.benchmark.modes):
        return ref, lazy  # the baselines' figures are (likely) this run's or kept: no compile
    fns = baseline_fns(exercise, ref)
    torch._dynamo.reset()
    return ref, fns
