"""Exercise 05 — softmax: one program per row, numerically stable, rows longer than a block.

Write `softmax(x) -> y` over the last dimension of x (any leading shape, N from 1 to 131072 and
more), differentiable: the backward is dx = y * (dy - sum(dy * y)), one fused kernel. Read
exercises/05_softmax/README.md first; grade with `make exercise-05`. Without a GPU this file runs
on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1).

Given: the block-size constants, the kernels' signatures, the argument checks (`_rows`,
`softmax`) and the launch-size helpers. Yours: the kernel bodies, the launches, and the
autograd.Function.
"""
import torch
import triton
import triton.language as tl

# A row up to this long stays in registers in one program; longer rows loop over LOOP_BLOCK
# columns (the online softmax).
MAX_FWD_BLOCK = 32768
MAX_BWD_BLOCK = 16384   # the backward holds y and dy: two row copies
LOOP_BLOCK = 4096
# On Triton's CPU interpreter (no GPU), small blocks: the checks' short rows then also take
# the two-pass path, and a long row costs a few dozen numpy calls instead of one huge one.
CPU_MAX_BLOCK = 512
CPU_LOOP_BLOCK = 256


@triton.jit
def _softmax_fwd_kernel(x_ptr, y_ptr,            # x: [M, N] rows x_row_stride apart; y: [M, N]
                        N, x_row_stride,
                        BLOCK_N: tl.constexpr,   # columns per step (a power of two)
                        ONE_BLOCK: tl.constexpr, # N <= BLOCK_N: the whole row in registers
                        F64: tl.constexpr):      # x is float64 (gradcheck)
    # the math type: float32 for fp32/fp16/bf16, float64 for float64. Convert every load with
    # .to(acc_ty) before any arithmetic (an exp or a long sum in 16 bits loses the digits the
    # checks ask for), and store with .to(y_ptr.dtype.element_ty).
    acc_ty = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)  # int64: row * N passes 2^31 on big inputs
    # TODO (about 8 lines), ONE_BLOCK: load the row (masked lanes must not change the max or
    #   the sum: what value should they read?), subtract the row max, exp, sum, divide, store.
    # TODO (about 20 lines), otherwise: the online softmax. A first loop over the row in blocks
    #   of BLOCK_N keeps a running max and a running sum of exp(x - running max), rescaling the
    #   sum whenever the max grows; a second loop writes exp(x - max) / sum. Beware of
    #   exp(-inf - (-inf)) = NaN where everything seen so far is -inf.
    pass


@triton.jit
def _softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr,   # all [M, N], contiguous
                        N,
                        BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    row = tl.program_id(0).to(tl.int64)
    # TODO (about 6 lines), ONE_BLOCK: dot = sum(y * dy) over the row; dx = y * (dy - dot).
    # TODO (about 14 lines), otherwise: one loop for the dot, a second to write dx.
    pass


def _num_warps(block: int) -> int:
    # ~16 fp32 values per thread: 4096 columns -> 8 warps, 8192 -> 16, 16384 and up -> 32
    return 32 if block >= 16384 else 16 if block >= 8192 else 8 if block >= 2048 else 4


def _blocks(N: int, device: torch.device, max_block: int) -> tuple[int, bool]:
    """(BLOCK_N, ONE_BLOCK) for rows of N elements."""
    if device.type == "cpu":
        max_block, loop_block = CPU_MAX_BLOCK, CPU_LOOP_BLOCK
    else:
        loop_block = LOOP_BLOCK
    one_block = N <= max_block
    block = triton.next_power_of_2(N) if one_block else loop_block
    return block, one_block


def _rows(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x as [M, N] rows without a copy, and the distance between rows; refuse what needs one."""
    N = x.shape[-1]
    if x.stride(-1) != 1 and N > 1:
        raise ValueError(f"x must have unit stride in its last dimension (got strides "
                         f"{x.stride()}): softmax reads rows; call x.contiguous() first")
    try:
        x2 = x.view(-1, N)
    except RuntimeError:
        raise ValueError(f"x's leading dimensions must be one evenly strided run of rows (got "
                         f"shape {tuple(x.shape)}, strides {x.stride()}); call x.contiguous() "
                         f"first") from None
    return x2, (x2.stride(0) if x2.shape[0] > 1 else N)


def softmax_fwd(x: torch.Tensor) -> torch.Tensor:
    x2, row_stride = _rows(x)
    M, N = x2.shape
    # TODO (about 6 lines): y = a new contiguous tensor shaped like x (return it at once when
    #   M or N is 0); block, one_block = _blocks(N, x.device, MAX_FWD_BLOCK); launch one program
    #   per row: _softmax_fwd_kernel[(M,)](..., num_warps=_num_warps(block)).
    raise NotImplementedError("softmax_fwd: not implemented yet (see the TODOs in "
                              "triton/softmax.py)")


def softmax_bwd(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    # TODO (about 8 lines): dy may arrive strided (the gradient of y.sum() is one value
    #   expanded); dx = torch.empty_like(y); one program per row of _softmax_bwd_kernel.
    raise NotImplementedError("softmax_bwd: not implemented yet (see the TODOs in "
                              "triton/softmax.py)")


class _Softmax(torch.autograd.Function):
    # TODO (about 8 lines): forward(ctx, x) computes y with softmax_fwd and saves what the
    #   backward needs (which is cheaper to keep: x or y?); backward(ctx, dy) returns dx.
    pass


def softmax(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x must be float32, float16, bfloat16 or float64, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (softmax runs over the last one)")
    # TODO (1 line): return _Softmax.apply(x)
    raise NotImplementedError("softmax: not implemented yet (see the TODOs in triton/softmax.py)")
