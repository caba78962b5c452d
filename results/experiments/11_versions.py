"""Build and run results/experiments/11_versions.cu: the five versions of exercise 11's GEMM
(naive, shared-memory tiles, register tiles, 16-byte loads, double buffering = the solution),
each validated against cuBLAS sgemm (TF32 off) and timed against it in the same process.

    python results/experiments/11_versions.py                  # 4096^3, every version
    python results/experiments/11_versions.py 4095 4097 4093   # an awkward shape (M N K)
    python results/experiments/11_versions.py 4096 4096 4096 3 4 5

Runs from the repository root on a GPU machine in well under a minute (the nvcc build takes a
few seconds; version 1 at 4096^3 takes ~0.1-0.5 s a run and is timed 3 times).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "results/experiments/11_versions.cu"


def nvidia_dirs() -> tuple[list[str], list[str]]:
    """Include and library folders of the CUDA libraries pip installed with torch (cublas_v2.h,
    libcublas.so.13): nvcc's own install may lack them."""
    inc, lib = [], []
    try:
        import nvidia
        for base in nvidia.__path__:
            inc += glob.glob(os.path.join(base, "*", "include"))
            lib += [os.path.dirname(p) for p in glob.glob(os.path.join(base, "*", "lib", "libcublas.so*"))]
    except ImportError:
        pass
    return inc, sorted(set(lib))


def build(out: Path) -> Path:
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    arch = "sm_90"
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}"
    except ImportError:
        pass
    inc, lib = nvidia_dirs()
    cublas = ["-lcublas"]
    if lib:  # only libcublas.so.13 there (no unversioned link): name it
        so = sorted(glob.glob(os.path.join(lib[0], "libcublas.so*")))[0]
        cublas = ["-L" + lib[0], "-l:" + os.path.basename(so), "-Xlinker", "-rpath=" + lib[0]]
    cmd = [nvcc, "-O3", "-std=c++17", f"-arch={arch}", "-I" + str(ROOT / "include"),
           *("-I" + d for d in inc), "-o", str(out), str(SRC), *cublas]
    subprocess.run(cmd, check=True)
    return out


def main(argv: list[str]) -> None:
    binary = build(Path(os.environ.get("TMPDIR", "/tmp")) / "ex11_versions")
    args = argv or ["4096", "4096", "4096"]
    subprocess.run([str(binary), *args], check=True)


if __name__ == "__main__":
    main(sys.argv[1:])
