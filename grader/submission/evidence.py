"""Evidence: what the profiler saw while the submission's op ran, reduced to data for the judge,
and the functions that evidence rests on, watched.

Runs in the submission's process (only that process can see its own calls); the judge applies
the rules (grader.common.trust) to what `analyse` returns. `watched` binds the functions the
evidence and the timings rest on before any submission code runs, and `redirected` says after
every request what was replaced since. What a patch in that process can still do to this
evidence, and how the judge limits it, is in the README's trust table.
"""
from __future__ import annotations

import importlib

from torch.autograd import DeviceType

from grader.common.trust import BUILTIN_NODE, TRITON_RANGE


def analyse(events, allowed) -> dict:
    """The evidence in a profile: ATen ops outside `allowed` (not counting what allowed ops,
    PyTorch's own autograd nodes, Triton's interpreter and our marker do inside themselves), each
    GPU kernel with its stream and whether an ATen op launched it, and the caller's stream.

    A kernel is tied to its launch by the runtime call (cudaLaunchKernel, cuLaunchKernelEx, ...)
    whose correlation id it carries; that call's ancestors say who launched it. Only runtime
    calls are indexed: CPU ops have correlation ids of their own that can collide.
    """
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    runtime = {e.id: e for e in cpu if e.name.startswith("cu") and not e.name.startswith("cuda::")}
    ops = []

    def walk(e):
        name = e.name
        if name in ("grader::marker", TRITON_RANGE) or BUILTIN_NODE.match(name):
            return
        if name.startswith("aten::"):
            if name not in allowed:
                ops.append(name)
            return
        for c in e.cpu_children:
            walk(c)
    for e in cpu:
        if e.cpu_parent is None:
            walk(e)
    kernels, stream = [], None
    for k in events:
        if k.device_type != DeviceType.CUDA or k.name.startswith(("Memcpy", "Memset")):
            continue
        if k.name.startswith(("grader::", "aten::")):
            continue  # a range of ours (or an op name) drawn on the GPU timeline, not a kernel
        # torch >= 2.12 names the launch in linked_correlation_id; before, the kernel's own id
        launch = runtime.get(getattr(k, "linked_correlation_id", 0) or k.id)
        names, p = [], launch.cpu_parent if launch is not None else None
        while p is not None:
            names.append(p.name)
            p = p.cpu_parent
        if "grader::marker" in names:
            stream = k.device_resource_id
            continue
        under = any(n.startswith("aten::") or BUILTIN_NODE.match(n) for n in names)
        kernels.append([k.name, k.device_resource_id, under, launch is not None])
    return {"ops": ops, "kernels": kernels, "stream": stream}


def watched(server_class) -> dict:
    """The functions the judge's evidence and figures rest on, bound before any submission code
    runs: name -> (where to look it up now, the original object, its code object), and the
    server's own methods (`server_class`). The server calls them through these names; a submission that replaces one (three lines of Python that
    rewrite what this process reports) is seen by `_redirected` and reported as tampering. What
    a patch can still do is in the README's trust table (grader.judge.review flags the rest)."""
    watched = {}
    for path in ("torch.library.opcheck", "torch.autograd.profiler.profile",
                 "torch.autograd.profiler.record_function", "torch.profiler.profile",
                 "torch.autograd.grad", "torch.cuda.synchronize", "torch.cuda.graph",
                 "torch.cuda.CUDAGraph", "triton.testing.do_bench",
                 "grader.submission.evidence.analyse", "grader.common.timing.time_step",
                 "grader.common.timing.time_fn", "grader.common.timing.capture",
                 "grader.common.timing.make_step", "grader.common.timing.host_ms",
                 "grader.common.trust.delegation", "grader.submission.loader.Impl.opcheck",
                 "grader.submission.loader.Impl.compiled"):
        module, _, name = path.rpartition(".")
        try:
            owner = importlib.import_module(module) if module != "grader.submission.loader.Impl" else \
                importlib.import_module("grader.submission.loader").Impl
        except ImportError:
            continue
        obj = getattr(owner, name, None)
        watched[path] = (owner, name, obj, getattr(obj, "__code__", None))
    for name, fn in vars(server_class).items():
        if callable(fn):
            watched[f"SubmissionServer.{name}"] = (server_class, name, fn, fn.__code__)
    return watched


def redirected(watched: dict, server) -> list[str]:
    """What was replaced since `_watched` (an attribute set to another object, or a function's
    code swapped), and the server's own methods shadowed on the instance."""
    found = []
    for path, (owner, name, obj, code) in watched.items():
        now = getattr(owner, name, None)
        if now is not obj or (code is not None and getattr(now, "__code__", None) is not code):
            found.append(f"replaced {path}, which the grader's evidence rests on")
    found += [f"replaced SubmissionServer.{k} on the server itself" for k in vars(server)
              if k.startswith("do_") or k in ("serve", "_observed", "_error")]
    return found[:10]
