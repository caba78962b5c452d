"""Exercise 11: what the thresholds are set from. At the graded case (M = N = K = 4096, fp32),
the fraction of cuBLAS fp32 (TF32 off) that a sound first kernel (naive; shared-memory tiles)
and the solution reach, forward and forward + backward, beside the baselines.

    python results/experiments/11_first_kernel.py        # from the repository root, on a GPU

Two parts, ~40 s in all on an H200 (most of it the two builds):
1. results/experiments/11_versions.cu: versions 1, 2 and 5 (the solution's kernel) timed with
   CUDA events against cuBLAS sgemm in one binary (the GEMM alone, plus the fused epilogue);
2. the solution as the grader builds it (torch.utils.cpp_extension), timed with
   triton.testing.do_bench as the benchmark does: forward and forward + backward against
   torch.addmm + relu (TF32 off) and torch.compile of it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def part1():
    versions = load(ROOT / "results/experiments/11_versions.py", "ex11_versions")
    binary = versions.build(Path(os.environ.get("TMPDIR", "/tmp")) / "ex11_versions")
    import subprocess
    subprocess.run([str(binary), "4096", "4096", "4096", "1", "2", "5"], check=True)


def part2():
    from triton.testing import do_bench
    from grader.discover import load_exercise
    from grader.loader import load_track
    ex = load_exercise(ROOT / "exercises/11_tiled_matmul")
    t = time.time()
    impl = load_track(ROOT / "solutions", ex, ex.tracks["cuda"])
    print(f"\nsolution built and loaded in {time.time() - t:.1f} s")
    ref = load(ROOT / "exercises/11_tiled_matmul/reference.py", "ex11_reference")
    case = ex.benchmark.case
    gen = torch.Generator(device="cuda").manual_seed(0)
    A, B, bias = ref.bench_inputs(case, torch.float32, "cuda", gen)
    dY = torch.randn(case["M"], case["N"], device="cuda", generator=gen)
    compiled = torch.compile(ref.reference, dynamic=False)
    # cuBLAS alone (the grader's matmul_fp32 ceiling is an 8192^3 A @ B; this is 4096^3)
    torch.backends.cuda.matmul.allow_tf32 = False
    ms_mm = do_bench(lambda: A @ B, rep=300)
    flops_f = ref.traffic(case, torch.float32, "forward")["flops"]
    flops_fb = ref.traffic(case, torch.float32, "forward_backward")["flops"]

    def fwd_bwd(fn):
        a, b, c = (x.detach().requires_grad_() for x in (A, B, bias))

        def step():
            for x in (a, b, c):
                x.grad = None
            fn(a, b, c).backward(dY)
        return step

    rows = [("cuBLAS A @ B alone (TF32 off)", ms_mm, None)]
    for name, fn in (("torch.addmm + relu (eager)", ref.reference), ("torch.compile", compiled),
                     ("solution", impl.linear_relu)):
        rows.append((name, do_bench(lambda: fn(A, B, bias), rep=300),
                     do_bench(fwd_bwd(fn), rep=300)))
    err = (impl.linear_relu(A, B, bias).double() - ref.reference(A.double(), B.double(),
                                                                 bias.double())).abs().max()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; M = N = K = 4096 fp32; "
          f"solution max |err| vs float64 {err.item():.2e}")
    print(f"{'':32} {'fwd ms':>8} {'TFLOP/s':>8} {'of cuBLAS':>9} {'fwd+bwd ms':>11} {'TFLOP/s':>8}")
    for name, f, fb in rows:
        tf = flops_f / f / 1e9
        line = f"{name:32} {f:8.3f} {tf:8.2f} {100 * ms_mm / f:8.1f}%"
        if fb is not None:
            line += f" {fb:11.3f} {flops_fb / fb / 1e9:8.2f}"
        print(line)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("needs a GPU")
    part1()
    part2()
