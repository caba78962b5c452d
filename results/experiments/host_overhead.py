"""Where the host time of a custom-op call goes (issue 13): for each track of the solutions at its
graded case, in one plain process (no grader, no profiler, no sandbox):

  gpu us      CUDA-event time of one call (triton.testing.do_bench, median)
  host us     CPU time to enqueue one call while the GPU is held busy (grader.timing.host_ms)
  wall us     8 back-to-back calls on fresh inputs, wall clock / 8 (what the grader's judge sees)
  syncs       host-device synchronizations one call makes (torch.cuda.set_sync_debug_mode)

then a cProfile of 50 enqueued calls: the functions with the most own time.

    python results/experiments/host_overhead.py [05 06 08 09 10 ...] [--track triton] [--profile]

GPU only; about 10 s per track, plus ~5 s each with --profile.

    python results/experiments/host_overhead.py --stages [10 06 ...]

adds, one at a time in one process, what the grader's submission process (grader/runner.py) has
that a plain process has not, and measures host time after each: its audit hook, its counting
wrapper around Triton launches, one torch.profiler session (every check's call is observed), and
the deterministic-mode switch it flips for timing.
"""
import cProfile
import io
import pstats
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from grader.discover import EXERCISES, load_exercise  # noqa: E402
from grader.loader import load_track  # noqa: E402
from grader.measure import make_inputs, step, _dy_for  # noqa: E402
from grader.reference import load_reference  # noqa: E402
from grader.timing import host_ms  # noqa: E402


def syncs(run) -> int:
    """Synchronizing calls one `run` makes (the debug mode warns once per sync)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught)


def wall_us(fn, ex, ref, case, mode) -> float:
    b = ex.benchmark
    sets = []
    for s in range(9):
        args = make_inputs(ex, ref, case, 1000 + s)
        dy = _dy_for(ref, args, ex) if mode == "forward_backward" else None
        sets.append(step(fn, args, mode, b.grad_args, dy)[0])
    sets[0]()  # warm-up set
    torch.cuda.synchronize()
    start = time.perf_counter()
    for run in sets[1:]:
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6 / 8


def stages(want):
    from grader import runner as R
    rows = []
    for folder in sorted(EXERCISES.iterdir()):
        if folder.is_dir() and folder.name[:2] in want:
            ex = load_exercise(folder)
            ref = load_reference(ex)
            impl = load_track(ROOT / "solutions", ex, ex.tracks["triton"])
            fn = getattr(impl, ex.benchmark.call)
            for mode in ex.benchmark.modes:
                args = make_inputs(ex, ref, ex.benchmark.case, 7)
                dy = _dy_for(ref, args, ex) if mode == "forward_backward" else None
                run, leaves = step(fn, args, mode, ex.benchmark.grad_args, dy)
                run()
                rows.append((f"{folder.name} {mode}", run, leaves))

    def measure(stage):
        for name, run, leaves in rows:
            h = sorted(host_ms(run, grad_to_none=leaves) * 1e3 for _ in range(3))[1]
            print(f"{stage:34s} {name:36s} host {h:8.1f} us", flush=True)

    measure("plain")
    events = [0]

    def counting(event, args):
        events[0] += 1
    attempts = R.Attempts([ROOT / "exercises"], [Path("/tmp")])
    sys.addaudithook(attempts.hook)
    sys.addaudithook(counting)
    measure("+ audit hook")
    for name, run, leaves in rows:
        events[0] = 0
        run()
        print(f"{'  audit events per call':34s} {name:36s} {events[0]}")
    fake = R.Runner.__new__(R.Runner)
    fake.triton_launches = 0
    fake.observing = True  # as inside a check's observed call (timed calls skip the range now)
    fake._record = torch.autograd.profiler.record_function
    R.Runner._wrap_triton(fake)
    measure("+ triton launch wrapper")
    name, run, leaves = rows[-1]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]):
        run()
    torch.cuda.synchronize()
    measure("+ one torch.profiler session")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    for name, run, leaves in rows:
        run()
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.use_deterministic_algorithms(False)
    measure("+ deterministic on, then off")


def main():
    if "--stages" in sys.argv:
        return stages([a for a in sys.argv[1:] if not a.startswith("-")] or ["05", "10"])
    want = [a for a in sys.argv[1:] if not a.startswith("-")] or ["05", "06", "08", "09", "10"]
    profile = "--profile" in sys.argv
    only = sys.argv[sys.argv.index("--track") + 1] if "--track" in sys.argv else None
    want = [a for a in want if a != only]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}")
    print(f"{'track':24s} {'mode':17s} {'gpu us':>8s} {'host us':>8s} {'wall us':>8s} {'syncs':>5s}")
    for folder in sorted(EXERCISES.iterdir()):
        if not folder.is_dir() or folder.name[:2] not in want:
            continue
        ex = load_exercise(folder)
        ref = load_reference(ex)
        case = ex.benchmark.case
        for tname, track in ex.tracks.items():
            if only and tname != only:
                continue
            try:
                impl = load_track(ROOT / "solutions", ex, track)
            except Exception as e:
                print(f"{folder.name}[{tname}]: load failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            fn = getattr(impl, ex.benchmark.call)
            for mode in ex.benchmark.modes:
                args = make_inputs(ex, ref, case, 7)
                dy = _dy_for(ref, args, ex) if mode == "forward_backward" else None
                run, leaves = step(fn, args, mode, ex.benchmark.grad_args, dy)
                run()
                gpu = triton.testing.do_bench(run, grad_to_none=leaves, return_mode="median") * 1e3
                host = host_ms(run, grad_to_none=leaves) * 1e3
                wall = wall_us(fn, ex, ref, case, mode)
                n = syncs(run)
                print(f"{folder.name + '[' + tname + ']':24s} {mode:17s} {gpu:8.1f} {host:8.1f} "
                      f"{wall:8.1f} {n:5d}", flush=True)
                if profile:
                    torch.cuda.synchronize()
                    torch.cuda._sleep(int(4e8))
                    pr = cProfile.Profile()
                    pr.enable()
                    for _ in range(50):
                        for t in leaves or ():
                            t.grad = None
                        run()
                    pr.disable()
                    torch.cuda.synchronize()
                    s = io.StringIO()
                    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
                    body = [l for l in s.getvalue().splitlines() if l.strip()][-16:]
                    print("    " + "\n    ".join(body), flush=True)
                del args, dy, run, leaves
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
