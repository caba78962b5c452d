"""Exercise 05 (softmax): a sound first kernel vs the solution vs the baselines, on one GPU.

    python results/experiments/05_first_kernel.py          (from the repository root; < 60 s)

Times, at the graded case (32768, 4096) bf16, forward and forward+backward:
  first     the Triton-tutorial-style kernel: one program per row, the whole row in one block,
            num_warps by block size (4 / 8 / 16), plus the same shape of backward
  solution  solutions/05_softmax/triton/softmax.py
  torch.softmax, torch.compile(torch.softmax), torch.compile(composite), Liger (if installed)
and the device copy bandwidth in the same run (the ceiling), then the solution's block choice
for long rows (one block vs the online two-pass loop) at N = 16384, 32768, 65536 (M*N = 2^27).
Sets the thresholds of exercises/05_softmax/exercise.toml: `pass` from `first`, `full` from
`solution`.
"""
import importlib.util
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "exercises" / "05_softmax"))
import reference as ref  # noqa: E402


def load_solution():
    path = ROOT / "solutions" / "05_softmax" / "triton" / "softmax.py"
    spec = importlib.util.spec_from_file_location("softmax_solution", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the first kernel: the Triton tutorial's shape ----------------------------------------------

@triton.jit
def first_fwd(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * N + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def first_bwd(y_ptr, dy_ptr, dx_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    y = tl.load(y_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - tl.sum(y * dy, axis=0))
    tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _warps(block):
    return 16 if block >= 4096 else 8 if block >= 2048 else 4


class First(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        M, N = x.shape
        y = torch.empty_like(x)
        b = triton.next_power_of_2(N)
        first_fwd[(M,)](x, y, N, BLOCK=b, num_warps=_warps(b))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy = dy.contiguous()
        M, N = y.shape
        dx = torch.empty_like(y)
        b = triton.next_power_of_2(N)
        first_bwd[(M,)](y, dy, dx, N, BLOCK=b, num_warps=_warps(b))
        return dx


# --- timing -------------------------------------------------------------------------------------

def time_fwd(fn, x):
    return do_bench(lambda: fn(x), warmup=25, rep=100, return_mode="median") * 1e3


def time_fwd_bwd(fn, x, dy):
    xg = x.detach().requires_grad_()

    def step():
        fn(xg).backward(dy)
    return do_bench(step, warmup=25, rep=100, grad_to_none=[xg], return_mode="median") * 1e3


def copy_gbs():
    a = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    b = torch.empty_like(a)
    us = do_bench(lambda: b.copy_(a), warmup=25, rep=100, return_mode="median") * 1e3
    gbs = 2 * a.numel() * 2 / us / 1e3
    del a, b
    torch.cuda.empty_cache()
    return gbs, us


def main():
    t0 = time.time()
    sol = load_solution()
    ceiling, copy_us = copy_gbs()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    print(f"copy 2 GiB bf16: {copy_us:.0f} us = {ceiling:.0f} GB/s (the ceiling)\n")

    M, N = 32768, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    (x,) = ref.bench_inputs({"M": M, "N": N}, torch.bfloat16, "cuda", gen)
    dy = torch.randn_like(x)
    fwd_bytes, both_bytes = 2 * x.numel() * 2, 5 * x.numel() * 2
    expect = torch.softmax(x.float(), -1)
    fns = {"first": First.apply, "solution": sol.softmax, "torch.softmax": ref.reference,
           "compile(torch.softmax)": torch.compile(ref.reference, dynamic=False),
           "compile(composite)": torch.compile(ref.composite, dynamic=False)}
    try:
        import liger_kernel  # noqa: F401
        fns["liger"] = ref.liger
    except ImportError:
        print("(liger_kernel not installed: no Liger row)")
    rows = {}
    for name, fn in fns.items():
        err = (fn(x).float() - expect).abs().max().item()
        f = time_fwd(fn, x)
        b = time_fwd_bwd(fn, x, dy)
        rows[name] = (f, b, err)
    comp = rows["compile(torch.softmax)"][1]
    print(f"(32768, 4096) bf16: ideal {fwd_bytes / ceiling / 1e3:.1f} us forward, "
          f"{both_bytes / ceiling / 1e3:.1f} us forward+backward at the copy bandwidth")
    print(f"{'':24} {'fwd us':>8} {'GB/s':>6} {'of copy':>8} {'fwd+bwd us':>11} "
          f"{'vs compile':>10} {'max err':>8}")
    for name, (f, b, err) in rows.items():
        gbs = fwd_bytes / f / 1e3
        print(f"{name:24} {f:8.1f} {gbs:6.0f} {gbs / ceiling:8.1%} {b:11.1f} {comp / b:9.2f}x "
              f"{err:8.1e}")

    print("\nsolution, long rows at M*N = 2^27: one block vs the online two-pass loop (fwd us, "
          "fwd+bwd us)")
    for n in (16384, 32768, 65536):
        (x,) = ref.bench_inputs({"M": (1 << 27) // n, "N": n}, torch.bfloat16, "cuda", gen)
        dy = torch.randn_like(x)
        line = f"  N={n:6}:"
        for label, limit in (("one block", 65536), ("online", 8192)):
            sol.MAX_FWD_BLOCK, sol.MAX_BWD_BLOCK = limit, min(limit, 16384)
            f, b = time_fwd(sol.softmax, x), time_fwd_bwd(sol.softmax, x, dy)
            line += f"  {label} {f:7.1f} / {b:7.1f}"
        print(line)
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
