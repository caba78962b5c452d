"""The Python around a Triton launch, without the GPU: the CPU cost of one call of a solution's
entry point (its eager door) against its registered op (the triton_op), with every Triton launch
replaced by a no-op, on CPU tensors. Runs anywhere (no GPU needed), ~20 s.

    python results/experiments/eager_door_cpu.py

What it isolates: the dispatcher, torch.library's wrappers and autograd plumbing, and whether
wrap_triton goes through PyTorch's tracing machinery. What it leaves out: Triton's own launcher
(~10-20 us a launch on a GPU machine) and the autograd engine's device thread (GPU tensors only).
"""
import importlib.util
import sys
import time
from pathlib import Path

import torch
import triton.runtime.jit as jit

ROOT = Path(__file__).resolve().parents[2]
jit.JITFunction.run = lambda self, *a, **k: None  # a launch costs nothing: only the Python around it


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def us(fn, n=300) -> float:
    for _ in range(20):
        fn()
    best = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - start) / n * 1e6)
    return min(best)


def fwd_bwd(f, leaves, dy):
    def run():
        for t in leaves:
            t.grad = None
        f().backward(dy)
    return run


def main():
    x = torch.randn(64, 256, requires_grad=True)
    w = torch.randn(256, requires_grad=True)
    r = torch.randn(64, 256, requires_grad=True)
    dy = torch.randn(64, 256)
    print(f"# CPU, torch {torch.__version__}; us per call, best of 3 x 300 calls, launches stubbed")
    print(f"{'exercise':14s} {'mode':18s} {'eager door':>10s} {'registered op':>14s}")
    m = load("solutions/06_rmsnorm/triton/rmsnorm.py")
    door, op = (lambda: m.rmsnorm(x, w, 1e-6)), (lambda: m.rmsnorm_fwd(x, w, 1e-6)[0])
    print(f"{'06 rmsnorm':14s} {'forward':18s} {us(door):10.1f} {us(op):14.1f}")
    print(f"{'06 rmsnorm':14s} {'forward+backward':18s} {us(fwd_bwd(door, (x, w), dy)):10.1f} "
          f"{us(fwd_bwd(op, (x, w), dy)):14.1f}")
    m = load("solutions/08_add_rmsnorm/triton/add_rmsnorm.py")
    door = lambda: m.add_rmsnorm(x, r, w, 1e-6)[0]
    op = lambda: m.add_rmsnorm_fwd(x, r, w, 1e-6)[0]
    print(f"{'08 add_rmsnorm':14s} {'forward':18s} {us(door):10.1f} {us(op):14.1f}")
    print(f"{'08 add_rmsnorm':14s} {'forward+backward':18s} "
          f"{us(fwd_bwd(door, (x, r, w), dy)):10.1f} {us(fwd_bwd(op, (x, r, w), dy)):14.1f}")
    m = load("solutions/09_rmsnorm_quant/triton/rmsnorm_quant.py")
    with torch.no_grad():
        xd, wd = x.detach(), w.detach()
        print(f"{'09 quant':14s} {'forward':18s} {us(lambda: m.rmsnorm_quant(xd, wd)):10.1f} "
              f"{us(lambda: m.rmsnorm_quant_op(xd, wd, 1e-6)):14.1f}")
        # the first try of the eager door: the body with wrap_triton, outside any triton_op
        from torch.library import wrap_triton
        print(f"{'09 quant':14s} {'wrap_triton outside an op':26s} "
              f"{us(lambda: m._quant_impl(xd, wd, 1e-6, wrap_triton)):6.1f}")


if __name__ == "__main__":
    main()
