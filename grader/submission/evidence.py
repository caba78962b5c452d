"""Evidence: what the profiler saw while the submission's op ran, reduced to data for the judge.

Runs in the submission's process (only that process can see its own calls); the judge applies
the rules (grader.common.trust) to what this returns. What a patch in that process can still do to this
evidence, and how the judge limits it, is in the README's trust table.
"""
from __future__ import annotations

from grader.common.trust import BUILTIN_NODE, TRITON_RANGE


def analyse(events, allowed) -> dict:
    """The evidence in a profile: ATen ops outside `allowed` (not counting what allowed ops,
    PyTorch's own autograd nodes, Triton's interpreter and our marker do inside themselves), each
    GPU kernel with its stream and whether an ATen op launched it, and the caller's stream.

    A kernel is tied to its launch by the runtime call (cudaLaunchKernel, cuLaunchKernelEx, ...)
    whose correlation id it carries; that call's ancestors say who launched it. Only runtime
    calls are indexed: CPU ops have correlation ids of their own that can collide.
    """
    from torch.autograd import DeviceType
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
