// Exercise 07 — layernorm, CUDA C++ track: the kernels and their launchers. Yours to write:
// welford_combine, welford_vec, warp_welford, then the three kernels (TODO 1-6, in order; the
// README's Steps say when each check starts to pass). The launchers at the end are given.
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
//   layernorm_bwd_kernel   persistent: ~SMs x 2 blocks, each looping over rows; dw/db summed in
//                          fp32 registers, written once per block as a row of partials; kDx /
//                          kDwDb compile out what autograd did not ask for
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
  // TODO 1 (about 6 lines): the summary of the union of two sets of values, from their two
  // summaries (Chan's formula: README, "The statistics"). An empty b (b.n == 0) leaves a as it
  // is; an empty a must give b (check that your formula does, or branch).
  return a;
}

// One loaded vector as a summary: its own mean, then M2 around it (two passes over registers).
// VEC is a power of two, so a vector of equal values gives that value back exactly, and M2 = 0.
template <typename A, typename T, int VEC>
__device__ __forceinline__ Welford<A> welford_vec(const Vec<T, VEC>& v) {
  // TODO 2 (about 10 lines): the summary of the VEC values of one loaded vector, in A: their
  // mean, then M2 around that mean. (For VEC = 1 that is {1, value, 0}.)
  return {A(0), A(0), A(0)};
}

template <typename A>
__device__ __forceinline__ Welford<A> warp_welford(Welford<A> w) {
  // TODO 3 (about 8 lines): the summary of the warp's 32 summaries, returned to every lane:
  // like course::warp_sum (common.cuh), but each step moves three values (n, mean, m2) with
  // __shfl_xor_sync and merges them with welford_combine.
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
  __shared__ Welford<A> shared[33];  // for block_welford
  const int64_t nvec = N / VEC;
  const V* wv = reinterpret_cast<const V*>(w);
  const V* bv = reinterpret_cast<const V*>(b);
  // TODO 4 (about 50 lines): the forward of rows blockIdx.x, blockIdx.x + gridDim.x, ... (the
  // launcher starts one wave of blocks; a block of a short input may get one row, or none).
  // For each row (its elements at x + row * ldx: int64, as that passes 2^31; y is dense):
  //   - pass 1: thread t loads vectors t, t + blockDim.x, ... of the row (16 bytes each); keeps
  //     the first K in registers (V xc[K]) and summarizes every vector it loads (welford_vec,
  //     welford_combine); then block_welford gives every thread the row's (n, mean, M2).
  //   - rstd = 1 / sqrt(M2 / N + eps) (biased variance); thread 0 writes mean_out[row],
  //     rstd_out[row].
  //   - pass 2: y = (x - mean) * rstd * w + b from the registers (vectors past the first K are
  //     loaded again); convert with to_math / from_math, round once on the store.
  // Then make it fast: w and b once per block, and the next row's x loading while this row is
  // reduced (README, "The kernels").
  (void)x; (void)ldx; (void)y; (void)wv; (void)bv; (void)nvec; (void)shared; (void)eps;
  (void)mean_out; (void)rstd_out; (void)rows;
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

template <typename T, int VEC, int K, bool kDx, bool kDwDb>
__global__ void __launch_bounds__(kMaxThreads)
layernorm_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t ldx,
                     const T* __restrict__ w, const typename Acc<T>::type* __restrict__ mean,
                     const typename Acc<T>::type* __restrict__ rstd, T* __restrict__ dx,
                     typename Acc<T>::type* __restrict__ part_w,
                     typename Acc<T>::type* __restrict__ part_b, int64_t rows, int64_t N) {
  using A = typename Acc<T>::type;
  using V = Vec<T, VEC>;
  __shared__ A shared[2][33];  // for block_sum2
  const int64_t nvec = N / VEC;
  const V* wv = reinterpret_cast<const V*>(w);
  // this block's rows of partials (kDwDb): each element is touched only by the thread that owns it
  A* pw = kDwDb ? part_w + int64_t(blockIdx.x) * N : nullptr;
  A* pb = kDwDb ? part_b + int64_t(blockIdx.x) * N : nullptr;
  // TODO 5 (about 90 lines): the backward, rows blockIdx.x, blockIdx.x + gridDim.x, ...
  //   - w (first K vectors of each thread) in registers once; dw and db accumulators
  //     (A dwc[K][VEC], dbc[K][VEC]) set to 0; for vectors past the first K, zero this block's
  //     partial rows pw / pb instead and accumulate there.
  //   - per row: x̂ = (x - mean) * rstd and g = dy * w; with kDx, s1 = sum(g), s2 = sum(g * x̂)
  //     over the row (block_sum2), then dx = rstd * (g - (s1 + x̂ * s2) / N); with kDwDb,
  //     dw += dy * x̂ and db += dy. x's rows are ldx elements apart; dy and dx are dense.
  //   - after the last row: write the register accumulators to pw / pb.
  //   Then make it fast: load the next row's x and dy before reducing this one (README, Hints).
  (void)dy; (void)x; (void)ldx; (void)wv; (void)mean; (void)rstd; (void)dx; (void)pw; (void)pb;
  (void)rows; (void)nvec; (void)shared;
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
  // TODO 6 (about 20 lines): dw[col] = sum over p < parts of part_w[p * N + col], db likewise,
  // for the 32 columns of this block (threadIdx.x: the column, threadIdx.y: every
  // kReduceRows-th partial row), added in a fixed order; write dw / db (either may be null),
  // rounded once to T. With parts = 0 they are 0.
  (void)part_w; (void)part_b; (void)dw; (void)db; (void)parts; (void)N;
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
  // writes partials (kDwDb). A dx-only backward has no partials (max_blocks = 0).
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
