"""Triton's CPU interpreter made to behave as the GPU does, for the learner's kernels.

Three shims, installed together by `install()` (only under TRITON_INTERPRET=1; idempotent):
bf16 computed on values (below), Python float arguments given to the kernel as fp32 scalar
tensors (`eps.to(tl.float32)` works, as compiled Triton passes a typed value), and every load,
store and atomic checked against the tensors the kernel was given before the interpreter
touches memory, so a missing mask is named ("pointer argument `y_ptr` ... mask it") instead of
crashing the process with SIGSEGV/SIGABRT.

bf16 on values:

Why: numpy has no bfloat16, so under TRITON_INTERPRET=1 Triton keeps bf16 tensors as their raw
16 bits in uint16 arrays, and its builder applies numpy to those integers. The plainest kernel,
`tl.store(out, tl.load(x) + tl.load(y))` on bf16, adds bit patterns and stores NaN and 1e37s on
the CPU while it is right on the GPU; comparisons, `tl.sum`, `tl.fma`, `tl.dot`, `tl.atomic_add`
and `tl.full(..., tl.bfloat16)` fail too, and every rounding to bf16 truncates. Upstream treats
bf16 as unsupported in the interpreter (triton-lang/triton PR #10945; issues #11584 `tl.dot`,
#11604 `tl.sum`), and a learner without a GPU must never be told that a correct kernel is wrong.

What `install()` does (only under TRITON_INTERPRET=1; idempotent): wraps a few methods of
the interpreter's builder and of its reduce/scan ops so that bf16 operands are read as float32
values (exact: every bf16 is a float32), the op runs on those, and a result that is bf16 on the
GPU is rounded back to bf16 bits to nearest, ties to even. Triton's own typing decides which
ops see bf16 at all, on both machines: bf16 + - * and min/max/compare stay bf16; / and %
compute in fp32; tl.max/tl.min/tl.argmax/tl.cumsum promote bf16 to fp32 first; tl.exp, log,
sqrt, rsqrt, erf, floor, sin... refuse bf16 ("Expected dtype ['fp32', 'fp64']"): cast first.
What reaches the builder as bf16, and is fixed here:

- arithmetic and comparisons: the builder's `binary_op`, `unary_op`, `ternary_op` (+ - *,
  negation, == < <= ..., tl.minimum/maximum, clamp). A comparison gives booleans on values
  (-0 == 0, NaN unordered). `tl.where` and `tl.abs` copy or mask bits: right already;
- `tl.fma`: x*y+z rounded once, as IEEE fma (computed in float64, rounded to odd to float32,
  so the rounding to bf16 is the only one that shows);
- `tl.dot`: bf16 operands as float32 values, accumulated in float32 with the accumulator; the
  result keeps the accumulator's dtype (fp32 stays fp32; a bf16 accumulator is rounded);
- casts between bf16 and fp32/fp16/fp64/integers, and the float constants a bf16 tensor meets
  (`x * 0.1`, `tl.full(..., 1.5, tl.bfloat16)`): rounded to nearest even (the interpreter
  truncated, and had no `get_bf16` at all); fp_downcast_rounding="rtz" truncates;
- reductions: `tl.sum` of bf16 (Triton keeps it bf16) as a pairwise tree whose partial sums
  are rounded to bf16, as the GPU's bf16 combine rounds them (accumulate in fp32 to do better:
  `tl.sum(x.to(tl.float32))`); `tl.reduce`/`tl.associative_scan` with your own combine function
  run it element by element through the arithmetic above; the built-in max/min/sum/cumsum
  combines applied to bf16 directly compute on values;
- `tl.atomic_add` on bf16 (the interpreter refused the dtype): lane by lane, each sum rounded;
  `tl.device_print` shows bf16 values, not their bits.

What it cannot make equal to the GPU, bit for bit (each within bf16 tolerance, so no correct
kernel fails for it): the order of a reduction (the GPU's tree is not ours, so a bf16 `tl.sum`
can differ in its last bit), the order of `tl.dot`'s accumulation, and bf16 constants in a
kernel, which Triton's GPU builder (`get_bf16`, by its C++ source) passes through a 6-decimal
string (a bf16 constant 1e-7 becomes 0 there; here it is rounded from its value). Not covered,
because the interpreter decodes them bit by bit or refuses them for every dtype: conversions
to and from fp8,
`tl.dot_scaled`, TMA descriptor loads padded with NaN, inline asm and libdevice calls; no
exercise uses them, and none needs a "needs a GPU" verdict on account of bf16.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os

import numpy as np
import torch
import triton.language as tl
from torch._subclasses.fake_tensor import FakeTensor
from triton._C.libtriton import ir
from triton.runtime import interpreter as ip

from grader.submission.interp_bounds import install_bounds

_DONE = "_grader_bf16_on_values"  # set on the builder class once installed


def _is_bf16(h) -> bool:
    """A bf16 TensorHandle: uint16 bits (comparison results carry their operand's dtype with
    bool data, so the data's dtype decides too)."""
    data = getattr(h, "data", None)
    return (isinstance(data, np.ndarray) and data.dtype == np.uint16
            and getattr(getattr(h, "dtype", None), "name", None) == "bf16")


def to_f32(bits) -> np.ndarray:
    """bf16 bits (uint16) -> their float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _odd_f32(v: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd: an inexact result gets an odd last bit, so a later
    rounding to bf16 (16 bits shorter) rounds as if from `v` itself (no double rounding)."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = v.astype(np.float32)
        inexact = (r.astype(np.float64) != v) & np.isfinite(r) & ((r.view(np.uint32) & 1) == 0)
        toward = np.where(v > r, np.float32(np.inf), np.float32(-np.inf))
        return np.where(inexact, np.nextafter(r, toward), r).astype(np.float32)


def to_bf16(values, rtz: bool = False) -> np.ndarray:
    """Numbers (float32, float64, integers, bools) -> bf16 bits, rounded to nearest, ties to
    even (or toward zero). NaN stays NaN, overflow becomes inf."""
    v = np.asarray(values)
    if v.dtype != np.float32:
        v = _odd_f32(v.astype(np.float64))
    u = v.view(np.uint32)
    with np.errstate(over="ignore"):  # only NaNs wrap around, and they are replaced
        r = u >> 16 if rtz else (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(np.isnan(v), (u >> 16) | 0x0040, r).astype(np.uint16)


def install() -> bool:
    """Apply the shim when Triton runs on its interpreter. True if it is (now) in place."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False

    B = ip.InterpreterBuilder
    if getattr(B, _DONE, False):
        return True
    TH = ip.TensorHandle

    def values(h):
        return TH(to_f32(h.data), tl.float32) if _is_bf16(h) else h

    def rounded(h):
        """A float32 result of bf16 operands: bf16 on the GPU. Booleans stay booleans."""
        if h.data.dtype == np.float32:
            return TH(to_bf16(h.data), tl.bfloat16)
        return TH(h.data, tl.int1) if h.data.dtype == np.bool_ else h

    def on_values(method):
        @functools.wraps(method)
        def wrapped(self, *args):
            if not any(_is_bf16(a) for a in args):
                return method(self, *args)
            return rounded(method(self, *[values(a) for a in args]))
        return wrapped

    def patch(cls, name, make):
        setattr(cls, name, make(getattr(cls, name)))

    # element-wise arithmetic, comparisons, math
    for name in ("binary_op", "unary_op"):
        patch(B, name, on_values)

    def ternary_op(self, a, b, c, op):  # a select (np.where) copies bits: right already
        return (ternary if op is np.where else ternary_values)(self, a, b, c, op)
    ternary, B.ternary_op = B.ternary_op, ternary_op
    ternary_values = on_values(ternary)

    def create_fma(self, x, y, z):
        if not any(_is_bf16(a) for a in (x, y, z)):
            return fma(self, x, y, z)
        f64 = [values(a).data.astype(np.float64) for a in (x, y, z)]
        return TH(to_bf16(f64[0] * f64[1] + f64[2]), tl.bfloat16)
    fma, B.create_fma = B.create_fma, create_fma

    def create_dot(self, a, b, d, *rest):
        out = dot(self, values(a), values(b), values(d), *rest)
        return rounded(out) if _is_bf16(d) else out
    dot, B.create_dot = B.create_dot, create_dot

    # casts and constants
    def cast_impl(self, src, dst_type):
        if _is_bf16(src):  # bf16 -> anything: from its float32 value
            return cast(self, values(src), dst_type)
        if dst_type.scalar == tl.bfloat16:
            return TH(to_bf16(src.data), tl.bfloat16)
        return cast(self, src, dst_type)
    cast, B.cast_impl = B.cast_impl, cast_impl

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if dst_type.scalar == tl.bfloat16 and not src.dtype.scalar.is_fp8():
            return TH(to_bf16(src.data, rtz=rounding_mode == ir.ROUNDING_MODE.RTZ), tl.bfloat16)
        return fp_to_fp(self, src, dst_type, rounding_mode)
    fp_to_fp, B.create_fp_to_fp = B.create_fp_to_fp, create_fp_to_fp

    B.get_bf16 = lambda self, value: TH(to_bf16(np.array([value], np.float64)), tl.bfloat16)

    # atomics, printing
    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        if op != ir.ATOMIC_OP.FADD or not _is_bf16(val):
            return atomic_rmw(self, op, ptr, val, mask, sem, scope)
        p, v, m = np.broadcast_arrays(ptr.data, val.data, mask.data)
        old, one = np.zeros(p.shape, np.uint16), np.ones(1, np.bool_)
        for i in np.ndindex(p.shape):  # lane by lane, as the GPU serializes them
            if m[i]:
                at = np.array([p[i]], np.uint64)
                old[i] = ip._interpreter.load(at, one, np.zeros(1, np.uint16), old.dtype)[0]
                ip._interpreter.store(at, to_bf16(to_f32(old[i]) + to_f32(v[i])).reshape(1), one)
        return TH(old, tl.bfloat16)
    atomic_rmw, B.create_atomic_rmw = B.create_atomic_rmw, create_atomic_rmw

    patch(B, "create_print", lambda orig: (lambda self, prefix, hex, vals, signed: orig(
        self, prefix, hex, vals if hex else [values(v) for v in vals], signed)))

    # reductions and scans
    def as_tensor(t, h):
        return tl.core.tensor(h, t.type.with_element_ty(h.dtype) if t.type.is_block() else h.dtype)

    def min_max(self, t, *ops, **kw):
        if not _is_bf16(t.handle):
            return orig_min_max(self, t, *ops, **kw)
        out = orig_min_max(self, as_tensor(t, values(t.handle)), *ops, **kw)
        back = lambda r: as_tensor(r, rounded(r.handle)) if r.dtype == tl.float32 else r
        return tuple(map(back, out)) if isinstance(out, tuple) else back(out)
    orig_min_max, ip.ReduceOps.min_max = ip.ReduceOps.min_max, min_max

    def tree_sum(self, t):
        if not _is_bf16(t.handle):
            return orig_sum(self, t)
        v = to_f32(t.handle.data)
        v = v.reshape(-1) if self.axis is None else np.moveaxis(v, self.axis, -1)
        while v.shape[-1] > 1:  # pairwise, each partial sum rounded to bf16
            if v.shape[-1] % 2:
                v = np.concatenate([v, np.zeros_like(v[..., :1])], axis=-1)
            v = to_f32(to_bf16(v[..., 0::2] + v[..., 1::2]))
        v = v[..., 0]
        if self.keep_dims:
            v = (v.reshape([1] * t.handle.data.ndim) if self.axis is None
                 else np.expand_dims(v, self.axis))
        return self.to_tensor(to_bf16(v), t.dtype)
    orig_sum, ip.ReduceOps.sum = ip.ReduceOps.sum, tree_sum

    for name in ("cumsum", "cumprod"):  # through the combine function: each step rounded
        patch(ip.ScanOps, name, lambda orig: (lambda self, t: self.generic_scan([t])
                                              if _is_bf16(t.handle) else orig(self, t)))

    install_bounds(ip, B)
    _install_fake_launches(ip)
    _install_scalars(ip)
    _install_builtin_cache(ip, tl)
    _libdevice_on_the_interpreter(tl)
    setattr(B, _DONE, True)
    return True


# --- the interpreter's own cost per launch ----------------------------------------------------

def _install_builtin_cache(ip, tl) -> None:
    """The interpreter patches triton.language around every launch, and finds what to patch by
    listing every member of tl, tl.core, tl.tensor and tl.math (inspect.getmembers) to keep the
    builtins: ~3 ms a launch on the 2-core machine, a third of a small kernel's launch (a
    gradcheck makes hundreds). Which members are builtins never changes, so they are listed once
    per module; each launch patches them as before, those that hold their builtin right then
    (as the listing would have found them: tl.core.tensor, the class tl.tensor is, was patched
    already in the same launch)."""
    found: dict[int, tuple[object, list]] = {}

    def patch_builtin(pkg, builder, scope):
        if id(pkg) not in found:  # (the module kept: its id stays its own)
            found[id(pkg)] = (pkg, [(n, m) for n, m in inspect.getmembers(pkg)
                                    if tl.core.is_builtin(m)])
        for name, member in found[id(pkg)][1]:
            if getattr(pkg, name, None) is member:
                ip._patch_attr(pkg, name, member, builder, scope)
    ip._patch_builtin = patch_builtin


# --- scalar arguments ----------------------------------------------------------------------------

def _install_scalars(ip) -> None:
    """A Python float kernel argument reaches the kernel as an fp32 scalar tensor, as compiled
    Triton types it (`mangle_type(float)` is fp32): `eps.to(tl.float32)` (Liger-Kernel's
    RMSNorm) works, and arithmetic with it promotes as on the GPU. Ints and bools were already
    converted by the interpreter; constexpr arguments are not converted at all."""
    convert = ip._implicit_cvt

    def implicit_cvt(arg):
        if isinstance(arg, float):
            return tl.tensor(ip.TensorHandle(np.array([arg], dtype=np.float32), tl.float32),
                             tl.float32)
        return convert(arg)
    ip._implicit_cvt = implicit_cvt


# --- launches on FakeTensors -------------------------------------------------------------------

def _install_fake_launches(ip) -> None:
    """A launch whose arguments are FakeTensors does nothing, as on the GPU.

    A triton_op's fake kernel is its own Python body, run on FakeTensors (shapes, dtypes and
    strides, no data): on the GPU, wrap_triton turns each launch in it into a traced call whose
    fake implementation does nothing (torch's triton_kernel_wrapper_mutation under
    FakeTensorMode), so the fake outputs are what the body allocates. Under TRITON_INTERPRET=1
    wrap_triton hands back the interpreted kernel itself (torch/_library/triton.py), which then
    reads the FakeTensors' memory, which they lack, and opcheck's fake-tensor test fails for every
    correct op. Skipping the launch here gives the fake outputs the GPU gives, so that test
    decides on the CPU what it decides on the GPU: the fake outputs' metadata against the real
    ones'. Only outside tracing: under a proxy or functional mode (make_fx, AOT dispatch,
    torch.compile) the launch would be left out of the traced graph, so there it is run, and fails
    as before (those need a GPU)."""
    keys = [getattr(torch._C._TorchDispatchModeKey, k) for k in ("PROXY", "FUNCTIONAL")
            if hasattr(torch._C._TorchDispatchModeKey, k)]
    call = ip.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        if any(isinstance(a, FakeTensor) for a in (*args, *kwargs.values())) and not any(
                torch._C._get_dispatch_mode(k) is not None for k in keys):
            return None
        return call(self, *args, **kwargs)
    ip.GridExecutor.__call__ = grid_call


_LIBDEVICE_TWINS = ("rsqrt", "sqrt", "sqrt_rn", "exp", "exp2", "log", "log2", "sin", "cos",
                    "floor", "ceil", "erf", "fma", "div_rn", "abs")


def _libdevice_on_the_interpreter(tl) -> None:
    for module in ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice"):
        try:
            lib = importlib.import_module(module)
        except ImportError:
            continue
        for name in _LIBDEVICE_TWINS:
            if hasattr(lib, name):
                setattr(lib, name, (lambda n: lambda *a, **k: getattr(tl.math, n)(*a))(name))
