// Exercise 06 — rmsnorm, CUDA C++ track, solved: the kernels and their launchers.
//
//   y  = x * rstd * w,  rstd = rsqrt(mean(x^2) + eps)   per row of N; fp32 math (fp64 for fp64)
//   dx = rstd * (w*dy - x * rstd^2 * mean(x*w*dy))
//   dw = sum over rows of dy * x * rstd
//
// Napkin math, (8, 4096, 4096) bf16, M = 32768 rows of N = 4096 (268 MB per tensor):
//   forward   read x, write y                 537 MB -> 125 us at 4.28 TB/s (H200), 179 us (H100)
//   backward  read x, dy; write dx            805 MB -> 188 us / 268 us  (+ dw partials, ~2%)
// (the copy ceilings of those GPUs; the measured ceiling and these kernels' times against it are
// in docs/performance.md). Every kernel below is memory-bound: 16-byte loads, the row kept in
// registers, each byte once.
//
// Why it is fast: what decides the rest is how many bytes each SM keeps in flight: at 4.28 TB/s
// and ~1 us of DRAM latency under load, ~4 MB over the GPU, ~32 KB per SM, all the time. One
// block per row (or a persistent block that waits for each row before it asks for the next) has
// its loads in flight only between a row's start and its reduction. So both kernels are
// persistent (one wave of blocks looping over the rows), and each block has the next row's loads
// on their way, into a second set of registers, while it reduces and writes this one. (A ring of
// 2-4 rows in shared memory filled by cp.async, which costs no registers, measured slower in
// both kernels: git history has it.)
//
// Kernels:
//   rmsnorm_fwd_kernel   persistent, ~SMs x 3-4 blocks of 512 threads, the next row's x prefetched
//   rmsnorm_bwd_kernel   persistent, ~SMs x 2 blocks, the next row's x, dy and rstd prefetched;
//                        dw summed in fp32 registers, written once per block as a row of partials
//   dw_reduce_kernel     [blocks, N] partials -> dw[N], in a fixed order (deterministic)
//   launchers            raw pointers + a stream: called by rmsnorm.cpp (which knows ATen)
//
// This file includes only CUDA headers and common.cuh: it compiles in seconds, so editing a
// kernel does not recompile the ATen-heavy rmsnorm.cpp.

#include "common.cuh"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace {

// From include/common.cuh (shared by every CUDA track): the math type Acc<T> (float for 16-bit
// types and float, double for double, so gradcheck can run), Vec<T, N> (N elements moved as one
// 16-byte access), block_sum (a sum over the block, returned to every thread), to_acc/from_acc
// (PyTorch builds with __CUDA_NO_HALF_CONVERSIONS__: __half and __nv_bfloat16 convert only
// through these).
using course::Acc;
using course::Vec;
using course::block_sum;
using course::from_acc;
using course::to_acc;

constexpr int kMaxThreads = 512;  // per block

// Row vectors (16 bytes each) a thread keeps in registers: 4096 bf16 are 512 vectors, 512
// threads with 1 each. Further vectors of long rows are read again from L1/L2.
constexpr int kFwdVecsPerThread = 1;
constexpr int kBwdVecsPerThread = 1;

// Persistent grids: at most this many blocks per SM (fewer when registers say so: the launchers
// ask the occupancy calculator). The backward's dw partials are one fp32 row per block, so its
// grid stays small (~2% of its traffic at 2 per SM).
constexpr int kFwdBlocksPerSM = 4;
constexpr int kBwdBlocksPerSM = 2;

// __launch_bounds__ minimum blocks per SM: caps the registers at 65536 / (512 * this), so that
// this many 512-thread blocks fit an SM. ptxas (CUDA 13.0, sm_90, bf16, 16-byte vectors): the
// forward takes 52 registers uncapped (2 blocks), 40 capped at 3 blocks without spilling, 32 at
// 4 with 24 bytes of spills; the backward takes 94 uncapped (1 block: too few warps), 64 at 2
// blocks without spilling, 40 at 3 with ~250 bytes of spills.
constexpr int kFwdMinBlocksPerSM = 3;
constexpr int kBwdMinBlocksPerSM = 2;

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// ---------------------------------------------------------------------------------------------
// Forward. Block p takes rows p, p + P, p + 2P, ... (P = gridDim.x). A row is nvec = N / VEC
// vectors; thread t owns vectors t, t + blockDim, ...; the first K stay in registers, further
// ones (rows longer than K * blockDim * VEC) are read again from memory (L1/L2) for the second
// pass. w is the same for every row: read once per block.

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, kFwdMinBlocksPerSM)
rmsnorm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   typename Acc<T>::type* __restrict__ rstd, int64_t rows, int64_t N,
                   typename Acc<T>::type eps) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  constexpr int K = kFwdVecsPerThread;
  __shared__ A shared[33];
  const int nvec = static_cast<int>(N / VEC);  // rmsnorm.cpp checks N < 2^31
  const int tail = threadIdx.x + K * blockDim.x;  // first vector not in registers
  const int64_t step = gridDim.x;
  const V* wv = reinterpret_cast<const V*>(w);

  V wc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) wc[k] = wv[i];
  }
  auto load = [&](int64_t r, V* xs) {  // row r's first K vectors of this thread, into registers
    const V* xr = reinterpret_cast<const V*>(x + r * N);  // int64: r * N passes 2^31
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) xs[k] = xr[i];
    }
  };

  V xc[K], xn[K];
  if (blockIdx.x < rows) load(blockIdx.x, xc);

  for (int64_t row = blockIdx.x; row < rows; row += step) {
    const V* xr = reinterpret_cast<const V*>(x + row * N);
    V* yr = reinterpret_cast<V*>(y + row * N);
    if (row + step < rows) load(row + step, xn);  // goes out now, arrives while we work

    // pass 1: sum of squares
    A ss = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A v = to_acc(xc[k].v[j]);
          ss += v * v;
        }
      }
    }
    for (int i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A v = to_acc(xv.v[j]);
        ss += v * v;
      }
    }
    const A r = rsqrt_(block_sum(ss, shared) / static_cast<A>(N) + eps);
    if (threadIdx.x == 0) rstd[row] = r;

    // pass 2: normalize and scale; round once on the store
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
        V out;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          out.v[j] = from_acc<T>(to_acc(xc[k].v[j]) * r * to_acc(wc[k].v[j]));
        yr[i] = out;
      }
    }
    for (int i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], wk = wv[i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) out.v[j] = from_acc<T>(to_acc(xv.v[j]) * r * to_acc(wk.v[j]));
      yr[i] = out;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) xc[k] = xn[k];
  }
}

// ---------------------------------------------------------------------------------------------
// Backward: a persistent grid. Block p takes rows p, p + P, p + 2P, ... (P = gridDim.x); the
// next row's x, dy and rstd are on their way while it works on one. dw of the columns a thread
// owns is summed over its block's rows in fp32 registers and written once, as row p of the
// [P, N] partials; dw_reduce_kernel adds the P rows. Never atomics into dw: bf16 atomics round
// the running sum at every row, and float atomics make the bits depend on timing.

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxThreads, kBwdMinBlocksPerSM)
rmsnorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ w,
                   const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                   typename Acc<T>::type* __restrict__ dw_partial, int64_t rows, int64_t N) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  constexpr int K = kBwdVecsPerThread;
  __shared__ A shared[33];
  const int nvec = static_cast<int>(N / VEC);  // rmsnorm.cpp checks N < 2^31
  const int tail = threadIdx.x + K * blockDim.x;  // first vector not in registers
  const int64_t step = gridDim.x;
  const V* wv = reinterpret_cast<const V*>(w);
  A* part = dw_partial + int64_t(blockIdx.x) * N;  // this block's row of partials: only its own

  V wc[K];         // w is the same for every row: read it once
  A dwc[K][VEC];   // dw of the cached columns, summed over this block's rows
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < nvec) wc[k] = wv[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) dwc[k][j] = 0;
  }
  // the uncached columns (long rows only) accumulate in the partial row itself; each element
  // is read and written only by the thread that owns it, so this needs no synchronization
  for (int i = tail; i < nvec; i += blockDim.x)
#pragma unroll
    for (int j = 0; j < VEC; ++j) part[i * VEC + j] = 0;

  auto load = [&](int64_t r, V* xs, V* dys) {
    const V* xr = reinterpret_cast<const V*>(x + r * N);
    const V* dyr = reinterpret_cast<const V*>(dy + r * N);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
        xs[k] = xr[i];
        dys[k] = dyr[i];
      }
    }
  };

  V xc[K], dyc[K], xn[K], dyn[K];
  A r = 0;  // this row's rstd (loaded one row ahead, as x and dy are)
  if (blockIdx.x < rows) {
    load(blockIdx.x, xc, dyc);
    r = rstd[blockIdx.x];
  }

  for (int64_t row = blockIdx.x; row < rows; row += step) {
    const V* xr = reinterpret_cast<const V*>(x + row * N);
    const V* dyr = reinterpret_cast<const V*>(dy + row * N);
    V* dxr = reinterpret_cast<V*>(dx + row * N);
    A rn = 0;  // the next row's: they go out now, and arrive while we work on this one
    if (row + step < rows) {
      rn = rstd[row + step];
      load(row + step, xn, dyn);
    }

    // pass 1: s = sum(x * w * dy) over the row
    A s = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          s += to_acc(xc[k].v[j]) * to_acc(wc[k].v[j]) * to_acc(dyc[k].v[j]);
      }
    }
    for (int i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], dyv = dyr[i], wk = wv[i];
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += to_acc(xv.v[j]) * to_acc(wk.v[j]) * to_acc(dyv.v[j]);
    }
    // c = rstd^2 * mean(x * w * dy); dx = rstd * (w * dy - x * c)
    const A c = block_sum(s, shared) * r * r / static_cast<A>(N);

    // pass 2: dx, and dw += dy * x * rstd
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i < nvec) {
        V out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A xv = to_acc(xc[k].v[j]), dyv = to_acc(dyc[k].v[j]);
          out.v[j] = from_acc<T>(r * (to_acc(wc[k].v[j]) * dyv - xv * c));
          dwc[k][j] += dyv * xv * r;
        }
        dxr[i] = out;
      }
    }
    for (int i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], dyv = dyr[i], wk = wv[i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A xa = to_acc(xv.v[j]), dya = to_acc(dyv.v[j]);
        out.v[j] = from_acc<T>(r * (to_acc(wk.v[j]) * dya - xa * c));
        part[i * VEC + j] += dya * xa * r;
      }
      dxr[i] = out;
    }
    r = rn;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      xc[k] = xn[k];
      dyc[k] = dyn[k];
    }
  }

#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
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
    dw[col] = from_acc<T>(t);
  }
}

// ---------------------------------------------------------------------------------------------
// launch configuration

// A persistent grid: as many blocks as fit on the GPU at once (it must not run in waves), at
// most `per_sm_max` per SM and never more than `cap`.
template <typename Kernel>
int64_t persistent_blocks(Kernel kernel, int threads, int per_sm_max, int64_t cap) {
  int per_sm = 0;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::min<int64_t>(cap, int64_t(course::num_sms()) * std::clamp(per_sm, 1, per_sm_max));
}

template <typename T, int VEC>
void fwd(const T* x, const T* w, T* y, typename Acc<T>::type* rstd, int64_t rows, int64_t N,
         double eps, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  auto kernel = rmsnorm_fwd_kernel<T, VEC>;
  const int threads = course::threads_for(N / VEC, kFwdVecsPerThread, kMaxThreads);
  const int64_t blocks = persistent_blocks(kernel, threads, kFwdBlocksPerSM, rows);
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, w, y, rstd, rows, N,
                                                                static_cast<A>(eps));
  CUDA_LAUNCH_CHECK();
}

template <typename T, int VEC>
int64_t bwd(const T* dy, const T* x, const T* w, const typename Acc<T>::type* rstd, T* dx,
            typename Acc<T>::type* partial, int64_t max_blocks, int64_t rows, int64_t N,
            cudaStream_t stream) {
  auto kernel = rmsnorm_bwd_kernel<T, VEC>;
  const int threads = course::threads_for(N / VEC, kBwdVecsPerThread, kMaxThreads);
  // never more blocks than the partial rows allocated
  const int64_t blocks = persistent_blocks(kernel, threads, kBwdBlocksPerSM, max_blocks);
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(dy, x, w, rstd, dx, partial,
                                                                  rows, N);
    CUDA_LAUNCH_CHECK();
  }
  return blocks;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The launchers rmsnorm.cpp calls (declared at its top; instantiated below for the four
// dtypes). Pointers are device pointers to dense tensors; A is the math type (Acc<T>).

template <typename T, typename A>
void rmsnorm_fwd_launch(const T* x, const T* w, T* y, A* rstd, int64_t rows, int64_t N,
                        double eps, cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "A must be the math type of T");
  if (rows == 0) return;
  if (course::vector_ok<T>(N, N, {x, w, y}))
    fwd<T, course::kVec16<T>>(x, w, y, rstd, rows, N, eps, stream);
  else
    fwd<T, 1>(x, w, y, rstd, rows, N, eps, stream);
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
  int64_t blocks = 0;  // no rows: no partials, and dw below is a sum of nothing (zeros)
  if (rows > 0)
    blocks = course::vector_ok<T>(N, N, {dy, x, w, dx})
                 ? bwd<T, course::kVec16<T>>(dy, x, w, rstd, dx, partials, max_blocks, rows, N,
                                             stream)
                 : bwd<T, 1>(dy, x, w, rstd, dx, partials, max_blocks, rows, N, stream);
  const dim3 block(32, kReduceRows);
  dw_reduce_kernel<T><<<static_cast<unsigned>(course::ceil_div(N, 32)), block, 0, stream>>>(
      partials, dw, blocks, N);
  CUDA_LAUNCH_CHECK();
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
