"""Toolchain: nvcc, the host compiler, the CUDA library headers and the target GPU, as every
build sets them (the JIT build, grader.submission.build; the ahead-of-time one,
grader.submission.aot; the bindings' precompiled header, grader.submission.pch), and the header
packages a track may ask for.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import torch

from grader.common.discover import Track
from grader.common.machine import links_shared_libstdcxx
from grader.submission.build_errors import BuildError


def toolchain_env() -> list[str]:
    """Point torch at nvcc and at the CUDA library headers; return extra include folders.

    pip's torch ships headers such as cusparse.h (which ATen/cuda/CUDAContext.h includes) in
    site-packages/nvidia/cu*/include, not in nvcc's install, so we add that folder.
    """
    # ninja (a pip package) sits beside this interpreter, maybe not on PATH
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    if not os.environ.get("CUDA_HOME"):
        home = _find_cuda_home()
        if home is not None:
            os.environ["CUDA_HOME"] = str(home)
    _use_a_shared_libstdcxx_compiler()
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:  # no GPU here: build for Hopper, the machines this course targets
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    includes = []
    for site in map(Path, sys.path):
        nvidia = site / "nvidia"
        if nvidia.is_dir():
            includes += [str(p) for p in sorted(nvidia.glob("cu*/include")) if p.is_dir()]
    return includes


def _use_a_shared_libstdcxx_compiler() -> None:
    """A CXX that links libstdc++ statically (grader.common.machine.links_shared_libstdcxx says
    what that breaks) is swapped for the g++/gcc on PATH."""
    cxx = os.environ.get("CXX")
    if not cxx or links_shared_libstdcxx(cxx):
        return
    for name, cc in (("g++", "gcc"), ("c++", "cc")):
        candidate = shutil.which(name)
        if candidate and candidate != cxx and links_shared_libstdcxx(candidate):
            os.environ["CXX"] = candidate
            if shutil.which(cc):
                os.environ["CC"] = shutil.which(cc)
            return


def _find_cuda_home() -> Path | None:
    """The CUDA install: nvcc plus its runtime library (an nvcc on PATH may be a wrapper script
    in /usr/local/bin, whose parent is not the install)."""
    nvcc = shutil.which("nvcc")
    candidates = [Path(p) for p in (os.environ.get("CUDA_PATH"),) if p]
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        has_lib = any(home.glob("lib64/libcudart*")) or any(home.glob("targets/*/lib/libcudart*"))
        if (home / "bin" / "nvcc").exists() and has_lib:
            return home
    return None


def _cutlass_headers() -> list[str]:
    try:
        import cutlass_library  # only for a track that asks for it (an optional package)
    except ImportError:
        raise BuildError("needs nvidia-cutlass (pip install nvidia-cutlass): its C++ headers are "
                         "this track's CUTLASS") from None
    root = Path(cutlass_library.source_path)
    return [str(root / "include"), str(root / "tools" / "util" / "include")]


HEADERS = {"cutlass": _cutlass_headers}  # header packages a track may ask for (`headers`)


def track_options(track: Track) -> tuple[list[str], list[str]]:
    """(include folders, nvcc flags) a track declares beyond the defaults; sets its arch."""
    includes = [d for h in track.headers for d in HEADERS[h]()]
    if track.arch:  # one track per process builds: the submission's, or an AOT build's
        os.environ["TORCH_CUDA_ARCH_LIST"] = track.arch
    return includes, list(track.cuda_flags)
