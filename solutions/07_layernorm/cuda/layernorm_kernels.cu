// Exercise 07 — layernorm, CUDA C++ track, solved: the kernels and their launchers.
//
//   y    = (x - mean) * rstd * w + b      mean, var = Welford over the row (biased variance),
//   rstd = 1 / sqrt(var + eps)            fp32 math (fp64 for fp64), y in x's dtype
//   x̂ = (x - mean) * rstd,  g = dy * w
//   dx = rstd * (g - mean(g) - x̂ * mean(g * x̂))
//   dw = sum over rows of dy * x̂,  db = sum over rows of dy
//
// Napkin math, (32768, 4096) bf16: M*N = 2^27 elements, 268 MB per tensor (5x the 50-60 MB L2).
//   forward   read x, write y (+ w, b, mean, rstd: 0.3 MB)      537 MB -> 126 us at 4.28 TB/s
//   backward  read x, dy; write dx (+ dw/db partials, ~9 MB)     805 MB -> 188 us
// Both are memory-bound by two orders of magnitude (~8 flops per element against 4-6 bytes):
// read each byte once, write each byte once, keep enough loads in flight.
//
// Contents:
//   Welford, welford_vec, welford_combine   the statistics: (count, mean, M2) and how two merge
//   block_welford, block_sum2                reductions over the block (warp shuffles + shared)
//   layernorm_fwd_kernel   one block per row (or, with kFwdPersistent, one wave of blocks
//                          looping over rows with the next row prefetched); the row stays in
//                          registers (16-byte loads); one Welford pass gives mean and variance,
//                          a second pass over the registers writes y
//   layernorm_bwd_kernel   persistent: ~SMs x 2 blocks, each looping over rows with the next row
//                          prefetched; dw/db summed in fp32 registers, written once per block as
//                          a row of partials; kDx / kDwDb compile out what autograd did not ask for
//   dwdb_reduce_kernel     [blocks, N] partials -> dw, db in a fixed order (the same bits every run)
//   launchers              raw pointers + a stream: called by layernorm.cpp (which knows ATen)
//
// This file includes only CUDA headers and common.cuh: it compiles in seconds, so editing a
// kernel does not recompile the ATen-heavy layernorm.cpp.

#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace {

using course::Acc;
using course::Vec;

constexpr int kMaxThreads = 512;   // per block
// Row vectors (16 bytes each) a thread keeps in registers. 4096 bf16 = 512 vectors: one each
// for 512 threads. The 06 rmsnorm forward measured 1 vector per thread fastest on an H200
// (150 us vs 173 us with 2); layernorm's are to be measured by results/experiments/07_*.py.
constexpr int kFwdVecsPerThread = 1;
constexpr int kBwdVecsPerThread = 1;
constexpr int kBwdBlocksPerSM = 2;  // persistent backward: blocks per SM (at most)
// Forward grid: persistent (one wave of blocks looping over rows, the next row prefetched) or
// one block per row. Measured at (32768, 4096) bf16 on an H200, 2026-11-22: persistent 248.5 us
// (50.6% of copy, results/gpu-2026-11-22/first-kernels.txt), one block per row 341.6 us (37.0%,
// results/gpu-2026-11-22/grade-03-05-07-08-09-10.txt). Both far below the 90% target: the
// forward's statistics pass is what to look at next (see the README, Measured).
constexpr bool kFwdPersistent = true;

// 16-bit values to the math type and back. PyTorch builds extensions with
// -D__CUDA_NO_HALF_CONVERSIONS__ and -D__CUDA_NO_BFLOAT16_CONVERSIONS__, so __half and
// __nv_bfloat16 have no implicit conversions there: convert with the intrinsics, explicitly.
__device__ __forceinline__ float to_math(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_math(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_math(float v) { return v; }
__device__ __forceinline__ double to_math(double v) { return v; }

template <typename T> __device__ __forceinline__ T from_math(typename Acc<T>::type v) { return v; }
template <> __device__ __forceinline__ __half from_math<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_math<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// ---------------------------------------------------------------------------------------------
// Welford's statistics. A set of values is summarized by (n, mean, M2 = sum (v - mean)^2); two
// summaries merge exactly (Chan et al.): the mean moves by delta * nb / n and M2 gains the
// spread between the two means. No E[x^2] - E[x]^2: with mean 1e4 and variance 1, E[x^2] is
// 1e8, whose float32 spacing is 8 — the variance would be lost in rounding (or come out < 0).

template <typename A>
struct Welford {
  A n, mean, m2;
};

template <typename A>
__device__ __forceinline__ Welford<A> welford_combine(Welford<A> a, Welford<A> b) {
  if (b.n == A(0)) return a;  // (a.n == 0 needs no branch: the formulas then return b)
  const A n = a.n + b.n;
  const A d = b.mean - a.mean;
  const A fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

// One loaded vector as a summary: its own mean, then M2 around it (two passes over registers).
// VEC is a power of two, so a vector of equal values gives that value back exactly, and M2 = 0.
template <typename A, typename T, int VEC>
__device__ __forceinline__ Welford<A> welford_vec(const Vec<T, VEC>& v) {
  A s = 0;
#pragma unroll
  for (int j = 0; j < VEC; ++j) s += to_math(v.v[j]);
  const A m = s / A(VEC);
  A m2 = 0;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const A d = to_math(v.v[j]) - m;
    m2 += d * d;
  }
  return {A(VEC), m, m2};
}

template <typename A>
__device__ __forceinline__ Welford<A> warp_welford(Welford<A> w) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Welford<A> o;
    o.n = __shfl_xor_sync(0xffffffffu, w.n, offset);
    o.mean = __shfl_xor_sync(0xffffffffu, w.mean, offset);
    o.m2 = __shfl_xor_sync(0xffffffffu, w.m2, offset);
    w = welford_combine(w, o);
  }
  return w;
}

// The block's summary, returned to every thread. Slot 32 holds the result, as in common.cuh's
// block_reduce, so back-to-back calls (one per row) never race: a warp writes its slot for the
// next row only after that call's first barrier, which every thread reaches after reading this
// call's result.
template <typename A>
__device__ __forceinline__ Welford<A> block_welford(Welford<A> w, Welford<A>* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  w = warp_welford(w);
  if (lane == 0) shared[warp] = w;
  __syncthreads();
  if (warp == 0) {
    Welford<A> t = lane < warps ? shared[lane] : Welford<A>{0, 0, 0};
    t = warp_welford(t);
    if (lane == 0) shared[32] = t;
  }
  __syncthreads();
  return shared[32];
}

// Two sums over the block at once (one pair of barriers instead of two), returned to every
// thread. `shared` is [2][33]; slot 32 is the result, so back-to-back calls never race: a warp
// writes its slot for the next row only after the first barrier of that call, which every
// thread reaches after reading this call's result.
template <typename A>
__device__ __forceinline__ void block_sum2(A& a, A& b, A (*shared)[33]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = course::warp_sum(a);
  b = course::warp_sum(b);
  if (lane == 0) {
    shared[0][warp] = a;
    shared[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    A ta = lane < warps ? shared[0][lane] : A(0);
    A tb = lane < warps ? shared[1][lane] : A(0);
    ta = course::warp_sum(ta);
    tb = course::warp_sum(tb);
    if (lane == 0) {
      shared[0][32] = ta;
      shared[1][32] = tb;
    }
  }
  __syncthreads();
  a = shared[0][32];
  b = shared[1][32];
}

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// g = dy * w rounded on its own, never fused into a later add: nvcc contracts a * b + c into one
// fma by default, so `dy * w - c1` in pass 2 would keep dy * w unrounded while s1 (pass 1) summed
// it rounded. For N = 1 (x̂ = 0, s1 = g, exact dx = 0) that leaves the rounding error of dy * w,
// times rstd = 1/sqrt(eps) = 316: 1.5e-5 instead of 0 (measured on an H200, 2026-11-22). With
// the same rounded g in both passes, g - s1 / N is exactly 0 there.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// ---------------------------------------------------------------------------------------------
// Forward: one block per row (the loop below then runs once), or with kFwdPersistent a
// persistent grid, as many blocks as fit on the GPU at once: block p takes rows p, p + P,
// p + 2P, ... (P = gridDim.x); w and b are loaded once per block, and the next row's x is
// loading while this row is reduced and written. A row is nvec = N / VEC
// vectors; thread t owns vectors t, t + blockDim, ...; the first K of them stay in registers,
// any further ones (rows longer than K * blockDim * VEC elements) are read again for the
// second pass (from L2: the row was just read). x's rows are ldx elements apart (a view such as
// x[:, :N] is read in place); y is dense.

template <typename T, int VEC, int K>
__global__ void __launch_bounds__(kMaxThreads)
layernorm_fwd_kernel(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
                     const T* __restrict__ b, T* __restrict__ y,
                     typename Acc<T>::type* __restrict__ mean_out,
                     typename Acc<T>::type* __restrict__ rstd_out, int64_t rows, int64_t N,
                     typename Acc<T>::type eps) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  __shared__ Welford<A> shared[33];
  const int64_t nvec = N / VEC;
  const int64_t tail = threadIdx.x + int64_t(K) * blockDim.x;  // first vector not in registers
  const V* wv = reinterpret_cast<const V*>(w);
  const V* bv = reinterpret_cast<const V*>(b);

  V wc[K], bc[K];  // the same for every row: read once per block
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (i < nvec) {
      wc[k] = wv[i];
      bc[k] = bv[i];
    }
  }
  V xc[K];
  auto load = [&](int64_t r, V* xs) {  // 16 bytes per instruction
    const V* xr = reinterpret_cast<const V*>(x + r * ldx);  // int64: r * ldx passes 2^31
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) xs[k] = xr[i];
    }
  };
  if (blockIdx.x < rows) load(blockIdx.x, xc);

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const V* xr = reinterpret_cast<const V*>(x + row * ldx);
    V* yr = reinterpret_cast<V*>(y + row * N);
    V xn[K];  // the next row's loads go out now
    if (row + gridDim.x < rows) load(row + gridDim.x, xn);

    // pass 1: summarize the row: each vector, then the thread's vectors, then the block
    Welford<A> st{0, 0, 0};
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) st = welford_combine(st, welford_vec<A>(xc[k]));
    }
    for (int64_t i = tail; i < nvec; i += blockDim.x)
      st = welford_combine(st, welford_vec<A>(xr[i]));
    st = block_welford(st, shared);
    const A mean = st.mean;
    const A rstd = rsqrt_(st.m2 / static_cast<A>(N) + eps);  // biased variance: M2 / N
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }

    // pass 2: normalize, scale, shift; round once on the store
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
        V out;
#pragma unroll
        for (int j = 0; j < VEC; ++j)
          out.v[j] = from_math<T>((to_math(xc[k].v[j]) - mean) * rstd * to_math(wc[k].v[j]) +
                                  to_math(bc[k].v[j]));
        yr[i] = out;
      }
    }
    for (int64_t i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], wk = wv[i], bk = bv[i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out.v[j] = from_math<T>((to_math(xv.v[j]) - mean) * rstd * to_math(wk.v[j]) +
                                to_math(bk.v[j]));
      yr[i] = out;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) xc[k] = xn[k];
  }
}

// ---------------------------------------------------------------------------------------------
// Backward: a persistent grid. Block p takes rows p, p + P, p + 2P, ... (P = gridDim.x), and
// while it reduces one row the next row's x and dy are already on their way (prefetched into
// registers). dw and db of the columns a thread owns are summed over its block's rows in fp32
// registers and written once, as row p of the [P, N] partials; dwdb_reduce_kernel adds the P
// rows. Never atomics into dw: bf16 atomics round the running sum at every row, and float
// atomics make the bits depend on timing.
//
// kDx / kDwDb: which gradients autograd asked for (ctx.needs_input_grad). Without dx there is
// no reduction over the row at all; without dw/db no partials.

// Registers: ptxas (CUDA 13.0, sm_90) gives the bf16 kernel with dx and dw/db 98 registers, so
// one block of 512 threads fits an SM, with one row of x and dy (16 KB) prefetched per SM; the
// 44% of copy measured on an H200 (2026-11-22) is about what that keeps in flight (132 x 16 KB
// at ~1 us of latency: ~2 TB/s). __launch_bounds__(kMaxThreads, 2) would fit two blocks, at
// ~150 bytes of spills per thread; in 06 capping the backward's registers spilled and got
// slower, so it is not done blind: results/experiments/07_first_kernel.py --sweep-constants
// times it (bwd_launch_bounds_2).
template <typename T, int VEC, int K, bool kDx, bool kDwDb>
__global__ void __launch_bounds__(kMaxThreads)
layernorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t ldx,
                     const T* __restrict__ w, const typename Acc<T>::type* __restrict__ mean,
                     const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                     typename Acc<T>::type* __restrict__ part_w,
                     typename Acc<T>::type* __restrict__ part_b, int64_t rows, int64_t N) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  __shared__ A shared[2][33];
  const int64_t nvec = N / VEC;
  const int64_t tail = threadIdx.x + int64_t(K) * blockDim.x;  // first vector not in registers
  const V* wv = reinterpret_cast<const V*>(w);
  // this block's rows of partials: each element is touched only by the thread that owns it
  A* pw = kDwDb ? part_w + int64_t(blockIdx.x) * N : nullptr;
  A* pb = kDwDb ? part_b + int64_t(blockIdx.x) * N : nullptr;

  V wc[K];         // w is the same for every row: read once
  A dwc[K][VEC];   // dw, db of the cached columns, summed over this block's rows
  A dbc[K][VEC];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    if (kDx && i < nvec) wc[k] = wv[i];
#pragma unroll
    for (int j = 0; j < VEC; ++j) dwc[k][j] = dbc[k][j] = 0;
  }
  if (kDwDb)  // the uncached columns (long rows only) accumulate in the partial rows themselves
    for (int64_t i = tail; i < nvec; i += blockDim.x)
#pragma unroll
      for (int j = 0; j < VEC; ++j) pw[i * VEC + j] = pb[i * VEC + j] = 0;

  V xc[K], dyc[K];
  auto load = [&](int64_t r, V* xs, V* dys) {
    const V* xr = reinterpret_cast<const V*>(x + r * ldx);
    const V* dyr = reinterpret_cast<const V*>(dy + r * N);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
        xs[k] = xr[i];
        dys[k] = dyr[i];
      }
    }
  };
  if (blockIdx.x < rows) load(blockIdx.x, xc, dyc);

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const A mu = mean[row], rs = rstd[row];
    const V* xr = reinterpret_cast<const V*>(x + row * ldx);
    const V* dyr = reinterpret_cast<const V*>(dy + row * N);
    V* dxr = reinterpret_cast<V*>(dx + row * N);

    // the next row's loads go out now: they arrive while this row is reduced and written
    V xn[K], dyn[K];
    if (row + gridDim.x < rows) load(row + gridDim.x, xn, dyn);

    // pass 1: s1 = sum(g), s2 = sum(g * x̂) over the row; dw, db += dy * x̂, dy
    A s1 = 0, s2 = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A xh = (to_math(xc[k].v[j]) - mu) * rs, d = to_math(dyc[k].v[j]);
          if (kDx) {
            const A g = mul_rn(d, to_math(wc[k].v[j]));
            s1 += g;
            s2 += g * xh;
          }
          if (kDwDb) {
            dwc[k][j] += d * xh;
            dbc[k][j] += d;
          }
        }
      }
    }
    for (int64_t i = tail; i < nvec; i += blockDim.x) {
      const V xv = xr[i], dyv = dyr[i];
      V wk;
      if (kDx) wk = wv[i];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A xh = (to_math(xv.v[j]) - mu) * rs, d = to_math(dyv.v[j]);
        if (kDx) {
          const A g = mul_rn(d, to_math(wk.v[j]));
          s1 += g;
          s2 += g * xh;
        }
        if (kDwDb) {
          pw[i * VEC + j] += d * xh;
          pb[i * VEC + j] += d;
        }
      }
    }

    if (kDx) {
      // pass 2: dx = rstd * (g - (s1 + x̂ * s2) / N)
      block_sum2(s1, s2, shared);
      const A c1 = s1 / static_cast<A>(N), c2 = s2 / static_cast<A>(N);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
        if (i < nvec) {
          V out;
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const A xh = (to_math(xc[k].v[j]) - mu) * rs;
            const A g = mul_rn(to_math(dyc[k].v[j]), to_math(wc[k].v[j]));
            out.v[j] = from_math<T>(rs * (g - c1 - xh * c2));
          }
          dxr[i] = out;
        }
      }
      for (int64_t i = tail; i < nvec; i += blockDim.x) {
        const V xv = xr[i], dyv = dyr[i], wk = wv[i];
        V out;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A xh = (to_math(xv.v[j]) - mu) * rs;
          const A g = mul_rn(to_math(dyv.v[j]), to_math(wk.v[j]));
          out.v[j] = from_math<T>(rs * (g - c1 - xh * c2));
        }
        dxr[i] = out;
      }
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      xc[k] = xn[k];
      dyc[k] = dyn[k];
    }
  }

  if (kDwDb) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < nvec) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          pw[i * VEC + j] = dwc[k][j];
          pb[i * VEC + j] = dbc[k][j];
        }
      }
    }
  }
}

// dw[n], db[n] = sums over the `parts` partial rows, 32 columns per block: threadIdx.x picks the
// column (a warp reads 128 contiguous bytes of a partial row), threadIdx.y strides over the
// partial rows, and the 16 sums of a column are added in a fixed order: same bits every run.
constexpr int kReduceRows = 16;

template <typename T>
__global__ void dwdb_reduce_kernel(const typename Acc<T>::type* __restrict__ part_w,
                                   const typename Acc<T>::type* __restrict__ part_b,
                                   T* __restrict__ dw, T* __restrict__ db, int64_t parts,
                                   int64_t N) {
  using A = typename Acc<T>::type;
  __shared__ A sums[2][kReduceRows][32];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A sw = 0, sb = 0;
  if (col < N)
    for (int64_t p = threadIdx.y; p < parts; p += kReduceRows) {
      sw += part_w[p * N + col];
      sb += part_b[p * N + col];
    }
  sums[0][threadIdx.y][threadIdx.x] = sw;
  sums[1][threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < N) {
    A tw = 0, tb = 0;
#pragma unroll
    for (int k = 0; k < kReduceRows; ++k) {
      tw += sums[0][k][threadIdx.x];
      tb += sums[1][k][threadIdx.x];
    }
    if (dw) dw[col] = from_math<T>(tw);
    if (db) db[col] = from_math<T>(tb);
  }
}

// ---------------------------------------------------------------------------------------------
// launch configuration

// Threads per block: enough that each thread keeps at most `per_thread` vectors of the row
// (4096 bf16 = 512 vectors: 512 threads), a multiple of 32, at most kMaxThreads.
inline int threads_for(int64_t nvec, int per_thread) {
  const int64_t t = (nvec + per_thread - 1) / per_thread;
  return static_cast<int>(std::min<int64_t>(kMaxThreads, std::max<int64_t>(32, (t + 31) / 32 * 32)));
}

// 16-byte loads need every row to start 16-byte aligned: N and ldx multiples of VEC, and aligned
// base pointers (a sliced view can start anywhere). Otherwise one element at a time.
template <typename T>
bool vector_ok(int64_t N, int64_t ldx, std::initializer_list<const void*> ptrs) {
  constexpr int VEC = course::kVec16<T>;
  if (N % VEC != 0 || ldx % VEC != 0) return false;
  for (const void* p : ptrs)
    if (p != nullptr && !course::aligned_for<T, VEC>(p)) return false;
  return true;
}

template <typename T, int VEC>
void fwd(const T* x, int64_t ldx, const T* w, const T* b, T* y, typename Acc<T>::type* mean,
         typename Acc<T>::type* rstd, int64_t rows, int64_t N, double eps, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  auto kernel = layernorm_fwd_kernel<T, VEC, kFwdVecsPerThread>;
  const int threads = threads_for(N / VEC, kFwdVecsPerThread);
  int64_t blocks = rows;
  if (kFwdPersistent) {  // one full wave: every SM holds as many blocks as fit on it
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
    blocks = std::min<int64_t>(rows, int64_t(course::num_sms()) * std::max(per_sm, 1));
  }
  kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, ldx, w, b, y, mean, rstd, rows,
                                                                N, static_cast<A>(eps));
  CUDA_LAUNCH_CHECK();
}

template <typename T, int VEC, bool kDx, bool kDwDb>
int64_t bwd(const T* dy, const T* x, int64_t ldx, const T* w, const typename Acc<T>::type* mean,
            const typename Acc<T>::type* rstd, T* dx, typename Acc<T>::type* part_w,
            typename Acc<T>::type* part_b, int64_t max_blocks, int64_t rows, int64_t N,
            cudaStream_t stream) {
  auto kernel = layernorm_bwd_kernel<T, VEC, kBwdVecsPerThread, kDx, kDwDb>;
  const int threads = threads_for(N / VEC, kBwdVecsPerThread);
  int per_sm = 0;
  // as many blocks as fit on the GPU at once (a persistent grid must not run in waves)
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  // max_blocks is the number of partial rows allocated: it caps the grid only when the kernel
  // writes partials (kDwDb). A dx-only backward has no partials (max_blocks = 0): capping it
  // there would launch nothing and hand back dx uninitialized.
  const int64_t cap = kDwDb ? max_blocks : rows;
  const int64_t blocks = std::min<int64_t>(
      cap, int64_t(course::num_sms()) * std::clamp(per_sm, 1, kBwdBlocksPerSM));
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(dy, x, ldx, w, mean, rstd, dx,
                                                                  part_w, part_b, rows, N);
    CUDA_LAUNCH_CHECK();
  }
  return blocks;
}

template <typename T, int VEC>
int64_t bwd_flags(bool want_dx, bool want_dwdb, const T* dy, const T* x, int64_t ldx, const T* w,
                  const typename Acc<T>::type* mean, const typename Acc<T>::type* rstd, T* dx,
                  typename Acc<T>::type* pw, typename Acc<T>::type* pb, int64_t max_blocks,
                  int64_t rows, int64_t N, cudaStream_t s) {
  if (want_dx && want_dwdb)
    return bwd<T, VEC, true, true>(dy, x, ldx, w, mean, rstd, dx, pw, pb, max_blocks, rows, N, s);
  if (want_dx)
    return bwd<T, VEC, true, false>(dy, x, ldx, w, mean, rstd, dx, pw, pb, max_blocks, rows, N, s);
  return bwd<T, VEC, false, true>(dy, x, ldx, w, mean, rstd, dx, pw, pb, max_blocks, rows, N, s);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The launchers layernorm.cpp calls (declared at its top; instantiated below for the four
// dtypes). Pointers are device pointers; every tensor is dense except x, whose rows are ldx
// elements apart.

template <typename T, typename A>
void layernorm_fwd_launch(const T* x, int64_t ldx, const T* w, const T* b, T* y, A* mean, A* rstd,
                          int64_t rows, int64_t N, double eps, cudaStream_t stream) {
  if (rows == 0) return;
  if (vector_ok<T>(N, ldx, {x, w, b, y}))
    fwd<T, course::kVec16<T>>(x, ldx, w, b, y, mean, rstd, rows, N, eps, stream);
  else
    fwd<T, 1>(x, ldx, w, b, y, mean, rstd, rows, N, eps, stream);
}

// The most partial rows the backward writes: the .cpp allocates [2, this, N] floats for them.
int64_t layernorm_bwd_max_blocks(int64_t rows) {
  return std::min<int64_t>(rows, int64_t(course::num_sms()) * kBwdBlocksPerSM);
}

// dx may be null (not wanted); dw and db may be null (not wanted): with both null no partials
// are made. `partials` holds 2 * max_blocks * N floats when dw or db is wanted.
template <typename T, typename A>
void layernorm_bwd_launch(const T* dy, const T* x, int64_t ldx, const T* w, const A* mean,
                          const A* rstd, T* dx, T* dw, T* db, A* partials, int64_t max_blocks,
                          int64_t rows, int64_t N, cudaStream_t stream) {
  const bool want_dx = dx != nullptr, want_dwdb = dw != nullptr || db != nullptr;
  if (!want_dx && !want_dwdb) return;
  A* pw = want_dwdb ? partials : nullptr;
  A* pb = want_dwdb ? partials + max_blocks * N : nullptr;
  int64_t blocks = 0;
  if (rows > 0) {
    blocks = vector_ok<T>(N, ldx, {dy, x, w, dx})
                 ? bwd_flags<T, course::kVec16<T>>(want_dx, want_dwdb, dy, x, ldx, w, mean, rstd,
                                                   dx, pw, pb, max_blocks, rows, N, stream)
                 : bwd_flags<T, 1>(want_dx, want_dwdb, dy, x, ldx, w, mean, rstd, dx, pw, pb,
                                   max_blocks, rows, N, stream);
  }
  if (want_dwdb) {  // with no rows, blocks = 0 and dw, db come out as sums of nothing: zeros
    const dim3 block(32, kReduceRows);
    dwdb_reduce_kernel<T><<<static_cast<unsigned>(course::ceil_div(N, 32)), block, 0, stream>>>(
        pw, pb, dw, db, blocks, N);
    CUDA_LAUNCH_CHECK();
  }
}

#define INSTANTIATE(T, A)                                                                        \
  template void layernorm_fwd_launch<T, A>(const T*, int64_t, const T*, const T*, T*, A*, A*,    \
                                           int64_t, int64_t, double, cudaStream_t);              \
  template void layernorm_bwd_launch<T, A>(const T*, const T*, int64_t, const T*, const A*,      \
                                           const A*, T*, T*, T*, A*, int64_t, int64_t, int64_t,  \
                                           cudaStream_t);
INSTANTIATE(float, float)
INSTANTIATE(double, double)
INSTANTIATE(__half, float)
INSTANTIATE(__nv_bfloat16, float)
#undef INSTANTIATE
