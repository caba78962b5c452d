"""Exercise 10 (layernorm_dropout): where the forward's time goes, by variants of its kernels.

Written against the solution as it was before commit 0232ff2, which adopted its `sol+proposal`
variant: its text edits apply to that file (git show 0232ff2^:solutions/10_layernorm_dropout/
triton/layernorm_dropout.py), not to today's, where they are already made.

    python3 results/experiments/10_variants.py --out results/gpu-DATE/10-variants  (repo root, GPU:
                                                  ~2-2.5 min; new variants stop at --budget-s 165)
    TRITON_INTERPRET=1 python3 results/experiments/10_variants.py --selftest     (CPU, ~7 min)
    TRITON_INTERPRET=1 python3 results/experiments/10_variants.py --cpu-dry-run --M 16 --N 64
                                                  (the GPU path on the interpreter, fake timings)
    python3 results/experiments/10_variants.py --sass      (sm_90 SASS counts, no GPU needed)

Today (H200, 2026-11-22) the solution's forward at the graded case ((32768, 4096) bf16, p = 0.1)
takes ~176 us = 72% of copy (target 85%, ~149 us). Compiled for sm_90 (ptxas and cuobjdump ship
with Triton: `--sass` needs no GPU), its program of 8 warps per row executes 496 SASS
instructions per thread for 16 elements, 31 per element, and at 176 us that is ~0.71 warp
instructions per cycle per scheduler: the forward is issue-bound. Per element: Philox4x32-7
~5.5 (one call per 8 elements), the keep test 3 (I2F.U16 of the word's half: the & 0xFFFF /
>> 16 split is folded into the I2F's halfword selector, FADD 0.5, FSETP), select and scale 2,
bf16 -> fp32 of x, w and b 1.5 each (the upper bf16 of a word costs a PRMT and a shift), the
column masks ~2, LayerNorm 5, the bf16 pack 0.5, and ~8 of fixed work per thread (addresses,
the key schedule, two block reductions, 1/sqrt) that only more elements per thread amortize.
The join/reshape interleave costs nothing (no shuffles, no shared memory: each thread's 8
consecutive columns come from one Philox call in its own registers). The I2F (16/clk/SM on
Hopper) keeps the XU pipe busy ~128 of ~700 cycles per warp: not the bound. The backward runs
at ~0.4 instructions per cycle per scheduler (~318 us for 505 instructions per row per thread):
latency-bound more than issue-bound (115 registers: 2 programs of 8 warps resident per SM).

Switches of this script's kernels (`k:` forward, `kb:` backward variants):
  MASK      0: the float rule (today): u16.to(float32) + 0.5 >= p * 65536
            1: the integer rule u16 >= T, T = ceil(p * 65536 - 0.5) computed once per program
               (derivation and proof at `drop_threshold`; the same keep/drop decision for every
               u16 and every p, tested exhaustively here and on the GPU)
            3: the integer rule without splitting off the upper half: word >= T << 16 (T =
               65536, i.e. p > 1 - 2^-17, keeps nothing: a constexpr, DROP_ALL)
  RZERO     the dropped value as `p * 0.0` (= +0) instead of the literal 0.0: with the literal
            and an integer keep, LLVM moves the select below the rounding to bf16 and picks the
            16-bit halves with byte permutes (PRMT): +1.2 instructions per element
  EVEN      N == BLOCK (the graded 4096): no `cols < N` masks, no where() on x - mean
  BITS      bf16 loaded as 32-bit words, unpacked with one shift / one AND per element
  ept       elements per thread: 16 = today's 8 warps for 4096 columns, 32 = 4 warps, 64 = 2
  ROWS      rows per program (2D block): w, b loaded and unpacked once per ROWS rows
  FOLD      fwd: y = xc * (rstd * scale) * w + b * scale (b * scale once per ROWS rows);
            bwd: w * scale hoisted out of the row loop, dx as FMAs, dw/db scaled at the end
  ONEPASS   shifted one-pass statistics (one block reduction instead of two)
  RED2      bwd: the two row sums as one two-operand reduction (one barrier round)
  STAGES    bwd: the row loop as tl.range(num_stages=STAGES): x, dy of the next rows fetched
            with cp.async while this row computes (the forward has no loop: num_stages moot)
  pps       bwd: persistent programs per SM (today 4)
The `sol+...` variants are the solution file itself with text edits applied (a temporary copy):
`sol+proposal` is the diff proposed for the solution (printed at the end of the log), and the
others its steps or extensions (bits: BITS; st2/st3: STAGES).

Checks before a variant is timed, at the graded case: its forward mask (w = 0, b = 1 makes every
kept output exactly 1/(1-p)) identical to the solution's; y's zeros exactly the mask and y held
to the float64 reference (reference.with_mask) for that mask; its backward mask (dy = 1, w = 1:
g = keep/(1-p), a flipped element moves dx by ~1.1) the same; dx against float64; and, at
(64, N), ~20 p values that put the threshold T exactly on u16 values present (an off-by-one
threshold shows there; at p = 0.1 alone a wrong T flips 1 in 65536 elements). Timing:
grader.timing.time_fn (do_bench, L2 flushed, median): forward, backward alone, forward+backward
(x, w, b requiring grad, y.backward(dy)), and a device copy (grader.timing._copy, 1 GiB bf16) in
the same process for "% of copy" by reference.traffic's bytes. The kernels are compiled up front
by --jobs processes (Triton's disk cache). Progress with elapsed seconds; the table last.
"""
from __future__ import annotations

import argparse
import difflib
import glob
import importlib.util
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SOL_PATH = ROOT / "solutions/10_layernorm_dropout/triton/layernorm_dropout.py"
REF_PATH = ROOT / "exercises/10_layernorm_dropout/reference.py"
T0 = time.perf_counter()
LOG = []


def say(*a):
    line = f"[{time.perf_counter() - T0:7.1f}s] " + " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.append(line)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --- the keep/drop threshold ----------------------------------------------------------------
#
# Today's rule (solution `_keep`, HALF_WORDS): keep = u16.to(float32) + 0.5 >= p * 65536.0, all
# in float32, u16 in 0..65535, p the kernel's float32 argument (Triton passes a Python float as
# float32, rounded to nearest: `(float)double` in the launcher).
#
# Claim: for every u16 and every float32 p in [0, 1] (so every Python p the op accepts), keep
# <=> u16 >= T with T = ceil(P - 1/2) (an integer in 0..65536), P = p * 65536 (real product).
# Proof.
#  (a) P is exact in float32: multiplying by 2^16 only moves the exponent (p <= 1: no overflow;
#      a subnormal p keeps its significand bits and may become normal: still exact).
#  (b) u16 -> float32 is exact (< 2^24), and u16 + 0.5 < 2^16 needs 17 significant bits: exact.
#  So the float32 comparison is the comparison of the exact reals: keep <=> u16 + 1/2 >= P
#  <=> u16 >= P - 1/2 <=> u16 >= ceil(P - 1/2) = T, since u16 is an integer. P in [0, 65536]
#  gives T in [0, 65536]; T = 65536 (P > 65535.5) keeps nothing, T = 0 (P <= 1/2) everything.
# In-kernel, T is computed once per program as ceil(p * 65536.0 - 0.5) in float32 (`_drop_t`):
#  - if P >= 1/2: P is a multiple of ulp(P) = 2^(E-23), E = floor(log2 P) in [-1, 16], and so is
#    1/2 (E <= 22); 0 <= P - 1/2 < 2^(E+1), so P - 1/2 = k 2^(E-23) with k < 2^24: exact, and
#    its ceil is T. (An FMA contraction p * 65536 - 0.5 rounds the same exact value once: same.)
#  - if P < 1/2: P - 1/2 is in [-1/2, 0), its rounding in [-1/2, 0] (both representable;
#    rounding is monotone), so the ceil is 0 (or -0, converted to 0) = T.
# Upper half without the split (MASK 3): for a 32-bit word w = hi * 2^16 + lo, hi >= T <=> w >=
# T * 2^16 for T <= 65535 (T * 2^16 < 2^32); T = 65536 must keep nothing: DROP_ALL.
# Tested: drop_threshold (exact rationals), the float32 rule and the float32 ceil emulated in
# numpy, for all 65536 u16 and ~20k values of p (every boundary k/65536, (k+1/2)/65536 and their
# float32 neighbours for a sample of k, tiny and near-1 p); on the GPU, the kernels' own
# expressions for all 65536 u16 and ~400k p (every boundary k in 0..65536) (`gpu_threshold_test`).


def f32(p: float) -> float:
    """p as the kernel sees it: rounded to float32 to nearest (struct uses the C cast too)."""
    return struct.unpack("f", struct.pack("f", p))[0]


def drop_threshold(p: float) -> int:
    """T: keep <=> u16 >= T, exactly today's float rule for the float32 p (proof above)."""
    big_p = Fraction(f32(p)) * 65536
    return min(max(math.ceil(big_p - Fraction(1, 2)), 0), 65536)


def threshold_p_values(every_k=False, k_sample=2000, seed=0):
    """p values that hit every corner: 0, 1, common ones, tiny, near 1, and the boundaries
    k/65536 and (k+1/2)/65536 (where the decision for u16 = k changes) with float32 neighbours."""
    ps = [0.0, -0.0, 1.0, 0.1, 0.5, 0.25, 0.75, 0.9, 0.99, 0.999, 0.01, 0.001, 1 / 3, 2 / 3,
          0.2, 0.3, 0.7, 1e-45, 1e-40, 2.0 ** -126, 1e-30, 1e-20, 1e-10, 1e-6, 1e-5,
          2.0 ** -17, 2.0 ** -16, 3 * 2.0 ** -17, 1 - 2.0 ** -17, 1 - 2.0 ** -16,
          1 - 2.0 ** -24, 1 - 2.0 ** -25, 1 - 1e-10, 1 - 1e-7, 0.99999, 0.999999,
          65535.5 / 65536, 65534.5 / 65536, 0.5 / 65536, 1.5 / 65536]
    rng = np.random.default_rng(seed)
    ks = np.arange(65537) if every_k else np.unique(np.concatenate(
        [np.arange(0, 8), np.arange(65529, 65537), rng.integers(0, 65537, k_sample),
         [6553, 6554, 6555, 32767, 32768, 32769]]))
    base = np.concatenate([ks / 65536.0, (ks + 0.5) / 65536.0]).astype(np.float32)
    base = base[(base >= 0) & (base <= 1)]
    up = np.nextafter(base, np.float32(2))
    dn = np.nextafter(base, np.float32(-1))
    more = np.concatenate([base, up, dn, rng.random(2000).astype(np.float32),
                           (rng.random(500) * 1e-4).astype(np.float32)])
    more = more[(more >= 0) & (more <= 1)]
    return ps + [float(v) for v in more]


def cpu_threshold_test(ps=None) -> int:
    """For every p and all 65536 u16: the float32 rule == u16 >= drop_threshold(p) == u16 >=
    the float32 ceil the kernels compute. Numpy float32 arithmetic is IEEE binary32, round to
    nearest even (the GPU's default mode). Returns the number of p checked; raises on a miss."""
    ps = threshold_p_values() if ps is None else ps
    u = np.arange(65536, dtype=np.uint32)
    uf = u.astype(np.float32)
    half, k65536 = np.float32(0.5), np.float32(65536.0)
    for p in ps:
        p32 = np.float32(f32(p))
        big_p = p32 * k65536                                  # float32 product (exact)
        keep_float = (uf + half) >= big_p                     # today's rule, float32
        t = drop_threshold(p)
        t_kernel = np.ceil(big_p - half)                      # _drop_t, float32
        t_kernel = int(t_kernel)
        if t_kernel != t:
            raise AssertionError(f"p={p!r}: float32 ceil gives {t_kernel}, exact T = {t}")
        if not np.array_equal(keep_float, u >= t):
            bad = np.nonzero(keep_float != (u >= t))[0][:5]
            raise AssertionError(f"p={p!r}: T={t} disagrees with the float rule at u16={bad}")
        words = u << 16                                       # MASK 3: the upper half, unsplit
        hi = (words >= (min(t, 65535) << 16)) & (t < 65536)
        if not np.array_equal(keep_float, hi):
            raise AssertionError(f"p={p!r}: the unsplit upper-half rule disagrees")
        if int((~keep_float).sum()) != t:
            raise AssertionError(f"p={p!r}: {int((~keep_float).sum())} dropped, T = {t}")
    return len(ps)


# --- the kernels ------------------------------------------------------------------------------

@triton.jit
def _add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _drop_t(p):
    """T = ceil(p * 65536 - 1/2) in float32: exact (see drop_threshold); 0 .. 65536. The cast
    is a no-op on the GPU (p arrives as float32); the interpreter passes a Python float."""
    return tl.math.ceil(tl.cast(p, tl.float32) * 65536.0 - 0.5).to(tl.int32)


@triton.jit
def _words(seed, j, N_ROUNDS: tl.constexpr):
    """[.., K] counters -> [.., 2K] words: word 4j+i = output i of Philox(seed, counter j)."""
    w0, w1, w2, w3 = tl.randint4x(seed, j, N_ROUNDS)
    return tl.join(tl.join(w0, w2), tl.join(w1, w3))


@triton.jit
def _keep2d(seed, rows, N, p, ROWS: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr,
            MASK: tl.constexpr, DROP_ALL: tl.constexpr, N_ROUNDS: tl.constexpr):
    """keep for [ROWS, BLOCK]: column 8j + 2i + h of row r gets half h of word i of counter
    r * ceil(N/8) + j: the solution's `_keep` (HALF_WORDS), for several rows at once."""
    if EVEN:
        q = BLOCK // 8
    else:
        q = (N + 7) // 8
    j = rows[:, None] * q + tl.arange(0, BLOCK // 8)[None, :]
    words = tl.reshape(_words(seed, j, N_ROUNDS), [ROWS, BLOCK // 2])
    if MASK == 0:
        u16 = tl.reshape(tl.join(words & 0xFFFF, (words >> 16) & 0xFFFF), [ROWS, BLOCK])
        keep = u16.to(tl.float32) + 0.5 >= p * 65536.0
    elif MASK == 1:
        u16 = tl.reshape(tl.join(words & 0xFFFF, words >> 16), [ROWS, BLOCK])
        keep = u16 >= _drop_t(p).to(tl.uint32)
    else:
        t = _drop_t(p)
        lo = (words & 0xFFFF) >= t.to(tl.uint32)
        hi = words >= (tl.minimum(t, 65535).to(tl.uint32) << 16)
        if DROP_ALL:
            hi = lo              # t = 65536: lo is all False, and so must hi be
        keep = tl.reshape(tl.join(lo, hi), [ROWS, BLOCK])
    return keep


@triton.jit
def _keep1d(seed, row, N, p, BLOCK: tl.constexpr, EVEN: tl.constexpr, MASK: tl.constexpr,
            DROP_ALL: tl.constexpr, N_ROUNDS: tl.constexpr):
    """_keep2d for one row (a scalar), in 1D layouts (the backward's row loop)."""
    if EVEN:
        q = BLOCK // 8
    else:
        q = (N + 7) // 8
    j = row * q + tl.arange(0, BLOCK // 8)
    words = tl.reshape(_words(seed, j, N_ROUNDS), [BLOCK // 2])
    if MASK == 0:
        u16 = tl.reshape(tl.join(words & 0xFFFF, (words >> 16) & 0xFFFF), [BLOCK])
        keep = u16.to(tl.float32) + 0.5 >= p * 65536.0
    elif MASK == 1:
        u16 = tl.reshape(tl.join(words & 0xFFFF, words >> 16), [BLOCK])
        keep = u16 >= _drop_t(p).to(tl.uint32)
    else:
        t = _drop_t(p)
        lo = (words & 0xFFFF) >= t.to(tl.uint32)
        hi = words >= (tl.minimum(t, 65535).to(tl.uint32) << 16)
        if DROP_ALL:
            hi = lo
        keep = tl.reshape(tl.join(lo, hi), [BLOCK])
    return keep


@triton.jit
def _unpack2d(xw, R: tl.constexpr, BLOCK: tl.constexpr):
    """[R, BLOCK/2] words of bf16 pairs -> [R, BLOCK] float32 (bf16 is float32's top half)."""
    lo = (xw << 16).to(tl.float32, bitcast=True)
    hi = (xw & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [R, BLOCK])


@triton.jit
def _unpack1d(xw, BLOCK: tl.constexpr):
    lo = (xw << 16).to(tl.float32, bitcast=True)
    hi = (xw & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [BLOCK])


@triton.jit
def _fwd_v(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, M, N, eps, p, seed,
           scale_hi, scale_lo,
           BLOCK: tl.constexpr, ROWS: tl.constexpr, EVEN: tl.constexpr, MASK: tl.constexpr,
           DROP_ALL: tl.constexpr, FOLD: tl.constexpr, BITS: tl.constexpr,
           ONEPASS: tl.constexpr, N_ROUNDS: tl.constexpr, RZERO: tl.constexpr):
    """The solution's one-block forward (float32 math), ROWS rows per program, with switches."""
    scale = scale_hi + scale_lo
    if RZERO:   # +0 as a runtime value: LLVM then keeps the select on float32 (see the edits)
        zero = p * 0.0
    else:
        zero = 0.0
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    if EVEN:  # N == BLOCK and M % ROWS == 0: no masks; strides are constants
        offs = rows[:, None] * BLOCK + cols[None, :]
        if BITS:
            u32 = tl.pointer_type(tl.uint32)
            half = tl.arange(0, BLOCK // 2)
            x = _unpack2d(tl.load(x_ptr.to(u32) + rows[:, None] * (BLOCK // 2) + half[None, :]),
                          ROWS, BLOCK)
            w = _unpack2d(tl.load(w_ptr.to(u32) + half)[None, :], 1, BLOCK)
            b = _unpack2d(tl.load(b_ptr.to(u32) + half)[None, :], 1, BLOCK)
        else:
            x = tl.load(x_ptr + offs).to(tl.float32)
            w = tl.load(w_ptr + cols).to(tl.float32)[None, :]
            b = tl.load(b_ptr + cols).to(tl.float32)[None, :]
    else:
        offs = rows[:, None] * N + cols[None, :]
        m2 = (rows[:, None] < M) & (cols[None, :] < N)
        x = tl.load(x_ptr + offs, mask=m2, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    if ONEPASS:
        # shifted one-pass statistics, k = the row's first element: var = E[d^2] - E[d]^2 with
        # d = x - k (no cancellation for a large mean: d is O(spread)); one block reduction
        if EVEN:
            k = tl.load(x_ptr + rows * BLOCK).to(tl.float32)
            d = x - k[:, None]
        else:
            k = tl.load(x_ptr + rows * N, mask=rows < M, other=0.0).to(tl.float32)
            d = tl.where(m2, x - k[:, None], 0.0)
        s1, s2 = tl.reduce((d, d * d), 1, _add2)
        md = s1 / N
        mean = k + md
        rstd = 1.0 / tl.sqrt(tl.maximum(s2 / N - md * md, 0.0) + eps)
        if FOLD:
            rs = rstd * scale
            y = (d * rs[:, None] - (md * rs)[:, None]) * w + b * scale
        else:
            y = ((d * rstd[:, None] - (md * rstd)[:, None]) * w + b) * scale
    else:
        mean = tl.sum(x, axis=1) / N
        xc = x - mean[:, None]
        if not EVEN:
            xc = tl.where(m2, xc, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
        if FOLD:
            y = xc * (rstd * scale)[:, None] * w + b * scale
        else:
            y = (xc * rstd[:, None] * w + b) * scale
    keep = _keep2d(seed, rows, N, p, ROWS, BLOCK, EVEN, MASK, DROP_ALL, N_ROUNDS)
    y = tl.where(keep, y, zero).to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(y_ptr + offs, y)
        tl.store(mean_ptr + rows, mean)
        tl.store(rstd_ptr + rows, rstd)
    else:
        tl.store(y_ptr + offs, y, mask=m2)
        tl.store(mean_ptr + rows, mean, mask=rows < M)
        tl.store(rstd_ptr + rows, rstd, mask=rows < M)


@triton.jit
def _bwd_v(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, part_ptr, M, N, p, seed,
           scale_hi, scale_lo,
           BLOCK: tl.constexpr, EVEN: tl.constexpr, WANT_DWB: tl.constexpr, MASK: tl.constexpr,
           DROP_ALL: tl.constexpr, FOLD: tl.constexpr, BITS: tl.constexpr, RED2: tl.constexpr,
           N_ROUNDS: tl.constexpr, STAGES: tl.constexpr):
    """The solution's one-block persistent backward (float32 math), with switches. STAGES > 1:
    the row loop's loads pipelined (cp.async into shared memory, STAGES - 1 rows ahead)."""
    scale = scale_hi + scale_lo
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    dw_part = part_ptr + pid.to(tl.int64) * N
    db_part = dw_part + nprog.to(tl.int64) * N
    cols = tl.arange(0, BLOCK)
    half = tl.arange(0, BLOCK // 2)
    u32 = tl.pointer_type(tl.uint32)
    if EVEN:
        if BITS:
            w = _unpack1d(tl.load(w_ptr.to(u32) + half), BLOCK)
        else:
            w = tl.load(w_ptr + cols).to(tl.float32)
    else:
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    if FOLD:
        w = w * scale            # g below is dy * keep, without the scale
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    db = tl.zeros([BLOCK], dtype=tl.float32)
    for row in tl.range(pid.to(tl.int64), M, nprog, num_stages=STAGES):
        if EVEN:
            if BITS:
                x = _unpack1d(tl.load(x_ptr.to(u32) + row * (BLOCK // 2) + half), BLOCK)
                dy = _unpack1d(tl.load(dy_ptr.to(u32) + row * (BLOCK // 2) + half), BLOCK)
            else:
                x = tl.load(x_ptr + row * BLOCK + cols).to(tl.float32)
                dy = tl.load(dy_ptr + row * BLOCK + cols).to(tl.float32)
        else:
            x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = (x - mean) * rstd
        if not EVEN:
            xhat = tl.where(cols < N, xhat, 0.0)
        keep = _keep1d(seed, row, N, p, BLOCK, EVEN, MASK, DROP_ALL, N_ROUNDS)
        if FOLD:
            g = tl.where(keep, dy, 0.0)
        else:
            g = tl.where(keep, dy * scale, 0.0)
        wg = w * g
        if RED2:
            s1, s2 = tl.reduce((xhat * wg, wg), 0, _add2)
        else:
            s1 = tl.sum(xhat * wg, axis=0)
            s2 = tl.sum(wg, axis=0)
        c1 = s1 / N
        c2 = s2 / N
        if FOLD:
            dx = wg * rstd - c2 * rstd - xhat * (c1 * rstd)
        else:
            dx = (wg - c2 - xhat * c1) * rstd
        if EVEN:
            tl.store(dx_ptr + row * BLOCK + cols, dx.to(dx_ptr.dtype.element_ty))
        else:
            tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=cols < N)
        if WANT_DWB:
            dw += g * xhat
            db += g
    if WANT_DWB:
        if FOLD:
            dw = dw * scale
            db = db * scale
        tl.store(dw_part + cols, dw, mask=cols < N)
        tl.store(db_part + cols, db, mask=cols < N)


@triton.jit
def _rule_kernel(p_ptr, out_ptr, BLOCK: tl.constexpr):
    """For p = p_ptr[program 0] (float32) and u16 = program 1's BLOCK values: the float rule,
    the integer rule (_drop_t) and the unsplit upper-half rule, as the variant kernels compute
    them; out = 1 where they all agree, 0 elsewhere."""
    p = tl.load(p_ptr + tl.program_id(0))
    u = (tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)).to(tl.uint32)
    keep_f = u.to(tl.float32) + 0.5 >= p * 65536.0
    t = _drop_t(p)
    keep_i = u >= t.to(tl.uint32)
    keep_h = ((u << 16) >= (tl.minimum(t, 65535).to(tl.uint32) << 16)) & (t < 65536)
    ok = (keep_f == keep_i) & (keep_f == keep_h)
    tl.store(out_ptr + tl.program_id(0).to(tl.int64) * 65536 + tl.program_id(1) * BLOCK
             + tl.arange(0, BLOCK), ok.to(tl.int8))


@triton.jit
def _u16_kernel(out_ptr, N, seed, BLOCK: tl.constexpr, N_ROUNDS: tl.constexpr):
    """The 16-bit uniforms of a row (program r), as the solution's _keep (HALF_WORDS) lays
    them out: column 8j + 2i + h = half h of word i of Philox(seed, r * ceil(N/8) + j)."""
    row = tl.program_id(0).to(tl.int64)
    j = row * ((N + 7) // 8) + tl.arange(0, BLOCK // 8)
    words = tl.reshape(_words(seed, j, N_ROUNDS), [BLOCK // 2])
    u16 = tl.reshape(tl.join(words & 0xFFFF, words >> 16), [BLOCK])
    tl.store(out_ptr + row * BLOCK + tl.arange(0, BLOCK), u16.to(tl.int32))


def u16_of(M, N, seed, device, n_rounds=7):
    block = max(16, triton.next_power_of_2(N))
    out = torch.empty((M, block), dtype=torch.int32, device=device)
    _u16_kernel[(M,)](out, N, seed, BLOCK=block, N_ROUNDS=n_rounds)
    return out[:, :N]


def boundary_ps(u16, count=3, seed=0):
    """p values that put the threshold T exactly at (or one past) a u16 value present in the
    sample, so an off-by-one threshold flips a sampled element: for v drawn from u16,
    p = (v + 1/2) / 65536 (T = v), its float32 neighbours (T = v and T = v + 1), and
    (v - 1/2) / 65536 (T = v - 1 or 0); plus v = 0 and v = 65535 ends."""
    vals = u16.flatten().cpu().numpy()
    rng = np.random.default_rng(seed)
    vs = list(rng.choice(vals, count)) + [int(vals.min()), int(vals.max())]
    ps = []
    for v in vs:
        c = np.float32((int(v) + 0.5) / 65536)
        ps += [float(c), float(np.nextafter(c, np.float32(2))),
               float(np.nextafter(c, np.float32(-1))), max(0.0, (int(v) - 0.5) / 65536)]
    return [p for p in ps if 0.0 <= p <= 1.0]


@triton.jit
def _rule_scalar_kernel(out_ptr, p):
    """The threshold the kernels compute from a scalar p argument (the launcher's float32)."""
    tl.store(out_ptr, _drop_t(p))


# --- variants: the solution module with its launchers replaced, or its text edited -----------

def _ept_warps(elems: int, ept: int) -> int:
    return max(1, min(16, elems // (32 * ept)))


def _forward_v(sol, orig_forward, cfg, x, w, b, p, seed, eps):
    N = x.shape[-1]
    if x.dtype == torch.float64 or N > sol.MAX_FWD_BLOCK or x.numel() == 0:
        return orig_forward(x, w, b, p, seed, eps)
    x = x.contiguous()
    w, b = w.contiguous(), b.contiguous()
    M = x.numel() // N
    y = torch.empty_like(x)
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    block = max(16, triton.next_power_of_2(N))
    rows = cfg.get("ROWS", 1)
    even = cfg.get("EVEN", True) and N == block and M % rows == 0
    bits = (cfg.get("BITS", False) and even and x.dtype == torch.bfloat16
            and all(t.data_ptr() % 4 == 0 for t in (x, w, b)))
    hi, lo = sol._scale(p)
    k = _fwd_v[(triton.cdiv(M, rows),)](
        x, w, b, y, mean, rstd, M, N, eps, p, seed, hi, lo,
        BLOCK=block, ROWS=rows, EVEN=even, MASK=cfg.get("MASK", 0),
        DROP_ALL=drop_threshold(p) >= 65536, FOLD=cfg.get("FOLD", False), BITS=bits,
        ONEPASS=cfg.get("ONEPASS", False), N_ROUNDS=sol.N_ROUNDS, RZERO=cfg.get("RZERO", True),
        num_warps=_ept_warps(block * rows, cfg.get("ept", 16)))
    KERNELS.setdefault(("fwd", cfg["_name"], N, str(x.dtype)), k)
    USED.add(("fwd", cfg["_name"]))
    return x, y, mean, rstd


def _backward_v(sol, orig_backward, cfg, dy, x, w, mean, rstd, p, seed, want_dwb):
    N = x.shape[-1]
    M = x.numel() // N
    if x.dtype == torch.float64 or N > sol.MAX_BWD_BLOCK or M == 0:
        return orig_backward(dy, x, w, mean, rstd, p, seed, want_dwb)
    dy = dy.contiguous()
    dx = torch.empty_like(x)
    dw = torch.empty_like(w) if want_dwb else None
    db = torch.empty_like(w) if want_dwb else None
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        programs = min(M, sms * cfg.get("pps", sol.PROGRAMS_PER_SM))
    else:
        programs = min(M, sol.CPU_PROGRAMS)
    partials = torch.empty((2, programs, N) if want_dwb else (1,), dtype=torch.float32,
                           device=x.device)
    block = max(16, triton.next_power_of_2(N))
    even = cfg.get("EVEN", True) and N == block
    bits = (cfg.get("BITS", False) and even and x.dtype == torch.bfloat16
            and all(t.data_ptr() % 4 == 0 for t in (x, w, dy)))
    hi, lo = sol._scale(p)
    k = _bwd_v[(programs,)](
        dy, x, w, mean, rstd, dx, partials, M, N, p, seed, hi, lo,
        BLOCK=block, EVEN=even, WANT_DWB=want_dwb, MASK=cfg.get("MASK", 0),
        DROP_ALL=drop_threshold(p) >= 65536, FOLD=cfg.get("FOLD", False), BITS=bits,
        RED2=cfg.get("RED2", False), N_ROUNDS=sol.N_ROUNDS, STAGES=cfg.get("STAGES", 1),
        num_warps=_ept_warps(block, cfg.get("ept", 16)))
    KERNELS.setdefault(("bwd", cfg["_name"], N, str(x.dtype)), k)
    USED.add(("bwd", cfg["_name"]))
    if want_dwb:
        sum_block = 256
        sol._sum_partials_kernel[(triton.cdiv(N, sum_block), 2)](partials, dw, db, programs, N,
                                                                 BLOCK=sum_block, num_warps=4)
    return dx, dw, db


KERNELS = {}   # (pass, variant, N, dtype) -> the CompiledKernel launched (for the SASS report)
USED = set()   # (pass, variant): this script's kernel ran (not the solution's fallback)
_count = [0]


def make_variant(name, fwd=None, bwd=None, edits=None):
    """A fresh copy of the solution module: `edits` [(old, new)] applied to its text (each old
    must occur exactly once), then `_forward` / `_backward` replaced by this script's kernels
    when `fwd` / `bwd` configs are given."""
    _count[0] += 1
    modname = f"sol10_{_count[0]}_{re.sub(r'[^A-Za-z0-9]', '_', name)}"
    path = SOL_PATH
    if edits:
        src = SOL_PATH.read_text()
        new = apply_edits(src, edits)
        # per process (the precompile workers write the same variants at the same time)
        path = Path(tempfile.gettempdir()) / f"ex10_variants_{os.getpid()}" / f"{modname}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(new)
        tmp.replace(path)
    mod = load(path, modname)
    assert mod.HALF_WORDS and mod.FOUR_PER_CALL, "the variants implement the HALF_WORDS mask"
    if fwd is not None:
        orig, cfg = mod._forward, dict(fwd, _name=name)
        mod._forward = lambda *a, _m=mod, _o=orig, _c=cfg: _forward_v(_m, _o, _c, *a)
    if bwd is not None:
        orig_b, cfg_b = mod._backward, dict(bwd, _name=name)
        mod._backward = lambda *a, _m=mod, _o=orig_b, _c=cfg_b: _backward_v(_m, _o, _c, *a)
    mod.VARIANT_NAME = name
    mod.VARIANT_PATH = path
    return mod


def apply_edits(src, edits):
    for old, new in edits:
        n = src.count(old)
        if n != 1:
            raise ValueError(f"edit expects exactly one occurrence, found {n}: {old[:80]!r}")
        src = src.replace(old, new)
    return src


# The diff proposed for the solution, as text edits (the `sol+proposal` variant; printed as a
# unified diff in the log). Smaller steps of it are variants too (`sol+intT`, ...).
EDIT_INT_THRESHOLD = [(
    """        # drop when u16 + 1/2 < 65536 p (exact in float32): round(65536 p) of the 65536 values,
        # probability within 2^-17 of p; p = 0 drops none, p = 1 all
        keep = u16.to(tl.float32) + 0.5 >= p * 65536.0
""",
    """        # drop when u16 + 1/2 < 65536 p (exact in float32): round(65536 p) of the 65536 values,
        # probability within 2^-17 of p; p = 0 drops none, p = 1 all. Compared as integers, with
        # no int->float conversion per element: u16 + 1/2 >= P <=> u16 >= T = ceil(P - 1/2),
        # P = p * 65536 (exact in float32; so is P - 1/2 when P >= 1/2, and when P < 1/2 the
        # ceil is 0 = T either way): the same keep/drop decision for every u16 and every p
        # (the cast: a no-op on the GPU, where p arrives as float32; the interpreter passes
        # a Python float, which must be rounded to float32 first, as the GPU's launcher does)
        t = tl.math.ceil(tl.cast(p, tl.float32) * 65536.0 - 0.5).to(tl.uint32)   # 0 .. 65536
        keep = u16 >= t
"""),
    ("""    scale = tl.cast(scale_hi, acc_ty) + tl.cast(scale_lo, acc_ty)
    row = tl.program_id(0).to(tl.int64)          # int64: row * N passes 2^31 on big inputs""",
     """    scale = tl.cast(scale_hi, acc_ty) + tl.cast(scale_lo, acc_ty)
    # the dropped value, +0 (p is finite), as a value the compiler cannot see: with the literal
    # 0.0 and an integer keep, LLVM moves the select below the rounding to y's dtype and picks
    # 16-bit halves with byte permutes (sm_90 SASS: ~1.2 instructions per element more)
    zero = p * 0.0
    row = tl.program_id(0).to(tl.int64)          # int64: row * N passes 2^31 on big inputs"""),
    ("""        tl.store(y_row + cols, tl.where(keep, z * scale, 0.0).to(y_ptr.dtype.element_ty),
                 mask=mask)""",
     """        tl.store(y_row + cols, tl.where(keep, z * scale, zero).to(y_ptr.dtype.element_ty),
                 mask=mask)"""),
    ("""            tl.store(y_row + c, tl.where(keep, z * scale, 0.0).to(y_ptr.dtype.element_ty),
                     mask=mask)""",
     """            tl.store(y_row + c, tl.where(keep, z * scale, zero).to(y_ptr.dtype.element_ty),
                     mask=mask)"""),
]

EDIT_EVEN = [
    # forward: N == BLOCK (the graded 4096 columns) loads and stores without masks and skips
    # the where() on x - mean
    ("""                BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr,
                FOUR: tl.constexpr, N_ROUNDS: tl.constexpr, HALF: tl.constexpr):
    # math in float32""",
     """                BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr,
                FOUR: tl.constexpr, N_ROUNDS: tl.constexpr, HALF: tl.constexpr,
                EVEN: tl.constexpr = False):             # N == BLOCK: no column masks
    # math in float32"""),
    ("""        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(acc_ty)
        mean = tl.sum(x, axis=0) / N
        xc = tl.where(mask, x - mean, 0.0)       # two passes over registers: no E[x^2]-E[x]^2
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(acc_ty)
        z = xc * rstd * w + b
        keep = _keep(seed, row, 0, N, p, BLOCK, FOUR, N_ROUNDS, HALF)
        tl.store(y_row + cols, tl.where(keep, z * scale, zero).to(y_ptr.dtype.element_ty),
                 mask=mask)
""",
     """        mask = cols < N
        if EVEN:   # no masks: ~2 SASS instructions per element fewer (FSEL, predicates)
            x = tl.load(x_row + cols).to(acc_ty)
        else:
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(acc_ty)
        mean = tl.sum(x, axis=0) / N
        xc = x - mean                            # two passes over registers: no E[x^2]-E[x]^2
        if not EVEN:
            xc = tl.where(mask, xc, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
        if EVEN:
            w = tl.load(w_ptr + cols).to(acc_ty)
            b = tl.load(b_ptr + cols).to(acc_ty)
        else:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty)
            b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(acc_ty)
        z = xc * rstd * w + b
        keep = _keep(seed, row, 0, N, p, BLOCK, FOUR, N_ROUNDS, HALF)
        y = tl.where(keep, z * scale, zero).to(y_ptr.dtype.element_ty)
        if EVEN:
            tl.store(y_row + cols, y)
        else:
            tl.store(y_row + cols, y, mask=mask)
"""),
    ("""                      FOUR=FOUR_PER_CALL, N_ROUNDS=N_ROUNDS, HALF=HALF_WORDS,
                      num_warps=_num_warps(block))""",
     """                      FOUR=FOUR_PER_CALL, N_ROUNDS=N_ROUNDS, HALF=HALF_WORDS,
                      EVEN=one_block and N == block, num_warps=_fwd_num_warps(block))"""),
    ("""def _block(n: int, max_block: int) -> tuple[int, bool]:""",
     """def _fwd_num_warps(block: int) -> int:
    return _num_warps(block)


def _block(n: int, max_block: int) -> tuple[int, bool]:"""),
]

EDIT_FWD_4WARPS = [(
    """def _fwd_num_warps(block: int) -> int:
    return _num_warps(block)
""",
    """def _fwd_num_warps(block: int) -> int:
    # the forward: ~32 elements per thread (4096 columns -> 4 warps), not 16: the fixed work
    # of a thread (addresses, Philox's key schedule, the reductions, 1/sqrt: ~125 SASS
    # instructions) is then shared by twice the elements (sm_90 SASS per element: ~29 -> ~24)
    return max(4, block // 1024)
""")]

# the backward: EVEN, the two row sums in one reduction, w * scale hoisted out of the row loop
EDIT_BWD = [
    ("""                WANT_DWB: tl.constexpr,                    # dw or db asked for
                FOUR: tl.constexpr, N_ROUNDS: tl.constexpr, HALF: tl.constexpr):""",
     """                WANT_DWB: tl.constexpr,                    # dw or db asked for
                FOUR: tl.constexpr, N_ROUNDS: tl.constexpr, HALF: tl.constexpr,
                EVEN: tl.constexpr = False,                # N == BLOCK: no column masks
                STAGES: tl.constexpr = 1):                 # > 1: the row loop's loads pipelined"""),
    ("""    if ONE_BLOCK:
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty)   # once per program
        dw = tl.zeros([BLOCK], dtype=acc_ty)
        db = tl.zeros([BLOCK], dtype=acc_ty)
        for row in range(pid.to(tl.int64), M, nprog):
            x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
            dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            keep = _keep(seed, row, 0, N, p, BLOCK, FOUR, N_ROUNDS, HALF)   # regenerated, not loaded
            g = tl.where(keep, dy * scale, 0.0)
            wg = w * g
            c1 = tl.sum(xhat * wg, axis=0) / N
            c2 = tl.sum(wg, axis=0) / N
            dx = (wg - c2 - xhat * c1) * rstd
            tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            if WANT_DWB:
                dw += g * xhat
                db += g
        if WANT_DWB:
            tl.store(dw_part + cols, dw, mask=mask)
            tl.store(db_part + cols, db, mask=mask)
""",
     """    if ONE_BLOCK:
        mask = cols < N
        if EVEN:
            ws = tl.load(w_ptr + cols).to(acc_ty) * scale              # once per program
        else:
            ws = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty) * scale
        dw = tl.zeros([BLOCK], dtype=acc_ty)     # sums of g * xhat / scale and g / scale
        db = tl.zeros([BLOCK], dtype=acc_ty)
        for row in tl.range(pid.to(tl.int64), M, nprog, num_stages=STAGES):
            if EVEN:
                x = tl.load(x_ptr + row * N + cols).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + cols).to(acc_ty)
            else:
                x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            xhat = (x - mean) * rstd
            if not EVEN:
                xhat = tl.where(mask, xhat, 0.0)
            keep = _keep(seed, row, 0, N, p, BLOCK, FOUR, N_ROUNDS, HALF)   # regenerated, not loaded
            gs = tl.where(keep, dy, 0.0)         # g / scale (the scale is in ws)
            wg = ws * gs
            s1, s2 = tl.reduce((xhat * wg, wg), 0, _add2)   # both row sums, one reduction
            c1 = s1 / N
            c2 = s2 / N
            dx = (wg - c2 - xhat * c1) * rstd
            if EVEN:
                tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty))
            else:
                tl.store(dx_ptr + row * N + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            if WANT_DWB:
                dw += gs * xhat
                db += gs
        if WANT_DWB:
            tl.store(dw_part + cols, dw * scale, mask=mask)
            tl.store(db_part + cols, db * scale, mask=mask)
"""),
    ("""@triton.jit
def _bwd_kernel(""",
     """@triton.jit
def _add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _bwd_kernel("""),
    ("""                             WANT_DWB=want_dwb, FOUR=FOUR_PER_CALL, N_ROUNDS=N_ROUNDS,
                             HALF=HALF_WORDS, num_warps=_num_warps(block))""",
     """                             WANT_DWB=want_dwb, FOUR=FOUR_PER_CALL, N_ROUNDS=N_ROUNDS,
                             HALF=HALF_WORDS, EVEN=one_block and N == block,
                             STAGES=BWD_STAGES, num_warps=_num_warps(block))"""),
    ("""PROGRAMS_PER_SM = 4     # backward programs per SM""",
     """BWD_STAGES = 1          # > 1: the backward's row loop prefetches x, dy (cp.async)
PROGRAMS_PER_SM = 4     # backward programs per SM"""),
]

PROPOSAL = EDIT_INT_THRESHOLD + EDIT_EVEN + EDIT_FWD_4WARPS + EDIT_BWD


def edit_bwd_stages(k):
    return [("BWD_STAGES = 1          #", f"BWD_STAGES = {k}          #")]

# bf16 loaded as 32-bit words (forward x, w, b; backward x, dy, w) when N == BLOCK: a bf16 is
# the upper half of its float32, so a word unpacks with one shift and one AND (Triton's own
# conversion spends a byte permute and a shift on the upper bf16 of each word)
EDIT_BITS = [
    ("""@triton.jit
def _fwd_kernel(""",
     """@triton.jit
def _load_bf16x2(ptr, BLOCK: tl.constexpr):
    \"\"\"BLOCK bfloat16 at a 4-byte aligned ptr, as float32: one 32-bit word per pair, the even
    column its low half (a shift), the odd column its high half (an AND): a bf16 is the upper
    half of its float32. Triton's own conversion spends a permute and a shift on the odd one.\"\"\"
    wd = tl.load(ptr.to(tl.pointer_type(tl.uint32)) + tl.arange(0, BLOCK // 2))
    lo = (wd << 16).to(tl.float32, bitcast=True)
    hi = (wd & 0xFFFF0000).to(tl.float32, bitcast=True)
    return tl.reshape(tl.join(lo, hi), [BLOCK])


@triton.jit
def _fwd_kernel("""),
    ("""                EVEN: tl.constexpr = False):             # N == BLOCK: no column masks
    # math in float32""",
     """                EVEN: tl.constexpr = False,              # N == BLOCK: no column masks
                BITS: tl.constexpr = False):             # EVEN, bf16, 4-byte aligned
    # math in float32"""),
    ("""        if EVEN:   # no masks: ~2 SASS instructions per element fewer (FSEL, predicates)
            x = tl.load(x_row + cols).to(acc_ty)
        else:""",
     """        if BITS:
            x = _load_bf16x2(x_row, BLOCK)
        elif EVEN:   # no masks: ~2 SASS instructions per element fewer (FSEL, predicates)
            x = tl.load(x_row + cols).to(acc_ty)
        else:"""),
    ("""        if EVEN:
            w = tl.load(w_ptr + cols).to(acc_ty)
            b = tl.load(b_ptr + cols).to(acc_ty)
        else:""",
     """        if BITS:
            w = _load_bf16x2(w_ptr, BLOCK)
            b = _load_bf16x2(b_ptr, BLOCK)
        elif EVEN:
            w = tl.load(w_ptr + cols).to(acc_ty)
            b = tl.load(b_ptr + cols).to(acc_ty)
        else:"""),
    ("""                      EVEN=one_block and N == block, num_warps=_fwd_num_warps(block))""",
     """                      EVEN=one_block and N == block,
                      BITS=_bits(one_block and N == block, x, w, b),
                      num_warps=_fwd_num_warps(block))"""),
    ("""def _fwd_num_warps(block: int) -> int:""",
     """def _bits(even: bool, *tensors) -> bool:
    # bf16 read as 32-bit words: whole rows of even length, 4-byte aligned (a view can start
    # at an odd element)
    return even and tensors[0].dtype == torch.bfloat16 and all(
        t.data_ptr() % 4 == 0 for t in tensors)


def _fwd_num_warps(block: int) -> int:"""),
    # the backward
    ("""                EVEN: tl.constexpr = False,                # N == BLOCK: no column masks
                STAGES: tl.constexpr = 1):                 # > 1: the row loop's loads pipelined""",
     """                EVEN: tl.constexpr = False,                # N == BLOCK: no column masks
                STAGES: tl.constexpr = 1,                  # > 1: the row loop's loads pipelined
                BITS: tl.constexpr = False):               # EVEN, bf16, 4-byte aligned"""),
    ("""        if EVEN:
            ws = tl.load(w_ptr + cols).to(acc_ty) * scale              # once per program""",
     """        if BITS:
            ws = _load_bf16x2(w_ptr, BLOCK) * scale
        elif EVEN:
            ws = tl.load(w_ptr + cols).to(acc_ty) * scale              # once per program"""),
    ("""            if EVEN:
                x = tl.load(x_ptr + row * N + cols).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + cols).to(acc_ty)""",
     """            if BITS:
                x = _load_bf16x2(x_ptr + row * N, BLOCK)
                dy = _load_bf16x2(dy_ptr + row * N, BLOCK)
            elif EVEN:
                x = tl.load(x_ptr + row * N + cols).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + cols).to(acc_ty)"""),
    ("""                             HALF=HALF_WORDS, EVEN=one_block and N == block,
                             STAGES=BWD_STAGES, num_warps=_num_warps(block))""",
     """                             HALF=HALF_WORDS, EVEN=one_block and N == block,
                             BITS=_bits(one_block and N == block, x, w, dy),
                             STAGES=BWD_STAGES, num_warps=_num_warps(block))"""),
]


def variant_specs():
    """(name, fwd cfg or None, bwd cfg or None, text edits or None, what it tests), the most
    informative first (a run short of time drops the tail)."""
    S = []
    base = dict(MASK=0, EVEN=False, BITS=False, ept=16)
    f4 = dict(base, EVEN=True, BITS=True, MASK=3, ept=32)
    bb = dict(MASK=0, EVEN=False, BITS=False, FOLD=False, RED2=False, ept=16, pps=4)
    # the solution file with the proposed edits, and its steps
    S.append(("sol+proposal", None, None, PROPOSAL,
              "solution + intT + even + fwd 4 warps + bwd (even, one reduction, scale hoisted)"))
    S.append(("sol+proposal+bits", None, None, PROPOSAL + EDIT_BITS,
              "+ bf16 read as 32-bit words (fwd x, w, b; bwd x, dy, w)"))
    S.append(("sol+proposal+st2", None, None, PROPOSAL + edit_bwd_stages(2),
              "+ backward row loop pipelined, 2 stages (x, dy of the next row in flight)"))
    S.append(("sol+proposal+bits+st2", None, None, PROPOSAL + EDIT_BITS + edit_bwd_stages(2),
              "bits and 2 stages"))
    S.append(("sol+proposal+st3", None, None, PROPOSAL + edit_bwd_stages(3),
              "backward row loop pipelined, 3 stages"))
    S.append(("sol+intT", None, None, EDIT_INT_THRESHOLD,
              "solution + integer threshold in _keep (fwd and bwd), nothing else"))
    S.append(("sol+intT+even", None, None, EDIT_INT_THRESHOLD + EDIT_EVEN,
              "+ no column masks when N == BLOCK (fwd)"))
    S.append(("sol+intT+even+4w", None, None, EDIT_INT_THRESHOLD + EDIT_EVEN + EDIT_FWD_4WARPS,
              "+ forward 4 warps (32 elements per thread)"))
    # this script's kernels: one switch at a time
    S.append(("k:base", base, None, None, "script kernel = solution's fwd (harness check)"))
    S.append(("k:mask1", dict(base, MASK=1), None, None, "integer threshold, split halves"))
    S.append(("k:mask3", dict(base, MASK=3), None, None, "integer threshold, unsplit upper half"))
    S.append(("k:mask3 lit0", dict(base, MASK=3, RZERO=False), None, None,
              "integer threshold, literal 0.0 in the select"))
    S.append(("k:even", dict(base, EVEN=True), None, None, "no column masks"))
    S.append(("k:even+bits", dict(base, EVEN=True, BITS=True), None, None,
              "+ bf16 unpacked from 32-bit words"))
    S.append(("k:even+bits+m3", dict(base, EVEN=True, BITS=True, MASK=3), None, None,
              "+ integer threshold (unsplit)"))
    S.append(("k:even+bits+m3 4w", f4, None, None, "4 warps (32 elements/thread)"))
    S.append(("k:even+bits+m3 4w lit0", dict(f4, RZERO=False), None, None,
              "4 warps, int rule, literal 0.0 in the select (LLVM sinks it: PRMTs)"))
    S.append(("k:even+bits+m1 4w", dict(f4, MASK=1), None, None, "4 warps, split int rule"))
    S.append(("k:even+bits+m0 4w", dict(f4, MASK=0), None, None, "4 warps, float rule"))
    S.append(("k:even+m3 4w", dict(f4, BITS=False), None, None, "4 warps, no bits"))
    S.append(("k:even+bits+m3 2w", dict(f4, ept=64), None, None, "2 warps (64 el./thread)"))
    S.append(("k:R2 fold 8w", dict(f4, ROWS=2, FOLD=True, ept=32), None, None,
              "2 rows per program, 8 warps (w, b, b*scale once per 2 rows)"))
    S.append(("k:R2 fold 4w", dict(f4, ROWS=2, FOLD=True, ept=64), None, None,
              "2 rows per program, 4 warps"))
    S.append(("k:onepass 4w", dict(f4, ONEPASS=True), None, None,
              "one block reduction (shifted one-pass statistics)"))
    # backward variants (forward: k:even+bits+m3 4w)
    S.append(("kb:base", f4, bb, None, "bwd: script kernel = solution's bwd"))
    S.append(("kb:even+m3", f4, dict(bb, EVEN=True, MASK=3), None, "bwd: no masks, int rule"))
    S.append(("kb:all", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True, RED2=True),
              None, "bwd: even, int rule, bits, scale hoisted, one reduction"))
    S.append(("kb:all m0", f4, dict(bb, EVEN=True, BITS=True, FOLD=True, RED2=True),
              None, "bwd: all but the float rule"))
    S.append(("kb:all st2", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True, RED2=True,
                                     STAGES=2), None, "bwd: + loads pipelined, 2 stages"))
    S.append(("kb:all st3", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True, RED2=True,
                                     STAGES=3), None, "bwd: + loads pipelined, 3 stages"))
    S.append(("kb:all st2 pps2", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True,
                                          RED2=True, STAGES=2, pps=2), None,
              "bwd: 2 stages, 2 programs per SM"))
    S.append(("kb:all pps2", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True, RED2=True,
                                      pps=2), None, "bwd: 2 programs per SM (~128 regs: 2 fit)"))
    S.append(("kb:all 4w", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True, RED2=True,
                                    ept=32), None, "bwd: 4 warps"))
    S.append(("kb:all 16w pps2", f4, dict(bb, EVEN=True, MASK=3, BITS=True, FOLD=True,
                                          RED2=True, ept=8, pps=2), None, "bwd: 16 warps"))
    return S


# --- checks -----------------------------------------------------------------------------------

def mask_of(mod, x, p, seed, eps=1e-5):
    """The mask an implementation draws for x's shape: w = 0, b = 1 makes every kept output
    exactly 1 / (1 - p) (never 0), so y != 0 is the mask, whatever the arithmetic."""
    n = x.shape[-1]
    w0 = torch.zeros(n, dtype=x.dtype, device=x.device)
    b1 = torch.ones(n, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        return mod.layernorm_dropout(x, w0, b1, p, seed, eps) != 0


def expected_dx(x, w, dy, keep, p, eps=1e-5, chunk=4096):
    """float64 dx for the mask `keep` (reference.with_mask's gradient, in closed form, by row
    chunks to bound memory)."""
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    x2, dy2, k2, o2 = (t.reshape(-1, x.shape[-1]) for t in (x, dy, keep, out))
    wd = w.double()
    for s in range(0, x2.shape[0], chunk):
        xc = x2[s:s + chunk].double()
        mean = xc.mean(-1, keepdim=True)
        rstd = ((xc - mean).pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        xhat = (xc - mean) * rstd
        wg = wd * dy2[s:s + chunk].double() * k2[s:s + chunk] * scale
        o2[s:s + chunk] = rstd * (wg - wg.mean(-1, keepdim=True)
                                  - xhat * (xhat * wg).mean(-1, keepdim=True))
    return out


def expected_y(ref, x, w, b, keep, p, eps=1e-5, chunk=4096):
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    x2, k2, o2 = (t.reshape(-1, x.shape[-1]) for t in (x, keep, out))
    for s in range(0, x2.shape[0], chunk):
        o2[s:s + chunk] = ref.with_mask(x2[s:s + chunk].double(), w.double(), b.double(),
                                        k2[s:s + chunk], p, eps)
    return out


def _scale(p):
    return max(1.0, 0.0 if p >= 1.0 else 1.0 / (1.0 - p))


def grads(mod, x, w, b, p, seed, dy, eps=1e-5):
    xs, ws, bs = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y = mod.layernorm_dropout(xs, ws, bs, p, seed, eps)
    y.backward(dy)
    return y.detach(), xs.grad, ws.grad, bs.grad


# --- the CPU self-test (interpreter) ------------------------------------------------------------

def selftest(args):
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    from grader import interp
    interp.install()    # bf16 on values (grader/interp.py): bf16 runs are then meaningful
    ref = load(REF_PATH, "ref10")
    say("threshold: exhaustive over u16, numpy float32 emulation ...")
    n = cpu_threshold_test()
    say(f"threshold: {n} values of p x 65536 u16: the float rule == u16 >= T == the float32 "
        f"ceil == the unsplit upper-half rule")
    # the kernels' own threshold expressions on the interpreter (p a Python float there)
    ps = [0.0, 1.0, 0.1, 0.5, 1e-45, 2.0 ** -17, 1 - 2.0 ** -24, 6553.5 / 65536, 0.999999]
    out = torch.empty(1, dtype=torch.int32)
    for p in ps:
        _rule_scalar_kernel[(1,)](out, p)
        assert int(out) == drop_threshold(p), (p, int(out), drop_threshold(p))
        pt = torch.tensor([f32(p)], dtype=torch.float32)
        ok = torch.empty(65536, dtype=torch.int8)
        _rule_kernel[(1, 16)](pt, ok, BLOCK=4096)
        assert bool(ok.all()), p
    say(f"threshold: the kernels' expressions on the interpreter agree for {len(ps)} p")

    sol = load(SOL_PATH, "sol10_ref")
    # the model of the solution's mask this script relies on: keep = u16 >= T
    bshape, bseed = (4, 64), 77
    xb = torch.randn(bshape, generator=torch.Generator().manual_seed(5))
    u16 = u16_of(bshape[0], bshape[1], bseed, "cpu", sol.N_ROUNDS)
    bps = boundary_ps(u16)
    for p in bps:
        if not torch.equal(mask_of(sol, xb, p, bseed), u16 >= drop_threshold(p)):
            raise AssertionError(f"the solution's mask is not u16 >= T at p={p!r}")
    say(f"the solution's mask == (u16 >= drop_threshold(p)) for {len(bps)} boundary p values")
    specs = variant_specs()
    if args.only:
        specs = [s for s in specs if re.search(args.only, s[0])]
    shapes = [(6, 64), (5, 100), (3, 256), (2, 1, 128), (3, 16), (2, 7)]
    dtypes = [torch.float32, torch.float16, torch.bfloat16]
    p_list = [0.1, 0.0, 1.0, 0.5, 1 - 2.0 ** -18]
    failures = 0
    for name, fcfg, bcfg, edits, what in specs:
        mod = make_variant(name, fcfg, bcfg, edits)
        worst = 0.0
        failed_before = failures
        for shape in shapes:
            for dtype in dtypes:
                for p in p_list if shape == (6, 64) else [0.1]:
                    seed = 1234 + shape[-1]
                    g = torch.Generator().manual_seed(hash((shape, str(dtype))) % 2**31)
                    x = torch.randn(shape, generator=g).to(dtype)
                    w = (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
                    b = (0.1 * torch.randn(shape[-1], generator=g)).to(dtype)
                    dy = torch.randn(shape, generator=g).to(dtype)
                    ks = mask_of(sol, x, p, seed)
                    kv = mask_of(mod, x, p, seed)
                    if not torch.equal(ks, kv):
                        failures += 1
                        say(f"  FAIL {name} {shape} {dtype} p={p}: forward mask differs "
                            f"({int((ks != kv).sum())} of {ks.numel()})")
                        continue
                    y, dx, dw, db = grads(mod, x, w, b, p, seed, dy)
                    ye = expected_y(ref, x, w, b, ks, p)
                    if not torch.equal(y != 0, ks & (ye != 0)):
                        failures += 1
                        say(f"  FAIL {name} {shape} {dtype} p={p}: y's zeros are not the mask")
                    want = [ye] + list(_expected_grads(ref, x, w, b, ks, p, dy))
                    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}[dtype]
                    for got, exp, nm in zip((y, dx, dw, db), want, ("y", "dx", "dw", "db")):
                        err = float((got.double() - exp).abs().max() / (1 + exp.abs().max()))
                        worst = max(worst, err if dtype == torch.float32 else 0.0)
                        if err > tol:
                            failures += 1
                            say(f"  FAIL {name} {shape} {dtype} p={p}: {nm} rel err {err:.2e}")
        # boundary p: T lands on u16 values present in the sample (off-by-one thresholds show)
        for p in bps:
            for dtype in (torch.float32, torch.bfloat16):
                km = mask_of(mod, xb.to(dtype), p, bseed)
                if not torch.equal(km, u16 >= drop_threshold(p)):
                    failures += 1
                    say(f"  FAIL {name} boundary p={p!r} {dtype}: forward mask differs")
                _, dxb, _, _ = grads(mod, xb.to(dtype), torch.ones(bshape[-1], dtype=dtype),
                                     torch.zeros(bshape[-1], dtype=dtype), p, bseed,
                                     torch.ones(bshape, dtype=dtype))
                dxe = expected_dx(xb, torch.ones(bshape[-1]), torch.ones(bshape), km, p)
                if float((dxb.double() - dxe).abs().max()) > 0.25 * _scale(p):
                    failures += 1
                    say(f"  FAIL {name} boundary p={p!r} {dtype}: backward mask differs")
        for pas, cfg in (("fwd", fcfg), ("bwd", bcfg)):
            if cfg is not None and (pas, name) not in USED:
                failures += 1
                say(f"  FAIL {name}: its {pas} kernel never ran (the solution's fallback did)")
        verdict = ("masks identical to the solution's" if failures == failed_before
                   else f"{failures - failed_before} FAILURES")
        say(f"selftest {name:28s} ({what}): {verdict} on {len(shapes)} shapes x {len(dtypes)} "
            f"dtypes and {len(bps)} boundary p; fp32 worst rel err {worst:.1e}")
    if args.out:
        write_log(args.out, "selftest.txt")
    say("selftest:", "OK" if failures == 0 else f"{failures} FAILURES")
    return failures == 0


def _expected_grads(ref, x, w, b, keep, p, dy, eps=1e-5):
    xs, ws, bs = (t.detach().double().requires_grad_() for t in (x, w, b))
    y = ref.with_mask(xs, ws, bs, keep, p, eps)
    y.backward(dy.double())
    return xs.grad, ws.grad, bs.grad


# --- SASS (ptxas and cuobjdump ship with Triton; no GPU needed to compile) -------------------

def _nvbin(tool):
    import triton.backends.nvidia as nv
    return str(Path(nv.__file__).parent / "bin" / tool)


def sass_stats(cubin: bytes) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        out = subprocess.run([_nvbin("cuobjdump"), "-sass", path], capture_output=True,
                             text=True, timeout=60).stdout
        res = subprocess.run([_nvbin("cuobjdump"), "-res-usage", path], capture_output=True,
                             text=True, timeout=60).stdout
    finally:
        os.unlink(path)
    found = re.findall(r"/\*([0-9a-f]{4})\*/\s+(.*?)\s*;", out)
    ops = [re.sub(r"^@!?U?P[T0-9]+\s+", "", m) for _, m in found]
    # the longest loop: a branch back to an earlier address (the backward's row loop)
    index = {int(a, 16): i for i, (a, _) in enumerate(found)}
    loop = 0
    for i, (a, t) in enumerate(found):
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < int(a, 16):
            loop = max(loop, i - index.get(int(m.group(1), 16), i))
    names = [o.split()[0].split(".")[0] for o in ops if o]
    names = [n for n in names if n not in ("NOP", "BRA", "EXIT")]
    reg = re.search(r"REG:(\d+)", res)
    from collections import Counter
    c = Counter(names)
    return {"instr": len(names), "regs": int(reg.group(1)) if reg else -1, "loop": loop,
            "I2F": c["I2F"], "ISETP": c["ISETP"], "FSETP": c["FSETP"], "PRMT": c["PRMT"],
            "FSEL": c["FSEL"], "SHFL": c["SHFL"], "BAR": c["BAR"]}


def jit_kernels(fn):
    """The CompiledKernels a JITFunction holds (best effort: Triton's cache layout varies)."""
    out = []
    try:
        for entry in getattr(fn, "device_caches", {}).values():
            cache = entry[0] if isinstance(entry, tuple) else entry
            out += list(cache.values())
    except Exception:  # noqa: BLE001
        pass
    return out


def sass_report(args):
    """Compile the forward variants for sm_90 (no GPU needed) and count SASS instructions per
    element at the graded case: what each switch removes."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"x_ptr": "*bf16", "w_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16",
           "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "M": "i32", "N": "i32", "eps": "fp32",
           "p": "fp32", "seed": "i32", "scale_hi": "fp32", "scale_lo": "fp32"}
    div = ["x_ptr", "w_ptr", "b_ptr", "y_ptr", "mean_ptr", "rstd_ptr", "M", "N"]
    sol = load(SOL_PATH, "sol10_sass")
    rows = []

    def compile_(fn, sig, consts, nw):
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in div if n in sig}
        src = ASTSource(fn=fn, signature=dict(sig, **{k: "constexpr" for k in consts}),
                        constexprs=consts, attrs=attrs)
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": nw})

    ssig = {k: v for k, v in sig.items() if k != "M"}
    k = compile_(sol._fwd_kernel, ssig, {"BLOCK": 4096, "ONE_BLOCK": True, "F64": False,
                                         "FOUR": True, "N_ROUNDS": 7, "HALF": True}, 8)
    rows.append(("solution _fwd_kernel", 16, sass_stats(k.asm["cubin"])))
    for name, fcfg, bcfg, edits, what in variant_specs():
        if edits:
            mod = make_variant(name, edits=edits)
            c = {"BLOCK": 4096, "ONE_BLOCK": True, "F64": False, "FOUR": True, "N_ROUNDS": 7,
                 "HALF": True}
            params = mod._fwd_kernel.arg_names
            if "EVEN" in params:
                c["EVEN"] = True
            if "BITS" in params:
                c["BITS"] = True
            nw = (mod._fwd_num_warps if hasattr(mod, "_fwd_num_warps") else mod._num_warps)(4096)
            k = compile_(mod._fwd_kernel, ssig, c, nw)
            rows.append((name, 4096 // (32 * nw), sass_stats(k.asm["cubin"])))
            continue
        if fcfg is None or bcfg is not None:
            continue
        r = fcfg.get("ROWS", 1)
        nw = _ept_warps(4096 * r, fcfg.get("ept", 16))
        consts = {"BLOCK": 4096, "ROWS": r, "EVEN": fcfg.get("EVEN", True),
                  "MASK": fcfg.get("MASK", 0), "DROP_ALL": False, "FOLD": fcfg.get("FOLD", False),
                  "BITS": fcfg.get("BITS", False) and fcfg.get("EVEN", True),
                  "ONEPASS": fcfg.get("ONEPASS", False), "N_ROUNDS": 7,
                  "RZERO": fcfg.get("RZERO", True)}
        k = compile_(_fwd_v, sig, consts, nw)
        rows.append((name, 4096 * r // (32 * nw), sass_stats(k.asm["cubin"])))
    brows = []
    bsig = {"dy_ptr": "*bf16", "x_ptr": "*bf16", "w_ptr": "*bf16", "mean_ptr": "*fp32",
            "rstd_ptr": "*fp32", "dx_ptr": "*bf16", "part_ptr": "*fp32", "M": "i32", "N": "i32",
            "p": "fp32", "seed": "i32", "scale_hi": "fp32", "scale_lo": "fp32"}
    div.extend(["dy_ptr", "dx_ptr", "part_ptr"])
    sc = {"BLOCK": 4096, "ONE_BLOCK": True, "F64": False, "WANT_DWB": True, "FOUR": True,
          "N_ROUNDS": 7, "HALF": True}
    k = compile_(sol._bwd_kernel, bsig, sc, 8)
    brows.append(("solution _bwd_kernel", 16, sass_stats(k.asm["cubin"])))
    for name, fcfg, bcfg, edits, what in variant_specs():
        if edits and name.startswith("sol+proposal"):
            mod = make_variant(name, edits=edits)
            c = dict(sc, EVEN=True)
            if "BITS" in mod._bwd_kernel.arg_names:
                c["BITS"] = True
            if "STAGES" in mod._bwd_kernel.arg_names:
                c["STAGES"] = mod.BWD_STAGES
            k = compile_(mod._bwd_kernel, bsig, c, 8)
            brows.append((name, 16, sass_stats(k.asm["cubin"])))
        elif bcfg is not None:
            nw = _ept_warps(4096, bcfg.get("ept", 16))
            c = {"BLOCK": 4096, "EVEN": bcfg.get("EVEN", True), "WANT_DWB": True,
                 "MASK": bcfg.get("MASK", 0), "DROP_ALL": False, "FOLD": bcfg.get("FOLD", False),
                 "BITS": bcfg.get("BITS", False), "RED2": bcfg.get("RED2", False),
                 "N_ROUNDS": 7, "STAGES": bcfg.get("STAGES", 1)}
            k = compile_(_bwd_v, bsig, c, nw)
            brows.append((name, 4096 // (32 * nw), sass_stats(k.asm["cubin"])))
    say(f"{'forward kernel (sm_90, bf16, N=4096)':38s} {'elem/thr':>8s} {'instr':>6s} "
        f"{'/elem':>6s} {'regs':>5s} {'I2F':>4s} {'PRMT':>5s} {'FSEL':>5s}")
    for name, ept, s in rows:
        say(f"{name:38s} {ept:8d} {s['instr']:6d} {s['instr'] / ept:6.2f} {s['regs']:5d} "
            f"{s['I2F']:4d} {s['PRMT']:5d} {s['FSEL']:5d}")
    say(f"{'backward kernel (sm_90, bf16, N=4096)':38s} {'elem/thr':>8s} {'loop':>6s} "
        f"{'/elem':>6s} {'regs':>5s} {'I2F':>4s} {'BAR':>5s}  (loop: the row loop's body)")
    for name, ept, s in brows:
        say(f"{name:38s} {ept:8d} {s['loop']:6d} {s['loop'] / ept:6.2f} {s['regs']:5d} "
            f"{s['I2F']:4d} {s['BAR']:5d}")
    if args.out:
        write_log(args.out, "sass.txt")


# --- the GPU run --------------------------------------------------------------------------------

def gpu_threshold_test(device="cuda", small=False):
    """The kernels' expressions on the device, every u16, p at every boundary k/65536 and
    (k+1/2)/65536 (k = 0..65536) with float32 neighbours, plus the corner list; and the scalar
    argument path (a Python float -> float32 by the launcher) against drop_threshold."""
    ps = threshold_p_values(every_k=not small, k_sample=20)[:200 if small else None]
    pt = torch.tensor([f32(p) for p in ps], dtype=torch.float32, device=device)
    bad = 0
    for s in range(0, len(ps), 8192):
        chunk = pt[s:s + 8192]
        ok = torch.empty((chunk.numel(), 65536), dtype=torch.int8, device=device)
        _rule_kernel[(chunk.numel(), 16)](chunk, ok, BLOCK=4096)
        bad += int((ok == 0).sum())
    out = torch.empty(1, dtype=torch.int32, device=device)
    scalar_bad = []
    for p in threshold_p_values(k_sample=200)[:40 if small else 400]:
        _rule_scalar_kernel[(1,)](out, p)
        if int(out) != drop_threshold(p):
            scalar_bad.append((p, int(out), drop_threshold(p)))
    return len(ps), bad, scalar_bad


def time_variant(mod, x, w, b, p, seed, eps, dy, time_fn):
    with torch.no_grad():
        f = time_fn(lambda: mod.layernorm_dropout(x, w, b, p, seed, eps))
        _, _, mean, rstd = mod._forward(x, w, b, p, seed, eps)
        bw = time_fn(lambda: mod._backward(dy, x, w, mean, rstd, p, seed, True))
    xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, b))

    def step():
        mod.layernorm_dropout(xs, ws, bs, p, seed, eps).backward(dy)
    fb = time_fn(step, grad_to_none=[xs, ws, bs])
    return f["ms"] * 1e3, bw["ms"] * 1e3, fb["ms"] * 1e3, f, fb


SWEEP = ({"M": 32768, "N": 1024, "p": 0.1}, {"M": 32768, "N": 2048, "p": 0.1},
         {"M": 32768, "N": 8192, "p": 0.1}, {"M": 32768, "N": 4096, "p": 0.5})


def _precompile(task):
    """In a worker process: run a variant once on a small input with the graded case's
    specializations (bf16, N, M and the backward's program count divisible by 16) so that its
    kernels land in Triton's on-disk cache; the main process then loads them (~0.1 s each)."""
    kind, name, n, device, rows = task
    t = time.perf_counter()
    if device == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1"
    specs = {sp[0]: sp for sp in [("solution", None, None, None, "")] + variant_specs()}
    if kind == "variant":
        _, fcfg, bcfg, edits, _ = specs[name]
        mod = make_variant(name, fcfg, bcfg, edits)
    else:
        mod = make_variant(name, edits=PROPOSAL if name == "sol+proposal" else None)
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn((rows, n), dtype=torch.bfloat16, device=device, generator=g)
    w = torch.ones(n, dtype=torch.bfloat16, device=device)
    mask_of(mod, x, 0.1, 1234)
    grads(mod, x, w, w, 0.1, 1234, torch.ones_like(x))
    if device == "cuda":
        torch.cuda.synchronize()
    return f"{kind}:{name}:{n}", time.perf_counter() - t


def precompile(names, n, jobs, sweep=True, timeout_s=90.0, device="cuda", rows=2048):
    import concurrent.futures as cf
    import multiprocessing as mp
    tasks = [("variant", nm, n, device, rows) for nm in names]
    if sweep:
        tasks += [("sweep", nm, c["N"], device, rows) for nm in ("solution", "sol+proposal")
                  for c in SWEEP if c["N"] != n]
    t = time.perf_counter()
    done = 0
    ex = None
    try:
        ex = cf.ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"))
        futs = [ex.submit(_precompile, tk) for tk in tasks]
        for fut in cf.as_completed(futs, timeout=timeout_s):
            try:
                fut.result()
                done += 1
            except Exception as e:  # noqa: BLE001  (the main loop compiles it then)
                say(f"precompile: a task failed: {type(e).__name__}: {str(e)[:200]}")
    except cf.TimeoutError:
        say(f"precompile: stopped after {timeout_s:.0f} s; the rest compiles in the main process")
    except Exception as e:  # noqa: BLE001
        say(f"precompile: the pool failed ({type(e).__name__}: {str(e)[:200]}); compiling "
            f"in the main process instead")
    finally:
        if ex is not None:
            procs = list(getattr(ex, "_processes", {}).values())
            ex.shutdown(wait=False, cancel_futures=True)
            for proc in procs:   # only this pool's own workers
                if proc.is_alive():
                    proc.terminate()
    say(f"precompiled {done} of {len(tasks)} (variant, shape) tasks in {jobs} processes in "
        f"{time.perf_counter() - t:.1f} s")


def kernel_stats(mod, name, N, dtype):
    """SASS size, registers, spills of the kernels a variant launched at the graded case."""
    ks = [(key[0], k) for key, k in KERNELS.items()
          if key[1] == name and key[2] == N and key[3] == str(dtype)]
    if not ks:   # the solution's own kernels (text-edited or not)
        for pas, fn in (("fwd", mod._fwd_kernel), ("bwd", mod._bwd_kernel)):
            found = jit_kernels(fn)
            if found:   # compiled for the graded case only, so far: the largest cubin if several
                ks.append((pas, max(found, key=lambda k: len(k.asm.get("cubin", b"")))))
    out = ""
    for pas, k in ks:
        try:
            st = sass_stats(k.asm["cubin"])
            out += (f" {pas}: {st['instr']} SASS instr, {k.n_regs} regs, {k.n_spills} spills, "
                    f"I2F {st['I2F']};")
        except Exception as e:  # noqa: BLE001
            out += f" {pas}: sass n/a ({type(e).__name__});"
    return out


def gpu_main(args):
    from grader.timing import _copy, time_fn
    ref = load(REF_PATH, "ref10")
    device = "cpu" if args.cpu_dry_run else "cuda"
    if args.cpu_dry_run:   # the whole GPU path on the interpreter, small, timings fake
        def time_fn(fn, grad_to_none=None):   # noqa: F811
            fn()
            return {"ms": 1.0, "p20": 1.0, "p80": 1.0}

        def _copy():   # noqa: F811
            return 1000.0
        torch.cuda.synchronize = lambda *a: None
        from grader import interp
        interp.install()
    dev = "cpu (interpreter dry run)" if args.cpu_dry_run else torch.cuda.get_device_name()
    say(f"device {dev}; torch {torch.__version__}, triton {triton.__version__}, "
        f"python {sys.version.split()[0]}; budget {args.budget_s:.0f} s")
    M, N, P = args.M, args.N, args.p
    case = {"M": M, "N": N, "p": P}
    dtype = torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    x, w, b, p, seed, eps = ref.bench_inputs(case, dtype, device, gen)
    dy = torch.randn(x.shape, dtype=dtype, device=device, generator=gen)
    fwd_bytes = ref.traffic(case, dtype, "forward")["bytes"]
    fb_bytes = ref.traffic(case, dtype, "forward_backward")["bytes"]

    n, bad, scalar_bad = gpu_threshold_test(device, small=args.cpu_dry_run)
    say(f"threshold on the GPU: {n} float32 p x 65536 u16: {bad} disagreements between the "
        f"float rule, u16 >= T and the unsplit upper-half rule; scalar-argument path: "
        f"{len(scalar_bad)} of 400 differ from drop_threshold {scalar_bad[:3]}")

    copy = _copy()
    say(f"copy bandwidth {copy:.0f} GB/s (grader.timing._copy, 1 GiB bf16)")

    sol = make_variant("solution")
    keep = mask_of(sol, x, p, seed)
    u16 = u16_of(M, N, seed, device, sol.N_ROUNDS)
    model_ok = bool(torch.equal(keep, u16 >= drop_threshold(p)))
    say(f"solution mask: kept fraction {float(keep.float().mean()):.6f} (expected "
        f"{1 - drop_threshold(p) / 65536:.6f}); == (u16 >= T) at the graded case: {model_ok}")
    # boundary p values for every variant, at (64, N): T on u16 values present in the sample
    # (T = 65536 excluded: a DROP_ALL recompile per variant; the CPU self-test covers it)
    bM = min(64, M)
    bu16 = u16[:bM]
    bps = [q for q in boundary_ps(bu16, count=6) if drop_threshold(q) < 65536]
    xb = x[:bM]
    del u16
    ye = expected_y(ref, x, w, b, keep, p, eps)
    # backward mask check: dy = 1, w = 1, so g = keep * scale exactly: a flipped element moves dx
    # by ~rstd * scale ~ 1.1, rounding moves it by < 0.02 (bf16)
    ones_n = torch.ones(N, dtype=dtype, device=device)
    zeros_n = torch.zeros(N, dtype=dtype, device=device)
    dy1 = torch.ones_like(x)
    dxe1 = expected_dx(x, ones_n, dy1, keep, p, eps)
    dxe = expected_dx(x, w, dy, keep, p, eps)
    torch.cuda.synchronize()
    say("float64 expectations for the solution's mask ready")

    rows = []
    specs = [("solution", None, None, None, "the current solution")] + variant_specs()
    if args.only:
        specs = [sp for sp in specs if sp[0] == "solution" or re.search(args.only, sp[0])]
    if args.jobs > 0:
        precompile([sp[0] for sp in specs], N, args.jobs, sweep=not args.no_sweep,
                   device=device, rows=16 if args.cpu_dry_run else 2048)
    diffs = {}
    for name, fcfg, bcfg, edits, what in specs:
        if time.perf_counter() - T0 > args.budget_s:
            say(f"{name:28s} skipped: past the time budget ({args.budget_s:.0f} s)")
            continue
        try:
            mod = sol if name == "solution" else make_variant(name, fcfg, bcfg, edits)
            if edits:
                diffs[name] = "".join(difflib.unified_diff(
                    SOL_PATH.read_text().splitlines(True),
                    Path(mod.VARIANT_PATH).read_text().splitlines(True),
                    "a/solutions/10_layernorm_dropout/triton/layernorm_dropout.py",
                    "b/solutions/10_layernorm_dropout/triton/layernorm_dropout.py"))
            km = mask_of(mod, x, p, seed)
            fwd_same = bool(torch.equal(km, keep))
            with torch.no_grad():
                y = mod.layernorm_dropout(x, w, b, p, seed, eps)
            zeros_ok = bool(torch.equal(y != 0, keep & (ye != 0)))
            y_err = float((y.double() - ye).abs().max())
            _, dx1, _, _ = grads(mod, x, ones_n, zeros_n, p, seed, dy1, eps)
            bwd_err1 = float((dx1.double() - dxe1).abs().max())
            bwd_same = bwd_err1 < 0.25
            _, dxg, _, _ = grads(mod, x, w, b, p, seed, dy, eps)
            dx_err = float((dxg.double() - dxe).abs().max())
            del km, y, dx1, dxg
            bnd_bad = 0
            for q in bps:
                kq = mask_of(mod, xb, q, seed)
                _, dxq, _, _ = grads(mod, xb, ones_n, zeros_n, q, seed, dy1[:bM], eps)
                dxqe = expected_dx(xb, ones_n, dy1[:bM], kq, q, eps)
                bnd_bad += int(not torch.equal(kq, bu16 >= drop_threshold(q)))
                # a flip moves dx by ~rstd * scale; rounding by ~|dx| 2^-8 (scale is 1/(1-q))
                bnd_bad += int(float((dxq.double() - dxqe).abs().max()) > 0.25 * _scale(q))
            same = fwd_same and bwd_same and zeros_ok and bnd_bad == 0
            f_us, b_us, fb_us, f, fb = time_variant(mod, x, w, b, p, seed, eps, dy, time_fn)
            st = kernel_stats(mod, name, N, dtype)
            rows.append((name, f_us, fwd_bytes / (f_us * 1e-6) / 1e9 / copy, b_us, fb_us,
                         fb_bytes / (fb_us * 1e-6) / 1e9 / copy, same, y_err, dx_err))
            say(f"{name:28s} fwd {f_us:7.1f} us [{f['p20'] * 1e3:.1f}-{f['p80'] * 1e3:.1f}] "
                f"bwd {b_us:7.1f} fwd+bwd {fb_us:7.1f} | mask: fwd {fwd_same}, bwd {bwd_same} "
                f"(dx err at dy=w=1 {bwd_err1:.3f}), zeros==mask {zeros_ok}, {len(bps)} boundary "
                f"p {'ok' if bnd_bad == 0 else f'{bnd_bad} BAD'} | y err {y_err:.2e} dx err "
                f"{dx_err:.2e} | {what}.{st}")
        except Exception as e:  # a variant that fails must not lose the others
            say(f"{name:28s} FAILED: {type(e).__name__}: {str(e)[:300]}")
            rows.append((name, float("nan"), float("nan"), float("nan"), float("nan"),
                         float("nan"), False, float("nan"), float("nan")))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    if not args.no_sweep and time.perf_counter() - T0 < args.budget_s:
        prop = make_variant("sol+proposal", edits=PROPOSAL)
        sweep = SWEEP
        if args.cpu_dry_run:
            sweep = ({"M": 8, "N": 64, "p": 0.1}, {"M": 8, "N": 100, "p": 0.5})
        for c in sweep:
            if time.perf_counter() - T0 > args.budget_s:
                say(f"sweep {c}: skipped: past the time budget")
                continue
            xs_, ws_, bs_, ps_, sd_, ep_ = ref.bench_inputs(c, dtype, device, gen)
            dys = torch.randn(xs_.shape, dtype=dtype, device=device, generator=gen)
            same = bool(torch.equal(mask_of(sol, xs_, ps_, sd_), mask_of(prop, xs_, ps_, sd_)))
            t = [time_variant(m, xs_, ws_, bs_, ps_, sd_, ep_, dys, time_fn)
                 for m in (sol, prop)]
            fbytes = ref.traffic(c, dtype, "forward")["bytes"]
            say(f"sweep {c}: solution fwd {t[0][0]:.1f} us ({fbytes / t[0][0] / 1e3 / copy:.1%}) "
                f"fwd+bwd {t[0][2]:.1f} | proposal fwd {t[1][0]:.1f} us "
                f"({fbytes / t[1][0] / 1e3 / copy:.1%}) fwd+bwd {t[1][2]:.1f} | mask same {same}")
            del xs_, dys
            torch.cuda.empty_cache()

    for name in ("sol+proposal", "sol+proposal+bits"):
        if name in diffs:
            LOG.append(f"\n--- {name}: the diff against the solution ---\n{diffs[name]}")
    say(f"layernorm_dropout ({M}, {N}) bf16, p = {P}; {dev}; copy {copy:.0f} GB/s; "
        f"fwd bytes {fwd_bytes / 1e6:.1f} MB, fwd+bwd {fb_bytes / 1e6:.1f} MB; times: median "
        f"of grader.timing.time_fn; 'mask=': forward and backward masks identical to the "
        f"solution's (graded case + boundary p); errors: max |.| against float64")
    head = (f"{'variant':28s} {'fwd us':>7s} {'%copy':>6s} {'bwd us':>7s} {'fwd+bwd':>8s} "
            f"{'%copy':>6s} {'mask=':>5s} {'y err':>8s} {'dx err':>8s}")
    lines = [head]
    for name, f_us, fpc, b_us, fb_us, fbpc, same, ye_, dxe_ in rows:
        lines.append(f"{name:28s} {f_us:7.1f} {fpc:6.1%} {b_us:7.1f} {fb_us:8.1f} {fbpc:6.1%} "
                     f"{'yes' if same else 'NO':>5s} {ye_:8.2e} {dxe_:8.2e}")
    if args.out:
        write_log(args.out, "variants.txt", extra="\n".join(lines))
    print("\n".join(lines))


def write_log(out, fname, extra=""):
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / fname).write_text("\n".join(LOG) + ("\n\n" + extra if extra else "") + "\n")
    print(f"log: {d / fname}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the full log here (a folder)")
    ap.add_argument("--selftest", action="store_true",
                    help="CPU: TRITON_INTERPRET=1, small shapes, masks vs the solution")
    ap.add_argument("--sass", action="store_true",
                    help="compile the forward variants for sm_90 (no GPU) and count SASS")
    ap.add_argument("--only", help="regex: run only the variants whose name matches")
    ap.add_argument("--no-sweep", action="store_true", help="skip the other sweep shapes")
    ap.add_argument("--jobs", type=int, default=None,
                    help="processes compiling the variants' kernels up front (0: none; "
                         "default 8 on the GPU, 0 in --cpu-dry-run)")
    ap.add_argument("--budget-s", type=float, default=165.0,
                    help="skip the remaining variants (and the sweep) past this many seconds")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="the GPU path on the interpreter (TRITON_INTERPRET=1), small --M/--N, "
                         "fake timings: catches mistakes before the GPU run")
    ap.add_argument("--M", type=int, default=32768)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--p", type=float, default=0.1)
    args = ap.parse_args()
    if args.jobs is None:
        args.jobs = 0 if args.cpu_dry_run else 8
    if args.selftest:
        sys.exit(0 if selftest(args) else 1)
    if args.sass:
        sass_report(args)
        return
    if args.cpu_dry_run:
        assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    elif not torch.cuda.is_available():
        sys.exit("no GPU: run with --selftest (TRITON_INTERPRET=1) or --sass")
    gpu_main(args)


if __name__ == "__main__":
    main()
