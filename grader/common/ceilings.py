"""Ceilings: what every kernel is held to, declared once as data (no torch here).

A ceiling is a rate this GPU can reach, measured once per GPU and torch version by the judge
(grader.judge.ceilings) and cached; an exercise names one (`[benchmark] ceiling`), its traffic
model counts what the ceiling's unit counts, and a track's figure is reported as a fraction of
it. A new ceiling is a new entry here and its measurement in grader.judge.ceilings.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ceiling:
    label: str        # "copy bandwidth"
    unit: str         # "GB/s" or "TFLOP/s"
    counts: str       # what the exercise's model counts: "bytes" or "flops"
    how: str          # how it is measured, for the reports


CEILINGS = {
    "bandwidth": Ceiling("copy bandwidth", "GB/s", "bytes",
                         "device-to-device copy of 1 GiB bf16, bytes read + written"),
    "read_bandwidth": Ceiling("read bandwidth", "GB/s", "bytes",
                              "a Triton kernel reading 1 GiB fp32 and writing nothing"),
    "matmul_bf16": Ceiling("bf16 matmul rate", "TFLOP/s", "flops", "cuBLAS bf16 8192^3"),
    "matmul_fp16": Ceiling("fp16 matmul rate", "TFLOP/s", "flops", "cuBLAS fp16 8192^3"),
    "matmul_fp32": Ceiling("fp32 matmul rate", "TFLOP/s", "flops", "cuBLAS fp32 8192^3, TF32 off"),
}


def rate(model: dict, ms: float, ceiling: str) -> float:
    """GB/s or TFLOP/s achieved in `ms` milliseconds (by the ceiling's unit)."""
    c = CEILINGS[ceiling]
    seconds = ms * 1e-3
    return model["bytes"] / seconds / 1e9 if c.counts == "bytes" else model["flops"] / seconds / 1e12
