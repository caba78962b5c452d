"""Ninja: what a build learns from torch.utils.cpp_extension's own ninja writer, and the ninja
tool itself. Shared by the JIT build (grader.submission.build), the bindings' precompiled header
(grader.submission.pch) and the early rebuild (grader.submission.early).
"""
from __future__ import annotations

import inspect
import os
import shutil
import sys
from pathlib import Path


def write_ninja(folder: Path, **args) -> str | None:
    """The build.ninja torch.utils.cpp_extension writes for a JIT build of a binding with
    these arguments (name, sources, extra_cuda_cflags, extra_include_paths), written into
    `folder`; its text, or None where this torch's writer (an internal) is spelled otherwise."""
    # torch here, not at the top: the early rebuild's child (grader.submission.early) uses
    # ninja_tool below and must start without torch
    from torch.utils import cpp_extension
    writer = cpp_extension._write_ninja_file_to_build_library
    args = dict(path=str(folder / "build.ninja"), extra_cflags=["-O3"], extra_sycl_cflags=[],
                extra_ldflags=[], with_cuda=True, with_sycl=False, is_standalone=False, **args)
    try:
        params = inspect.signature(writer).parameters
        writer(**{k: v for k, v in args.items() if k in params})
        return (folder / "build.ninja").read_text()
    except Exception:
        return None


def ninja_tool() -> str | None:
    """ninja (a pip package) beside this interpreter, or on PATH."""
    return shutil.which("ninja", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


