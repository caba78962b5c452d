"""Honest Python 3.12 syntax (read only where the interpreter is 3.12 or newer): type aliases,
type parameters of functions and classes, f-strings reusing their own quotes and nesting. The
review must not raise on it and must find nothing."""
import torch

type Shape = tuple[int, ...]
type Pair[T] = tuple[T, T]


def first[T](items: list[T]) -> T:
    return items[0]


class Box[T: (int, float), *Ts, **P]:
    def __init__(self, value: T) -> None:
        self.value = value


def describe(x: torch.Tensor, table: dict[str, int]) -> str:
    return f"{x.shape} {table["key"]} {f"{f"{1 + 1}"}"} {"a" if x.numel() else "b"}"
