"""Timing methods: the graded forward+backward case of the Triton solutions of 05, 06 and 08 and of their baselines, timed N times by events around eager calls (the old way) and by CUDA-graph replay (the grader's way), with the host time beside. On a GPU machine, from the repository root: `python3 benchmarks/timing_methods.py [--times 5] [--exercise 06]`.

Each row is one implementation at its exercise's graded case; each cell is the median of N
timings in one process and, in brackets, (max - min) / median across them. Events time
`triton.testing.do_bench` around the eager step (L2 flushed); replay times the same step
captured in a CUDA graph (grader.common.timing.time_step). Where the host needs as long to enqueue a
step as the GPU needs to run it, the events measure the host. Writes its table into
docs/performance.md (section "timing-methods"); --no-doc prints only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the grader's public helpers, when run as a script

EXERCISES = ("05", "06", "08")  # the Triton tracks whose fwd+bwd the events timed badly


def _spread(values: list[float]) -> str:
    return f"{100 * (max(values) - min(values)) / statistics.median(values):.1f}%"


def rows_for(number: str, times: int) -> list[str]:
    import torch
    from grader.judge.baselines import baseline_fns
    from grader.judge.cases import dy_for, fresh_seed, make_inputs
    from grader.common.discover import discover
    from grader.common.pyfile import import_file
    from grader.common.reference import load_reference
    from grader.common.timing import host_ms, make_step, time_fn, time_step
    ex = discover(only=number)[0]
    b, ref = ex.benchmark, load_reference(ex)
    track = ex.tracks["triton"]
    solution = import_file(ROOT / "solutions" / ex.id / "triton" / track.module,
                           f"solution_{ex.id}")
    impls = {"solution (triton)": getattr(solution, b.call), **baseline_fns(ex, ref)}
    args = make_inputs(ex, ref, b.case, fresh_seed())
    dy = dy_for(ref, args, ex)
    out = []
    for name, fn in impls.items():
        if isinstance(fn, str):
            out.append(f"| {ex.id} | {name} | {fn} | | |")
            continue
        try:
            run = make_step(fn, args, "forward_backward", b.grad_args, dy)
            events = [time_fn(run)["ms"] * 1e3 for _ in range(times)]
            replay = [time_step(run)["ms"] * 1e3 for _ in range(times)]
            host = host_ms(run) * 1e3
        except Exception as e:  # a peer not installed, a baseline that fails: said, not fatal
            out.append(f"| {ex.id} | {name} | {type(e).__name__}: {str(e)[:80]} | | |")
            continue
        out.append(f"| {ex.id} | {name} | {statistics.median(events):.1f} ({_spread(events)}) | "
                   f"{statistics.median(replay):.1f} ({_spread(replay)}) | {host:.0f} |")
        print(out[-1], flush=True)
        torch.cuda.synchronize()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--times", type=int, default=5)
    p.add_argument("--exercise", help="one of 05, 06, 08 (default: all three)")
    p.add_argument("--no-doc", action="store_true", help="print the table only")
    a = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("timing_methods.py needs a GPU: there is none here.", file=sys.stderr)
        return 1
    started = time.perf_counter()
    table = [f"forward+backward at each exercise's graded case ({torch.cuda.get_device_name()}), "
             f"{a.times} timings each in one process: median µs and (max − min) / median.", "",
             "| exercise | implementation | events µs (spread) | graph replay µs (spread) | "
             "host µs per step |", "|---|---|---|---|---|"]
    for number in ([a.exercise] if a.exercise else EXERCISES):
        table += rows_for(number, a.times)
    body = "\n".join(table) + "\n"
    print(body)
    print(f"({time.perf_counter() - started:.0f} s)")
    if not a.no_doc:
        from grader.tools.benchdoc import write_section
        write_section("timing-methods", body, device=torch.cuda.get_device_name(),
                      command="python3 benchmarks/timing_methods.py --times "
                              f"{a.times}" + (f" --exercise {a.exercise}" if a.exercise else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
