"""Exercise 09 (rmsnorm_quant): time a sound first kernel, both solutions and the baselines at the
graded case, (32768, 4096) bf16 -> int8 + fp32 scales, so the thresholds can be set from
measurements. Run from the repository root on a GPU (under 60 s, most of it the CUDA build and
torch.compile):

    python results/experiments/09_first_kernel.py

Rows:
  first kernel (triton)   one program per row, the row in registers, 4 warps, a division per
                          element: what a learner writes first after the README
  cuda, one-element loads the CUDA solution's scalar path, forced by a misaligned view of x (rows
                          of 4096 at a stride of 4097): no 16-byte loads
  triton solution, cuda solution, eager composite (reference.py), torch.compile of it
  triton kernel, N warps   the Triton solution's kernel launched directly (no triton_op dispatch)
                          at 4 and 8 warps: the warps question, without the host's share
Bytes per call (reference.traffic): read 2MN + 2N, write MN + 4M = 402.8 MB.

Columns: "us" is the grader's method (grader.timing.time_fn: triton.testing.do_bench, calls queued
back to back, L2 flushed; the host's launch time is hidden when it is shorter than the kernel);
"host us" the CPU time to enqueue one call (grader.timing.host_ms); "synced us" the first run's
method (the median of 50 calls, each followed by a synchronize: host launch time included).
"""
import functools
import importlib.util
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grader.discover import discover  # noqa: E402
from grader.loader import load_track  # noqa: E402
from grader.reference import load_reference  # noqa: E402
from grader.timing import host_ms, time_fn  # noqa: E402

M, N = 32768, 4096
COPY_GBS = 4276  # copy bandwidth measured on an H200, 2026-11-21


@triton.jit
def _first_kernel(x_ptr, w_ptr, q_ptr, scale_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, axis=0) / N + eps) * w
    amax = tl.max(tl.abs(y), axis=0)
    scale = tl.where(amax > 0, amax / 127.0, 1.0)
    r = (y / scale + 12582912.0) - 12582912.0
    q = tl.minimum(tl.maximum(r, -127.0), 127.0)
    tl.store(q_ptr + row * N + cols, q.to(tl.int8), mask=mask)
    tl.store(scale_ptr + row, scale)


def first_kernel(x, w, eps):
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _first_kernel[(x.shape[0],)](x, w, q, scale, x.shape[1], eps,
                                 BLOCK=triton.next_power_of_2(x.shape[1]), num_warps=4)
    return q, scale


@functools.cache
def _solution_module():
    """The Triton solution's module, loaded once, its op in its own namespace."""
    text = (ROOT / "solutions/09_rmsnorm_quant/triton/rmsnorm_quant.py").read_text()
    path = Path("/tmp/ex09_solution_kernel.py")
    path.write_text(text.replace("ex09_triton::", "ex09_direct::"))
    spec = importlib.util.spec_from_file_location("ex09_solution_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def solution_kernel(num_warps):
    """The Triton solution's kernel, launched directly at `num_warps`."""
    mod = _solution_module()

    def run(x, w, eps):
        q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        scale = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        mod._rmsnorm_quant_kernel[(x.shape[0],)](
            x, w, q, scale, x.stride(0), x.stride(1), x.shape[1], eps,
            BLOCK_N=triton.next_power_of_2(x.shape[1]), ONE_BLOCK=True, num_warps=num_warps)
        return q, scale
    return run


def time_us(fn, *args, iters=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*args)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    return statistics.median(times)


def main():
    ex = discover(only="09")[0]
    ref = load_reference(ex)
    impls = {t: load_track(ROOT / "solutions", ex, ex.tracks[t]) for t in ("triton", "cuda")}
    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, eps = ref.bench_inputs({"M": M, "N": N}, torch.bfloat16, "cuda", g)
    wide = torch.empty((M, N + 1), dtype=torch.bfloat16, device="cuda")
    wide[:, 1:].copy_(x)
    x_misaligned = wide[:, 1:]
    nbytes = ref.traffic({"M": M, "N": N}, torch.bfloat16, "forward")["bytes"]
    compiled = torch.compile(ref.reference)
    rows = [
        ("eager composite", ref.reference, x),
        ("torch.compile", compiled, x),
        ("first kernel (triton)", first_kernel, x),
        ("cuda, one-element loads", impls["cuda"].rmsnorm_quant, x_misaligned),
        ("triton solution", impls["triton"].rmsnorm_quant, x),
        ("cuda solution", impls["cuda"].rmsnorm_quant, x),
        ("triton kernel, 4 warps", solution_kernel(4), x),
        ("triton kernel, 8 warps", solution_kernel(8), x),
    ]
    want_q, want_s = ref.reference(x, w, eps)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print(f"(M, N) = ({M}, {N}) bf16; {nbytes / 1e6:.1f} MB per call; copy ceiling "
          f"{COPY_GBS} GB/s (H200, 2026-11-21)")
    print(f"{'':26s} {'us':>8s} {'GB/s':>8s} {'of copy':>8s} {'vs compile':>10s} {'max|dq|':>8s}"
          f" {'host us':>8s} {'synced us':>10s}")
    base = None
    for name, fn, xi in rows:
        us = time_fn(lambda: fn(xi, w, eps))["ms"] * 1e3
        host = host_ms(lambda: fn(xi, w, eps)) * 1e3
        synced = time_us(fn, xi, w, eps)
        q, s = fn(xi, w, eps)
        dq = (q.int() - want_q.int()).abs().max().item()
        if name == "torch.compile":
            base = us
        gbs = nbytes / us / 1e3
        vs = f"{base / us:9.2f}x" if base else ""
        print(f"{name:26s} {us:8.1f} {gbs:8.0f} {gbs / COPY_GBS:7.1%} {vs:>10s} {dq:8d}"
              f" {host:8.1f} {synced:10.1f}", flush=True)


if __name__ == "__main__":
    main()
