"""Trust: the rules a submission is held to, applied by the trusted side.

- **Your kernels do the work.** While the submission's op runs, its process records the PyTorch
  (ATen) ops dispatched (from Python or C++: `at::mul` goes through the dispatcher too) and the GPU
  kernels launched with their streams (torch.profiler), and Triton launches. `delegation()` turns
  that evidence into a verdict: an ATen op outside allocation, views and the exercise's `allow`
  list, a library kernel (cuBLAS, PyTorch's) the track did not declare, or no kernel of the
  submission's own at all, is delegation.
- **The caller's stream.** Every kernel of the op must run on the caller's current stream; work on
  another stream is not ordered before the caller's next use of the output.
- **Fresh memory is poisoned** (grader.common.poison): an element a kernel forgets to write
  reads NaN.

What keeps the repository and the judge out of the submission's reach is grader.submission.sandbox.
"""
from __future__ import annotations

import re

# ATen ops any submission may call: allocation, views and metadata, and `.contiguous()` (whose
# copy is a documented pass over memory, which the timing then pays for).
BASE_ALLOWED = frozenset("aten::" + n for n in """
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros zero_ fill_
resize_ view _unsafe_view reshape _reshape_alias as_strided t transpose permute select slice
narrow unsqueeze squeeze expand expand_as flatten unflatten view_as alias detach detach_
lift_fresh split split_with_sizes chunk unbind contiguous is_nonzero item _local_scalar_dense
set_ record_stream lift lift_fresh_copy _has_compatible_shallow_copy_type size stride numel dim
is_same_size result_type type_as
""".split())

# Kernels that are a library's, not the submission's (a name launched outside any ATen op).
LIBRARY_KERNELS = re.compile(r"at::native|at::cuda|cublas|cudnn|nvjet|xmma|cutlass|gemv|"
                             r"gemmSN|gemmk1|splitKreduce|magma", re.I)

# Autograd nodes of PyTorch's own ops (AddBackward0, ViewBackward0, ...): their work is the
# engine's bookkeeping for ops the forward already answered for.
BUILTIN_NODE = re.compile(r"^autograd::engine::evaluate_function: (?:[A-Z]\w*Backward\d+|"
                          r"torch::autograd::\w+)$")
TRITON_RANGE = "grader::triton_launch"  # the interpreter's own work, inside a Triton launch


class Delegation(AssertionError):
    """The op used PyTorch (or a library) instead of the submission's own kernels."""


class SideStream(AssertionError):
    """The op launched work on another stream than the caller's current one."""


def allowed_ops(exercise, track) -> frozenset:
    return BASE_ALLOWED | frozenset(exercise.allow) | frozenset(track.allow)


def rule_text(exercise, track) -> str:
    extra = sorted(set(exercise.allow) | set(track.allow))
    return ("the exercise's rule: your own kernels do the work; PyTorch may only allocate, "
            "reshape and view" + (f" (and call {', '.join(extra)}, declared in exercise.toml)"
                                  if extra else ""))


def delegation(observed: dict, exercise, track, *, what: str,
               sanitized: bool = False) -> str | None:
    """None if the evidence shows the submission's own work only; else why not (for a learner).

    `observed`: {"ops": [ATen ops outside the allowed set], "kernels": [[name, stream,
    under_aten_op]], "triton": launches, "stream": the caller's stream id or None, "gpu": bool,
    "work": bool (did the call have elements to compute)}.
    """
    ops = observed.get("ops") or []
    if ops:
        names = ", ".join(sorted(set(ops))[:4])
        return (f"{what} called PyTorch's {names}: {rule_text(exercise, track)}. Compute the "
                f"result with your kernel instead of torch/ATen operations")
    own = re.compile("|".join(_name_forms(k) for k in track.own_kernels) or "(?!)", re.I)
    # [name, stream, launched under an ATen op, launch found]: only kernels whose launch was
    # found are judged (an unattributed kernel is never held against the submission)
    if observed.get("gpu") and observed.get("stream") is None and sanitized:
        # Under compute-sanitizer the profiler records no GPU activity (the sanitizer holds the
        # tracing interface): not even the grader's own marker kernel shows, so the kernel
        # evidence is missing, not negative. The ATen-op rule above still held; the kernel
        # rules are not applied (SANITIZE runs are for finding bugs, without timing).
        return None
    kernels = [k for k in observed.get("kernels") or [] if k[3]]
    library = [k[0] for k in kernels if not k[2] and LIBRARY_KERNELS.search(k[0])
               and not own.search(k[0])]
    if library:
        return (f"{what} launched a library kernel that is not yours ({library[0][:120]}): "
                f"{rule_text(exercise, track)}")
    if observed.get("work"):
        mine = [k for k in observed.get("kernels") or [] if not k[2]]
        if observed.get("gpu") and not mine:
            return (f"{what} launched no kernel of its own on the GPU: "
                    f"{rule_text(exercise, track)}")
        if not observed.get("gpu") and not track.sources and not observed.get("triton"):
            return (f"{what} launched no Triton kernel: {rule_text(exercise, track)}")
    return None


def _name_forms(name: str) -> str:
    """A kernel name as the profiler may report it: demangled (cutlass::device_kernel) or as
    its Itanium-mangled prefix (N7cutlass13device_kernel), the form long template names keep."""
    parts = name.split("::")
    mangled = "".join(f"{len(p)}{p}" for p in parts)
    return f"{re.escape(name)}|{re.escape(mangled)}" if len(parts) > 1 else re.escape(name)


def side_stream(observed: dict, *, what: str) -> str | None:
    stream = observed.get("stream")
    if stream is None:
        return None
    other = [(k[0], k[1]) for k in observed.get("kernels") or [] if k[1] != stream]
    if not other:
        return None
    k, s = other[0]
    return (f"{what} ran kernel {k[:80]} on stream {s}, not on the caller's current stream "
            f"{stream}: its output is not ordered before the caller's next use (it may still be "
            f"running when read). Launch on the current stream (at::cuda::getCurrentCUDAStream() "
            f"/ torch.cuda.current_stream()), or make it wait for your side stream")
