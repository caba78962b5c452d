// Exercise 06 — rmsnorm, CUDA C++ track, solved.
//
//   y  = x * rstd * w,  rstd = rsqrt(mean(x^2) + eps)   per row of N; fp32 math (fp64 for fp64)
//   dx = rstd * (w*dy - x * rstd^2 * mean(x*w*dy))
//   dw = sum over rows of dy * x * rstd
//
// Napkin math, (8, 4096, 4096) bf16, M = 32768 rows of N = 4096 (268 MB per tensor):
//   forward   read x, write y                 537 MB -> 125 us at 4.28 TB/s (H200), 179 us (H100)
//   backward  read x, dy; write dx            805 MB -> 188 us / 268 us  (+ dw partials, ~2%)
// Every kernel below is memory-bound: 16-byte loads, the row kept in registers, each byte once.
//
// Kernels:
//   rmsnorm_fwd_kernel   one block per row: sum of squares, block reduction, normalize, scale
//   rmsnorm_bwd_kernel   persistent: ~SMs x 4 blocks, each looping over rows; dw summed in
//                        registers (fp32) and written once per block as a partial row
//   dw_reduce_kernel     [blocks, N] partials -> dw[N], in a fixed order (deterministic)
// plus plain C++ loops for CPU tensors, and the registration with the dispatcher at the end.
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
// Row vectors a thread keeps in registers. Measured on an H200 at (8, 4096, 4096) bf16
// (2026-11-21): the forward is fastest with one vector per thread (512 threads per 4096-wide
// row: 150 us vs 173 us with two, 190 us with four); the backward, which also holds dy and
// the dw sums, with two (306 us vs 385 us with one; capping its registers to fit more blocks
// per SM spilled and got slower).
constexpr int kFwdVecsPerThread = 1;
constexpr int kBwdVecsPerThread = 2;
constexpr int kBwdBlocksPerSM = 4;     // persistent backward: blocks per SM (at most)

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// ---------------------------------------------------------------------------------------------
// CUDA kernels. A row is nvec = N / VEC vectors; thread t owns vectors t, t + blockDim, ...: the
// first k{Fwd,Bwd}VecsPerThread of them stay in registers, any further ones (rows longer than
// that many vectors per thread * blockDim * VEC) are read again from memory (L1/L2).

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   typename Acc<T>::type* __restrict__ rstd, int64_t N,
                   typename Acc<T>::type eps) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  __shared__ A shared[33];
  const int64_t row = blockIdx.x;
  const int64_t nvec = N / VEC;
  const V* xr = reinterpret_cast<const V*>(x + row * N);
  const V* wv = reinterpret_cast<const V*>(w);
  V* yr = reinterpret_cast<V*>(y + row * N);

  V xc[kFwdVecsPerThread], wc[kFwdVecsPerThread];
  A ss = 0;
#pragma unroll
  for (int k = 0; k < kFwdVecsPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < nvec) {
      xc[k] = xr[i];
      wc[k] = wv[i];  // issued now, so its latency hides behind the reduction
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A v = static_cast<A>(xc[k].v[j]);
        ss += v * v;
      }
    }
  }
  for (int64_t i = threadIdx.x + int64_t(kFwdVecsPerThread) * blockDim.x; i < nvec; i += blockDim.x) {
    const V xv = xr[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const A v = static_cast<A>(xv.v[j]);
      ss += v * v;
    }
  }
  const A r = rsqrt_(block_sum(ss, shared) / static_cast<A>(N) + eps);
  if (threadIdx.x == 0) rstd[row] = r;

#pragma unroll
  for (int k = 0; k < kFwdVecsPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < nvec) {
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out.v[j] = static_cast<T>(static_cast<A>(xc[k].v[j]) * r * static_cast<A>(wc[k].v[j]));
      yr[i] = out;
    }
  }
  for (int64_t i = threadIdx.x + int64_t(kFwdVecsPerThread) * blockDim.x; i < nvec; i += blockDim.x) {
    const V xv = xr[i], wk = wv[i];
    V out;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      out.v[j] = static_cast<T>(static_cast<A>(xv.v[j]) * r * static_cast<A>(wk.v[j]));
    yr[i] = out;
  }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                   const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                   typename Acc<T>::type* __restrict__ dw_partial, int64_t rows, int64_t N) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  __shared__ A shared[33];
  const int64_t nvec = N / VEC;
  const int64_t tail = threadIdx.x + int64_t(kBwdVecsPerThread) * blockDim.x;  // first uncached
  const V* wv = reinterpret_cast<const V*>(w);
  A* part = dw_partial + int64_t(blockIdx.x) * N;  // this block's row of partials: only its own

  V wc[kBwdVecsPerThread];       // w is the same for every row: read it once
  A dwc[kBwdVecsPerThread][VEC];  // dw of the cached columns, summed over this block's rows
#pragma unroll
  for (int k = 0; k < kBwdVecsPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < nvec) wc[k] = wv[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) dwc[k][j] = 0;
  }
  // the uncached columns (long rows only) accumulate in the partial row itself; each element
  // is read and written only by the thread that owns it, so this needs no synchronization
  for (int64_t i = tail; i < nvec; i += blockDim.x)
#pragma unroll
    for (int j = 0; j < VEC; ++j) part[i * VEC + j] = 0;

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const V* xr = reinterpret_cast<const V*>(x + row * N);
    const V* dyr = reinterpret_cast<const V*>(dy + row * N);
    V* dxr = reinterpret_cast<V*>(dx + row * N);
    const A r = rstd[row];

    // pass 1: s = sum(x * w * dy) over the row
    V xc[kBwdVecsPerThread], dyc[kBwdVecsPerThread];
    A s = 0;
#pragma unroll
    for (int k = 0; k < kBwdVecsPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
        xc[k] = xr[i];
        dyc[k] = dyr[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          s += static_cast<A>(xc[k].v[j]) * static_cast<A>(wc[k].v[j]) * static_cast<A>(dyc[k].v[j]);
      }
    }
    for (int64_t i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], dyv = dyr[i], wk = wv[i];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        s += static_cast<A>(xv.v[j]) * static_cast<A>(wk.v[j]) * static_cast<A>(dyv.v[j]);
    }
    // c = rstd^2 * mean(x * w * dy); dx = rstd * (w * dy - x * c)
    const A c = block_sum(s, shared) * r * r / static_cast<A>(N);

    // pass 2: dx, and dw += dy * x * rstd
#pragma unroll
    for (int k = 0; k < kBwdVecsPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
        V out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A xv = static_cast<A>(xc[k].v[j]), dyv = static_cast<A>(dyc[k].v[j]);
          out.v[j] = static_cast<T>(r * (static_cast<A>(wc[k].v[j]) * dyv - xv * c));
          dwc[k][j] += dyv * xv * r;
        }
        dxr[i] = out;
      }
    }
    for (int64_t i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], dyv = dyr[i], wk = wv[i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A xa = static_cast<A>(xv.v[j]), dya = static_cast<A>(dyv.v[j]);
        out.v[j] = static_cast<T>(r * (static_cast<A>(wk.v[j]) * dya - xa * c));
        part[i * VEC + j] += dya * xa * r;
      }
      dxr[i] = out;
    }
  }

#pragma unroll
  for (int k = 0; k < kBwdVecsPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < nvec) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) part[i * VEC + j] = dwc[k][j];
    }
  }
}

// dw[n] = sum over the `parts` partial rows, for 32 columns per block: threadIdx.x picks the
// column (a warp reads 128 contiguous bytes of a partial row), threadIdx.y strides over the
// partial rows, and the 16 sums of a column are added in a fixed order: same bits every run.
constexpr int kReduceRows = 16;

template <typename T>
__global__ void dw_reduce_kernel(const typename Acc<T>::type* __restrict__ partial,
                                 T* __restrict__ dw, int64_t parts, int64_t N) {
  using A = typename Acc<T>::type;
  __shared__ A sums[kReduceRows][32];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A s = 0;
  if (col < N)
    for (int64_t p = threadIdx.y; p < parts; p += kReduceRows) s += partial[p * N + col];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    A t = 0;
#pragma unroll
    for (int k = 0; k < kReduceRows; ++k) t += sums[k][threadIdx.x];
    dw[col] = static_cast<T>(t);
  }
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
// CUDA launchers

template <typename T, int VEC>
static void launch_fwd(const at::Tensor& x, const at::Tensor& w, at::Tensor& y, at::Tensor& rstd,
                       int64_t rows, int64_t N, double eps, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const int threads = threads_for(N / VEC, kFwdVecsPerThread);
  rmsnorm_fwd_kernel<T, VEC><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      x.data_ptr<T>(), w.data_ptr<T>(), y.data_ptr<T>(), rstd.data_ptr<A>(), N,
      static_cast<A>(eps));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_fwd_cuda(const at::Tensor& x_in, const at::Tensor& w_in,
                                                    double eps) {
  check_inputs(x_in, w_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  TORCH_CHECK(rows < (int64_t(1) << 31), "x has too many rows for one launch: ", rows);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = empty_rstd(x);
  if (rows == 0) return {y, rstd};
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_fwd_cuda", [&] {
    constexpr int VEC = 16 / sizeof(scalar_t);
    // 16-byte loads need every row to start 16-byte aligned: N a multiple of VEC, and aligned
    // base pointers (a sliced view can start anywhere); otherwise one element at a time
    if (N % VEC == 0 && aligned16(x.data_ptr<scalar_t>()) && aligned16(w.data_ptr<scalar_t>()) &&
        aligned16(y.data_ptr<scalar_t>()))
      launch_fwd<scalar_t, VEC>(x, w, y, rstd, rows, N, eps, stream);
    else
      launch_fwd<scalar_t, 1>(x, w, y, rstd, rows, N, eps, stream);
  });
  return {y, rstd};
}

template <typename T, int VEC>
static void launch_bwd(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                       const at::Tensor& rstd, at::Tensor& dx, at::Tensor& dw, int64_t rows,
                       int64_t N, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  const int threads = threads_for(N / VEC, kBwdVecsPerThread);
  int device = 0, sms = 0, per_sm = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // as many blocks as fit on the GPU at once (a persistent grid must not run in waves)
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rmsnorm_bwd_kernel<T, VEC>,
                                                               threads, 0));
  const int64_t blocks = std::min<int64_t>(rows, int64_t(sms) * std::clamp(per_sm, 1, kBwdBlocksPerSM));
  at::Tensor partial = at::empty({blocks, N}, x.options().dtype(math_type(x)));
  if (blocks > 0) {  // no rows: no partials, and dw below is a sum of nothing (zeros)
    rmsnorm_bwd_kernel<T, VEC><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
        dy.data_ptr<T>(), x.data_ptr<T>(), w.data_ptr<T>(), rstd.data_ptr<A>(), dx.data_ptr<T>(),
        partial.data_ptr<A>(), rows, N);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const dim3 reduce_block(32, kReduceRows);
  dw_reduce_kernel<T><<<static_cast<unsigned>((N + 31) / 32), reduce_block, 0, stream>>>(
      partial.data_ptr<A>(), dw.data_ptr<T>(), blocks, N);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_bwd_cuda(const at::Tensor& dy_in, const at::Tensor& x_in,
                                                    const at::Tensor& w_in,
                                                    const at::Tensor& rstd_in) {
  check_backward(dy_in, x_in, w_in, rstd_in);
  const c10::cuda::CUDAGuard guard(x_in.device());
  // dy often arrives strided (the gradient of a sum is an expanded scalar): copy it then
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), w = w_in.contiguous(),
                   rstd = rstd_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::empty_like(w);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_bwd_cuda", [&] {
    constexpr int VEC = 16 / sizeof(scalar_t);
    if (N % VEC == 0 && aligned16(dy.data_ptr<scalar_t>()) && aligned16(x.data_ptr<scalar_t>()) &&
        aligned16(w.data_ptr<scalar_t>()) && aligned16(dx.data_ptr<scalar_t>()))
      launch_bwd<scalar_t, VEC>(dy, x, w, rstd, dx, dw, rows, N, stream);
    else
      launch_bwd<scalar_t, 1>(dy, x, w, rstd, dx, dw, rows, N, stream);
  });
  return {dx, dw};
}

// ---------------------------------------------------------------------------------------------
// CPU: the same math as plain loops (where to get the formulas right before any kernel)

std::tuple<at::Tensor, at::Tensor> rmsnorm_fwd_cpu(const at::Tensor& x_in, const at::Tensor& w_in,
                                                   double eps) {
  check_inputs(x_in, w_in);
  const at::Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = empty_rstd(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_fwd_cpu", [&] {
    using A = typename Acc<scalar_t>::type;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    A* rp = rstd.data_ptr<A>();
    for (int64_t r = 0; r < rows; ++r) {
      const scalar_t* xr = xp + r * N;
      A ss = 0;
      for (int64_t j = 0; j < N; ++j) ss += static_cast<A>(xr[j]) * static_cast<A>(xr[j]);
      const A rs = A(1) / std::sqrt(ss / static_cast<A>(N) + static_cast<A>(eps));
      rp[r] = rs;
      for (int64_t j = 0; j < N; ++j)
        yp[r * N + j] = static_cast<scalar_t>(static_cast<A>(xr[j]) * rs * static_cast<A>(wp[j]));
    }
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_bwd_cpu(const at::Tensor& dy_in, const at::Tensor& x_in,
                                                   const at::Tensor& w_in, const at::Tensor& rstd_in) {
  check_backward(dy_in, x_in, w_in, rstd_in);
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), w = w_in.contiguous(),
                   rstd = rstd_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::empty_like(w);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_bwd_cpu", [&] {
    using A = typename Acc<scalar_t>::type;
    const scalar_t* dyp = dy.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const A* rp = rstd.data_ptr<A>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    std::vector<A> dw_acc(N, A(0));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * N;
      const A rs = rp[r];
      A s = 0;
      for (int64_t j = 0; j < N; ++j)
        s += static_cast<A>(xp[o + j]) * static_cast<A>(wp[j]) * static_cast<A>(dyp[o + j]);
      const A c = s * rs * rs / static_cast<A>(N);
      for (int64_t j = 0; j < N; ++j) {
        const A xv = static_cast<A>(xp[o + j]), dyv = static_cast<A>(dyp[o + j]);
        dxp[o + j] = static_cast<scalar_t>(rs * (static_cast<A>(wp[j]) * dyv - xv * c));
        dw_acc[j] += dyv * xv * rs;
      }
    }
    scalar_t* dwp = dw.data_ptr<scalar_t>();
    for (int64_t j = 0; j < N; ++j) dwp[j] = static_cast<scalar_t>(dw_acc[j]);
  });
  return {dx, dw};
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
