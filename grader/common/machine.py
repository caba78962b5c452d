"""Machine: what this machine can do, asked without torch: Linux Landlock (can a process make
the file system read-only for itself?), the NVIDIA driver (is there a GPU to ask torch about?
how many can CUDA use?) and a C++ compiler's libstdc++ (shared, as an extension loaded into
torch's process needs).
"""
from __future__ import annotations

import ctypes
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


def _cuda() -> ctypes.CDLL | None:
    """The driver's library, initialized (cuInit), or None: no driver, or it refuses. It
    initializes CUDA in the asking process: never ask in a process that later forks one that
    uses CUDA (a zygote)."""
    if not driver_loaded():
        return None
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if cuda.cuInit(0) == 0 else None


def cuda_devices() -> int:
    """The GPUs CUDA can use here (CUDA_VISIBLE_DEVICES applies), asked of the driver's library
    (cuDeviceGetCount) in 0.1 s, not of torch (2-3 s of import): 0 without a driver or a device,
    or where the driver refuses."""
    count = ctypes.c_int(0)
    cuda = _cuda()
    if cuda is None or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def cuda_device_name() -> str | None:
    """The first of those GPUs by name, the string torch.cuda.get_device_name() gives (both read
    the driver's), or None where there is none. Asked of the driver's library: a grade's process
    that imported torch for it (2-3 s with bytecode, ~4 s without, as on the GPU hosts) started
    its warming and timing judges that much later."""
    cuda, device = _cuda(), ctypes.c_int(0)
    if cuda is None or cuda.cuDeviceGet(ctypes.byref(device), 0) != 0:  # no device 0: none
        return None
    name = ctypes.create_string_buffer(256)
    if cuda.cuDeviceGetName(name, len(name), device) != 0:
        return None
    return name.value.decode(errors="replace") or None


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
