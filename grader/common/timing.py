"""Timing: the one timing helper (the ceilings it is compared with: grader.common.ceilings).

How: a step (one forward, or one forward+backward: `make_step`) is captured in a CUDA graph and
its replays are timed with `triton.testing.do_bench` (warm-up, L2 flushed before every
repetition, CUDA events): the median and the 20th-80th percentile spread of GPU time
(`time_step`). A step that cannot be captured is timed by events around eager calls, labelled
so. Beside it, the host time of one eager call: the CPU time to enqueue it while the GPU is kept
busy (so the host never waits for the GPU); when that exceeds the GPU time, the op is host-bound
(reported, never scored).

Only processes that run kernels import it (torch and Triton at its top): the judge times the
baselines with it in its own process, and the submission's process times
the op with it: both import it before anything else of theirs runs (grader.submission binds its
functions before the submission is imported, grader.submission.server).
"""
from __future__ import annotations

import time

import torch
import triton.testing

QUANTILES = (0.2, 0.5, 0.8)


def stats(quantiles: list[float]) -> dict:
    p20, p50, p80 = quantiles
    return {"ms": p50, "p20": p20, "p80": p80}


LOOK_MS = 50         # the first look at a figure: its replays' spread says whether to go on
SETTLED = 0.01       # ... (p80 - p20) / median within this, over at least
SETTLED_REPLAYS = 25  # this many replays: the median will not move by more (a grade's 2%)


def time_fn(fn, *, rep_ms: int = 200, warmup_ms: int = 50) -> dict:
    """Median and spread of `fn` in ms by CUDA events, L2 flushed between runs (do_bench): a
    graph's replay (time_step), or one kernel whose launch the GPU never waits for (ceilings).

    As many replays as the spread needs and no more: a first look of LOOK_MS, then the full
    `rep_ms` only where that look has not settled (too wide, or too few replays: a step of
    milliseconds). A step so long that the look could not hold SETTLED_REPLAYS of it (its
    second call, timed) goes to the full `rep_ms` at once: do_bench's own estimate and warm-up
    made the look ~8 calls of it, 1.3 s of the 4.6 s that 13's eager forward+backward (183 ms)
    took to time (an H200, 2026-11-30)."""
    fn()  # first call outside the timing: compilation, autotuning, lazy init
    look = min(rep_ms, LOOK_MS)
    if look < rep_ms:
        torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if (time.perf_counter() - began) * 1e3 * SETTLED_REPLAYS > look:
            look = rep_ms
    q = triton.testing.do_bench(fn, warmup=warmup_ms, rep=look, quantiles=list(QUANTILES))
    p20, p50, p80 = q
    if look < rep_ms and (p80 - p20 > SETTLED * p50 or look / p50 < SETTLED_REPLAYS):
        q = triton.testing.do_bench(fn, warmup=0, rep=rep_ms, quantiles=list(QUANTILES))
    return stats(q)


def make_step(fn, args, mode, grad_args, dy):
    """One step of `fn` in `mode`, as a zero-argument callable returning its outputs: the
    forward's outputs ("forward"), or the first output and the gradients of the inputs in
    `grad_args` for the fixed incoming gradient `dy` ("forward_backward"). The gradients come
    from torch.autograd.grad, so nothing accumulates in .grad between steps and a captured step
    replays exactly. The inputs are used as they are (a leaf shares its input's memory): writing
    new values into them changes what the next call, or replay, computes. The one definition,
    for the submission's op (grader.submission) and every baseline alike."""
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
    try:
        graph, _ = capture(run)
    except Exception as e:  # not capturable: the caller reports why, and it is timed eagerly
        torch.cuda.synchronize()
        t = time_fn(run, rep_ms=rep_ms, warmup_ms=warmup_ms)
        return {**t, "method": "events", "capture_error": e}
    t = time_fn(graph.replay, rep_ms=rep_ms, warmup_ms=warmup_ms)
    return {**t, "method": "graph"}


SLEEP_CLOCK_HZ = 2.0e9  # at least an SM's clock (an H200's boost is 1.98 GHz): a sleeping
#                         kernel of this many cycles a second lasts at least that long


def host_ms(fn, *, calls: int = 20) -> float:
    """CPU time to enqueue one eager call, measured while the GPU is held busy by a sleeping
    kernel, so that no call waits for the GPU (a queue that drains would hide the host cost).
    Reported beside the GPU time, never mixed into it. `calls` at most: fewer where one call's
    enqueue is long (20 ms of enqueues measure it well; 20 calls of 13's eager reference, each
    launching its S x S softmax, were seconds).

    The sleep is as long as the calls' enqueues can be (one call, synchronized, bounds one
    enqueue), with a margin, up to 0.1 s: a fixed 0.1 s was a fourth to a half of a timing's
    "GPU time and host time" (an H200, 2026-12-01: 27 such stretches in a scorecard run again).
    An event after the sleep says whether the GPU was still asleep when the last call was
    enqueued; where it was not, the figure is taken again behind a sleep 4x as long."""
    began = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    first = time.perf_counter() - began  # an upper bound of one enqueue
    calls = max(3, min(calls, int(0.02 / max(first, 1e-6))))
    # twice the bound, and never more than 0.1 s at first: a long step's bound is mostly its
    # GPU time (13's eager reference: 183 ms a call, 1.7 ms of it enqueue)
    ahead_s = min(0.1, 2 * calls * first + 0.005)
    for _ in range(3):
        torch.cuda._sleep(int(ahead_s * SLEEP_CLOCK_HZ))
        asleep = torch.cuda.Event()
        asleep.record()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        spent = (time.perf_counter() - start) * 1e3 / calls
        held = not asleep.query()  # still sleeping: no call waited for the GPU
        torch.cuda.synchronize()
        if held:
            break
        ahead_s *= 4
    return spent
