"""Honest, odd Python: every statement kind of Python 3.10-3.11 (3.12's are in odd_syntax_312.py),
using only what a kernel file imports and does. The review must not raise on it, and must find
nothing: match (every pattern), async with/for/comprehensions, await, walrus, star expressions
and unpacking, decorators, lambdas, nested comprehensions, f-strings with nested quotes and
format specs, annotations with and without values, global/nonlocal, try/except*/else/finally,
parenthesized context managers, del, assert, raise from, yield from, chained comparisons,
positional-only and keyword-only parameters, a dataclass, properties, an autograd.Function, an
nn.Module, a triton_op, feature detection by import and getattr/hasattr, reading the
environment, and a `__main__` block (which never runs when the grader imports the file).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools
import itertools
import math
import operator
import os
import struct
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

try:
    from triton.language.extra import libdevice
except ImportError:  # an older Triton
    from triton.language.extra.cuda import libdevice

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1" or os.getenv("X") is not None
HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16}
DTYPES[torch.bfloat16] = tl.bfloat16
FP8 = getattr(torch, "float8_e5m2", None)
HAS_DESC = hasattr(tl, "make_tensor_descriptor") and "make_tensor_descriptor" in dir(tl)
BITS = struct.unpack("<I", struct.pack("<f", 1.5))[0]
CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in itertools.product((64, 128), (4, 8))]
counter = 0
Vector = list[float]
x: int
y: "torch.Tensor | None" = None
big = 1_000_000 + 0x10 + 0o7 + 0b1 + 1e-3j.imag
raw = rb"\x00" + b"abc" + bytes(3) + bytearray(2)
ell = ...


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = libdevice.rsqrt(v * v + 1.0)
    tl.store(y_ptr + offs, v, mask=mask)


@triton_op("ex_odd::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    n = x.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    wrap_triton(_kernel)[grid](x, y, n, BLOCK=128)
    return y


@torch.library.register_fake("ex_odd::scale")
def _(x):
    return torch.empty_like(x)


@dataclass(frozen=True)
class Launch:
    block: int = 128
    warps: int = field(default=4)
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def threads(self) -> int:
        return self.block * self.warps

    @staticmethod
    def make(*args: int, block: int = 64, **kw: Any) -> "Launch":
        return Launch(block, *args[:1], **kw)

    @classmethod
    def default(cls, /) -> "Launch":
        return cls()


class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps=1e-6):
        ctx.save_for_backward(x, w)
        ctx.eps = eps
        ctx.shape, (ctx.a, *ctx.rest) = x.shape, (1, 2, 3)
        return scale(x) * w

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy * w, None, None


class Module(torch.nn.Module):
    def __init__(self, n: int, *, device=None) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(n, device=device))
        setattr(self, "b", torch.nn.Parameter(torch.zeros(n, device=device)))
        self.__private = 1

    def forward(self, x):
        return Fn.apply(x, self.w) + self.b


def closures():
    total = 0

    def add(k):
        nonlocal total
        total += k
        return total

    global counter
    counter += 1
    return add


@functools.lru_cache(maxsize=None)
def block_for(n: int) -> int:
    return triton.next_power_of_2(n) if n > 0 else 1


def everything(items: list[int], table: dict[str, int], *rest, **options) -> Optional[int]:
    squares = [i * i for i in items if i % 2 for _ in range(1)]
    nested = [[a * b for b in items] for a in items]
    evens = {i for i in items if not i & 1} | {-1, +2, ~3}
    inverse = {v: k for k, v in table.items()}
    lazy = (i for i in items)
    first, *middle, last = items or [0, 0]
    a, (b, c) = 1, (2, 3)
    if (n := len(items)) > 3 and 0 < n <= 10 != 11:
        pass
    elif n is None or n not in (1, 2):
        pass
    else:
        del squares[0:1]
    while n > 0:
        n -= 1
        if n == 5:
            continue
        break
    else:
        n = 0
    for i, (k, v) in enumerate(sorted(table.items(), key=operator.itemgetter(1))):
        assert isinstance(k, str), f"key {k!r} at {i}"
    try:
        value = table["key"]
    except KeyError as e:
        raise ValueError(f"missing {e.args[0]}") from None
    except (TypeError, AttributeError):
        value = 0
    else:
        value += 1
    finally:
        message = f"{value:>{n}} {'nested' + 'quotes'} {table.get('k', 0)!s:10}"
    match items:
        case []:
            return None
        case None:
            return 0
        case [one]:
            return one
        case [0, *others] if others:
            return len(others)
        case {"key": v, **others}:
            return v
        case Launch(block=64, warps=w) | Launch(block=w):
            return w
        case int() | float() as num:
            return int(num)
        case _:
            pass
    fn: Callable[[int], int] = lambda v, *args, k=1, **kw: v + k  # noqa: E731
    total = functools.reduce(operator.add, map(fn, filter(None, items)), 0)
    print(*items, sep=", ", end="\n")
    return total + math.ceil(math.log2(max(items) + 1)) + sum(lazy) + len(nested) + len(evens) + len(
        inverse) + a + b + c + first + last + len(middle) + len(message) + len(rest) + len(options)


def generator():
    yield 1
    yield from range(3)
    received = yield
    return received


async def asynchronous(source):
    async with source as s, source:
        async for item in s:
            await item
    values = [v async for v in source]
    return values


def groups():
    try:
        pass
    except* ValueError as eg:
        warnings.warn(str(eg))
    with (open_a() as a, open_b() as b):
        return a, b


def open_a():
    return None


open_b = open_a


def dunders(x):
    return type(x).__name__, Fn.__qualname__, __doc__, __file__


if __name__ == "__main__":
    import sys
    import time
    t = time.perf_counter()
    print(scale(torch.ones(4)), sys.argv, time.perf_counter() - t)


class Mode(enum.Enum):
    FAST = enum.auto()


Record = collections.namedtuple("Record", ["block", "warps"])
CACHE: collections.OrderedDict = collections.OrderedDict()


@contextlib.contextmanager
def on_device(device):
    yield device


with contextlib.nullcontext(), on_device(None):
    pass
