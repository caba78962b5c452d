// Exercise 03 — bias_relu: the CUDA kernels and their launchers (TODO 5 and TODO 8).
//
//   forward   y            = relu(x * scale + bias)          x, y [M, N] row-major; bias [N]
//   backward  grad_x       = grad_y * (y > 0) * scale
//             grad_bias[j] = sum over rows i of grad_y[i, j] * (y[i, j] > 0)
//
// bias_relu.cpp calls the launchers at the bottom after it has checked the inputs (2-D x,
// bias [N], same device and dtype), made them contiguous, allocated the outputs and made their
// GPU the current one; you can rely on that here. It passes raw device pointers and the stream
// PyTorch is using: launch every kernel on that stream, never on stream 0.
//
// Given: the includes and the signatures. This file includes no PyTorch header, only the
// course's common.cuh (include/common.cuh), so it compiles in a few seconds, and when you edit
// a kernel ninja recompiles only this file. What common.cuh gives that you need here:
//   course::Acc<T>::type           the math type: float for __half, __nv_bfloat16 and float;
//                                  double for double
//   course::to_acc(v)              an element to the math type (__half -> float, ...)
//   course::from_acc<T>(a)         and back, rounded once
//   course::Vec<T, N>              N elements moved as one load/store (the fast version)
//   course::vector_ok<T>(N, N, {pointers})   may rows of T be moved 16 bytes at a time?
//   course::ceil_div, course::num_sms()
//   CUDA_CHECK(call), CUDA_LAUNCH_CHECK()    throw an error naming the CUDA error, file and line
// T is one of float, double, __half, __nv_bfloat16 (the launchers are instantiated at the bottom
// for the four); __half and __nv_bfloat16 have no implicit conversions under PyTorch's build
// flags, so convert with to_acc / from_acc.

#include "common.cuh"

#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace {

using course::Acc;
using course::ceil_div;
using course::from_acc;
using course::to_acc;

// TODO 5a (about 12 lines): the forward kernel. y[r, c] = relu(x[r, c] * scale + bias[c]).
//   - Math in acc_t = typename Acc<T>::type (float for fp16/bf16): to_acc(...) on the way in,
//     from_acc<T>(...) on the way out.
//   - A first version: one thread per element, a 1-D grid, i = blockIdx.x * blockDim.x +
//     threadIdx.x as int64_t (M * N passes 2^31 on big tensors), column c = i % N, return if
//     i >= M * N (the last block runs past the end).
//   - Keep NaN a NaN, as torch.relu does: z < 0 ? 0 : z.
template <typename T>
__global__ void bias_relu_forward_kernel(const T* __restrict__ x,     // [M, N]
                                         const T* __restrict__ bias,  // [N]
                                         T* __restrict__ y,           // [M, N]
                                         int64_t M, int64_t N,
                                         typename Acc<T>::type scale) {
}

// TODO 8a (about 25 lines): the backward kernel. For its rows and columns:
//     g = y > 0 ? grad_y : 0          (a select: grad_y * mask would turn inf * 0 into NaN)
//     grad_x = g * scale              (stored in T)
//     and add g into a float (acc_t) running sum per column.
//   grad_bias needs a sum over all M rows of each column. Atomics into grad_bias would make the
//   result change from run to run (float addition is not associative) and fp16 atomics lose
//   precision; instead, let each block write its own partial sums: partials[blockIdx.y, col].
//   A 2-D layout makes that natural: threadIdx.x/blockIdx.x pick columns, threadIdx.y/blockIdx.y
//   rows, and each thread walks down rows r += gridDim.y * blockDim.y keeping its sums in
//   registers; then add the blockDim.y sums of a column in shared memory (__syncthreads()
//   between writing and reading) and write one partial row per block.
template <typename T>
__global__ void bias_relu_backward_kernel(const T* __restrict__ grad_y,                  // [M, N]
                                          const T* __restrict__ y,                       // [M, N]
                                          T* __restrict__ grad_x,                        // [M, N]
                                          typename Acc<T>::type* __restrict__ partials,  // [P, N]
                                          int64_t M, int64_t N,
                                          typename Acc<T>::type scale) {
}

// TODO 8b (about 10 lines): grad_bias[col] = sum over p < P of partials[p, col], in acc_t, in
// a fixed order (so the result is the same on every run), from_acc<T> once at the end.
// One thread per column is a fine start.
template <typename T>
__global__ void column_sum_kernel(const typename Acc<T>::type* __restrict__ partials,  // [P, N]
                                  T* __restrict__ out,                                 // [N]
                                  int64_t P, int64_t N) {
}

}  // namespace

// TODO 5b (about 8 lines): the forward launcher.
//   1. return at once if M or N is 0 (a grid of 0 blocks is a launch error; y is allocated)
//   2. bias_relu_forward_kernel<T><<<blocks, threads, 0, stream>>>(x, bias, y, M, N, scale);
//      with blocks = ceil_div(M * N, threads) for the one-thread-per-element version
//   3. CUDA_LAUNCH_CHECK(); right after the launch: a bad launch (too many threads, a grid too
//      large) is otherwise silent.
template <typename T, typename A>
void bias_relu_fwd_launch(const T* x, const T* bias, T* y, int64_t M, int64_t N, A scale,
                          cudaStream_t stream) {
  throw std::runtime_error(
      "bias_relu_fwd_launch: not implemented yet (TODO 5 in cuda/bias_relu_kernels.cu)");
}

// TODO 8c (about 3 lines): how many partial rows the backward kernel will write: the block rows
// (gridDim.y) of its grid for this M and N. bias_relu.cpp allocates partials [P, N] of the math
// type with it, then passes P to bias_relu_bwd_launch, which launches exactly P block rows
// (0 when M or N is 0). The pointers are the launch's, for a fast version that picks its vector
// width from their alignment.
template <typename T>
int64_t bias_relu_bwd_partial_rows(const T* grad_y, const T* y, const T* grad_x, int64_t M,
                                   int64_t N) {
  throw std::runtime_error(
      "bias_relu_bwd_partial_rows: not implemented yet (TODO 8 in cuda/bias_relu_kernels.cu)");
}

// TODO 8d (about 15 lines): the backward launcher.
//   - N == 0: nothing to do. M == 0: grad_bias is a sum of no rows, zeros:
//     CUDA_CHECK(cudaMemsetAsync(grad_bias, 0, N * sizeof(T), stream)) (0.0 is all-zero bits)
//   - launch the backward kernel with partial_rows block rows (gridDim.y), then
//     column_sum_kernel on the same stream (so it runs after), and check each launch
template <typename T, typename A>
void bias_relu_bwd_launch(const T* grad_y, const T* y, T* grad_x, T* grad_bias, A* partials,
                          int64_t partial_rows, int64_t M, int64_t N, A scale,
                          cudaStream_t stream) {
  throw std::runtime_error(
      "bias_relu_bwd_launch: not implemented yet (TODO 8 in cuda/bias_relu_kernels.cu)");
}

// Given: the four element types bias_relu.cpp calls the launchers with.
#define INSTANTIATE(T, A)                                                                    \
  template void bias_relu_fwd_launch<T, A>(const T*, const T*, T*, int64_t, int64_t, A,      \
                                           cudaStream_t);                                    \
  template int64_t bias_relu_bwd_partial_rows<T>(const T*, const T*, const T*, int64_t,      \
                                                 int64_t);                                   \
  template void bias_relu_bwd_launch<T, A>(const T*, const T*, T*, T*, A*, int64_t, int64_t, \
                                           int64_t, A, cudaStream_t);
INSTANTIATE(float, float)
INSTANTIATE(double, double)
INSTANTIATE(__half, float)
INSTANTIATE(__nv_bfloat16, float)
#undef INSTANTIATE
