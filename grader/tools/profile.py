"""Profile: the graded case's kernels under Nsight Compute, read out for a learner.

    make exercise-06 PROFILE=1        (python -m grader.tools.profile --exercise 06 [--impl starter |
                                       --submission DIR] [--track cuda] [--mode forward])

For each track and benchmark mode, the track's entry point runs once on the graded case (after
one warm-up call, outside the profiled range, which compiles and autotunes) under
`ncu --clock-control none` (the GPU's own clocks, as the timing sees them), and each kernel
launched is printed with its duration, DRAM throughput as % of peak, SM (compute) throughput,
achieved occupancy and what limits it, the top warp-stall reasons, and a one-line reading.
Where ncu is not installed, it says so. Profiling needs a GPU, and counters the driver lets
this user read (ERR_NVGPUCTRPERM otherwise: ncu's message is printed as it is).
"""
from __future__ import annotations

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grader.common.discover import discover
from grader.common.paths import ROOT

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
METRICS = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active",
           "sm__maximum_warps_per_active_cycle_pct", "launch__registers_per_thread",
           "launch__block_size", "launch__shared_mem_per_block_static",
           "launch__shared_mem_per_block_dynamic", "launch__occupancy_limit_registers",
           "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
           "launch__occupancy_limit_blocks")
STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
STALL_WORDS = {  # what a learner can act on, in ncu's own terms
    "long_scoreboard": "long scoreboard (waiting on global/local memory loads)",
    "short_scoreboard": "short scoreboard (shared memory, special math)",
    "barrier": "barrier (__syncthreads / tl.debug_barrier)",
    "mio_throttle": "MIO throttle (shared-memory instruction queue full)",
    "lg_throttle": "LG throttle (too many global load/store instructions)",
    "math_pipe_throttle": "math pipe throttle (a compute unit saturated)",
    "wait": "wait (fixed-latency dependencies)", "not_selected": "not selected (enough warps)",
    "membar": "memory barrier", "dispatch_stall": "dispatch stall",
    "no_instruction": "no instruction (instruction cache misses)",
    "branch_resolving": "branch resolving", "drain": "drain (stores at exit)",
    "imc_miss": "constant cache miss", "tex_throttle": "texture throttle", "sleeping": "sleeping"}


def find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), "/usr/local/cuda", "/opt/nvidia/nsight-compute"):
        if base and Path(base, "bin", "ncu").is_file():
            return str(Path(base, "bin", "ncu"))
    return None


def ncu_command(ncu: str, child: list[str]) -> list[str]:
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off",
           "--target-processes", "all", "--csv", "--page", "raw", "--print-units", "base"]
    for s in SECTIONS:
        cmd += ["--section", s]
    return cmd + ["--metrics", ",".join(METRICS)] + child


def parse_csv(text: str) -> list[dict]:
    """ncu --csv --page raw: a header row, a units row, one row per kernel; ncu's own lines
    (==PROF==, ==WARNING==) and the program's output around them skipped."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(lines))
    header, data = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
    return [dict(zip(header, r)) for r in data]


def _num(row: dict, key: str) -> float | None:
    try:
        return float(row.get(key, "").replace(",", ""))
    except ValueError:
        return None


def read_kernel(row: dict) -> dict:
    """One kernel's figures, from its raw metrics."""
    limits = {k: _num(row, f"launch__occupancy_limit_{k}")
              for k in ("registers", "shared_mem", "warps", "blocks")}
    known = {k: v for k, v in limits.items() if v is not None}
    limiter = min(known, key=known.get) if known else None
    smem = sum(_num(row, f"launch__shared_mem_per_block_{k}") or 0 for k in ("static", "dynamic"))
    stalls = sorted(((m.group(1), _num(row, k)) for k in row if (m := STALL.match(k))
                     and m.group(1) != "selected" and _num(row, k)), key=lambda s: -s[1])
    ns = _num(row, "gpu__time_duration.sum")
    return {"name": row.get("Kernel Name", "?"), "us": ns / 1e3 if ns is not None else None,
            "dram": _num(row, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            "sm": _num(row, "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            "achieved": _num(row, "sm__warps_active.avg.pct_of_peak_sustained_active"),
            "theoretical": _num(row, "sm__maximum_warps_per_active_cycle_pct"),
            "limiter": limiter, "registers": _num(row, "launch__registers_per_thread"),
            "block": _num(row, "launch__block_size"), "smem": smem, "stalls": stalls[:3]}


def limiter_text(k: dict) -> str:
    what = k["limiter"]
    if what == "registers" and k["registers"]:
        return f"{k['registers']:.0f} registers per thread"
    if what == "shared_mem":
        return f"{k['smem'] / 1024:.0f} KiB of shared memory per block"
    if what == "warps" and k["block"]:
        return f"the block size ({k['block']:.0f} threads)"
    if what == "blocks" and k["block"]:
        return f"blocks per SM (blocks of {k['block']:.0f} threads are small)"
    return what or "?"


def reading(k: dict) -> str:
    """One line: where the kernel stands, and what bounds it."""
    dram, sm, ach = k["dram"] or 0, k["sm"] or 0, k["achieved"]
    if dram >= 60 and dram >= sm:
        return f"memory-bound at {dram:.0f}% of DRAM peak: " + (
            "little left" if dram >= 80 else "room left: fewer passes over memory, wider loads")
    if sm >= 60:
        return f"compute-bound at {sm:.0f}% of SM peak: " + (
            "little left" if sm >= 80 else "room left in the pipes it uses")
    if k["us"] is not None and k["us"] < 5:
        return (f"launch-sized: {k['us']:.1f} us, too little work to fill the GPU (fuse it with "
                f"a neighbour, or give each program more)")
    line = "latency-bound"
    if ach is not None:
        line += f": occupancy {ach:.0f}%"
        if k["theoretical"] is not None and k["theoretical"] < 100:
            line += f", limited by {limiter_text(k)}"
    if k["stalls"]:
        line += f"; warps mostly wait on {k['stalls'][0][0].replace('_', ' ')}"
    return line


def report(kernels: list[dict]) -> str:
    out = []
    for i, k in enumerate(kernels):
        name = k["name"] if len(k["name"]) <= 90 else k["name"][:87] + "..."
        fmt = lambda v, unit="%": "n/a" if v is None else f"{v:.1f}{unit}"  # noqa: E731
        occ = f"{fmt(k['achieved'])} achieved"
        if k["theoretical"] is not None:
            occ += f" of {fmt(k['theoretical'])} theoretical" + (
                f", limited by {limiter_text(k)}" if k["theoretical"] < 100 else "")
        out += [f"  [{i}] {name}",
                f"      duration {fmt(k['us'], ' us')}; DRAM throughput {fmt(k['dram'])} of peak; "
                f"SM throughput {fmt(k['sm'])} of peak",
                f"      occupancy {occ}",
                "      top warp stalls: " + (", ".join(
                    f"{STALL_WORDS.get(s, s.replace('_', ' '))} {v:.1f}" for s, v in k["stalls"])
                    or "n/a") + " (cycles per issued instruction)",
                f"      reading: {reading(k)}"]
    return "\n".join(out)


def profile(tree: Path, exercise: str, tracks=None, modes=None, out=print) -> int:
    ncu = find_ncu()
    if ncu is None:
        out("ncu is not installed here: Nsight Compute comes with the CUDA toolkit "
            "(https://developer.nvidia.com/nsight-compute); put its `ncu` on PATH and run "
            "this again on a machine with a GPU")
        return 1
    ex = discover(only=exercise)[0]
    if ex.benchmark is None:
        out(f"{ex.id} has no graded case to profile")
        return 1
    code = 0
    for track in tracks or list(ex.tracks):
        for mode in modes or ex.benchmark.modes:
            out(f"{ex.id} [{track}] {mode}, case {ex.benchmark.case} {ex.benchmark.dtype}, under "
                f"ncu --clock-control none:")
            child = [sys.executable, "-m", "grader.tools.profile_child", str(tree), ex.id, track,
                     mode]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
            proc = subprocess.run(ncu_command(ncu, child), cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=1800)
            kernels = [read_kernel(r) for r in parse_csv(proc.stdout)]
            if proc.returncode != 0 or not kernels:
                code = 1
                said = "\n".join(l for l in (proc.stdout + proc.stderr).splitlines()
                                 if not l.startswith('"'))[-3000:]
                out(f"  ncu found no kernel (exit code {proc.returncode}):\n{said}")
                continue
            out(report(kernels))
    return code


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.tools.profile")
    p.add_argument("--exercise", required=True)
    p.add_argument("--impl", default="starter", choices=["starter", "solutions"])
    p.add_argument("--submission")
    p.add_argument("--track", action="append", help="one track (default: every track)")
    p.add_argument("--mode", action="append", choices=["forward", "forward_backward"],
                   help="one mode (default: every mode the exercise times)")
    a = p.parse_args(argv)
    tree = Path(a.submission).resolve() if a.submission else ROOT / a.impl
    return profile(tree, a.exercise, a.track, a.mode,
                   out=lambda m: print(m, flush=True))


if __name__ == "__main__":
    sys.exit(main())
