"""Exercise 13 reference: the op, the benchmark inputs, the baselines and the flop model."""
import math

import torch
import torch.nn.functional as F


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _mask_bytes_ok(q, causal):
    """The eager reference holds S x S matrices: refuse up front, saying so, where they cannot
    fit (an out-of-memory error half-way leaves the allocator fragmented for what follows)."""
    if not q.is_cuda or isinstance(q, torch._subclasses.FakeTensor):
        return  # a fake tensor holds no memory (the grader traces shapes with them)
    B, H, S, _ = q.shape
    size = torch.promote_types(q.dtype, torch.float32).itemsize
    # live at once: the scores, the masked scores, P (saved), and with autograd the backward's
    # dP and dS; the causal mask itself is S x S bytes
    copies = 5 if torch.is_grad_enabled() and q.requires_grad else 3
    need = copies * B * H * S * S * size + (S * S if causal else 0)
    free, _total = torch.cuda.mem_get_info(q.device)
    free += torch.cuda.memory_reserved(q.device) - torch.cuda.memory_allocated(q.device)
    if need > free:
        raise MemoryError(
            f"the eager reference materializes S x S: at B={B}, H={H}, S={S} it needs about "
            f"{need / 2**30:.0f} GiB ({copies} matrices of {B * H * S * S * size / 2**30:.1f} GiB "
            f"in {torch.promote_types(q.dtype, torch.float32)}), and {free / 2**30:.0f} GiB are "
            f"free on this GPU: not run (this is the memory FlashAttention never allocates)")


def reference(q, k, v, causal=False, scale=None):
    """softmax(scale * q kᵀ + causal mask) v as a PyTorch user writes it: the S x S scores and
    probabilities are materialized (the "eager" baseline). Math in at least float32; float64
    stays float64 (the checks call this on .double() copies for the expectation)."""
    acc = torch.promote_types(q.dtype, torch.float32)
    _mask_bytes_ok(q, causal)
    qf, kf, vf = q.to(acc), k.to(acc), v.to(acc)
    s = (qf @ kf.transpose(-2, -1)) * _scale(q, scale)
    if causal:
        S = q.shape[-2]
        above = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
        s = s.masked_fill(above, float("-inf"))
    return (torch.softmax(s, dim=-1) @ vf).to(q.dtype)


class _Exact(torch.autograd.Function):
    """softmax(scale q kᵀ + mask) v in the reference's precision (float64 for float64 inputs),
    a block of query rows at a time for every head at once, never S x S in memory. Causal, a
    block of rows [a, b) reads keys [0, b) only. The backward is the softmax's derivative in
    closed form over the same blocks (P from the saved log-sum-exp; the same math autograd
    derives from `reference`, a test holds them together):
        delta = rowsum(dO o), dv += Pᵀ dO, dS = P (dO vᵀ - delta), dq = scale dS k,
        dk += scale dSᵀ q."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        acc = torch.promote_types(q.dtype, torch.float32)
        qf, kf, vf = q.to(acc), k.to(acc), v.to(acc)
        o = torch.empty_like(qf)
        lse = torch.empty(qf.shape[:-1], dtype=acc, device=q.device)
        for a, b, keys, s in _blocks(qf, kf, causal, scale):
            m = s.amax(-1, keepdim=True)              # finite: every row sees at least one key
            p = s.sub_(m).exp_()                      # in place: one block of scores alive
            l = p.sum(-1, keepdim=True)
            o[..., a:b, :] = (p @ vf[..., :keys, :]) / l
            lse[..., a:b] = (m + l.log()).squeeze(-1)
        ctx.save_for_backward(qf, kf, vf, o, lse)
        ctx.causal, ctx.scale, ctx.dtype = causal, scale, q.dtype
        return o.to(q.dtype)

    @staticmethod
    def backward(ctx, do):
        qf, kf, vf, o, lse = ctx.saved_tensors
        do = do.to(qf.dtype)
        delta = (do * o).sum(-1)
        dq, dk, dv = torch.zeros_like(qf), torch.zeros_like(kf), torch.zeros_like(vf)
        for a, b, keys, s in _blocks(qf, kf, ctx.causal, ctx.scale):
            p = s.sub_(lse[..., a:b, None]).exp_()    # masked scores: exp(-inf) = 0
            dv[..., :keys, :] += p.transpose(-2, -1) @ do[..., a:b, :]
            ds = (do[..., a:b, :] @ vf[..., :keys, :].transpose(-2, -1)).sub_(
                delta[..., a:b, None]).mul_(p)
            dq[..., a:b, :] = ctx.scale * (ds @ kf[..., :keys, :])
            dk[..., :keys, :] += ctx.scale * (ds.transpose(-2, -1) @ qf[..., a:b, :])
        return dq.to(ctx.dtype), dk.to(ctx.dtype), dv.to(ctx.dtype), None, None


ROWS_AT_ONCE = 1 << 27  # scores per block of query rows (all heads): 1 GiB in float64


def _blocks(qf, kf, causal, scale):
    """(a, b, keys, scores): query rows [a, b) of every head against keys [0, keys), scaled and
    masked (-inf above the diagonal when causal)."""
    S = qf.shape[-2]
    rows = max(1, min(S, ROWS_AT_ONCE // max(1, qf[..., 0, 0].numel() * S)))
    for a in range(0, S, rows):
        b = min(S, a + rows)
        keys = b if causal else S
        s = (qf[..., a:b, :] @ kf[..., :keys, :].transpose(-2, -1)).mul_(scale)
        if causal:
            later = (torch.arange(keys, device=qf.device)[None, :] >
                     torch.arange(a, b, device=qf.device)[:, None])
            s.masked_fill_(later, float("-inf"))
        yield a, b, keys, s


def exact(q, k, v, causal=False, scale=None):
    """`reference`'s math without its S x S matrices (_Exact): what the grader validates every
    timed call against. At the benchmark case the plain reference in float64 needs ~100 GiB for
    its forward and backward; this ~4 GiB, and half the work when causal (the blocks above the
    diagonal are not computed)."""
    return _Exact.apply(q, k, v, bool(causal), _scale(q, scale))


# What the grader validates each timed call against (grader/judge/measure.py): `exact`, the
# reference's math a block of rows at a time, since the plain reference in float64 does not fit
# in a GPU's memory at the benchmark case. (The answer is unique; only the memory differs.)
validating = exact


def _sdpa(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    chosen = getattr(SDPBackend, backend)

    def run(q, k, v, causal=False, scale=None):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    run.__doc__ = f"F.scaled_dot_product_attention restricted to SDPBackend.{backend}"
    return run


sdpa_flash = _sdpa("FLASH_ATTENTION")          # FlashAttention-2 (Dao's kernels, in PyTorch)
sdpa_efficient = _sdpa("EFFICIENT_ATTENTION")  # xFormers' memory-efficient kernels
sdpa_cudnn = _sdpa("CUDNN_ATTENTION")          # cuDNN's fused attention (Hopper: FA3-like)

_flex = {}


def flex(q, k, v, causal=False, scale=None):
    """FlexAttention (torch.nn.attention.flex_attention) under torch.compile, its causal mask
    as a block mask: PyTorch's own generated Triton attention, a peer."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if "fn" not in _flex:
        _flex["fn"] = torch.compile(flex_attention, dynamic=False)
    block_mask = None
    if causal:
        key = (q.shape[-2], q.device)
        if key not in _flex:
            _flex[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None,
                                           q.shape[-2], q.shape[-2], device=q.device)
        block_mask = _flex[key]
    return _flex["fn"](q, k, v, block_mask=block_mask, scale=scale)


def bench_inputs(case, dtype, device, generator):
    shape = (case["B"], case["H"], case["S"], case["D"])
    q, k, v = (torch.randn(shape, dtype=torch.float32, device=device,
                           generator=generator).to(dtype) for _ in range(3))
    return (q, k, v, bool(case["causal"]), None)


def flops(case, dtype, mode):
    """Useful flops, the way FlashAttention papers count them (so rates compare):
    forward  2 matmuls of 2 S S D per (batch, head): 4 B H S² D, half of it when causal;
    backward 5 matmuls (S = q kᵀ again, dV, dP, dQ, dK): 2.5 x the forward.
    (The solution's deterministic backward does 7: P and dP once in each of its two kernels.)
    Bytes: read q, k, v, write o and the log-sum-exp; the backward reads q, k, v, o, dO and
    the lse, writes dq, dk, dv (a few hundred MB: the op is far from memory-bound)."""
    B, H, S, D = case["B"], case["H"], case["S"], case["D"]
    size = torch.tensor([], dtype=dtype).element_size()
    fwd = 4 * B * H * S * S * D * (0.5 if case["causal"] else 1.0)
    bhsd = B * H * S * D
    fwd_bytes = 4 * bhsd * size + 4 * B * H * S
    if mode == "forward":
        return {"flops": fwd, "bytes": fwd_bytes}
    return {"flops": 3.5 * fwd, "bytes": fwd_bytes + 8 * bhsd * size + 8 * B * H * S}


def small_model(fn):
    """A model around the op for the torch.compile check: a projection to q, k, v, attention,
    an output projection; every weight an argument, written with F.linear so Inductor compiles
    the rest."""
    def model(x, w_qkv, w_out):
        B, S, E = x.shape
        qkv = F.linear(x, w_qkv).view(B, S, 3, 2, E // 2).permute(2, 0, 3, 1, 4)  # [3, B, H, S, D]
        o = fn(qkv[0], qkv[1], qkv[2], True, None)                                 # [B, H, S, D]
        return F.linear(o.transpose(1, 2).reshape(B, S, E), w_out)
    return model
