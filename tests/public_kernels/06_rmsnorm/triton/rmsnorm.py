"""Exercise 06 answered with a public kernel: Liger-Kernel's RMSNorm (its own Triton forward and
backward, imported from the `liger-kernel` package), with only the glue the exercise's API needs.
A correct public kernel must never be flagged for review nor accused of delegation."""
import torch
from liger_kernel.ops.rms_norm import LigerRMSNormFunction


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # offset 0 and the "llama" casting mode: y = x * rstd * w, the exercise's definition
    return LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
