"""Patching what the evidence rests on through a value the review must follow: an alias, a
container, a loop, a helper's parameter, a helper's return, a lambda, a class attribute, type(),
a decorated kernel's own attributes."""
import torch
import triton
import triton.language as tl

lib = torch.library
lib.opcheck = None  # review: patch
Event = [torch.cuda.Event][0]
Event.elapsed_time = lambda self, end: 0.001  # review: patch
for cls in (triton.JITFunction,):
    cls.run = None  # review: patch


def patch(target, name):
    target.elapsed_time = None  # review: patch


patch(torch.cuda.Event, "x")


def timer():
    return torch.cuda.Event


timer().record = None  # review: patch
(lambda: triton.testing)().do_bench = None  # review: patch
kind = type(torch.empty(0))
kind.sum = None  # review: patch


class Holder:
    event = torch.cuda.Event

    def go(self):
        self.event.synchronize = None  # review: patch


@triton.jit
def k(x_ptr):
    tl.store(x_ptr, 1.0)


k.run = lambda *a, **kw: None  # review: patch
modules = [torch.library]  # review: value
