"""Compiles: the Triton specializations a track's kernels are compiled for, counted where they
are made (the submission's process), so a grade can say where its seconds go.

Triton compiles a kernel once per specialization: every `tl.constexpr` value, and for each
other argument its type, an integer's being 1 or a multiple of 16, a pointer's being 16-byte
aligned. A check that draws a new length or stride per example can compile a new kernel per
example (a second or more each on a GPU host). Counted:
- on a GPU, every compile Triton makes (its `_do_compile`: the in-memory cache missed; a
  kernel found in the on-disk cache is loaded, fast, and counted apart);
- on the interpreter, which compiles nothing, the distinct specializations the launches would
  have compiled, by Triton's rule (below): what the same checks cost on a GPU.
The judge asks for the figures at the end of a phase and records them as an event.
"""
from __future__ import annotations

import time

import torch


def _arg_key(value):
    """One argument as Triton specializes it (triton.runtime.jit's specialize_impl)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "1" if value == 1 else ("i%16" if value % 16 == 0 else "i")
    if isinstance(value, float):
        return "fp32"
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, (tuple, list)):
        return tuple(_arg_key(v) for v in value)
    return type(value).__name__  # a tensor descriptor, a dtype: one kind each


class Compiles:
    """The counts of one process: kernel name -> its specializations (keys), and the seconds
    real compiles took."""

    def __init__(self):
        self.keys: dict[str, set] = {}
        self.seconds = 0.0
        self.compiled = 0   # compiles that missed Triton's on-disk cache too (slow ones)
        self.emulated = False

    def install(self, interpreted: bool) -> None:
        """Hook Triton where its specializations are decided: the interpreter's launches (keys
        by the rule above) or the JIT's compiles."""
        counts = self
        if interpreted:
            from triton.runtime.interpreter import GridExecutor  # only where it runs
            self.emulated = True
            launch = GridExecutor.__call__

            def counted(executor, *args, **kwargs):
                names = executor.arg_names
                constexprs = set(executor.constexprs)
                key = tuple(repr(a) if n in constexprs else _arg_key(a)
                            for n, a in zip(names, args))
                key += tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
                counts.keys.setdefault(executor.fn.__qualname__, set()).add(key)
                return launch(executor, *args, **kwargs)
            GridExecutor.__call__ = counted
            return
        from triton.runtime.jit import JITFunction  # (as above: the side that runs here)
        compile_one = getattr(JITFunction, "_do_compile", None)
        if compile_one is None:  # a Triton that compiles elsewhere: no figures, nothing else
            return

        def timed(fn, key, *args, **kwargs):
            began = time.perf_counter()
            try:
                return compile_one(fn, key, *args, **kwargs)
            finally:
                spent = time.perf_counter() - began
                name = getattr(getattr(fn, "fn", None), "__qualname__", "kernel")
                counts.keys.setdefault(name, set()).add(str(key))
                counts.seconds += spent
                counts.compiled += spent > 0.05  # a load from the on-disk cache takes ~ms
        JITFunction._do_compile = timed

    def stats(self) -> dict:
        return {"specializations": sum(len(k) for k in self.keys.values()),
                "kernels": {name: len(k) for name, k in sorted(self.keys.items())},
                "seconds": round(self.seconds, 2), "compiled": self.compiled,
                "emulated": self.emulated}
