"""Launches build: the launch records' extension (grader/submission/launches.cpp), compiled by the
judge into the grader's cache, once per toolchain; the submission's process only loads it (its
sandbox cannot write there, and it must not build code the judge trusts).

A plain CPython extension compiled by the host C++ compiler: no torch headers (a few seconds, not
the minute of a torch extension), no link to CUPTI (it finds the libcupti torch loaded, at run
time). The headers: CUPTI's and the CUDA toolkit's (crt/, which CUPTI's headers include and the
pip wheels do not ship). The key: the source, the compiler, Python's headers and CUPTI's. A
failed build is kept beside it (later judges say why instead of compiling again; delete it to
retry). Standard library only: the judge builds before it imports torch.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

from grader.common.machine import links_shared_libstdcxx
from grader.common.paths import CACHE, ROOT

SOURCE = ROOT / "grader" / "submission" / "launches.cpp"
FOLDER = CACHE / "launches"
NAME = "_grader_launches"  # the module's name (its PyInit_ function)


def _compiler() -> str | None:
    for cxx in (os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++")):
        if cxx and links_shared_libstdcxx(cxx):  # never a second libstdc++ in the .so
            return cxx
    return None


def _cuda_homes() -> list[Path]:
    homes = [Path(p) for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")) if p]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(Path(nvcc).resolve().parent.parent)
    return homes + [Path("/usr/local/cuda")] + sorted(Path("/usr/local").glob("cuda-*"),
                                                       reverse=True)


def _includes() -> list[Path] | None:
    """[the CUDA toolkit's include folder, CUPTI's if apart], or None."""
    wheels = [p for site in map(Path, sys.path) for p in sorted(site.glob("nvidia/cu*/include"))]
    for home in _cuda_homes():
        include = home / "include"
        if not (include / "crt" / "host_defines.h").exists():
            continue
        for cupti in (include, home / "extras" / "CUPTI" / "include", *wheels):
            if (cupti / "cupti.h").exists() and (cupti / "generated_cuda_meta.h").exists():
                return [include] if cupti == include else [include, cupti]
    return None


def _key(cxx: str, includes: list[Path]) -> str:
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), cxx.encode(), version.encode(), sys.version.encode(),
                 sysconfig.get_paths()["include"].encode(),
                 *(str(i).encode() for i in includes),
                 *((i / "cupti.h").read_bytes() for i in includes if (i / "cupti.h").exists())):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


@cache
def built() -> tuple[Path | None, str]:
    """(the extension's path, "") or (None, why there is none)."""
    cxx = _compiler()
    if cxx is None:
        return None, "no C++ compiler that links libstdc++ shared (CXX, g++, c++)"
    includes = _includes()
    if includes is None:
        return None, "no CUDA toolkit headers with CUPTI's (CUDA_HOME, nvcc, /usr/local/cuda)"
    py = Path(sysconfig.get_paths()["include"])
    if not (py / "Python.h").exists():
        return None, f"no Python.h in {py}"
    folder = FOLDER / _key(cxx, includes)
    so, failed = folder / f"{NAME}.so", folder / "failed.txt"
    if so.exists():
        return so, ""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # judges started together build it once
        if so.exists():
            return so, ""
        if failed.exists():
            return None, "the build failed (" + failed.read_text()[:300] + ")"
        tmp = folder / f"{NAME}.{os.getpid()}.tmp"
        cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", f"-I{py}",
               *(f"-I{i}" for i in includes), str(SOURCE), "-o", str(tmp), "-ldl"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            tmp.unlink(missing_ok=True)
            errors = [l for l in run.stderr.splitlines() if "error" in l] or [run.stderr[-300:]]
            failed.write_text(errors[0])
            return None, "the build failed (" + errors[0][:300] + ")"
        tmp.replace(so)  # whole or not at all: a process never loads half a library
    return so, ""
