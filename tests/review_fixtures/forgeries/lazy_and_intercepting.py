"""Lazy or intercepting tensors and dispatch: a Tensor subclass, __torch_function__ and
__torch_dispatch__, a registration into ATen's namespace, PyTorch's dispatch modes, Triton's
launch hooks, the caching allocator, CUDA graphs, a result cache keyed by id()."""
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode  # review: intercept


class Lazy(torch.Tensor):  # review: intercept
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # review: intercept
        return func(*args, **(kwargs or {}))


class Spy:
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # review: intercept
        return func(*args, **(kwargs or {}))


lib = torch.library.Library("aten", "IMPL")  # review: intercept
triton.knobs.runtime.launch_enter_hook = None  # review: intercept
torch.cuda.caching_allocator_alloc(1 << 30)  # review: intercept
graph = torch.cuda.CUDAGraph()  # review: graph
cache = {}


def add(x, y):
    key = id(x)  # review: identity
    if key not in cache:
        cache[key] = x + y
    return cache[key]
