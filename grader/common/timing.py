"""Timing: the one timing helper, and the ceilings every kernel is held to.

How: a step (one forward, or one forward+backward: `make_step`) is captured in a CUDA graph and
its replays are timed with `triton.testing.do_bench` (warm-up, L2 flushed before every
repetition, CUDA events): the median and the 20th-80th percentile spread of GPU time
(`time_step`). A step that cannot be captured is timed by events around eager calls, labelled
so. Beside it, the host time of one eager call: the CPU time to enqueue it while the GPU is kept
busy (so the host never waits for the GPU); when that exceeds the GPU time, the op is host-bound
(reported, never scored).

Ceilings are declared once, in CEILINGS (name, unit, what the op's model counts, how measured),
measured once per GPU and torch version and cached; a new ceiling is a new entry here.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

QUANTILES = (0.2, 0.5, 0.8)


@dataclass(frozen=True)
class Ceiling:
    label: str        # "copy bandwidth"
    unit: str         # "GB/s" or "TFLOP/s"
    counts: str       # what the exercise's model counts: "bytes" or "flops"
    how: str          # how it is measured, for the reports
    measure: Callable  # () -> rate in `unit`, on the current GPU


def rate(model: dict, ms: float, ceiling: str) -> float:
    """GB/s or TFLOP/s achieved in `ms` milliseconds (by the ceiling's unit)."""
    c = CEILINGS[ceiling]
    seconds = ms * 1e-3
    return model["bytes"] / seconds / 1e9 if c.counts == "bytes" else model["flops"] / seconds / 1e12


def stats(quantiles: list[float]) -> dict:
    p20, p50, p80 = quantiles
    return {"ms": p50, "p20": p20, "p80": p80}


def time_fn(fn, *, rep_ms: int = 200, warmup_ms: int = 50) -> dict:
    """Median and spread of `fn` in ms by CUDA events, L2 flushed between runs (do_bench): a
    graph's replay (time_step), or one kernel whose launch the GPU never waits for (ceilings)."""
    import triton.testing
    fn()  # first call outside the timing: compilation, autotuning, lazy init
    q = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=list(QUANTILES))
    return stats(q)


def make_step(fn, args, mode, grad_args, dy):
    """One step of `fn` in `mode`, as a zero-argument callable returning its outputs: the
    forward's outputs ("forward"), or the first output and the gradients of the inputs in
    `grad_args` for the fixed incoming gradient `dy` ("forward_backward"). The gradients come
    from torch.autograd.grad, so nothing accumulates in .grad between steps and a captured step
    replays exactly. The inputs are used as they are (a leaf shares its input's memory): writing
    new values into them changes what the next call, or replay, computes. The one definition,
    for the submission's op (grader.submission) and every baseline alike."""
    import torch
    if mode == "forward":
        def forward():
            out = fn(*args)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(o.detach() if isinstance(o, torch.Tensor) else None for o in outs)
        return forward
    args = list(args)
    leaves = [args[i].detach().requires_grad_(True) for i in grad_args]
    for i, leaf in zip(grad_args, leaves):
        args[i] = leaf

    def forward_backward():
        out = fn(*args)
        first = out[0] if isinstance(out, (tuple, list)) else out
        grads = torch.autograd.grad(first, leaves, dy, allow_unused=True)
        return (first.detach(),) + tuple(grads)
    return forward_backward


def capture(run):
    """`run` captured in a CUDA graph: (graph, its static outputs). Two warm-up calls on a side
    stream first (what capture asks: autotuning, lazy initialization and the allocator's first
    blocks happen outside it). Raises what the capture raised: a host synchronization, .item(),
    a copy to the CPU, an allocation outside PyTorch's allocator, work on another stream."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run()
    return graph, outs


def time_step(run, *, rep_ms: int = 200, warmup_ms: int = 50) -> dict:
    """The one timing helper: GPU time of one step, replayed from a captured CUDA graph.

    One step per graph, and L2 flushed before every replay (do_bench's memset, outside the
    timed events): each replay starts as a step does in a model, with other work's data in the
    cache, and a case smaller than L2 is not timed from a warm cache. The flush also keeps the
    GPU behind the host, so the events hold the replay's GPU time and not its launch. Replay
    takes the host out of the figure: on hosts where one eager autograd step costs as much CPU
    as the GPU work, events around eager calls measured the host (13-45% spread, FACTS.md).

    A step that cannot be captured is timed by events around eager calls instead, and says so:
    {"method": "events", "capture_error": the exception}. Otherwise {"method": "graph"}."""
    import torch
    try:
        graph, _ = capture(run)
    except Exception as e:  # not capturable: the caller reports why, and it is timed eagerly
        torch.cuda.synchronize()
        t = time_fn(run, rep_ms=rep_ms, warmup_ms=warmup_ms)
        return {**t, "method": "events", "capture_error": e}
    t = time_fn(graph.replay, rep_ms=rep_ms, warmup_ms=warmup_ms)
    return {**t, "method": "graph"}


def host_ms(fn, *, calls: int = 20) -> float:
    """CPU time to enqueue one eager call, measured while the GPU is held busy by a sleeping
    kernel, so that no call waits for the GPU (a queue that drains would hide the host cost).
    Reported beside the GPU time, never mixed into it."""
    import torch
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e8))  # ~0.1 s of GPU cycles ahead of the calls: far more than 20
    #                              enqueues take (a host-bound op needs ~1 ms each)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    spent = (time.perf_counter() - start) * 1e3 / calls
    torch.cuda.synchronize()
    return spent


# --- the ceilings --------------------------------------------------------------------------------

def _copy() -> float:
    import torch
    src = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB, far past L2
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src))
    return 2 * (1 << 30) / (t["ms"] * 1e-3) / 1e9


def _read() -> float:
    """A Triton kernel that loads every byte and stores nothing (its one store is guarded by a
    test on the data that never holds, so the loads cannot be removed): read-only bandwidth,
    without a reduction."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + tl.arange(0, BLOCK), x, mask=x == 12345.678)

    n = 1 << 28
    x = torch.rand(n, device="cuda", dtype=torch.float32)  # values in [0, 1)
    out = torch.empty(4096, device="cuda", dtype=torch.float32)
    block = 4096
    t = time_fn(lambda: read_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block, num_warps=8))
    return 4 * n / (t["ms"] * 1e-3) / 1e9


def _matmul(dtype_name: str) -> Callable:
    def measure() -> float:
        import torch
        dtype = getattr(torch, dtype_name)
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32: what CUDA cores can do
        try:
            t = time_fn(lambda: a @ b, rep_ms=300)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return 2 * n ** 3 / (t["ms"] * 1e-3) / 1e12
    return measure


CEILINGS = {
    "bandwidth": Ceiling("copy bandwidth", "GB/s", "bytes",
                         "device-to-device copy of 1 GiB bf16, bytes read + written", _copy),
    "read_bandwidth": Ceiling("read bandwidth", "GB/s", "bytes",
                              "a Triton kernel reading 1 GiB fp32 and writing nothing", _read),
    "matmul_bf16": Ceiling("bf16 matmul rate", "TFLOP/s", "flops", "cuBLAS bf16 8192^3",
                           _matmul("bfloat16")),
    "matmul_fp16": Ceiling("fp16 matmul rate", "TFLOP/s", "flops", "cuBLAS fp16 8192^3",
                           _matmul("float16")),
    "matmul_fp32": Ceiling("fp32 matmul rate", "TFLOP/s", "flops",
                           "cuBLAS fp32 8192^3, TF32 off", _matmul("float32")),
}


def ceiling_cache_path(folder: Path, device_name: str, torch_version: str) -> Path:
    safe = "".join(c if c.isalnum() else "-" for c in f"{device_name}-{torch_version}")
    return folder / f"{safe}.json"


def measure_ceilings(folder: Path, names=None) -> dict:
    """This GPU's ceilings (name -> rate), measured once per device and torch, cached."""
    import torch
    name = torch.cuda.get_device_name()
    path = ceiling_cache_path(folder, name, torch.__version__)
    out = json.loads(path.read_text()) if path.exists() else {}
    out.update(device=name, torch=str(torch.__version__))
    missing = [c for c in (names or CEILINGS) if c not in out]
    for c in missing:
        out[c] = CEILINGS[c].measure()
        torch.cuda.empty_cache()
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2))
    return out
