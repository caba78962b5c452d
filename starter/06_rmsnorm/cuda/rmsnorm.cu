// Exercise 06 — rmsnorm, CUDA C++ track: the same fused op as the Triton track, in CUDA C++.
//
//   y  = x * rstd * w,  rstd = rsqrt(mean(x^2) + eps)   per row of N; fp32 math (fp64 for fp64)
//   dx = rstd * (w*dy - x * rstd^2 * mean(x*w*dy))
//   dw = sum over rows of dy * x * rstd
//
// Read exercises/06_rmsnorm/README.md first; grade with `make exercise-06`. Without a GPU the
// file is still built, and the CPU path is checked on CPU tensors.
//
// Given: the helpers (math type, 16-byte vectors, the block reduction), the
// argument checks, and the registration with the dispatcher at the end (schema + one
// implementation per backend). Yours, in this order:
//   1. the CPU loops (rmsnorm_fwd_cpu, rmsnorm_bwd_cpu): where you get the formulas right
//   2. the CUDA kernels and their launchers (rmsnorm_fwd_cuda, rmsnorm_bwd_cuda)
//   3. rmsnorm.py: the fake kernels, the autograd formula, and rmsnorm()
// Only light headers: this file builds in ~25 s on 2 cores instead of ~75 s with
// <torch/extension.h>.

#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cuda_runtime.h>

#include "common.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// ---------------------------------------------------------------------------------------------
// helpers

// From include/common.cuh (shared by every CUDA track): the math type Acc<T> (float for 16-bit
// types and float, double for double, so gradcheck can run), Vec<T, N> (N elements moved as one
// 16-byte access) and block_sum (a sum over the block, returned to every thread).
using course::Acc;
using course::Vec;
using course::block_sum;

constexpr int kMaxThreads = 512;       // per block
// Row vectors a thread keeps in registers: the forward holds x and w (one vector each measured
// fastest on an H200), the backward also dy and the dw sums (two). Further ones are re-read.
constexpr int kFwdVecsPerThread = 1;
constexpr int kBwdVecsPerThread = 2;
constexpr int kBwdBlocksPerSM = 4;     // persistent backward: blocks per SM (at most)

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// ---------------------------------------------------------------------------------------------
// CUDA kernels. Suggested layout: a row is nvec = N / VEC vectors (VEC = 16 / sizeof(T) when
// every row starts 16-byte aligned, else 1); thread t owns vectors t, t + blockDim, ...; the
// first k{Fwd,Bwd}VecsPerThread of them stay in registers, further ones (very long rows) are read again.

// One block per row: sum of squares (block_sum), rstd, then y = x * rstd * w; thread 0 stores
// rstd[row]. TODO (about 35 lines). Use int64_t for row * N.
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   typename Acc<T>::type* __restrict__ rstd, int64_t N,
                   typename Acc<T>::type eps) {
  // TODO
}

// Persistent: gridDim.x blocks (SMs x a few), block b takes rows b, b + gridDim.x, ...; per
// row, one block_sum for mean(x * w * dy), then dx; dw for its columns summed in registers in the math type (float; double for double)
// over its rows, written once at the end to its own row of dw_partial ([gridDim.x, N]): no
// atomics. TODO (about 60 lines).
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                   const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                   typename Acc<T>::type* __restrict__ dw_partial, int64_t rows, int64_t N) {
  // TODO
}

// dw[n] = sum of dw_partial[p][n] over the partial rows p, cast to T; a fixed order of
// additions, so the same bits every run. TODO (about 15 lines).
template <typename T>
__global__ void dw_reduce_kernel(const typename Acc<T>::type* __restrict__ partial,
                                 T* __restrict__ dw, int64_t parts, int64_t N) {
  // TODO
}

// ---------------------------------------------------------------------------------------------
// argument checks (the same for CPU and CUDA) and shapes

inline void check_inputs(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0,
              "x must have a last dimension of at least 1 (the rows), got shape ", x.sizes());
  TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), "w must have shape [", x.size(-1),
              "] (x's last dimension), got ", w.sizes());
  TORCH_CHECK(w.device() == x.device(), "w must be on x's device ", x.device(), ", got ",
              w.device());
  TORCH_CHECK(w.scalar_type() == x.scalar_type(), "w must have x's dtype ", x.scalar_type(),
              ", got ", w.scalar_type());
  const auto t = x.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble,
              "x must be float32, float16, bfloat16 or float64, got ", t);
}

inline void check_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                           const at::Tensor& rstd) {
  check_inputs(x, w);
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.scalar_type() == x.scalar_type() &&
                  dy.device() == x.device(),
              "dy must have x's shape, dtype and device");
  TORCH_CHECK(rstd.numel() * x.size(-1) == x.numel() && rstd.device() == x.device() &&
                  rstd.scalar_type() == (x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
              "rstd must be the second output of rmsnorm_fwd for this x");
}

inline at::ScalarType math_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// rstd has x's shape without the last dimension (a 0-d tensor for a 1-d x)
inline at::Tensor empty_rstd(const at::Tensor& x) {
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(math_type(x)));
}

template <typename T>
inline bool aligned16(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Threads per block: enough that each thread keeps at most `per_thread` vectors of the row
// (4096 bf16 = 512 vectors: 512 threads forward, 256 backward), a multiple of 32, at most
// kMaxThreads.
inline int threads_for(int64_t nvec, int per_thread) {
  const int64_t t = (nvec + per_thread - 1) / per_thread;
  return static_cast<int>(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, (t + 31) / 32 * 32)));
}

// ---------------------------------------------------------------------------------------------
// the ops. Each returns what the schema at the end says: (y, rstd) and (dx, dw).

std::tuple<at::Tensor, at::Tensor> rmsnorm_fwd_cuda(const at::Tensor& x, const at::Tensor& w,
                                                    double eps) {
  TORCH_CHECK(false, "rmsnorm_fwd (CUDA): not implemented yet (see cuda/rmsnorm.cu)");
  // TODO (about 20 lines): check_inputs(x, w); a c10::cuda::CUDAGuard for x's device;
  // contiguous x and w; y = at::empty_like(x), rstd = empty_rstd(x); rows = numel / N (return
  // early when 0); AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ...): launch
  // rmsnorm_fwd_kernel<scalar_t, 16 / sizeof(scalar_t)> when N is a multiple of that and the
  // pointers are aligned16, else <scalar_t, 1>; grid = rows, block = threads_for(N / VEC, kFwdVecsPerThread), on
  // c10::cuda::getCurrentCUDAStream(); then C10_CUDA_KERNEL_LAUNCH_CHECK().
  return {};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_bwd_cuda(const at::Tensor& dy, const at::Tensor& x,
                                                    const at::Tensor& w, const at::Tensor& rstd) {
  TORCH_CHECK(false, "rmsnorm_bwd (CUDA): not implemented yet (see cuda/rmsnorm.cu)");
  // TODO (about 30 lines): as above (check_backward; dy is often not contiguous), plus the
  // persistent grid: blocks = min(rows, SMs * min(occupancy, 4)) from
  // cudaDeviceGetAttribute(cudaDevAttrMultiProcessorCount) and
  // cudaOccupancyMaxActiveBlocksPerMultiprocessor; partials = at::empty({blocks, N}, math type: float, double for double);
  // then dw_reduce_kernel over ceil(N / 32) blocks. No rows: dw is all zeros.
  return {};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_fwd_cpu(const at::Tensor& x, const at::Tensor& w,
                                                   double eps) {
  TORCH_CHECK(false, "rmsnorm_fwd (CPU): not implemented yet (see cuda/rmsnorm.cu)");
  // TODO (about 20 lines): check_inputs; contiguous x and w; y, rstd as on the GPU; then
  // AT_DISPATCH_FLOATING_TYPES_AND2 with plain loops over rows and columns, math in
  // Acc<scalar_t>::type (static_cast to it on every load, back to scalar_t on every store).
  return {};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_bwd_cpu(const at::Tensor& dy, const at::Tensor& x,
                                                   const at::Tensor& w, const at::Tensor& rstd) {
  TORCH_CHECK(false, "rmsnorm_bwd (CPU): not implemented yet (see cuda/rmsnorm.cu)");
  // TODO (about 25 lines): per row s = sum(x * w * dy), c = s * rstd^2 / N,
  // dx = rstd * (w * dy - x * c); dw summed over rows in a std::vector of the math type, cast
  // to w's dtype at the end.
  return {};
}

// ---------------------------------------------------------------------------------------------
// registration: the schema once, then one implementation per backend. The fake (meta) kernels
// and the autograd formula are registered from Python (rmsnorm.py).

TORCH_LIBRARY(ex06_cuda, m) {
  m.def("rmsnorm_fwd(Tensor x, Tensor w, float eps) -> (Tensor, Tensor)");
  m.def("rmsnorm_bwd(Tensor dy, Tensor x, Tensor w, Tensor rstd) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ex06_cuda, CUDA, m) {
  m.impl("rmsnorm_fwd", &rmsnorm_fwd_cuda);
  m.impl("rmsnorm_bwd", &rmsnorm_bwd_cuda);
}

TORCH_LIBRARY_IMPL(ex06_cuda, CPU, m) {
  m.impl("rmsnorm_fwd", &rmsnorm_fwd_cpu);
  m.impl("rmsnorm_bwd", &rmsnorm_bwd_cpu);
}
