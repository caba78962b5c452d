"""Exercise 08 — add_rmsnorm, Triton track, solved.

    h  = x + residual                              rounded to x's dtype: what the next layer sees
    y  = h * rstd * w,  rstd = 1/sqrt(mean(h^2) + eps)     fp32 math on the rounded h
    dh = rstd * (w*dy - hhat * mean(hhat*w*dy)) + dh_out   hhat = h * rstd; dh_out: h's own grad
    dx = dresidual = dh;   dw = sum over rows of dy * hhat

Napkin math, (32768, 4096) bf16: 134,217,728 elements, 268 MB per tensor.
  forward   reads x, residual; writes y, h (w: 8 KB, rstd: 128 KB)
                                                  1074 MB -> 251 us at 4.28 TB/s (H200 copy)
  unfused   h = x + residual (read 2, write 1), then RMSNorm (read h, write y): 5 tensors,
            1342 MB -> 314 us at best: fusing saves the write-then-read of h, 20%
  backward  reads dy, h (+ dh_out when h's output is used later); writes one dh for both x
            and residual (w, rstd, dw and the dw partials: ~2%)
                                                   805 MB -> 188 us (1074 MB with dh_out)
About 4 flops per byte: all that matters is reading each byte once.
The solution against torch.compile and Liger, forward and forward+backward: docs/performance.md,
"Solutions against the baselines" (08_add_rmsnorm) and "repeatability-07-12". (A first
measurement, on an H200 on 2026-11-22 before the dw reduction took tiles of partial rows, had
the forward near the copy rate and forward+backward only tying torch.compile: the backward was
where the room was. Git history: gpu-2026-11-22/first-kernels.txt, removed in 3e7a589.)

Three ops, all `triton_op`s (Inductor sees their kernels; the fakes come free):
  add_rmsnorm_fwd(x, residual, w, eps) -> (y, h, rstd)        functional, with autograd
  add_rmsnorm_inplace(x, residual, w, eps) -> y                writes h into residual
  add_rmsnorm_bwd(dy, dh, h, w, rstd) -> (dx, dw)
The in-place op declares mutates_args=("residual",): the dispatcher, functionalization (what
torch.compile does to mutations) and opcheck all rely on that declaration being true.

Two doors to the same kernels (as in 06): under torch.compile `add_rmsnorm` calls the registered
op; in eager mode a plain torch.autograd.Function runs the same bodies, because a custom op's
eager call with autograd costs ~240 us of CPU in PyTorch's Python wrappers per op call
(torch/_library/custom_ops.py backend_impl; measured by the experiment host_overhead.py on the
H200 machine, 2026-11-22: git history, removed in commit 3e7a589): more host time than the GPU
needs for the whole step.
"""
import functools
from typing import Optional

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

# A row up to this long is held in registers by one program (one read of each input); longer
# rows loop over column blocks of LOOP_BLOCK and read h back (mostly from L2).
MAX_FWD_BLOCK = 16384
MAX_BWD_BLOCK = 8192    # the backward holds h, dy, dh_out, w and the dw accumulator
LOOP_BLOCK = 4096
CPU_REDUCE_COLS = 1024  # and the dw reduction in few wide programs: each program is a Python
#                        loop there (~30 ms of interpreter overhead each), not a warp
CPU_PROGRAMS = 4        # on the interpreter: a few programs, so the row loop is exercised

# The launch configuration: performance only, one value each (no autotuning at grade time).
# benchmarks/norm_sweep.py times alternatives to it at the graded case on a GPU; the fastest
# row it prints is pasted here. A fixed configuration sums dw in a fixed order: the same bits
# every run.
CONFIG = {
    # Set from benchmarks/norm_sweep.py on an H200 (2026-11-26, graded case, graph replay): the
    # backward with the next row prefetched, 8 per thread, 2 programs per SM: 194.1 us against
    # 236.2 us (16 per thread, 4 per SM, no prefetch); fwd+bwd 455.7 us against 498.8 us
    "fwd_per_thread": 16,      # forward: elements of a row per thread (4096 columns: 8 warps)
    "bwd_per_thread": 8,      # backward: the same
    # Backward programs per SM: the dw partials are one fp32 row per program (written once,
    # read once: ~2% of the backward's traffic at 4 per SM)
    "bwd_programs_per_sm": 2,
    # the next row's h, dy and rstd loaded (into registers) while this row is reduced and
    # written, so that each program has loads in flight all the time, not only at a row's start
    "bwd_prefetch": True,
    "bwd_stages": 1,           # num_stages of the backward's row loop (Triton's own pipelining)
    "bwd_evict": "",           # eviction_policy of the h, dy loads: "" or "evict_first"
    # the dw reduction: [reduce_rows, reduce_cols] tiles of partials per step, so that each
    # program has many loads in flight and the programs fill the GPU (4096 columns: 256 programs)
    "reduce_rows": 256,
    "reduce_cols": 16,
    "reduce_warps": 8,
}


@triton.jit
def _add_rmsnorm_fwd_kernel(x_ptr, r_ptr, w_ptr,       # x, residual: [M, N]; w: [N]
                            y_ptr, h_ptr, rstd_ptr,    # y, h: [M, N] (h may be residual); rstd: [M]
                            N, eps,
                            BLOCK_N: tl.constexpr,     # columns per step (a power of two)
                            ONE_BLOCK: tl.constexpr,   # N <= BLOCK_N: the row stays in registers
                            F64: tl.constexpr):        # float64 math (gradcheck)
    acc_ty = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)                # int64: row * N passes 2^31
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
        r = tl.load(r_ptr + row * N + cols, mask=mask, other=0.0).to(acc_ty)
        # round h to the storage dtype once, store it, and normalize that same rounded h: y is
        # then exactly rmsnorm(h) of the h the caller gets back (and the backward reloads)
        h_st = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + cols, h_st, mask=mask)
        h = h_st.to(acc_ty)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty)
        tl.store(y_ptr + row * N + cols, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # long rows: add, store h and sum squares block by block; then normalize from h
        acc = tl.zeros([BLOCK_N], dtype=acc_ty)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = c < N
            x = tl.load(x_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
            r = tl.load(r_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
            h_st = (x + r).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + row * N + c, h_st, mask=mask)
            h = h_st.to(acc_ty)
            acc += h * h
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            mask = c < N
            # the same program wrote these elements above: its own stores are visible to it
            h = tl.load(h_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
            w = tl.load(w_ptr + c, mask=mask, other=0.0).to(acc_ty)
            tl.store(y_ptr + row * N + c, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _add_rmsnorm_bwd_kernel(dy_ptr, dho_ptr, h_ptr, w_ptr, rstd_ptr,  # dy, dh_out, h: [M, N]
                            dx_ptr, dw_part_ptr,       # dx: [M, N]; dw partials: [programs, N]
                            M, N,
                            HAS_DH: tl.constexpr,      # h's own output got a gradient
                            BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr,
                            PREFETCH: tl.constexpr = False,  # CONFIG["bwd_prefetch"]
                            STAGES: tl.constexpr = 1,        # CONFIG["bwd_stages"]
                            EVICT: tl.constexpr = ""):       # CONFIG["bwd_evict"]
    # Persistent: program p takes rows p, p + P, ... and sums its rows' dy * hhat into its own
    # partial row of dw: no atomics, the same sum every run.
    acc_ty = tl.float64 if F64 else tl.float32
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    part_row = dw_part_ptr + pid.to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(acc_ty)
        dw = tl.zeros([BLOCK_N], dtype=acc_ty)
        first = pid.to(tl.int64)                 # < M: the launcher starts at most M programs
        if PREFETCH:
            h_next = tl.load(h_ptr + first * N + cols, mask=mask, other=0.0, eviction_policy=EVICT)
            dy_next = tl.load(dy_ptr + first * N + cols, mask=mask, other=0.0,
                              eviction_policy=EVICT)
            rstd_next = tl.load(rstd_ptr + first)
        for row in tl.range(first, M, nprog, num_stages=STAGES):
            if PREFETCH:
                h_in, dy_in, rstd = h_next, dy_next, rstd_next
                # the next row's loads go out before this row's reduction and stores (past the
                # last row: masked off, nothing read)
                nxt = row + nprog
                more = nxt < M
                h_next = tl.load(h_ptr + nxt * N + cols, mask=mask & more, other=0.0,
                                 eviction_policy=EVICT)
                dy_next = tl.load(dy_ptr + nxt * N + cols, mask=mask & more, other=0.0,
                                  eviction_policy=EVICT)
                rstd_next = tl.load(rstd_ptr + nxt, mask=more, other=0.0)
            else:
                h_in = tl.load(h_ptr + row * N + cols, mask=mask, other=0.0, eviction_policy=EVICT)
                dy_in = tl.load(dy_ptr + row * N + cols, mask=mask, other=0.0,
                                eviction_policy=EVICT)
                rstd = tl.load(rstd_ptr + row)
            h = h_in.to(acc_ty)
            dy = dy_in.to(acc_ty)
            hhat = h * rstd
            wdy = w * dy
            c = tl.sum(hhat * wdy, axis=0) / N
            dh = (wdy - hhat * c) * rstd
            if HAS_DH:   # h = x + residual feeds y and the h output: both gradients add up
                dh += tl.load(dho_ptr + row * N + cols, mask=mask, other=0.0,
                              eviction_policy=EVICT).to(acc_ty)
            tl.store(dx_ptr + row * N + cols, dh.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += dy * hhat
        tl.store(part_row + cols, dw, mask=mask)
    else:
        for start in range(0, N, BLOCK_N):
            c = start + cols
            tl.store(part_row + c, tl.zeros([BLOCK_N], dtype=acc_ty), mask=c < N)
        for row in range(pid.to(tl.int64), M, nprog):
            rstd = tl.load(rstd_ptr + row)
            acc = tl.zeros([BLOCK_N], dtype=acc_ty)
            for start in range(0, N, BLOCK_N):
                c = start + cols
                mask = c < N
                h = tl.load(h_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
                w = tl.load(w_ptr + c, mask=mask, other=0.0).to(acc_ty)
                acc += h * w * dy
            mean = tl.sum(acc, axis=0) * rstd / N   # mean(hhat * w * dy)
            for start in range(0, N, BLOCK_N):
                c = start + cols
                mask = c < N
                h = tl.load(h_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
                dy = tl.load(dy_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
                w = tl.load(w_ptr + c, mask=mask, other=0.0).to(acc_ty)
                hhat = h * rstd
                dh = (w * dy - hhat * mean) * rstd
                if HAS_DH:
                    dh += tl.load(dho_ptr + row * N + c, mask=mask, other=0.0).to(acc_ty)
                tl.store(dx_ptr + row * N + c, dh.to(dx_ptr.dtype.element_ty), mask=mask)
                part = tl.load(part_row + c, mask=mask, other=0.0)
                tl.store(part_row + c, part + dy * hhat, mask=mask)


@triton.jit
def _dw_reduce_kernel(part_ptr, dw_ptr,               # partials: [P, N] (fp32/fp64); dw: [N]
                      P, N,
                      BLOCK_P: tl.constexpr,          # partial rows per step
                      BLOCK_N: tl.constexpr):         # columns per program
    # the second stage: each program sums one block of columns over the P partial rows, in the
    # partials' own precision and a fixed order, and rounds once into w's dtype. A [BLOCK_P,
    # BLOCK_N] tile per step, not one partial row: at P = 528 (4 per SM) one row at a time is
    # 528 loads each waiting for the one before (~1 us each under load); in tiles of 256 rows
    # it is 3 steps, and N / BLOCK_N programs (256 at N = 4096, ~2 per SM) share the columns
    # (tiles of 64 x 32, 9 steps over 128 programs, took 10.8 us on an H200: latency, not bytes)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_P)
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=part_ptr.dtype.element_ty)
    for p in range(0, P, BLOCK_P):
        r = p + rows
        mask = (r[:, None] < P) & (cols[None, :] < N)
        acc += tl.load(part_ptr + r[:, None].to(tl.int64) * N + cols[None, :], mask=mask,
                       other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=cols < N)


def _num_warps(block: int, per_thread: int) -> int:
    # `per_thread` elements of the row per thread (16: 4096 columns -> 8 warps), 4 to 16 warps
    return min(16, max(4, block // (32 * per_thread)))


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x must be float32, float16, bfloat16 or float64, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got "
                         f"{tuple(residual.shape)}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    if residual.device != x.device:
        raise ValueError(f"residual must be on x's device {x.device}, got {residual.device}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape [{x.shape[-1]}] (x's last dimension), got "
                         f"{tuple(w.shape)}")
    if w.dtype != x.dtype:
        raise TypeError(f"w must have x's dtype {x.dtype}, got {w.dtype}")
    if w.device != x.device:
        raise ValueError(f"w must be on x's device {x.device}, got {w.device}")


def _direct(kernel):
    return kernel  # eager door: launch the JIT function itself


def _launch_fwd(x, residual, w, y, h, rstd, eps, launch=wrap_triton):
    # launch: wrap_triton inside a registered op (Inductor traces the launch), _direct in the
    # eager door (outside a triton_op, wrap_triton goes through PyTorch's tracing machinery on
    # every call: 300 us of CPU per forward instead of 62 on the H200 machine; git history:
    # gpu-2026-11-22-r2/host-overhead-wrap-triton-outside-op.txt, removed in commit 3e7a589)
    N = x.shape[-1]
    M = x.numel() // N
    if M == 0:
        return
    one_block = N <= MAX_FWD_BLOCK
    block = triton.next_power_of_2(N) if one_block else LOOP_BLOCK
    # one program per row: 32768 programs of 8 warps for the headline case
    launch(_add_rmsnorm_fwd_kernel)[(M,)](
        x, residual, w, y, h, rstd, N, eps, BLOCK_N=block, ONE_BLOCK=one_block,
        F64=x.dtype == torch.float64, num_warps=_num_warps(block, CONFIG["fwd_per_thread"]))


def _fwd_impl(x, residual, w, eps, launch):
    _check(x, residual, w)
    # the kernel walks rows with stride N: a no-op for contiguous inputs, a copy otherwise
    x, residual, w = x.contiguous(), residual.contiguous(), w.contiguous()
    y = torch.empty_like(x)
    h = torch.empty_like(x)
    rstd = torch.empty(x.shape[:-1], dtype=_math_dtype(x), device=x.device)
    _launch_fwd(x, residual, w, y, h, rstd, eps, launch)
    return y, h, rstd


@triton_op("ex08_triton::add_rmsnorm_inplace", mutates_args=("residual",))
def add_rmsnorm_inplace(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                        eps: float) -> torch.Tensor:
    _check(x, residual, w)
    if not residual.is_contiguous():
        # .contiguous() would make a copy, and h would land in the copy, not in residual
        raise ValueError("residual must be contiguous: the in-place form writes h into it")
    x, w = x.contiguous(), w.contiguous()
    y = torch.empty_like(x)
    # rstd is not returned: a scratch row of 4 bytes per row (inference: no backward here)
    rstd = torch.empty(x.shape[:-1], dtype=_math_dtype(x), device=x.device)
    _launch_fwd(x, residual, w, y, residual, rstd, eps)
    return y


@functools.lru_cache(maxsize=None)
def _sms(device_index: int) -> int:
    # asked once per device: get_device_properties builds a Python object on every call
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _bwd_impl(dy, dh, h, w, rstd, launch):
    if dy.shape != h.shape:
        raise ValueError(f"dy must have h's shape {tuple(h.shape)}, got {tuple(dy.shape)}")
    if dh is not None and dh.shape != h.shape:
        raise ValueError(f"dh must have h's shape {tuple(h.shape)}, got {tuple(dh.shape)}")
    # incoming gradients often arrive strided (the gradient of a sum is an expanded scalar)
    dy, h, w, rstd = dy.contiguous(), h.contiguous(), w.contiguous(), rstd.contiguous()
    dh = dh.contiguous() if dh is not None else None
    N = h.shape[-1]
    M = h.numel() // N
    dx = torch.empty_like(h)
    if M == 0:
        return dx, torch.zeros_like(w)
    dw = torch.empty_like(w)
    if h.is_cuda:
        programs = min(M, _sms(h.device.index if h.device.index is not None
                               else torch.cuda.current_device())
                       * CONFIG["bwd_programs_per_sm"])
    else:
        programs = min(M, CPU_PROGRAMS)
    partials = torch.empty((programs, N), dtype=_math_dtype(h), device=h.device)
    one_block = N <= MAX_BWD_BLOCK
    block = triton.next_power_of_2(N) if one_block else LOOP_BLOCK
    launch(_add_rmsnorm_bwd_kernel)[(programs,)](
        dy, dh if dh is not None else dy, h, w, rstd, dx, partials, M, N,
        HAS_DH=dh is not None, BLOCK_N=block, ONE_BLOCK=one_block,
        F64=h.dtype == torch.float64, PREFETCH=CONFIG["bwd_prefetch"],
        STAGES=CONFIG["bwd_stages"], EVICT=CONFIG["bwd_evict"],
        num_warps=_num_warps(block, CONFIG["bwd_per_thread"]))
    cols = CONFIG["reduce_cols"] if h.is_cuda else CPU_REDUCE_COLS
    launch(_dw_reduce_kernel)[(triton.cdiv(N, cols),)](
        partials, dw, programs, N, BLOCK_P=CONFIG["reduce_rows"], BLOCK_N=cols,
        num_warps=CONFIG["reduce_warps"])
    return dx, dw


# the registered functional ops (torch.compile's door; opcheck tests them): the same bodies
@triton_op("ex08_triton::add_rmsnorm_fwd", mutates_args=())
def add_rmsnorm_fwd(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _fwd_impl(x, residual, w, eps, wrap_triton)


@triton_op("ex08_triton::add_rmsnorm_bwd", mutates_args=())
def add_rmsnorm_bwd(dy: torch.Tensor, dh: Optional[torch.Tensor], h: torch.Tensor,
                    w: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _bwd_impl(dy, dh, h, w, rstd, wrap_triton)


def _setup_context(ctx, inputs, output):
    _x, _residual, w, _eps = inputs
    _y, h, rstd = output
    ctx.save_for_backward(h, w, rstd)   # h, not x and residual: one tensor instead of two
    # an output nobody differentiates arrives as None instead of a tensor of zeros: no zeros
    # written and read back for h when only y is used
    ctx.set_materialize_grads(False)


def _grads(h, w, rstd, dy, dh, bwd):
    if dy is None:              # only h was used: y's branch adds nothing
        return dh, dh, None, None
    dx, dw = bwd(dy, dh, h, w, rstd)
    # h = x + residual: both get the same gradient, one tensor written once
    return dx, dx, dw, None


def _backward(ctx, dy, dh, _drstd):
    return _grads(*ctx.saved_tensors, dy, dh, add_rmsnorm_bwd)


add_rmsnorm_fwd.register_autograd(_backward, setup_context=_setup_context)


class _AddRMSNormEager(torch.autograd.Function):
    """Eager mode's door: the same kernels without the custom-op dispatch (see the top)."""

    @staticmethod
    def forward(ctx, x, residual, w, eps):
        y, h, rstd = _fwd_impl(x, residual, w, eps, _direct)
        ctx.save_for_backward(h, w, rstd)
        ctx.set_materialize_grads(False)
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        return _grads(*ctx.saved_tensors, dy, dh,
                      lambda *a: _bwd_impl(*a, launch=_direct))


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h): h = x + residual, y = rmsnorm(h, w). Differentiable through both outputs."""
    if torch.compiler.is_compiling():
        y, h, _rstd = add_rmsnorm_fwd(x, residual, w, float(eps))  # the registered op
        return y, h
    return _AddRMSNormEager.apply(x, residual, w, float(eps))


def add_rmsnorm_(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float = 1e-6) -> torch.Tensor:
    """y; h = x + residual is written into `residual` (no new tensor for it). No autograd."""
    return add_rmsnorm_inplace(x, residual, w, float(eps))
