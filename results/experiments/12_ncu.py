"""Exercise 12: what limits the two solutions against cuBLAS at 8192^3 bf16 (issue 12).

The graded figures (results/RESULTS.md) put the Triton track at ~0.9x and the CUTLASS track at
~0.98x of `F.linear` + relu. This script times, in one process and on the same inputs, the
Triton kernel, the CUTLASS kernel, cuBLAS alone (`torch.addmm`: the bar for the GEMM itself)
and `F.linear` + relu (cuBLAS + a separate epilogue kernel), with the grader's timing helper;
then (--ncu, under Nsight Compute) runs each once more so that ncu can read the counters:

    python results/experiments/12_ncu.py                          # timings, TFLOP/s (GPU)
    ncu --clock-control none -k regex:'matmul|device_kernel|nvjet|gemm|sm90' \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        python results/experiments/12_ncu.py --ncu

What to read in ncu's output: "Compute (SM) Throughput" of the tensor-core pipe against cuBLAS's
kernel, the grid (a persistent kernel launches one CTA per SM), registers and shared memory per
block (how many stages the mainloop can keep in flight), and the duration of each kernel.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = "12_matmul_tc"
CASE = {"M": 8192, "N": 8192, "K": 8192, "act": "relu"}
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "exercises" / EX))


def load_ops():
    import torch
    import torch.nn.functional as F
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="12")[0]
    build(ROOT / "solutions", ex, ex.tracks["cutlass"])  # the grader's build, loaded
    spec = importlib.util.spec_from_file_location(
        "ex12_triton_solution", ROOT / "solutions" / EX / "triton" / "matmul_tc.py")
    tri = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tri)
    return {
        "triton": tri.matmul_act,
        "cutlass": torch.ops.ex12_cutlass.matmul_act,
        "cuBLAS addmm (no act)": lambda A, B, bias, act: torch.addmm(bias, A, B),
        "F.linear + relu": lambda A, B, bias, act: torch.relu(F.linear(A, B.t(), bias)),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ncu", action="store_true", help="one call of each after warm-up, for ncu")
    a = p.parse_args()
    import torch
    import reference as ref
    from grader.timing import time_fn
    g = torch.Generator(device="cuda").manual_seed(0)
    args = ref.bench_inputs(CASE, torch.bfloat16, "cuda", g)
    ops = load_ops()
    for f in ops.values():  # autotune / first-call costs out of the way
        f(*args)
    torch.cuda.synchronize()
    if a.ncu:
        for f in ops.values():
            f(*args)
        torch.cuda.synchronize()
        return
    flops = ref.traffic(CASE, torch.bfloat16, "forward")["flops"]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"8192^3 bf16, act=relu, {flops / 1e12:.2f} TFLOP per call")
    us = {name: time_fn(lambda f=f: f(*args))["ms"] * 1e3 for name, f in ops.items()}
    base = us["cuBLAS addmm (no act)"]
    for name, t in us.items():
        print(f"  {name:24s} {t:9.1f} us  {flops / t / 1e6:6.1f} TFLOP/s  "
              f"{base / t:6.1%} of cuBLAS's rate")


if __name__ == "__main__":
    main()
