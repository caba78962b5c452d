"""Triton 3.8's CPU interpreter multiplies bf16 tl.dot operands as their uint16 storage (garbage):
patch create_dot to widen bf16 operands to fp32 first (exact: bf16 x bf16 products fit fp32).
Import after setting TRITON_INTERPRET=1, before launching kernels."""
import numpy as np
import triton.language as tl
from triton.runtime import interpreter as _I

_orig = _I.InterpreterBuilder.create_dot


def _create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    if a.dtype.scalar == tl.bfloat16:
        a = _I.TensorHandle(_I._convert_float(a.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)
    if b.dtype.scalar == tl.bfloat16:
        b = _I.TensorHandle(_I._convert_float(b.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32)
    return _orig(self, a, b, d, input_precision, max_num_imprecise_acc)


_I.InterpreterBuilder.create_dot = _create_dot
