"""Exercise 13 answered in the manner of Triton's fused-attention tutorial (FlashAttention-2).

Source of the design: https://github.com/triton-lang/triton/blob/main/python/tutorials/06-fused-attention.py
(Triton, MIT license, Copyright 2018-2020 Philippe Tillet, 2020-2022 OpenAI; credits in the
tutorial: Tri Dao's FlashAttention-2, the OpenAI kernel team). Not a copy: written for the review's
tests from the tutorial's documented algorithm. It uses the constructs the tutorial's kernels and
autograd.Function use: host TensorDescriptors whose block shapes an autotuning pre_hook sets
(`nargs["desc_q"].block_shape = ...`), device-side descriptors (`tl.make_tensor_descriptor`,
`isinstance(..., tl.tensor_descriptor)`) with `triton.set_allocator` for their scratch, the
configurations narrowed where the environment says a test runs (`"PYTEST_VERSION" in os.environ`),
early config pruning, `tl.range(..., warp_specialize=...)`, capability checks, the grid kept on
ctx, extra launch arguments by backend. The review must find nothing here.
"""
import os

import torch

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

DEVICE = triton.runtime.driver.active.get_active_torch_device()


def is_hip():
    return triton.runtime.driver.active.get_current_target().backend == "hip"


def is_cuda():
    return triton.runtime.driver.active.get_current_target().backend == "cuda"


def supports_host_descriptor():
    return is_cuda() and torch.cuda.get_device_capability()[0] >= 9


def is_blackwell():
    return is_cuda() and torch.cuda.get_device_capability()[0] == 10


def is_hopper():
    return is_cuda() and torch.cuda.get_device_capability()[0] == 9


@triton.jit
def _inner(acc, l_i, m_i, q, desc_k, desc_v, row0, dtype: tl.constexpr, start_m, scale,
           BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
           STAGE: tl.constexpr, offs_m: tl.constexpr, offs_n: tl.constexpr,
           N_CTX: tl.constexpr, warp_specialize: tl.constexpr):
    if STAGE == 1:      # blocks left of the diagonal: no mask
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:    # the diagonal block: the causal mask
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:               # not causal: every block
        lo, hi = 0, N_CTX
    k_row = row0 + lo
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        s = tl.dot(q, desc_k.load([k_row, 0]).T) * scale
        if STAGE == 2:
            s = s + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(dtype), desc_v.load([k_row, 0]), acc)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
        k_row += BLOCK_N
    return acc, l_i, m_i


def _host_descriptor_pre_hook(nargs):
    block_m, block_n, head_dim = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["HEAD_DIM"]
    if not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    nargs["desc_q"].block_shape = [block_m, head_dim]
    nargs["desc_k"].block_shape = [block_n, head_dim]
    nargs["desc_v"].block_shape = [block_n, head_dim]
    nargs["desc_o"].block_shape = [block_m, head_dim]


STAGES = [1] if is_hip() else [2, 3, 4]
configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w,
                         pre_hook=_host_descriptor_pre_hook)
           for bm in (64, 128) for bn in (32, 64, 128) for s in STAGES for w in (4, 8)]
if "PYTEST_VERSION" in os.environ:  # one configuration under a test: reproducible, quick
    configs = [triton.Config(dict(BLOCK_M=128, BLOCK_N=64), num_stages=2, num_warps=4,
                             pre_hook=_host_descriptor_pre_hook)]


def keep(conf):
    area = conf.kwargs["BLOCK_M"] * conf.kwargs["BLOCK_N"]
    return not (is_hopper() and area < 128 * 128 and conf.num_warps == 8)


def prune_invalid_configs(configs, named_args, **kwargs):
    n_ctx, stage = kwargs["N_CTX"], kwargs["STAGE"]
    return [c for c in configs if c.kwargs.get("BLOCK_M", 0) <= n_ctx
            and (c.kwargs.get("BLOCK_M", 0) >= c.kwargs.get("BLOCK_N", 0) or stage == 1)]


@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.autotune(configs=list(filter(keep, configs)), key=["N_CTX", "HEAD_DIM", "warp_specialize"],
                 prune_configs_by={"early_config_prune": prune_invalid_configs})
@triton.jit
def _attn_fwd(sm_scale, M, Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX, HEAD_DIM: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr,
              warp_specialize: tl.constexpr):
    dtype = tl.float16
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    rows = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_v = _maybe_make_tensor_desc(desc_v, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, [rows, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    row0 = (off_hz // H) * (N_CTX * H) + (off_hz % H) * N_CTX
    q_row = row0 + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    scale = sm_scale * 1.44269504  # 1 / ln(2): exp2 instead of exp
    q = desc_q.load([q_row, 0])
    if STAGE & 1:
        acc, l_i, m_i = _inner(acc, l_i, m_i, q, desc_k, desc_v, row0, dtype, start_m, scale,
                               BLOCK_M, HEAD_DIM, BLOCK_N, 4 - STAGE, offs_m, offs_n, N_CTX,
                               warp_specialize)
    if STAGE & 2:
        acc, l_i, m_i = _inner(acc, l_i, m_i, q, desc_k, desc_v, row0, dtype, start_m, scale,
                               BLOCK_M, HEAD_DIM, BLOCK_N, 2, offs_m, offs_n, N_CTX,
                               warp_specialize)
    m_i += tl.math.log2(l_i)
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    desc_o.store([q_row, 0], (acc / l_i[:, None]).to(dtype))


@triton.jit
def _attn_bwd_preprocess(O, DO, Delta, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    off_n = tl.arange(0, HEAD_DIM)
    at = off_hz * HEAD_DIM * N_CTX + off_m[:, None] * HEAD_DIM + off_n[None, :]
    o = tl.load(O + at)
    do = tl.load(DO + at).to(tl.float32)
    tl.store(Delta + off_hz * N_CTX + off_m, tl.sum(o * do, axis=1))


class _attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, sm_scale, warp_specialize=True):
        head_dim = q.shape[-1]
        if head_dim != k.shape[-1] or head_dim != v.shape[-1] or head_dim not in (16, 32, 64, 128,
                                                                                  256):
            raise ValueError(f"head dimensions {q.shape[-1]}, {k.shape[-1]}, {v.shape[-1]}")
        o = torch.empty_like(q)
        stage = 3 if causal else 1
        extra_kern_args = {}
        if is_hip():
            extra_kern_args = {"waves_per_eu": 3 if head_dim <= 64 else 2,
                               "allow_flush_denorm": True}
        M = torch.empty((q.shape[0], q.shape[1], q.shape[2]), device=q.device,
                        dtype=torch.float32)
        if supports_host_descriptor():
            rows = q.shape[0] * q.shape[1] * q.shape[2]
            dummy = [1, 1]  # the pre_hook sets each block shape to the chosen configuration's
            desc_q, desc_k, desc_v, desc_o = (
                TensorDescriptor(t, shape=[rows, head_dim], strides=[head_dim, 1],
                                 block_shape=dummy) for t in (q, k, v, o))
        else:
            desc_q, desc_k, desc_v, desc_o = q, k, v, o

        def alloc_fn(size: int, align: int, _):
            return torch.empty(size, dtype=torch.int8, device="cuda")

        triton.set_allocator(alloc_fn)

        def grid(META):
            return (triton.cdiv(q.shape[2], META["BLOCK_M"]), q.shape[0] * q.shape[1], 1)

        ctx.grid = grid
        if is_blackwell() and warp_specialize:
            extra_kern_args["maxnreg"] = 168 if head_dim == 128 else 80
        _attn_fwd[grid](sm_scale, M, q.shape[0], q.shape[1], desc_q, desc_k, desc_v, desc_o,
                        N_CTX=q.shape[2], HEAD_DIM=head_dim, STAGE=stage,
                        warp_specialize=warp_specialize, **extra_kern_args)
        ctx.save_for_backward(q, k, v, o, M)
        ctx.sm_scale, ctx.head_dim, ctx.causal = sm_scale, head_dim, causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, M = ctx.saved_tensors
        do = do.contiguous()
        delta = torch.empty_like(M)
        batch, heads, n_ctx = q.shape[:3]
        _attn_bwd_preprocess[(n_ctx // 128, batch * heads)](o, do, delta, n_ctx, BLOCK_M=128,
                                                              HEAD_DIM=ctx.head_dim)
        raise NotImplementedError("the tutorial's dq/dk/dv kernels are left out of this fixture")


def flash_attention(q, k, v, causal: bool = False, sm_scale: float | None = None):
    scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
    return _attention.apply(q, k, v, causal, scale)
