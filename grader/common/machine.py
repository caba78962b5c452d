"""Machine: what this machine can do, asked without torch: Linux Landlock (can a process make
the file system read-only for itself?), the NVIDIA driver (is there a GPU to ask torch about?)
and a C++ compiler's libstdc++ (shared, as an extension loaded into torch's process needs).
"""
from __future__ import annotations

import os
import subprocess

try:
    import landlock
except ImportError:  # not installed (the GPU machines' image): no sandbox of the file system
    landlock = None

# What the NVIDIA driver shows where it is loaded (WSL: /dev/dxg); without any of them
# torch.cuda.is_available() is False whatever torch says
DRIVER = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or no `landlock` package)."""
    try:
        return int(landlock.landlock_abi_version()) if landlock is not None else 0
    except Exception:  # the package, but no Landlock in this kernel
        return 0


def landlock_available() -> bool:
    """Can a process here make the file system read-only for itself?"""
    return landlock_abi() >= 1


def driver_loaded() -> bool:
    return any(os.path.exists(p) for p in DRIVER)


def links_shared_libstdcxx(compiler: str) -> bool:
    """Does `compiler` link libstdc++ as a shared library? An extension must use the process's
    one: a compiler that links it statically (seen: CXX=/opt/gcc/bin/g++ on the GPU machines)
    puts a second copy in the .so, whose stream facets clash with torch's (the first
    TORCH_CHECK message that formats a number segfaults)."""
    try:
        out = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return os.path.isabs(out) and os.path.exists(out)
