// Exercise 07 — layernorm, CUDA C++ track, solved: the backward kernels and their launcher
// (the forward, with the napkin math of both, is in layernorm_fwd.cu).
//
//   x̂ = (x - mean) * rstd,  g = dy * w     mean, rstd: saved by the forward (fp32; fp64 for fp64)
//   dx = rstd * (g - mean(g) - x̂ * mean(g * x̂))
//   dw = sum over rows of dy * x̂,  db = sum over rows of dy
//
// Napkin math, (32768, 4096) bf16: 268 MB per tensor.
//   backward  read x, dy; write dx (+ w, mean, rstd: 0.3 MB)    805 MB -> 201 us at 4 TB/s
//             (+ the dw/db partials: 528 rows x 4096 x 2 floats, 17 MB written and read back)
// (4 TB/s: a round H200-class copy rate; the measured ceiling and figures: docs/performance.md.)
// To stream at that rate the chip needs ~40-64 KB of reads outstanding per SM at every moment
// (layernorm_fwd.cu: Why it is fast): a persistent grid of ~4 blocks of 128 threads per SM, each
// with the next row's x and dy already loading while it reduces this one.
//
// This file includes only CUDA headers and common.cuh: it compiles on its own, so editing a
// kernel does not recompile the ATen-heavy layernorm.cpp, which calls the launchers at the end.

#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace {

// From common.cuh: Acc<T> (the math type), Vec (16 bytes moved at once), and Packed<T, VEC>, the
// row's vectors as kept in registers, with its load, store, unpack, pack and fresh.
using course::Acc, course::Packed, course::Vec, course::load_packed, course::store_packed;
using course::fresh, course::pack, course::unpack, course::from_acc, course::to_acc;

constexpr int kMaxThreads = 512;  // per block

// Backward: vectors per thread (128 threads per 4096-wide bf16 row) and blocks per SM (at most;
// the number of dw/db partial rows is SMs x this). The bf16 kernel with dx and dw/db takes 128
// registers (the __launch_bounds__ cap; capped at 96 it spills): 4 blocks of 128 threads per SM,
// each with the next row (16 KB) loading: 64 KB per SM. Both can be set when building
// (-DEX07_BWD_VECS=1 -DEX07_BWD_BLOCKS=2; benchmarks/norm_sweep.py --cuda07 builds and times
// such variants): 1 vector per thread is 512 threads of 64 registers (ptxas -v, CUDA 13.0,
// sm_90, no spills), 2 blocks per SM, the 06 backward's shape.
#ifndef EX07_BWD_VECS
#define EX07_BWD_VECS 4
#endif
#ifndef EX07_BWD_BLOCKS
#define EX07_BWD_BLOCKS 4
#endif
constexpr int kBwdVecsPerThread = EX07_BWD_VECS;
constexpr int kBwdBlocksPerSM = EX07_BWD_BLOCKS;

// g = dy * w rounded on its own, never fused into a later add: nvcc contracts a * b + c into one
// fma by default, so `dy * w - c1` in pass 2 would keep dy * w unrounded while s1 (pass 1) summed
// it rounded. For N = 1 (x̂ = 0, s1 = g, exact dx = 0) that leaves the rounding error of dy * w,
// times rstd = 1/sqrt(eps) = 316: ~1e-5 instead of 0. With the same rounded g in both passes,
// g - s1 / N is exactly 0 there.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

// ---------------------------------------------------------------------------------------------
// Backward: a persistent grid. Block p takes rows p, p + P, p + 2P, ... (P = gridDim.x), and
// while it reduces one row the next row's x, dy, mean and rstd are already on their way
// (prefetched into registers). dw and db of the columns a thread owns are summed over its
// block's rows in fp32 and written once, as row p of the [P, N] partials; dwdb_reduce_kernel
// adds the P rows. Never atomics into dw: bf16 atomics round the running sum at every row, and
// float atomics make the bits depend on timing.
//
// Where the sums live: in shared memory (kSharedSums: 2 N floats, 32 KB at N = 4096; each
// thread reads and writes only its own columns, so no barrier and no race), so that the
// registers hold only the rows: 4 blocks of 128 threads per SM (128 registers), each with its
// next row (16 KB) in flight. In registers they would cost 64 floats per thread at 4 vectors of
// 8: one block per SM. A row too long for shared memory (N > ~28000 floats of sums) sums in its
// partial row in global memory instead (read-modified-written through L1/L2 every row).
//
// kDx / kDwDb: which gradients autograd asked for (ctx.needs_input_grad). Without dx there is
// no reduction over the row at all; without dw/db no partials.
template <typename T, int VEC, int K, bool kDx, bool kDwDb, bool kFull, bool kSharedSums>
__global__ void __launch_bounds__(kMaxThreads)
layernorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t ldx,
                     const T* __restrict__ w, const typename Acc<T>::type* __restrict__ mean,
                     const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                     typename Acc<T>::type* __restrict__ part_w,
                     typename Acc<T>::type* __restrict__ part_b, int64_t rows, int64_t N) {
  using A = typename Acc<T>::type;
  using V = Packed<T, VEC>;  // a vector of a row, as loaded (16 bytes)
  using VA = Vec<A, VEC>;    // its dw or db sums
  __shared__ A shared[2][33];
  extern __shared__ __align__(32) unsigned char sums_smem[];  // [2][N] A with kSharedSums
  const int t = threadIdx.x, nt = blockDim.x;
  const int64_t nvec = N / VEC;
  const int64_t tail = t + int64_t(K) * nt;  // first vector not in registers
  const V* wv = reinterpret_cast<const V*>(w);
  // as in layernorm_fwd.cu: register vector k is vector at(k) of the row, counted if in_row(k)
  auto in_row = [&](int k) { return kFull || t + int64_t(k) * nt < nvec; };
  auto at = [&](int k) {
    const int64_t i = t + int64_t(k) * nt;
    return kFull ? i : std::min<int64_t>(i, nvec - 1);
  };
  // this block's rows of partials: each element is touched only by the thread that owns it
  A* pw = kDwDb ? part_w + int64_t(blockIdx.x) * N : nullptr;
  A* pb = kDwDb ? part_b + int64_t(blockIdx.x) * N : nullptr;
  // dw, db of this thread's columns, summed over this block's rows (fp32): in shared memory
  // (kSharedSums: LDS/STS, 32-bit addresses), or in the partial rows in global memory
  VA* sw = nullptr;
  VA* sb = nullptr;
  if (kDwDb) {
    if constexpr (kSharedSums) {
      sw = reinterpret_cast<VA*>(sums_smem);
      sb = sw + nvec;
    } else {
      sw = reinterpret_cast<VA*>(pw);
      sb = reinterpret_cast<VA*>(pb);
    }
    VA zero;
#pragma unroll
    for (int j = 0; j < VEC; ++j) zero.v[j] = A(0);
    for (int64_t i = t; i < nvec; i += nt) sw[i] = sb[i] = zero;
  }

  V wc[K] = {};  // w is the same for every row: read once
  if (kDx) {
#pragma unroll
    for (int k = 0; k < K; ++k) wc[k] = load_packed(wv + at(k));
  }

  V xc[K], dyc[K];
  A mu = 0, rs = 0;
  auto load = [&](int64_t r, V* xs, V* dys, A& m, A& s) {
    const V* xr = reinterpret_cast<const V*>(x + r * ldx);
    const V* dyr = reinterpret_cast<const V*>(dy + r * N);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      xs[k] = load_packed(xr + at(k));
      dys[k] = load_packed(dyr + at(k));
    }
    m = mean[r];
    s = rstd[r];
  };
  if (blockIdx.x < rows) load(blockIdx.x, xc, dyc, mu, rs);

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const V* xr = reinterpret_cast<const V*>(x + row * ldx);
    const V* dyr = reinterpret_cast<const V*>(dy + row * N);
    V* dxr = reinterpret_cast<V*>(dx + row * N);

    // the next row's loads go out now: they arrive while this row is reduced and written
    V xn[K], dyn[K];
    A mun = 0, rsn = 0;
    if (row + gridDim.x < rows) load(row + gridDim.x, xn, dyn, mun, rsn);

    // pass 1: s1 = sum(g), s2 = sum(g * x̂) over the row; dw, db += dy * x̂, dy
    A s1 = 0, s2 = 0;
    auto pass1 = [&](int64_t i, bool in, const V& xv, const V& dyv, const V& wk) {
      VA aw{}, ab{};
      if (kDwDb && in) {  // (at a clamped index: another thread's sums; not even read)
        aw = sw[i];
        ab = sb[i];
      }
      A t1 = 0, t2 = 0;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A xh = (unpack(xv, j) - mu) * rs, d = unpack(dyv, j);
        if (kDx) {
          const A g = mul_rn(d, unpack(wk, j));
          t1 += g;
          t2 += g * xh;
        }
        if (kDwDb) {
          aw.v[j] += d * xh;
          ab.v[j] += d;
        }
      }
      if (in) {
        s1 += t1;
        s2 += t2;
        if (kDwDb) {
          sw[i] = aw;
          sb[i] = ab;
        }
      }
    };
#pragma unroll
    for (int k = 0; k < K; ++k) {
      V wk;
      if (kDx) wk = wc[k];
      pass1(at(k), in_row(k), xc[k], dyc[k], wk);
    }
    for (int64_t i = tail; i < nvec; i += nt) {
      V wk;
      if (kDx) wk = load_packed(wv + i);
      pass1(i, true, load_packed(xr + i), load_packed(dyr + i), wk);
    }

    if (kDx) {
      // pass 2: dx = rstd * (g - (s1 + x̂ * s2) / N)
      course::block_sum2(s1, s2, shared);
      const A c1 = s1 / static_cast<A>(N), c2 = s2 / static_cast<A>(N);
      auto pass2 = [&](const V& xv, const V& dyv, const V& wk) {
        A out[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A xh = (unpack(xv, j) - mu) * rs;
          const A g = mul_rn(unpack(dyv, j), unpack(wk, j));
          out[j] = rs * (g - c1 - xh * c2);
        }
        return pack<T>(out);
      };
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const V dxv = pass2(fresh(xc[k]), fresh(dyc[k]), fresh(wc[k]));
        if (in_row(k)) store_packed(dxr + at(k), dxv);
      }
      for (int64_t i = tail; i < nvec; i += nt)
        store_packed(dxr + i,
                     pass2(load_packed(xr + i), load_packed(dyr + i), load_packed(wv + i)));
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      xc[k] = xn[k];
      dyc[k] = dyn[k];
    }
    mu = mun;
    rs = rsn;
  }

  if (kDwDb && kSharedSums)  // the block's sums, once, to its partial rows
    for (int64_t i = t; i < nvec; i += nt) {
      reinterpret_cast<VA*>(pw)[i] = sw[i];
      reinterpret_cast<VA*>(pb)[i] = sb[i];
    }
}

// dw[n], db[n] = sums over the `parts` partial rows, 32 columns per block: threadIdx.x picks the
// column (a warp reads 128 contiguous bytes of a partial row), threadIdx.y strides over the
// partial rows, and the 32 sums of a column are added in a fixed order: same bits every run.
// With ~500 partial rows (132 SMs x 4 blocks) and N = 4096 that is 17 MB to read with only
// N / 32 = 128 blocks: 1024 threads each, loads unrolled, to keep ~32 KB in flight per SM.
constexpr int kReduceRows = 32;

template <typename T>
__global__ void __launch_bounds__(32 * kReduceRows)
dwdb_reduce_kernel(const typename Acc<T>::type* __restrict__ part_w,
                   const typename Acc<T>::type* __restrict__ part_b, T* __restrict__ dw,
                   T* __restrict__ db, int64_t parts, int64_t N) {
  using A = typename Acc<T>::type;
  __shared__ A sums[2][kReduceRows][32];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  A sw = 0, sb = 0;
  if (col < N) {
#pragma unroll 4
    for (int64_t p = threadIdx.y; p < parts; p += kReduceRows) {
      sw += part_w[p * N + col];
      sb += part_b[p * N + col];
    }
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
    if (dw) dw[col] = from_acc<T>(tw);
    if (db) db[col] = from_acc<T>(tb);
  }
}

// ---------------------------------------------------------------------------------------------
// launch configuration

template <typename T, int VEC, bool kDx, bool kDwDb>
int64_t bwd(const T* dy, const T* x, int64_t ldx, const T* w, const typename Acc<T>::type* mean,
            const typename Acc<T>::type* rstd, T* dx, typename Acc<T>::type* part_w,
            typename Acc<T>::type* part_b, int64_t max_blocks, int64_t rows, int64_t N,
            cudaStream_t stream) {
  using A = typename Acc<T>::type;
  constexpr int K = kBwdVecsPerThread;
  const int threads = course::threads_for(N / VEC, K, kMaxThreads);
  // dw/db sums in shared memory when they fit (next to the kernel's 2 x 33 static values)
  const int64_t sums_bytes = 2 * N * int64_t(sizeof(A));
  const bool sums_shared =
      kDwDb && sums_bytes + 2 * 33 * int64_t(sizeof(A)) <= course::max_smem_per_block();
  const int smem = sums_shared ? static_cast<int>(sums_bytes) : 0;
  // kFull: every thread's register vectors lie in the row (no clamps), compiled for the 16-byte
  // path of the 16-bit types only (the graded case), with the sums in shared memory (a row too
  // long for shared memory takes the general kernel)
  constexpr bool kFullOk = VEC > 1 && sizeof(T) == 2;
  const bool full = kFullOk && N / VEC >= int64_t(K) * threads && sums_shared == kDwDb;
  auto kernel = full          ? layernorm_bwd_kernel<T, VEC, K, kDx, kDwDb, kFullOk, kDwDb>
                : sums_shared ? layernorm_bwd_kernel<T, VEC, K, kDx, kDwDb, false, kDwDb>
                              : layernorm_bwd_kernel<T, VEC, K, kDx, kDwDb, false, false>;
  if (smem > 48 * 1024)  // above 48 KB a kernel must opt in
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  // as many blocks as fit on the GPU at once (a persistent grid must not run in waves)
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  // max_blocks is the number of partial rows allocated: it caps the grid only when the kernel
  // writes partials (kDwDb). A dx-only backward has no partials (max_blocks = 0): capping it
  // there would launch nothing and hand back dx uninitialized.
  const int64_t cap = kDwDb ? max_blocks : rows;
  const int64_t blocks = std::min<int64_t>(
      cap, int64_t(course::num_sms()) * std::clamp(per_sm, 1, kBwdBlocksPerSM));
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), threads, smem, stream>>>(dy, x, ldx, w, mean, rstd, dx,
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
    blocks = course::vector_ok<T>(N, ldx, {dy, x, w, dx})
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
  template void layernorm_bwd_launch<T, A>(const T*, const T*, int64_t, const T*, const A*,      \
                                           const A*, T*, T*, T*, A*, int64_t, int64_t, int64_t,  \
                                           cudaStream_t);
INSTANTIATE(float, float)
INSTANTIATE(double, double)
INSTANTIATE(__half, float)
INSTANTIATE(__nv_bfloat16, float)
#undef INSTANTIATE
