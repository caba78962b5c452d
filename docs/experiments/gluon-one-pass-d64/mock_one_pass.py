"""CPU stand-ins for one_pass.py's API (EXP38C_MOCK=1 in gpu.py): plain PyTorch math, so the
harness's plumbing can be dry-run without a GPU. Not the kernels; its numbers mean nothing."""
import math
import struct

import torch

LOG2E = 1.4426950408889634


def _fwd(q, k, v, causal, scale):
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        S = q.shape[2]
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ v.float()
    return o.to(q.dtype), lse * LOG2E


def _bwd(do, q, k, v, o, lse2, causal, scale):
    qf, kf, vf, dof = (t.float() for t in (q, k, v, do))
    s = (qf @ kf.transpose(-1, -2)) * scale
    p = torch.exp2(s * LOG2E - lse2[..., None])
    if causal:
        S = q.shape[2]
        p = p.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), 0.0)
    delta = (o.float() * dof).sum(-1, keepdim=True)
    ds = p * (dof @ vf.transpose(-1, -2) - delta)
    return tuple(t.to(q.dtype) for t in (ds @ kf * scale, ds.transpose(-1, -2) @ qf * scale,
                                         p.transpose(-1, -2) @ dof))


class _FA:
    @staticmethod
    def _direct(k):
        return k

    @staticmethod
    def _split(x):
        f32 = lambda y: struct.unpack("f", struct.pack("f", y))[0]
        hi = f32(x)
        return hi, f32(x - hi)

    @staticmethod
    def _fwd_impl(q, k, v, causal, scale, launch):
        return _fwd(q, k, v, causal, scale)

    @staticmethod
    def _bwd_impl(do, q, k, v, o, lse, causal, scale, launch):
        return _bwd(do, q, k, v, o, lse, causal, scale)

    @staticmethod
    def flash_attention(q, k, v, causal=False, scale=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                scale=scale)


fa = _FA()


class _Finish:
    def __getitem__(self, grid):
        def run(dqa, dq, n, hi, lo, BLOCK, num_warps):
            dq.view(-1)[:n] = (dqa.view(-1)[:n] * (hi + lo)).to(dq.dtype)
        return run


_dq_finish_kernel = _Finish()


def forward(q, k, v, causal, scale):
    return _fwd(q, k, v, causal, scale)


def backward(q, k, v, o, do, lse2, delta, causal, scale, ordered):
    return _bwd(do, q, k, v, o, lse2, causal, scale)
