"""The catalogue's dodge: a try/except around the kernel that falls back to PyTorch, by a torch
function, torch.nn.functional, an ATen op, a tensor method or the @ operator."""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def softmax(x):
    try:
        y = torch.empty_like(x)
        _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
    except Exception:  # review: fallback
        return torch.softmax(x, -1)


def softmax2(x):
    try:
        return softmax(x)
    except:  # review: fallback  # noqa: E722
        return F.softmax(x, dim=-1)


def softmax3(x):
    try:
        return softmax(x)
    except RuntimeError:  # review: fallback
        return x.softmax(-1)


def linear(x, w):
    try:
        return softmax(x)
    except (ValueError, TypeError):  # review: fallback
        return torch.ops.aten.mm(x, w)


def linear2(x, w):
    try:
        return softmax(x)
    except ValueError:  # review: fallback
        return x @ w
