// Exercise 04 — reduce_sum: the kernels and their launcher (TODO 2-5).
//
//   reduce_sum(x)        = sum of every element of x            (one row of numel elements)
//   reduce_sum_rows(x)   = [sum of row r of x for r < M]        (M rows of N elements)
//
// One machinery serves both: a flat sum is the case "1 row". reduce_sum.cpp has checked x
// (floating, contiguous), allocated the outputs and a workspace of rows * splits partials, and
// calls splits_for and sum_rows at the bottom of this file (the interface is in reduce_sum.h).
//
// The plan (the README explains why, with the numbers):
//   stage 1  partial_sums_kernel: `splits` blocks share a row; each sums its chunk of the row
//            (16-byte loads, several accumulators per thread, math in float or double), then
//            the block's threads combine their values (block_reduce_sum), and thread 0 writes
//            ONE value: the block's partial sum
//   stage 2  finish_kernel: one block per row adds that row's partials, always in the same order
// No atomicAdd of floats: blocks finish in a different order on every run, and float addition
// is not associative, so the result's last bits would change from call to call. The checks call
// each op ten times and want the same bits.
//
// common.cuh is on the include path: CUDA_CHECK, CUDA_LAUNCH_CHECK, course::Vec<T, N>,
// course::kVec16<T>, course::aligned_for, course::ceil_div, course::num_sms. It also has a
// course::block_sum: do not use it here. Writing the block reduction is this exercise.

#include "common.cuh"
#include "reduce_sum.h"

#include <algorithm>
#include <stdexcept>

namespace ex04 {
namespace {

constexpr int kThreads = 256;     // threads per block: 8 warps
constexpr int kUnroll = 4;        // 16-byte loads in flight per thread, one accumulator each
constexpr int kBlocksPerSm = 4;   // blocks per SM the grid aims for

// Given: an element widened to the math type (float for half/bfloat16/float, double for
// double). PyTorch builds with __CUDA_NO_HALF_CONVERSIONS__, so __half has no implicit casts.
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

// TODO 2 (about 12 lines): the sum of one value per thread over the block (kThreads threads),
// returned in thread 0 (other threads may return anything). `smem` is kThreads values of
// shared memory. First a tree in shared memory, halving the values at each step down to 64,
// then warp 0 finishes with __shfl_down_sync (no shared memory, no barrier: a warp's lanes move
// together). Every step reads what other warps wrote: mind the barriers.
template <typename A>
__device__ __forceinline__ A block_reduce_sum(A v, A* smem) {
  return v;  // replace: this is only the calling thread's own value
}

// TODO 3 (about 25 lines): stage 1. Block blockIdx.x works on row blockIdx.x / splits, columns
// [chunk * (blockIdx.x % splits), + chunk) clipped to the row (the last chunk is shorter, a
// chunk past the end is empty), and writes that piece's sum to dst[blockIdx.x].
//   - kVec elements per load: read them as one course::Vec<T, kVec> (kVec = 1 for pointers that
//     are not 16-byte aligned; sum_rows decides). `chunk` is a multiple of kVec.
//   - Accumulate in typename Out<T>::type, widen() every element first.
//   - Several independent accumulators, the loads of a trip issued before its adds.
//   - The elements after the last whole vector, one by one.
//   - int64_t for every index: 4 GiB of bf16 is 2^31 elements.
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
partial_sums_kernel(const T* __restrict__ x, int64_t cols, int64_t chunk, int splits,
                    typename Out<T>::type* __restrict__ dst) {
}

// TODO 4 (about 8 lines): stage 2. Block blockIdx.x adds the `splits` partials of its row
// (partials[row * splits + i]) in an order that never changes, and writes out[row].
template <typename A>
__global__ void __launch_bounds__(kThreads)
finish_kernel(const A* __restrict__ partials, int splits, A* __restrict__ out) {
}

}  // namespace

// TODO 5a (about 6 lines): how many blocks share one row. Aim for about kBlocksPerSm blocks per
// SM over the whole grid (course::num_sms()), but never so many that a block gets less than one
// trip of its loop (kThreads * kUnroll vectors of 16 bytes). At least 1. Returning 1 (one block
// per row) is correct, and slow for reduce_sum: one block cannot read at the GPU's bandwidth.
int splits_for(int64_t rows, int64_t cols, int element_size) {
  return 1;
}

// TODO 5b (about 15 lines): the launches, on `stream`.
//   - rows == 0: nothing to launch (a grid of 0 blocks is an error).
//   - rows * splits blocks of kThreads for stage 1, writing straight to `out` when splits is 1,
//     else to `partials` followed by stage 2 with one block per row.
//   - chunk: the row shared among `splits` blocks, rounded up to whole vectors.
//   - The 16-byte path (kVec = course::kVec16<T>) only when every row starts 16-byte aligned
//     (course::aligned_for<T, course::kVec16<T>>(x), and whole vectors per row unless there is a
//     single row); otherwise kVec = 1.
//   - CUDA_LAUNCH_CHECK() after every launch.
template <typename T>
void sum_rows(const T* x, int64_t rows, int64_t cols, int splits,
              typename Out<T>::type* partials, typename Out<T>::type* out, cudaStream_t stream) {
  throw std::runtime_error("reduce_sum (CUDA): not implemented yet (TODO 2-5 in "
                           "cuda/reduce_sum_kernels.cu)");
}

// One instance per dtype (reduce_sum.cpp calls these).
template void sum_rows<float>(const float*, int64_t, int64_t, int, float*, float*, cudaStream_t);
template void sum_rows<double>(const double*, int64_t, int64_t, int, double*, double*,
                               cudaStream_t);
template void sum_rows<__half>(const __half*, int64_t, int64_t, int, float*, float*,
                               cudaStream_t);
template void sum_rows<__nv_bfloat16>(const __nv_bfloat16*, int64_t, int64_t, int, float*, float*,
                                      cudaStream_t);

}  // namespace ex04
