"""Exercise 03 — bias_relu: the autograd.Function, the functional op and the nn.Module
(TODOs 1, 6 and 9).

    y = relu(x * scale + bias)        x [M, N], bias [N], scale a Python float

Read exercises/03_bias_relu/README.md first; grade with
`python -m grader grade --exercise 03`. Without a GPU your C++ CPU path is checked and the CUDA
checks are reported as "needs a GPU".

`bias_relu_ext` is the module built from bias_relu.cpp + bias_relu_kernels.cu (the grader builds
it with torch.utils.cpp_extension and registers it under this name before importing this file,
as `pip install` of a setup.py would). It has two functions:
    bias_relu_ext.forward(x, bias, scale)    -> y
    bias_relu_ext.backward(grad_y, y, scale) -> (grad_x, grad_bias)
"""
import torch
from torch import nn
from torch.autograd.function import once_differentiable

import bias_relu_ext


class BiasReLUFunction(torch.autograd.Function):
    """Tells autograd how to differentiate the extension's forward."""

    @staticmethod
    def forward(ctx, x, bias, scale):
        # TODO 1 (about 4 lines): y = bias_relu_ext.forward(x, bias, scale); save what backward
        # needs with ctx.save_for_backward(...) (tensors) and ctx.scale = scale (a float); return
        # y. Which tensor is enough for the backward, and costs no extra memory? (README, hints)
        raise NotImplementedError("bias_relu: not implemented yet (TODO 1 in cuda/bias_relu.py: "
                                  "the autograd.Function's forward)")

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):
        # TODO 6 (about 5 lines): get the saved tensor back (ctx.saved_tensors), make grad_y
        # contiguous (after y.sum().backward() it is one number expanded to [M, N], strides
        # (0, 0)), call bias_relu_ext.backward, and return one gradient per input of forward:
        # (grad_x, grad_bias, None), None for the float scale.
        raise NotImplementedError("BiasReLUFunction.backward: not implemented yet (TODO 6 in "
                                  "cuda/bias_relu.py)")


def bias_relu(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """relu(x * scale + bias) for x [M, N] and bias [N], differentiable in x and bias. Given."""
    return BiasReLUFunction.apply(x, bias, float(scale))


class BiasReLU(nn.Module):
    """y = relu(x * scale + bias) with a learnable bias [features] and a fixed float scale.

    BiasReLU(features, scale=1.0, device=None, dtype=None); the bias starts at zeros.
    """

    def __init__(self, features: int, scale: float = 1.0, device=None, dtype=None):
        super().__init__()
        # TODO 9 (about 4 lines): keep `features` and `scale` (as a float), and the bias as an
        # nn.Parameter named `bias` (zeros of shape [features] on `device` with `dtype`), so
        # that optimizers, state_dict() and .to() see it.
        raise NotImplementedError("BiasReLU: not implemented yet (TODO 9 in cuda/bias_relu.py)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # TODO 9 (1 line): the functional op above, with this module's bias and scale
        raise NotImplementedError("BiasReLU.forward: not implemented yet (TODO 9 in "
                                  "cuda/bias_relu.py)")
