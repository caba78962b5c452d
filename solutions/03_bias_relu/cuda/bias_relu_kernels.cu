// Exercise 03 — bias_relu, solved: the CUDA kernels and their launchers.
//
//   forward   y            = relu(x * scale + bias)          x, y [M, N] row-major; bias [N]
//   backward  grad_x       = grad_y * (y > 0) * scale        y > 0 exactly where z = x*scale+bias > 0
//             grad_bias[j] = sum_i grad_y[i, j] * (y[i, j] > 0)
//
// Kernels, in the order they run:
//   bias_relu_forward_kernel    one pass: read x, write y; the bias vector stays in registers
//   bias_relu_backward_kernel   one pass: read grad_y and y, write grad_x, and per block one fp32
//                               partial column sum of grad_y * (y > 0)  ->  partials [P, N]
//   column_sum_kernel           grad_bias = the sum of the P partial rows, in a fixed order
// Launchers (called by bias_relu.cpp, which owns the tensors): bias_relu_fwd_launch,
// bias_relu_bwd_partial_rows, bias_relu_bwd_launch. They take raw device pointers and a stream.
//
// Only common.cuh here, no PyTorch header: this file compiles in a few seconds, several times
// faster than with ATen's Tensor and Dispatch headers (docs/performance.md, "build-times"), and
// ninja recompiles only the file that changed, so editing a kernel never rebuilds bias_relu.cpp.
// at::Tensor, the dtype dispatch, the device guard and PyTorch's stream live in bias_relu.cpp.
//
// Napkin math, float32, M = N = 8192 (one tensor = 8192 * 8192 * 4 B = 268 MB):
//   forward   read x, write y                 2 x 268 MB = 537 MB
//             -> 125 us at 4.28 TB/s (H200 measured copy), 179 us at ~3.0 TB/s (H100)
//   backward  read grad_y, read y, write grad_x   3 x 268 MB = 805 MB  -> 188 us / 268 us
//             partials: P x N x 4 B, P = a few dozen block rows -> ~1 MB written and read
//             again: noise
//   eager PyTorch runs relu(x * scale + bias) as 3 kernels that each read and write a full
//   tensor (6 x 268 MB), 449 us measured on the H200; its backward is 3 more kernels
//   (threshold_backward, the mul by scale, the column sum: ~6 passes). Fused, the whole
//   forward+backward is 5 passes instead of ~12: ~2.4x at equal bandwidth.
//   torch.compile also fuses the forward, and for training saves a 1-byte mask (z <= 0) that its
//   backward reads instead of y: 18-23 bytes per element against our 20 (fp32). Saving y keeps
//   this exercise simple; a bit-packed mask (16.25 bytes per element) is the README's
//   "Going further".
// The arithmetic (3 flops per element) is nothing: every kernel here is a memory stream, judged
// by the fraction of copy bandwidth it reaches.

#include "common.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace {

constexpr int kThreads = 256;      // threads per block (tx * ty), the __launch_bounds__ below
constexpr int kMaxThreadsX = 64;   // column lanes per block when M is large (see plan_launch)
constexpr int kRows = 4;           // rows a thread loads before it stores (bytes in flight)
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = 1 << 30;
constexpr int kSumX = 32, kSumY = 8;  // column_sum_kernel's block: 32 columns x 8 row lanes

using course::Acc;
using course::ceil_div;
using course::from_acc;
using course::to_acc;
// course::Vec<T, VEC>: VEC consecutive elements moved as one 16-byte load or store (4 fp32,
// 8 fp16/bf16, 2 fp64): alignas makes the compiler emit one 128-bit instruction (LDG.E.128 /
// STG.E.128) instead of VEC narrow ones, 4-8x fewer memory instructions for the same bytes.
// VEC = 1 is the plain one-element-per-thread fallback, for any N and any alignment.
using course::Vec;

// The smallest power of two >= n, but at most cap (a power of two).
int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < n && p < cap) p *= 2;
  return p;
}

// ---------------------------------------------------------------------------------------------
// kernels

// A block is tx column lanes x ty row lanes. Thread (tx, ty) owns VEC adjacent columns and walks
// down the rows ty, ty + row_step, ... ; its VEC bias values are loaded once and reused for every
// row. All index arithmetic is int64: r * N passes 2^31 for tensors over 8 GB in fp32.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
bias_relu_forward_kernel(const T* __restrict__ x,     // [M, N]
                         const T* __restrict__ bias,  // [N]
                         T* __restrict__ y,           // [M, N]
                         int64_t M, int64_t N,
                         typename Acc<T>::type scale) {
  using acc_t = typename Acc<T>::type;  // float for fp16/bf16/fp32, double for fp64
  using vec_t = Vec<T, VEC>;
  const int64_t ncols = N / VEC;  // vectors per row (VEC divides N: see course::vector_ok)
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < ncols;
       c += int64_t(gridDim.x) * blockDim.x) {
    const vec_t bv = *reinterpret_cast<const vec_t*>(bias + c * VEC);
    acc_t b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) b[k] = to_acc(bv.v[k]);
    // Rows in batches of kRows: issue all the loads of a batch before the first store, so each
    // thread has kRows 16-byte loads in flight (latency hidden by memory parallelism, not by
    // waiting), and the compiler never has to prove a store cannot alias a later load.
    for (int64_t r0 = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r0 < M; r0 += kRows * row_step) {
      vec_t xv[kRows];
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t r = r0 + u * row_step;
        if (r < M) xv[u] = *reinterpret_cast<const vec_t*>(x + r * N + c * VEC);
      }
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t r = r0 + u * row_step;
        if (r >= M) break;
        vec_t yv;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const acc_t z = to_acc(xv[u].v[k]) * scale + b[k];
          yv.v[k] = from_acc<T>(z < acc_t(0) ? acc_t(0) : z);  // NaN stays NaN, as torch.relu
        }
        *reinterpret_cast<vec_t*>(y + r * N + c * VEC) = yv;
      }
    }
  }
}

// Same layout as the forward. Each thread also sums grad_y * (y > 0) over the rows it visits,
// in fp32 registers; the block then adds its ty row lanes together through shared memory and
// writes one partial row: partials[blockIdx.y, columns]. No atomics: every partial is written by
// exactly one thread, and column_sum_kernel adds them in a fixed order, so grad_bias is
// bitwise the same on every run.
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
bias_relu_backward_kernel(const T* __restrict__ grad_y,                  // [M, N]
                          const T* __restrict__ y,                       // [M, N]
                          T* __restrict__ grad_x,                        // [M, N]
                          typename Acc<T>::type* __restrict__ partials,  // [gridDim.y, N]
                          int64_t M, int64_t N,
                          typename Acc<T>::type scale) {
  using acc_t = typename Acc<T>::type;
  using vec_t = Vec<T, VEC>;
  __shared__ acc_t red[kThreads * VEC];  // [VEC][ty][tx]: lanes tx are adjacent, no bank conflicts
  const int tx = threadIdx.x, ty = threadIdx.y, bdx = blockDim.x, bdy = blockDim.y;
  const int64_t ncols = N / VEC;
  const int64_t row_step = int64_t(gridDim.y) * bdy;
  // The loop runs over the block's first column, not the thread's: every thread of the block
  // makes the same number of trips, so all of them reach the __syncthreads() inside.
  for (int64_t c0 = int64_t(blockIdx.x) * bdx; c0 < ncols; c0 += int64_t(gridDim.x) * bdx) {
    const int64_t c = c0 + tx;
    const bool active = c < ncols;
    acc_t sum[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) sum[k] = acc_t(0);
    if (active) {
      for (int64_t r0 = int64_t(blockIdx.y) * bdy + ty; r0 < M; r0 += kRows * row_step) {
        vec_t gv[kRows], yv[kRows];  // a batch of rows: 2 * kRows loads in flight
#pragma unroll
        for (int u = 0; u < kRows; ++u) {
          const int64_t r = r0 + u * row_step;
          if (r < M) {
            gv[u] = *reinterpret_cast<const vec_t*>(grad_y + r * N + c * VEC);
            yv[u] = *reinterpret_cast<const vec_t*>(y + r * N + c * VEC);
          }
        }
#pragma unroll
        for (int u = 0; u < kRows; ++u) {
          const int64_t r = r0 + u * row_step;
          if (r >= M) break;
          vec_t gx;
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            // a select, not a multiply by the mask: grad_y = inf where y = 0 must give 0, not NaN
            const acc_t g = to_acc(yv[u].v[k]) > acc_t(0) ? to_acc(gv[u].v[k]) : acc_t(0);
            gx.v[k] = from_acc<T>(g * scale);
            sum[k] += g;
          }
          *reinterpret_cast<vec_t*>(grad_x + r * N + c * VEC) = gx;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) red[(k * bdy + ty) * bdx + tx] = sum[k];
    __syncthreads();
    if (ty == 0 && active) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        acc_t s = acc_t(0);
        for (int j = 0; j < bdy; ++j) s += red[(k * bdy + j) * bdx + tx];
        partials[int64_t(blockIdx.y) * N + c * VEC + k] = s;
      }
    }
    __syncthreads();  // red is written again by the next column tile
  }
}

// grad_bias[j] = sum over p of partials[p, j], accumulated in fp32 (fp64 for fp64), rounded once.
// A block is 32 columns x 8 row lanes: a warp reads 32 adjacent columns of one partial row (one
// 128-byte line), and 8 lanes per column give 8x the memory parallelism of one thread per column.
template <typename T>
__global__ void __launch_bounds__(kSumX * kSumY)
column_sum_kernel(const typename Acc<T>::type* __restrict__ partials,  // [P, N]
                  T* __restrict__ out,                                 // [N]
                  int64_t P, int64_t N) {
  using acc_t = typename Acc<T>::type;
  __shared__ acc_t red[kSumY][kSumX];
  const int64_t col = int64_t(blockIdx.x) * kSumX + threadIdx.x;
  acc_t s = acc_t(0);
  if (col < N)
    for (int64_t p = threadIdx.y; p < P; p += kSumY) s += partials[p * N + col];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    acc_t t = acc_t(0);
#pragma unroll
    for (int j = 0; j < kSumY; ++j) t += red[j][threadIdx.x];
    out[col] = from_acc<T>(t);
  }
}

// ---------------------------------------------------------------------------------------------
// launch configuration

struct Plan {
  dim3 grid, block;
};

// Block shape: up to 64 column lanes and the rest row lanes when M is large (so a block's
// partial row covers 64 vectors and there are few partial rows); more column lanes when M is
// small (M = 1 would leave row lanes idle); one column lane and 256 row lanes when N = 1
// (a warp then reads 32 adjacent rows, which are adjacent in memory). The grid's columns cover
// the row's vectors; its rows are left to the caller.
Plan block_shape(int64_t M, int64_t ncols) {
  const int ty = pow2_at_least(M, kThreads / pow2_at_least(ncols, kMaxThreadsX));
  const int tx = pow2_at_least(ncols, kThreads / ty);
  const int64_t bx = std::min(ceil_div(ncols, tx), kMaxGridX);
  return {dim3(static_cast<unsigned>(bx), 1), dim3(tx, ty)};
}

// Grid rows: exactly as many blocks as fit on the GPU at once (occupancy x SMs), one wave; each
// thread loops over rows. More blocks would only queue behind the first wave, and in the
// backward each extra block row is one more partial row to write and sum.
template <typename Kernel>
Plan plan_launch(Kernel kernel, int64_t M, int64_t ncols) {
  Plan plan = block_shape(M, ncols);
  const int threads = int(plan.block.x * plan.block.y);
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  const int64_t resident = int64_t(std::max(per_sm, 1)) * course::num_sms();
  const int64_t by = std::min({resident / plan.grid.x, ceil_div(M, plan.block.y), kMaxGridY});
  plan.grid.y = static_cast<unsigned>(std::max<int64_t>(1, by));
  return plan;
}

template <typename T, int VEC>
void launch_forward(const T* x, const T* bias, T* y, int64_t M, int64_t N,
                    typename Acc<T>::type scale, cudaStream_t stream) {
  auto kernel = bias_relu_forward_kernel<T, VEC>;
  const Plan plan = plan_launch(kernel, M, N / VEC);
  kernel<<<plan.grid, plan.block, 0, stream>>>(x, bias, y, M, N, scale);
  CUDA_LAUNCH_CHECK();
}

// The backward's block rows, one partial row each, for the width it will run at.
template <typename T, int VEC>
int64_t backward_rows(int64_t M, int64_t N) {
  return plan_launch(bias_relu_backward_kernel<T, VEC>, M, N / VEC).grid.y;
}

template <typename T, int VEC>
void launch_backward(const T* grad_y, const T* y, T* grad_x, T* grad_bias,
                     typename Acc<T>::type* partials, int64_t P, int64_t M, int64_t N,
                     typename Acc<T>::type scale, cudaStream_t stream) {
  Plan plan = block_shape(M, N / VEC);
  plan.grid.y = static_cast<unsigned>(P);  // backward_rows' plan: P block rows, P partial rows
  bias_relu_backward_kernel<T, VEC><<<plan.grid, plan.block, 0, stream>>>(grad_y, y, grad_x,
                                                                         partials, M, N, scale);
  CUDA_LAUNCH_CHECK();
  // same stream, so it starts after the kernel above has written every partial
  column_sum_kernel<T><<<static_cast<unsigned>(ceil_div(N, kSumX)), dim3(kSumX, kSumY), 0,
                         stream>>>(partials, grad_bias, P, N);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers: bias_relu.cpp has checked shapes, dtypes and devices, made the tensors contiguous,
// made their GPU the current one, and passes PyTorch's current stream. T is the element type
// (float, double, __half, __nv_bfloat16), A its math type (course::Acc<T>: float, or double).
// Instantiated below for the four.

template <typename T, typename A>
void bias_relu_fwd_launch(const T* x, const T* bias, T* y, int64_t M, int64_t N, A scale,
                          cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "A must be the math type of T");
  if (M == 0 || N == 0) return;  // a grid of 0 blocks is a launch error
  if (course::vector_ok<T>(N, N, {x, bias, y}))
    launch_forward<T, course::kVec16<T>>(x, bias, y, M, N, scale, stream);
  else
    launch_forward<T, 1>(x, bias, y, M, N, scale, stream);
}

// How many partial rows (N math-type values each) the backward writes: its grid's block rows.
// bias_relu.cpp allocates them (PyTorch's caching allocator: no cudaMalloc per call) and passes
// them back to bias_relu_bwd_launch; the same pointers give the same vector width here and there.
template <typename T>
int64_t bias_relu_bwd_partial_rows(const T* grad_y, const T* y, const T* grad_x, int64_t M,
                                   int64_t N) {
  if (M == 0 || N == 0) return 0;
  return course::vector_ok<T>(N, N, {grad_y, y, grad_x})
             ? backward_rows<T, course::kVec16<T>>(M, N)
             : backward_rows<T, 1>(M, N);
}

template <typename T, typename A>
void bias_relu_bwd_launch(const T* grad_y, const T* y, T* grad_x, T* grad_bias, A* partials,
                          int64_t partial_rows, int64_t M, int64_t N, A scale,
                          cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "A must be the math type of T");
  if (N == 0) return;
  if (M == 0) {  // a sum of no rows is 0 (all-zero bits are 0.0 in every float type)
    CUDA_CHECK(cudaMemsetAsync(grad_bias, 0, N * sizeof(T), stream));
    return;
  }
  if (course::vector_ok<T>(N, N, {grad_y, y, grad_x}))
    launch_backward<T, course::kVec16<T>>(grad_y, y, grad_x, grad_bias, partials, partial_rows,
                                          M, N, scale, stream);
  else
    launch_backward<T, 1>(grad_y, y, grad_x, grad_bias, partials, partial_rows, M, N, scale,
                          stream);
}

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
