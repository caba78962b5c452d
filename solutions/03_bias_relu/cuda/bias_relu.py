"""Exercise 03 — bias_relu, solved: the autograd.Function, the functional op and the nn.Module.

    y = relu(x * scale + bias)        x [M, N], bias [N], scale a Python float

`bias_relu_ext` is the module built from bias_relu.cpp + bias_relu_kernels.cu (the grader builds
it with torch.utils.cpp_extension and registers it under this name before importing this file,
as `pip install` of a setup.py would). It has two functions:
    bias_relu_ext.forward(x, bias, scale)   -> y
    bias_relu_ext.backward(grad_y, y, scale) -> (grad_x, grad_bias)
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

import bias_relu_ext


class BiasReLUFunction(torch.autograd.Function):
    """Tells autograd how to differentiate the extension's forward.

    Backward needs the mask z > 0 and nothing else. y > 0 exactly where z > 0 (relu keeps the
    positive values and zeroes the rest), so saving y is enough: y exists anyway (it is the
    output), so saving it costs no memory, where saving x and bias would keep x alive and make
    backward recompute z.
    """

    @staticmethod
    def forward(ctx, x, bias, scale):
        y = bias_relu_ext.forward(x, bias, scale)
        ctx.save_for_backward(y)  # autograd's version counter catches an in-place edit of y later
        ctx.scale = scale         # a float, not a tensor: stored on ctx directly
        return y

    @staticmethod
    @once_differentiable  # backward is itself a kernel, not differentiable again: say so
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        # Autograd passes whatever gradient it has: after y.sum().backward() it is a scalar
        # expanded to y's shape, strides (0, 0), one float pretending to be M*N. The kernels
        # read dense rows, so make it dense (free when it already is).
        grad_y = grad_y.contiguous()
        grad_x, grad_bias = bias_relu_ext.backward(grad_y, y, ctx.scale)
        # one kernel computes both; hand autograd only what it asked for (scale gets None)
        return (grad_x if ctx.needs_input_grad[0] else None,
                grad_bias if ctx.needs_input_grad[1] else None,
                None)


def bias_relu(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """relu(x * scale + bias) for x [M, N] and bias [N], differentiable in x and bias."""
    return BiasReLUFunction.apply(x, bias, float(scale))


class BiasReLU(nn.Module):
    """y = relu(x * scale + bias) with a learnable bias [features] and a fixed float scale."""

    def __init__(self, features: int, scale: float = 1.0, device=None, dtype=None):
        super().__init__()
        self.features = features
        self.scale = float(scale)
        # an nn.Parameter: seen by .parameters() (so optimizers update it), saved in
        # state_dict(), moved by .to()/.cuda()/.double()
        self.bias = nn.Parameter(torch.zeros(features, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bias_relu(x, self.bias, self.scale)

    def extra_repr(self) -> str:
        return f"features={self.features}, scale={self.scale}"
