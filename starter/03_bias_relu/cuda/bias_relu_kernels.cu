// Exercise 03 — bias_relu: the CUDA kernels and their host launchers (TODO 5 and TODO 8).
//
//   forward   y            = relu(x * scale + bias)          x, y [M, N] row-major; bias [N]
//   backward  grad_x       = grad_y * (y > 0) * scale
//             grad_bias[j] = sum over rows i of grad_y[i, j] * (y[i, j] > 0)
//
// bias_relu.cpp calls the two launchers at the bottom after it has checked the inputs (2-D x,
// bias [N], same device and dtype) and made them contiguous; you can rely on that here.
//
// Given: the includes and the signatures. The includes are light on purpose: this file does not
// include <torch/extension.h> (pybind11 and all of torch's C++ API), so it compiles in seconds
// and, when you edit a kernel, ninja recompiles only this file. Each header brings one thing:
//   ATen/core/Tensor.h         at::Tensor (sizes, dtype, data pointers)
//   ATen/Dispatch.h            AT_DISPATCH_FLOATING_TYPES_AND2: one template instance per dtype
//   ATen/OpMathType.h          at::opmath_type<scalar_t>: float for fp16/bf16/fp32, double for fp64
//   ATen/ops/empty*.h, zeros.h at::empty, at::empty_like, at::zeros
//   c10/cuda/CUDAGuard.h       c10::cuda::CUDAGuard: make x's GPU the current one
//   c10/cuda/CUDAStream.h      c10::cuda::getCurrentCUDAStream(): the stream PyTorch is using
//   c10/cuda/CUDAException.h   C10_CUDA_KERNEL_LAUNCH_CHECK(), C10_CUDA_CHECK(...)

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <tuple>

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// For the fast version (README, "Making it fast"): VEC consecutive elements moved as one
// 16-byte load or store, e.g. Vec<float, 4> or Vec<c10::Half, 8>:
//     const auto v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(x + offset);
// Only valid where N % VEC == 0 and every pointer is 16-byte aligned; keep a VEC = 1 path.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

// TODO 5a (about 12 lines): the forward kernel. y[r, c] = relu(x[r, c] * scale + bias[c]).
//   - Math in acc_t = at::opmath_type<scalar_t> (float for fp16/bf16): convert with
//     static_cast<acc_t>(...) on the way in and static_cast<scalar_t>(...) on the way out.
//   - A first version: one thread per element, a 1-D grid, i = blockIdx.x * blockDim.x +
//     threadIdx.x as int64_t (M * N passes 2^31 on big tensors), column c = i % N, return if
//     i >= M * N (the last block runs past the end).
//   - Keep NaN a NaN, as torch.relu does: z < 0 ? 0 : z.
template <typename scalar_t>
__global__ void bias_relu_forward_kernel(const scalar_t* __restrict__ x,     // [M, N]
                                         const scalar_t* __restrict__ bias,  // [N]
                                         scalar_t* __restrict__ y,           // [M, N]
                                         int64_t M, int64_t N,
                                         at::opmath_type<scalar_t> scale) {
}

// TODO 8a (about 25 lines): the backward kernel. For its rows and columns:
//     g = y > 0 ? grad_y : 0          (a select: grad_y * mask would turn inf * 0 into NaN)
//     grad_x = g * scale              (stored in scalar_t)
//     and add g into a float (acc_t) running sum per column.
//   grad_bias needs a sum over all M rows of each column. Atomics into grad_bias would make the
//   result change from run to run (float addition is not associative) and fp16 atomics lose
//   precision; instead, let each block write its own partial sums: partials[blockIdx.y, col].
//   A 2-D layout makes that natural: threadIdx.x/blockIdx.x pick columns, threadIdx.y/blockIdx.y
//   rows, and each thread walks down rows r += gridDim.y * blockDim.y keeping its sums in
//   registers; then add the blockDim.y sums of a column in shared memory (__syncthreads()
//   between writing and reading) and write one partial row per block.
template <typename scalar_t>
__global__ void bias_relu_backward_kernel(const scalar_t* __restrict__ grad_y,               // [M, N]
                                          const scalar_t* __restrict__ y,                    // [M, N]
                                          scalar_t* __restrict__ grad_x,                     // [M, N]
                                          at::opmath_type<scalar_t>* __restrict__ partials,  // [P, N]
                                          int64_t M, int64_t N,
                                          at::opmath_type<scalar_t> scale) {
}

// TODO 8b (about 10 lines): grad_bias[col] = sum over p < P of partials[p, col], in acc_t, in
// a fixed order (so the result is the same on every run), cast to scalar_t once at the end.
// One thread per column is a fine start.
template <typename scalar_t>
__global__ void column_sum_kernel(const at::opmath_type<scalar_t>* __restrict__ partials,  // [P, N]
                                  scalar_t* __restrict__ out,                              // [N]
                                  int64_t P, int64_t N) {
}

}  // namespace

// TODO 5b (about 15 lines): the forward launcher.
//   1. const c10::cuda::CUDAGuard guard(x.device());   (x may live on cuda:1)
//   2. y = at::empty_like(x); return it at once if x has no elements (a grid of 0 blocks is a
//      launch error)
//   3. AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_relu_forward_cuda", [&] {
//        ... scalar_t is the element type in here; launch
//        bias_relu_forward_kernel<scalar_t><<<blocks, threads, 0, stream>>>(x.const_data_ptr<scalar_t>(), ...);
//      });
//      with stream = c10::cuda::getCurrentCUDAStream() (the stream PyTorch is using, not 0),
//      and the scale as static_cast<at::opmath_type<scalar_t>>(scale).
//   4. C10_CUDA_KERNEL_LAUNCH_CHECK(); right after the launch: a bad launch (too many threads,
//      a grid too large) is otherwise silent.
at::Tensor bias_relu_forward_cuda(const at::Tensor& x, const at::Tensor& bias, double scale) {
  TORCH_CHECK(false, "bias_relu_forward_cuda: not implemented yet (TODO 5 in cuda/bias_relu_kernels.cu)");
  return at::Tensor();
}

// TODO 8c (about 20 lines): the backward launcher. Like the forward, plus:
//   - grad_bias = at::empty({N}, y.options()); when M == 0 it is at::zeros (a sum of no rows)
//   - partials = at::empty({P, N}, y.options().dtype(<float, or double for fp64>)) with P the
//     number of block rows (gridDim.y) of the backward kernel; inside the dispatch lambda
//     c10::CppTypeToScalarType<at::opmath_type<scalar_t>>::value is that dtype
//   - launch the backward kernel, then column_sum_kernel on the same stream (so it runs after),
//     and check each launch
std::tuple<at::Tensor, at::Tensor> bias_relu_backward_cuda(const at::Tensor& grad_y,
                                                           const at::Tensor& y, double scale) {
  TORCH_CHECK(false, "bias_relu_backward_cuda: not implemented yet (TODO 8 in cuda/bias_relu_kernels.cu)");
  return {};
}
