"""Interp bounds: every load, store and atomic of a kernel on Triton's CPU interpreter checked
against the tensors the kernel was given, before the interpreter touches memory (installed by
grader.submission.interp). A missing mask is then named ("pointer argument `y_ptr` ... mask it",
at the kernel's tl.load/tl.store line) instead of crashing the process with SIGSEGV/SIGABRT, or
reading another tensor's memory silently. Tensor descriptors too (tl.make_tensor_descriptor in
the kernel, or a host-side TensorDescriptor argument: desc.load, desc.store): their blocks are
masked by the shape the descriptor declares, so a shape or stride that reaches past the tensor
is what is named.
"""
from __future__ import annotations

import inspect

import numpy as np


class OutOfBounds(IndexError):
    """A kernel's load/store/atomic would touch memory outside every tensor it was given."""


# the tensors of the launch running now: (first byte, end byte, parameter name, tensor)
_regions: list[tuple[int, int, str, object]] = []


def _tensor_regions(name, arg, out) -> None:
    if isinstance(arg, (tuple, list)):
        for k, a in enumerate(arg):
            _tensor_regions(f"{name}[{k}]", a, out)
        return
    base = getattr(arg, "base", arg)  # a TensorDescriptor's or TensorWrapper's tensor
    if not hasattr(base, "data_ptr") or not hasattr(base, "stride"):
        return
    kind = "descriptor" if hasattr(arg, "block_shape") else "pointer"
    name = f"{kind} argument `{name}`"
    size = base.element_size()
    if base.numel() == 0:
        out.append((base.data_ptr(), base.data_ptr(), name, base))
        return
    # the view's own extent: from its lowest to its highest element (gaps of a strided view
    # inside it are readable memory, so they are not flagged; values show a wrong stride)
    lo = sum((n - 1) * st for n, st in zip(base.shape, base.stride()) if st < 0)
    hi = sum((n - 1) * st for n, st in zip(base.shape, base.stride()) if st > 0)
    start = base.data_ptr() + lo * size
    out.append((start, base.data_ptr() + (hi + 1) * size, name, base))


def _describe(t) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    return f"a {dtype} tensor of shape {tuple(t.shape)}, {t.numel()} elements"


def _check_bounds(what: str, ptrs, mask, builder) -> None:
    if not _regions:
        return
    addr = ptrs.data
    if mask is not None:
        # as bool: the interpreter holds some masks as int32 (a block mask & a scalar
        # condition), and an int array would index lanes instead of selecting them
        m = np.broadcast_to(mask.data, addr.shape).astype(bool)
        if not m.all():
            addr = addr[m]  # masked-off lanes may hold any address: never touched
    if addr.size == 0:
        return
    addr = addr.reshape(-1).astype(np.uint64)
    elem = ptrs.get_element_ty().primitive_bitwidth // 8 if hasattr(
        ptrs.get_element_ty(), "primitive_bitwidth") else 1
    inside = np.zeros(addr.shape, dtype=bool)
    for lo, hi, _, _ in _regions:
        inside |= (addr >= np.uint64(lo)) & (addr + np.uint64(max(elem, 1)) <= np.uint64(hi))
    if inside.all():
        return
    bad = addr[~inside]
    first = int(bad[0])
    # the argument the pointer was most likely computed from: the nearest start below it
    below = [r for r in _regions if r[0] <= first]
    lo, hi, name, t = max(below, key=lambda r: r[0]) if below else min(_regions,
                                                                        key=lambda r: r[0])
    size = t.element_size()
    base = t.data_ptr()
    offs = np.unique((bad.astype(np.int64) - np.int64(base)) // size)
    lanes = bad.size
    if offs.size > 1 and offs[-1] - offs[0] == offs.size - 1:
        shown = f"{int(offs[0])}..{int(offs[-1])}"
    else:
        shown = ", ".join(str(int(o)) for o in offs[:6]) + (", ..." if offs.size > 6 else "")
    program = tuple(int(i) for i in getattr(builder, "grid_idx", ()) or ())
    last = (hi - base) // size - 1
    if what.startswith("desc"):  # masked by the descriptor's own shape: that shape is too big
        fix = ("the descriptor's shape or strides reach past the tensor: make it with the "
               "tensor's own shape and strides (its loads past that shape read zeros, its "
               "stores there are dropped)")
    elif mask is None:  # no mask at all
        fix = (f"mask it ({what}(ptr + offs, mask=offs < n, ...)), and check the offset and "
               f"stride arithmetic")
    else:  # a mask was given, and these lanes are on under it
        fix = ("these lanes are on under its mask, so the mask is not what is missing: check "
               "the offset and stride arithmetic (each tensor with its own strides and "
               "length) and what the mask compares")
    raise OutOfBounds(
        f"out-of-bounds {what} in program {program}: {lanes} lane(s) of {name} "
        f"({_describe(t)}) at element offsets {shown} from its start, outside "
        f"0..{last}: {fix}; on a GPU this reads or writes another allocation, or crashes")


def install_bounds(ip, B) -> None:
    """Check every address a kernel touches against the tensors of its launch (vectorized: one
    numpy comparison per tensor argument and memory op)."""

    init = ip.GridExecutor._init_args_hst

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        regions = []
        try:
            named = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        except TypeError:  # the interpreter reports a wrong call itself
            named = {}
        for name, arg in named.items():
            _tensor_regions(name, arg, regions)
        _regions[:] = regions
        return args_hst, kwargs_hst
    ip.GridExecutor._init_args_hst = init_args_hst

    call = ip.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        try:
            return call(self, *args, **kwargs)
        except ip.InterpreterError as e:  # the interpreter wraps it as repr(e): give it back
            if isinstance(e.__cause__, OutOfBounds):  # its traceback ends in the kernel's line
                raise OutOfBounds(str(e.__cause__)).with_traceback(
                    e.__cause__.__traceback__) from None
            raise
        finally:
            _regions.clear()
    ip.GridExecutor.__call__ = grid_call

    load, store = B.create_masked_load, B.create_masked_store

    # (keywords too: a descriptor's load passes cache_modifier= and eviction_policy=)
    def create_masked_load(self, ptrs, mask, other, *rest, **kw):
        _check_bounds(self._grader_via or "tl.load", ptrs,
                      None if self._grader_unmasked else mask, self)
        return load(self, ptrs, mask, other, *rest, **kw)

    def create_masked_store(self, ptrs, value, mask, *rest, **kw):
        _check_bounds(self._grader_via or "tl.store", ptrs,
                      None if self._grader_unmasked else mask, self)
        return store(self, ptrs, value, mask, *rest, **kw)
    B.create_masked_load, B.create_masked_store = create_masked_load, create_masked_store

    # a tl.load/tl.store without a mask reaches the masked one with a mask of all ones: flagged,
    # so that an access out of bounds says "mask it" only where there is no mask; a descriptor's
    # load/store reaches it with the mask of the descriptor's shape: named as such
    B._grader_unmasked, B._grader_via = False, None

    def via(orig, **state):
        def op(self, *args, **kw):
            saved = {k: getattr(self, k) for k in state}
            for k, v in state.items():
                setattr(self, k, v)
            try:
                return orig(self, *args, **kw)
            finally:
                for k, v in saved.items():
                    setattr(self, k, v)
        return op
    B.create_load = via(B.create_load, _grader_unmasked=True)
    B.create_store = via(B.create_store, _grader_unmasked=True)
    for name, what in (("create_descriptor_load", "desc.load"),
                       ("create_descriptor_store", "desc.store")):
        if hasattr(B, name):  # (a Triton whose interpreter has tensor descriptors)
            setattr(B, name, via(getattr(B, name), _grader_via=what))

    rmw, cas = B.create_atomic_rmw, B.create_atomic_cas

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        _check_bounds("tl.atomic_rmw", ptr, mask, self)
        return rmw(self, op, ptr, val, mask, sem, scope)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        _check_bounds("tl.atomic_cas", ptr, None, self)
        return cas(self, ptr, cmp, val, sem, scope)
    B.create_atomic_rmw, B.create_atomic_cas = create_atomic_rmw, create_atomic_cas


# libdevice functions with a tl.math twin: the interpreter has no libdevice (its stubs return
# None, and a kernel then fails on its first store: Liger-Kernel's RMSNorm calls libdevice's
# rsqrt), so each is made to call its twin there, looked up at call time (the interpreter swaps
# tl.math's functions for its own while a kernel runs). On a GPU nothing here runs.
