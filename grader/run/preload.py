"""Preload: what a zygote (grader.run.zygote) imports and computes before it serves forks, and
the check that none of it initialised CUDA (a fork after that is not valid). Every process
forked from the zygote starts with it: torch, triton, pytest and the grader's modules imported
(3-4 s of CPU per process otherwise), and Triton's key of its own sources computed.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import sys
import tempfile
from pathlib import Path

import torch

from grader.common.forking import ZygoteError

# What each process imports before it does anything that depends on its request. Nothing here may
# query CUDA at import (grader.judge.plugin does: HAS_GPU; it is imported by pytest in the child).
PRELOAD = {
    "judge": ["torch", "numpy", "pytest", "pytest_timeout", "_hypothesis_pytestplugin",
              "hypothesis", "grader.common.discover", "grader.common.events",
              "grader.common.processes", "grader.common.reference", "grader.common.seam",
              "grader.common.settings", "grader.common.timing", "grader.common.trust",
              "grader.common.poison", "grader.judge.spawn", "grader.judge.review",
              "grader.judge.proxy", "grader.judge.explain", "grader.judge.check",
              "grader.judge.cases", "grader.judge.testing", "grader.judge.gradcheck",
              "grader.judge.strategies", "grader.judge.baselines", "grader.judge.measure",
              "torch._dynamo"],  # FakeTensorMode's first use, a peer's, a compiled baseline's
    "submission": ["torch", "numpy", "triton", "triton.language", "grader.common.discover",
                   "grader.common.pyfile", "grader.common.settings", "grader.common.timing",
                   "grader.common.trust", "grader.common.poison", "grader.common.seam",
                   "grader.submission.early", "grader.submission.sandbox",
                   "grader.submission.build", "grader.submission.server",
                   "torch.autograd.profiler", "multiprocessing.connection", "landlock",
                   # torch.library's triton_op, opcheck and torch.compile import it: 1 s of CPU
                   # here; a forked process's start on a busy GPU host took 4-6 s without it
                   "torch._dynamo"],
}


_TRIPPED: list[str] = []  # every tripwire that fired (a module may swallow the exception)


def _trip(what: str):
    def tripped(*a, **k):
        _TRIPPED.append(what)
        raise ZygoteError(f"CUDA was queried ({what}) while preloading")
    return tripped


def preload(role: str, extra=()) -> list[str]:
    """Import the role's modules with every way torch has to reach the CUDA driver replaced by a
    tripwire: a module that queries CUDA at import raises here, naming itself, instead of
    initialising the driver. The imports that failed otherwise are returned (the child imports
    them itself, as a started process would)."""
    names = ("_cuda_getDeviceCount", "_cuda_init", "_cuda_getDevice", "_cuda_setDevice")
    saved = {n: getattr(torch._C, n) for n in names if hasattr(torch._C, n)}
    nvml = os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    # what an import may pin from this process's environment: torch._dynamo sets
    # TORCHINDUCTOR_CACHE_DIR and tempfile's folder (/tmp) as it imports, and a child that kept
    # them would write outside its sandbox's folders (it sets its own: grader.submission)
    environ, tempdir = dict(os.environ), tempfile.tempdir
    skipped = []
    try:
        for n in saved:
            setattr(torch._C, n, _trip(f"torch._C.{n}"))
        saved_lazy = torch.cuda._lazy_init
        torch.cuda._lazy_init = _trip("torch.cuda._lazy_init")
        try:
            for name in PRELOAD[role] + list(extra):
                try:
                    importlib.import_module(name)
                except ZygoteError as e:
                    raise ZygoteError(f"{e}: importing {name}") from None
                except Exception as e:  # not installed here: the child will say so, as ever
                    skipped.append(f"{name} ({type(e).__name__}: {e})")
                if _TRIPPED:  # the module caught it, and may keep a wrong answer: refuse too
                    raise ZygoteError(f"CUDA was queried ({_TRIPPED[0]}) while preloading: "
                                      f"importing {name}")
        finally:
            torch.cuda._lazy_init = saved_lazy
    finally:
        for n, fn in saved.items():
            setattr(torch._C, n, fn)
        os.environ.clear()
        os.environ.update(environ)
        tempfile.tempdir = tempdir
        if nvml is not None:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml
    return skipped


def triton_key_once() -> None:
    """Triton's own key, computed once here for every forked process: each compile's cache key
    starts with a hash of Triton's sources and its compiler library, which a process computes
    at its first compile, found in the cache or not (0.41 s of a first forward's 1.6 s on an
    H200 host, cProfile, 2026-11-30): once per process, so once per check share and timing.
    CPU only (files read and hashed). Not where Triton interprets (nothing is compiled)."""
    if os.environ.get("TRITON_INTERPRET") == "1" or "triton" not in sys.modules:
        return
    try:
        from triton.runtime.cache import triton_key  # (the submission's zygote only, after triton)
    except ImportError:  # a Triton that keys its cache elsewhere: each process computes it
        return
    if hasattr(triton_key, "cache_info"):  # computed once per process: the forks inherit it
        triton_key()


def cuda_initialised() -> str | None:
    """Why this process may not fork (the CUDA driver initialised, a CUDA context), or None."""
    if torch.cuda.is_initialized():
        return "torch initialised CUDA"
    libs = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
            if "/libcuda.so" in line}
    for lib in libs:  # loaded is not initialised: cuCtxGetCurrent answers 3 before cuInit
        ctx = ctypes.c_void_p()
        rc = ctypes.CDLL(lib).cuCtxGetCurrent(ctypes.byref(ctx))
        if rc != 3:  # CUDA_ERROR_NOT_INITIALIZED
            return f"the CUDA driver was initialised ({lib}: cuCtxGetCurrent returned {rc})"
    return None
