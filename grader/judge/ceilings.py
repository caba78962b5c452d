"""Measuring the ceilings (grader.common.ceilings declares them) on this GPU, in the judge.

Each is measured once per device and torch version, with the one timing helper's events
(grader.common.timing.time_fn), and cached under grader.common.paths.CEILINGS: the submission's
process cannot write there.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import triton
import triton.language as tl

from grader.common.ceilings import CEILINGS
from grader.common.timing import time_fn


def _copy() -> float:
    src = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB, far past L2
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src))
    return 2 * (1 << 30) / (t["ms"] * 1e-3) / 1e9


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), x, mask=x == 12345.678)


def _read() -> float:
    """A Triton kernel that loads every byte and stores nothing (its one store is guarded by a
    test on the data that never holds, so the loads cannot be removed): read-only bandwidth,
    without a reduction."""
    n = 1 << 28
    x = torch.rand(n, device="cuda", dtype=torch.float32)  # values in [0, 1)
    out = torch.empty(4096, device="cuda", dtype=torch.float32)
    block = 4096
    t = time_fn(lambda: _read_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block,
                                                                 num_warps=8))
    return 4 * n / (t["ms"] * 1e-3) / 1e9


def _matmul(dtype_name: str):
    def measure() -> float:
        dtype = getattr(torch, dtype_name)
        n = 8192
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False  # plain fp32: what CUDA cores can do
        try:
            t = time_fn(lambda: a @ b, rep_ms=300)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        return 2 * n ** 3 / (t["ms"] * 1e-3) / 1e12
    return measure


MEASURE = {"bandwidth": _copy, "read_bandwidth": _read, "matmul_bf16": _matmul("bfloat16"),
           "matmul_fp16": _matmul("float16"), "matmul_fp32": _matmul("float32")}
assert set(MEASURE) == set(CEILINGS), "every declared ceiling is measured here"


def ceiling_cache_path(folder: Path, device_name: str, torch_version: str) -> Path:
    safe = "".join(c if c.isalnum() else "-" for c in f"{device_name}-{torch_version}")
    return folder / f"{safe}.json"


def measure_ceilings(folder: Path, names=None) -> dict:
    """This GPU's ceilings (name -> rate), measured once per device and torch, cached."""
    name = torch.cuda.get_device_name()
    path = ceiling_cache_path(folder, name, torch.__version__)
    out = json.loads(path.read_text()) if path.exists() else {}
    out.update(device=name, torch=str(torch.__version__))
    missing = [c for c in (names or CEILINGS) if c not in out]
    for c in missing:
        out[c] = MEASURE[c]()
        torch.cuda.empty_cache()
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2))
    return out
