"""Seam: the wire between the judge (the trusted checks) and the submission's process.

Messages are pickled with torch's ForkingPickler, so tensors travel as shared memory: CUDA tensors
as CUDA IPC handles (no copy), CPU tensors as shared-memory files. Pickle from an untrusted
process is code execution, so the judge reads the submission's process's messages with `SafeUnpickler`: only
plain data and the handful of torch functions that rebuild a shared tensor may appear in them.

Tensors sent to the submission's process are transfer copies (`transfer_copy`): the submission's process never holds the
judge's own tensors, so nothing it does later (a thread, a deferred kernel, a cached pointer) can
change an input after the reference has read it, or an expectation.
"""
from __future__ import annotations

import io
import pickle
import threading
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # registers the tensor reductions with ForkingPickler

# shared-memory files by name (no file-descriptor passing over the socket)
torch.multiprocessing.set_sharing_strategy("file_system")

MAX_MESSAGE = 1 << 30  # bytes; a message beyond this from the submission's process is refused


def start_sharing() -> None:
    """Start torch's shared-memory manager now, in the background: the first tensor shared in
    a process starts it (torch_shm_manager, a process of its own that loads libtorch: 0.5 s on
    the 2-core machine) and waits for it, in the first check otherwise."""
    threading.Thread(target=lambda: torch.empty(1).share_memory_(), daemon=True).start()


def dumps(obj) -> bytes:
    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


# What a message from the submission's process may name: plain containers and the rebuilders of shared tensors.
_ALLOWED = {
    ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"),
    ("builtins", "complex"), ("collections", "OrderedDict"),
    ("torch", "Size"), ("torch", "device"), ("torch", "Tensor"), ("torch", "UntypedStorage"),
    ("torch.storage", "UntypedStorage"), ("torch.storage", "TypedStorage"),
    ("torch.nn.parameter", "Parameter"),
    ("torch._utils", "_rebuild_tensor"), ("torch._utils", "_rebuild_tensor_v2"),
    ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_meta_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_tensor"),
    ("torch.multiprocessing.reductions", "rebuild_storage_filename"),
    ("torch.multiprocessing.reductions", "rebuild_storage_empty"),
    ("torch.multiprocessing.reductions", "rebuild_typed_storage"),
    ("torch.multiprocessing.reductions", "rebuild_typed_storage_child"),
}
_DTYPES = {str(getattr(torch, n)).removeprefix("torch."): getattr(torch, n)
           for n in dir(torch) if isinstance(getattr(torch, n, None), torch.dtype)}


class UnsafeMessage(RuntimeError):
    """The submission's process sent something other than data and shared tensors."""


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and name in _DTYPES:
            return _DTYPES[name]
        if module == "torch" and name.endswith("Storage") and hasattr(torch, name):
            return getattr(torch, name)  # typed storage classes (FloatStorage, ...)
        raise UnsafeMessage(f"the submission's process sent a message naming {module}.{name}: "
                            f"only data and tensors may cross the seam")


def loads_untrusted(data: bytes):
    """A message from the submission's process; anything that does not read as one (bytes that
    are not a pickle, a truncated one, a tensor whose shared memory cannot be opened) is
    UnsafeMessage, said as such, never a crash of the judge."""
    try:
        return SafeUnpickler(io.BytesIO(data)).load()
    except UnsafeMessage:
        raise
    except Exception as e:
        raise UnsafeMessage(f"bytes that do not read as a message ({type(e).__name__}: "
                            f"{str(e)[:200]})") from e


_EMPTY = "__empty_tensor__"


def _pack(v):
    """Tensors without elements have no memory to share: they travel as their metadata."""
    if isinstance(v, torch.Tensor) and v.numel() == 0:
        return (_EMPTY, tuple(v.shape), tuple(v.stride()), str(v.dtype).removeprefix("torch."),
                str(v.device), bool(v.requires_grad))
    return v


def _unpack(v):
    if isinstance(v, tuple) and len(v) == 6 and v[0] == _EMPTY:
        _, shape, stride, dtype, device, grad = v
        t = torch.empty_strided(shape, stride, dtype=_DTYPES[dtype], device=device)
        return t.requires_grad_() if grad else t
    return v


def _map_leaves(fn, v):
    if isinstance(v, tuple) and len(v) == 6 and v[0] == _EMPTY:
        return fn(v)
    if isinstance(v, (tuple, list)):
        return type(v)(_map_leaves(fn, x) for x in v)
    if isinstance(v, dict):
        return {k: _map_leaves(fn, x) for k, x in v.items()}
    return fn(v)


def send(conn, obj) -> None:
    conn.send_bytes(dumps(_map_leaves(_pack, obj)))


def recv_trusted(conn):
    """The submission's process reading the judge: the judge is trusted."""
    return _map_leaves(_unpack, pickle.loads(conn.recv_bytes()))


def recv_untrusted(conn):
    """The judge reading the submission's process: data and shared tensors only."""
    return _map_leaves(_unpack, loads_untrusted(conn.recv_bytes(MAX_MESSAGE)))


def transfer_copy(t: torch.Tensor) -> torch.Tensor:
    """A fresh copy of `t` with its size, strides and storage offset (a view like x[:, ::2] or
    x[1:] reaches the submission's process as that same kind of view, so strided and misaligned checks still
    test what they mean to), in memory that is then shared with the submission's process.

    The whole storage is copied, not only the span the view covers: a check may make a view
    into a bigger buffer on purpose (12's A[:, :K] of a buffer whose columns past K hold 1000s,
    so that a kernel reading past K sees them), and the submission's process must see the same bytes there,
    not the end of its allocation."""
    t = t.detach()
    if t.device.type == "meta":  # a shape without data
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    total = max(t.storage_offset() + extent, t.untyped_storage().nbytes() // t.element_size())
    buf = torch.empty(total, dtype=t.dtype, device=t.device)
    if buf.device.type == "cpu":
        buf.share_memory_()  # into shared memory while empty: the copy below writes it once
    # the storage as it lies: also right for views whose elements share memory (an expanded
    # gradient, stride 0)
    buf.copy_(t.as_strided((total,), (1,), 0))
    return buf.as_strided(t.shape, t.stride(), t.storage_offset())


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do two tensors' storages overlap (an output that is an input, or a view of one)?"""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    a0, b0 = sa.data_ptr(), sb.data_ptr()
    return a0 < b0 + sb.nbytes() and b0 < a0 + sa.nbytes()


def tree_map(fn, v):
    if isinstance(v, (tuple, list)):
        return type(v)(tree_map(fn, x) for x in v)
    if isinstance(v, dict):
        return {k: tree_map(fn, x) for k, x in v.items()}
    return fn(v)


def tensors_in(v) -> list:
    out = []
    tree_map(lambda x: out.append(x) if isinstance(x, torch.Tensor) else None, v)
    return out
