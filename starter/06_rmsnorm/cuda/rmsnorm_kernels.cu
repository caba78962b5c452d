// Exercise 06 — rmsnorm, CUDA C++ track: the kernels and their launchers. Yours to write:
// TODO 1-3, in order (after TODO 0, the CPU loops in rmsnorm.cpp, and rmsnorm.py).
//
//   y  = x * rstd * w,  rstd = rsqrt(mean(x^2) + eps)   per row of N; fp32 math (fp64 for fp64)
//   dx = rstd * (w*dy - x * rstd^2 * mean(x*w*dy))
//   dw = sum over rows of dy * x * rstd
//
// Read exercises/06_rmsnorm/README.md first; grade with `make exercise-06`. Without a GPU the
// files are still built, and the CPU path is checked on CPU tensors.
//
// Given: the helpers (math type, conversions, 16-byte vectors, the block reduction), the launch
// configuration helpers, and the kernels' signatures. rmsnorm.cpp (checks, allocation, dtype
// dispatch, the registration with the dispatcher) calls the launchers at the end of this file
// with raw device pointers and the current stream.
//
// This file includes only CUDA headers and common.cuh: it compiles in seconds, so editing a
// kernel does not recompile the ATen-heavy rmsnorm.cpp.

#include "common.cuh"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace {

// From include/common.cuh (shared by every CUDA track): the math type Acc<T> (float for 16-bit
// types and float, double for double, so gradcheck can run), Vec<T, N> (N elements moved as one
// 16-byte access), block_sum (a sum over the block, returned to every thread), to_acc/from_acc
// (PyTorch builds with __CUDA_NO_HALF_CONVERSIONS__: __half and __nv_bfloat16 convert only
// through these: to_acc(v) on every load, from_acc<T>(a) on every store).
using course::Acc;
using course::Vec;
using course::block_sum;
using course::from_acc;
using course::to_acc;

constexpr int kMaxThreads = 512;       // per block
// Row vectors (16 bytes each) a thread keeps in registers: 4096 bf16 are 512 vectors, 512
// threads with 1 each. Further vectors of long rows are read again from memory (L1/L2).
[[maybe_unused]] constexpr int kFwdVecsPerThread = 1;
[[maybe_unused]] constexpr int kBwdVecsPerThread = 1;
constexpr int kBwdBlocksPerSM = 2;     // persistent backward: blocks per SM (at most)

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// ---------------------------------------------------------------------------------------------
// CUDA kernels. Suggested layout: a row is nvec = N / VEC vectors (VEC = 16 / sizeof(T) when
// every row starts 16-byte aligned, else 1); thread t owns vectors t, t + blockDim, ...; the
// first k{Fwd,Bwd}VecsPerThread of them stay in registers, further ones (very long rows) are
// read again. Use int64_t for row * N (it passes 2^31).

// Rows blockIdx.x, blockIdx.x + gridDim.x, ... (launched with one block per row, the loop runs
// once): sum of squares (block_sum), rstd, then y = x * rstd * w; thread 0 stores rstd[row].
// TODO 1 (about 40 lines).
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   typename Acc<T>::type* __restrict__ rstd, int64_t rows, int64_t N,
                   typename Acc<T>::type eps) {
  // TODO 1
}

// Persistent: gridDim.x blocks (SMs x a few), block b takes rows b, b + gridDim.x, ...; per
// row, one block_sum for mean(x * w * dy), then dx; dw for its columns summed in registers in
// the math type (float; double for double) over its rows, written once at the end to its own
// row of dw_partial ([gridDim.x, N]): no atomics. TODO 2 (about 60 lines).
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                   const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                   typename Acc<T>::type* __restrict__ dw_partial, int64_t rows, int64_t N) {
  // TODO 2
}

// dw[n] = sum of dw_partial[p][n] over the partial rows p, rounded once to T (from_acc); a
// fixed order of additions, so the same bits every run; parts = 0 gives zeros. TODO 3 (about
// 15 lines).
template <typename T>
__global__ void dw_reduce_kernel(const typename Acc<T>::type* __restrict__ partial,
                                 T* __restrict__ dw, int64_t parts, int64_t N) {
  // TODO 3
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The launchers rmsnorm.cpp calls (declared at its top; instantiated below for the four
// dtypes). Pointers are device pointers to dense tensors; A is the math type (Acc<T>).

template <typename T, typename A>
void rmsnorm_fwd_launch(const T* x, const T* w, T* y, A* rstd, int64_t rows, int64_t N,
                        double eps, cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "A must be the math type of T");
  throw std::runtime_error("rmsnorm_fwd (CUDA): not implemented yet (see cuda/rmsnorm_kernels.cu, TODO 1)");
  // TODO 1 (about 10 lines): with course::vector_ok<T>(N, N, {x, w, y}) launch
  // rmsnorm_fwd_kernel<T, course::kVec16<T>>, else rmsnorm_fwd_kernel<T, 1>: grid = rows (one
  // block per row; rows == 0: launch nothing), block =
  // course::threads_for(N / VEC, kFwdVecsPerThread, kMaxThreads), on `stream`, eps as A; then
  // CUDA_LAUNCH_CHECK().
}

// The most partial rows the backward writes: rmsnorm.cpp allocates [this, N] of A for them.
int64_t rmsnorm_bwd_max_blocks(int64_t rows) {
  return std::min<int64_t>(rows, int64_t(course::num_sms()) * kBwdBlocksPerSM);
}

// dx [rows, N] and dw [N]; `partials` holds max_blocks * N values of A.
template <typename T, typename A>
void rmsnorm_bwd_launch(const T* dy, const T* x, const T* w, const A* rstd, T* dx, T* dw,
                        A* partials, int64_t max_blocks, int64_t rows, int64_t N,
                        cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "A must be the math type of T");
  throw std::runtime_error("rmsnorm_bwd (CUDA): not implemented yet (see cuda/rmsnorm_kernels.cu, TODO 2-3)");
  // TODO 3 (about 20 lines): the persistent grid, blocks = min(max_blocks, SMs (course::num_sms())
  // * min(occupancy, kBwdBlocksPerSM)), occupancy from cudaOccupancyMaxActiveBlocksPerMultiprocessor
  // for the kernel and block size you launch (course::vector_ok<T>(N, N, {dy, x, w, dx}) picks
  // VEC as in the forward); no rows: no launch (blocks = 0). Then dw_reduce_kernel<T> over
  // ceil_div(N, 32) blocks, reducing the `blocks` partial rows into dw. CUDA_CHECK each CUDA
  // call, CUDA_LAUNCH_CHECK() after each launch.
}

#define INSTANTIATE(T, A)                                                                    \
  template void rmsnorm_fwd_launch<T, A>(const T*, const T*, T*, A*, int64_t, int64_t, double, \
                                         cudaStream_t);                                      \
  template void rmsnorm_bwd_launch<T, A>(const T*, const T*, const T*, const A*, T*, T*, A*,  \
                                         int64_t, int64_t, int64_t, cudaStream_t);
INSTANTIATE(float, float)
INSTANTIATE(double, double)
INSTANTIATE(__half, float)
INSTANTIATE(__nv_bfloat16, float)
#undef INSTANTIATE
