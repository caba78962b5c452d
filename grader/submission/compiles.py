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

import inspect
import time

import torch

from grader.common.settings import current


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
        if not current().sanitize:
            keys_without_line_numbers(JITFunction)

    def stats(self) -> dict:
        return {"specializations": sum(len(k) for k in self.keys.values()),
                "kernels": {name: len(k) for name, k in sorted(self.keys.items())},
                "seconds": round(self.seconds, 2), "compiled": self.compiled,
                "emulated": self.emulated}


def keys_without_line_numbers(jit_function) -> bool:
    """Key each Triton kernel by its source without the line it starts on. Triton's key of a
    @triton.jit function (its `cache_key`: the function's source, its callees' keys, the
    constexpr globals it reads) also holds its starting line, so a line added to one kernel
    moves every kernel below it in the file, and each of their specializations compiles again:
    a one-line edit of 13's forward kernel cost about a fresh grade in watch-13 (58-75 s against
    55-82 s, an H200, 2026-11-29; docs/performance.md, "Grading time"). Without it an edit
    compiles the kernels whose source changed. A kernel found in the cache keeps the line
    numbers of the compile that made it, which only debug information shows (a device assert, a
    profiler's source view): a grade under compute-sanitizer, whose reports name lines, keys as
    Triton does. Where this Triton's key is not computed that way, nothing is changed (False)."""
    owner = next((c for c in jit_function.__mro__ if "cache_key" in vars(c)), None)
    prop = vars(owner).get("cache_key") if owner else None
    if not isinstance(prop, property):
        return False
    if getattr(prop.fget, "without_lines", False):
        return True  # done already (a zygote's fork, a second server)
    try:
        if "starting_line_number" not in inspect.getsource(prop.fget):
            return False
    except (OSError, TypeError):
        return False
    keyed = prop.fget

    def cache_key(fn):
        if getattr(fn, "hash", None) is not None:
            return fn.hash
        line = fn.starting_line_number
        fn.starting_line_number = 0  # only while the key is made: a compile reads the real one
        try:
            return keyed(fn)
        finally:
            fn.starting_line_number = line
    cache_key.without_lines = True
    setattr(owner, "cache_key", property(cache_key))
    return True
