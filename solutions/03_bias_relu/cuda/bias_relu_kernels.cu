// Exercise 03 — bias_relu, solved: the CUDA kernels and their host launchers.
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
// Launchers (called by bias_relu.cpp): bias_relu_forward_cuda, bias_relu_backward_cuda.
//
// Only light headers here (no <torch/extension.h>, no pybind11), so this file compiles without
// the extra minute that pybind11 and torch's C++ API cost the binding; and ninja recompiles only
// the file that changed, so editing a kernel never rebuilds bias_relu.cpp.
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

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <tuple>

namespace {

constexpr int kThreads = 256;      // threads per block (tx * ty), the __launch_bounds__ below
constexpr int kMaxThreadsX = 64;   // column lanes per block when M is large (see plan_launch)
constexpr int kRows = 4;           // rows a thread loads before it stores (bytes in flight)
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = 1 << 30;
constexpr int kSumX = 32, kSumY = 8;  // column_sum_kernel's block: 32 columns x 8 row lanes

// VEC consecutive elements moved as one 16-byte load or store (4 fp32, 8 fp16/bf16, 2 fp64).
// alignas makes the compiler emit one 128-bit instruction (LDG.E.128 / STG.E.128) instead of
// VEC narrow ones: 4-8x fewer memory instructions for the same bytes. VEC = 1 is the plain
// one-element-per-thread fallback, for any N and any alignment.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest power of two >= n, but at most cap (a power of two).
int pow2_at_least(int64_t n, int cap) {
  int p = 1;
  while (p < n && p < cap) p *= 2;
  return p;
}

// A 16-byte path needs whole vectors in every row (N % VEC == 0, so no vector straddles two
// rows and bias[c*VEC ...] lines up with x[r, c*VEC ...]) and every pointer on a 16-byte
// boundary: x[1:] of a fresh tensor is contiguous yet starts one element past it, and a 16-byte
// load there faults with "misaligned address".
template <typename T, int VEC>
bool vectorizable(int64_t N, std::initializer_list<const void*> pointers) {
  if (VEC == 1 || N % VEC != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * VEC) != 0) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// kernels

// A block is tx column lanes x ty row lanes. Thread (tx, ty) owns VEC adjacent columns and walks
// down the rows ty, ty + row_step, ... ; its VEC bias values are loaded once and reused for every
// row. All index arithmetic is int64: r * N passes 2^31 for tensors over 8 GB in fp32.
template <typename scalar_t, int VEC>
__global__ void __launch_bounds__(kThreads)
bias_relu_forward_kernel(const scalar_t* __restrict__ x,     // [M, N]
                         const scalar_t* __restrict__ bias,  // [N]
                         scalar_t* __restrict__ y,           // [M, N]
                         int64_t M, int64_t N,
                         at::opmath_type<scalar_t> scale) {
  using acc_t = at::opmath_type<scalar_t>;  // float for fp16/bf16/fp32, double for fp64
  using vec_t = Vec<scalar_t, VEC>;
  const int64_t ncols = N / VEC;  // vectors per row (VEC divides N: see vectorizable)
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < ncols;
       c += int64_t(gridDim.x) * blockDim.x) {
    const vec_t bv = *reinterpret_cast<const vec_t*>(bias + c * VEC);
    acc_t b[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) b[k] = static_cast<acc_t>(bv.v[k]);
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
          const acc_t z = static_cast<acc_t>(xv[u].v[k]) * scale + b[k];
          yv.v[k] = static_cast<scalar_t>(z < acc_t(0) ? acc_t(0) : z);  // NaN stays NaN, as torch.relu
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
template <typename scalar_t, int VEC>
__global__ void __launch_bounds__(kThreads)
bias_relu_backward_kernel(const scalar_t* __restrict__ grad_y,                 // [M, N]
                          const scalar_t* __restrict__ y,                      // [M, N]
                          scalar_t* __restrict__ grad_x,                       // [M, N]
                          at::opmath_type<scalar_t>* __restrict__ partials,    // [gridDim.y, N]
                          int64_t M, int64_t N,
                          at::opmath_type<scalar_t> scale) {
  using acc_t = at::opmath_type<scalar_t>;
  using vec_t = Vec<scalar_t, VEC>;
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
            const acc_t g = static_cast<acc_t>(yv[u].v[k]) > acc_t(0) ? static_cast<acc_t>(gv[u].v[k])
                                                                     : acc_t(0);
            gx.v[k] = static_cast<scalar_t>(g * scale);
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
template <typename scalar_t>
__global__ void __launch_bounds__(kSumX * kSumY)
column_sum_kernel(const at::opmath_type<scalar_t>* __restrict__ partials,  // [P, N]
                  scalar_t* __restrict__ out,                              // [N]
                  int64_t P, int64_t N) {
  using acc_t = at::opmath_type<scalar_t>;
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
    out[col] = static_cast<scalar_t>(t);
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
// (a warp then reads 32 adjacent rows, which are adjacent in memory).
// Grid: exactly as many blocks as fit on the GPU at once (occupancy x SMs), one wave; each
// thread loops over rows. More blocks would only queue behind the first wave, and in the
// backward each extra block row is one more partial row to write and sum.
template <typename Kernel>
Plan plan_launch(Kernel kernel, int64_t M, int64_t ncols) {
  const int ty = pow2_at_least(M, kThreads / pow2_at_least(ncols, kMaxThreadsX));
  const int tx = pow2_at_least(ncols, kThreads / ty);
  int device = 0, sms = 0, per_sm = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, tx * ty, 0));
  const int64_t resident = int64_t(std::max(per_sm, 1)) * sms;
  const int64_t bx = std::min(ceil_div(ncols, tx), kMaxGridX);
  const int64_t by = std::max<int64_t>(1, std::min({resident / bx, ceil_div(M, ty), kMaxGridY}));
  return {dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), dim3(tx, ty)};
}

template <typename scalar_t, int VEC>
void launch_forward(const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, double scale,
                    cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t M = x.size(0), N = x.size(1);
  auto kernel = bias_relu_forward_kernel<scalar_t, VEC>;
  const Plan plan = plan_launch(kernel, M, N / VEC);
  kernel<<<plan.grid, plan.block, 0, stream>>>(
      x.const_data_ptr<scalar_t>(), bias.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(),
      M, N, static_cast<acc_t>(scale));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename scalar_t, int VEC>
void launch_backward(const at::Tensor& grad_y, const at::Tensor& y, at::Tensor& grad_x,
                     at::Tensor& grad_bias, double scale, cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t M = y.size(0), N = y.size(1);
  auto kernel = bias_relu_backward_kernel<scalar_t, VEC>;
  const Plan plan = plan_launch(kernel, M, N / VEC);
  const int64_t P = plan.grid.y;  // one partial row per block row
  // fp32 partials whatever the storage dtype (fp64 for fp64): rounding each partial to fp16
  // would throw away the accuracy the fp32 accumulation bought.
  const at::Tensor partials =
      at::empty({P, N}, y.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
  kernel<<<plan.grid, plan.block, 0, stream>>>(
      grad_y.const_data_ptr<scalar_t>(), y.const_data_ptr<scalar_t>(),
      grad_x.mutable_data_ptr<scalar_t>(), partials.mutable_data_ptr<acc_t>(), M, N,
      static_cast<acc_t>(scale));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // same stream, so it starts after the kernel above has written every partial
  column_sum_kernel<scalar_t><<<static_cast<unsigned>(ceil_div(N, kSumX)), dim3(kSumX, kSumY), 0,
                                stream>>>(partials.const_data_ptr<acc_t>(),
                                          grad_bias.mutable_data_ptr<scalar_t>(), P, N);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// launchers: bias_relu.cpp has checked shapes, dtypes and devices, and made the tensors contiguous

at::Tensor bias_relu_forward_cuda(const at::Tensor& x, const at::Tensor& bias, double scale) {
  const c10::cuda::CUDAGuard guard(x.device());  // launch on x's GPU, not on GPU 0
  at::Tensor y = at::empty_like(x);
  const int64_t M = x.size(0), N = x.size(1);
  if (M == 0 || N == 0) return y;  // a grid of 0 blocks is a launch error
  // the stream PyTorch is using right now (torch.cuda.stream(...) included), never stream 0
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_relu_forward_cuda", [&] {
    constexpr int VEC = 16 / sizeof(scalar_t);
    if (vectorizable<scalar_t, VEC>(N, {x.const_data_ptr(), bias.const_data_ptr(), y.const_data_ptr()}))
      launch_forward<scalar_t, VEC>(x, bias, y, scale, stream);
    else
      launch_forward<scalar_t, 1>(x, bias, y, scale, stream);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> bias_relu_backward_cuda(const at::Tensor& grad_y,
                                                           const at::Tensor& y, double scale) {
  const c10::cuda::CUDAGuard guard(y.device());
  const int64_t M = y.size(0), N = y.size(1);
  at::Tensor grad_x = at::empty_like(y);
  if (M == 0 || N == 0) return {grad_x, at::zeros({N}, y.options())};  // a sum of no rows is 0
  at::Tensor grad_bias = at::empty({N}, y.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(), "bias_relu_backward_cuda", [&] {
    constexpr int VEC = 16 / sizeof(scalar_t);
    if (vectorizable<scalar_t, VEC>(N, {grad_y.const_data_ptr(), y.const_data_ptr(), grad_x.const_data_ptr()}))
      launch_backward<scalar_t, VEC>(grad_y, y, grad_x, grad_bias, scale, stream);
    else
      launch_backward<scalar_t, 1>(grad_y, y, grad_x, grad_bias, scale, stream);
  });
  return {grad_x, grad_bias};
}
