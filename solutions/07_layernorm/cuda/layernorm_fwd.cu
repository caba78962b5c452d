// Exercise 07 — layernorm, CUDA C++ track, solved: the forward kernel and its launcher
// (the backward is in layernorm_bwd.cu).
//
//   y    = (x - mean) * rstd * w + b      mean, var over the row (biased variance),
//   rstd = 1 / sqrt(var + eps)            fp32 math (fp64 for fp64), y in x's dtype
//   x̂ = (x - mean) * rstd,  g = dy * w
//   dx = rstd * (g - mean(g) - x̂ * mean(g * x̂))
//   dw = sum over rows of dy * x̂,  db = sum over rows of dy
//
// Napkin math, (32768, 4096) bf16: M*N = 2^27 elements, 268 MB per tensor (5x the 50-60 MB L2).
//   forward   read x, write y (+ w, b, mean, rstd: 0.3 MB)      537 MB -> 134 us at 4 TB/s
//   backward  read x, dy; write dx (+ w, mean, rstd: 0.3 MB)    805 MB -> 201 us
//             (+ the dw/db partials: 528 rows x 4096 x 2 floats, 17 MB written and read back)
// (4 TB/s: a round H200-class copy rate; the measured ceiling and figures: docs/performance.md.)
// Both are memory-bound by two orders of magnitude (~8 flops per element against 4-6 bytes):
// read each byte once, write each byte once, keep loads in flight.
//
// Why it is fast: loads in flight. To stream at ~4 TB/s with ~1-1.5 us of DRAM latency under
// load, the chip needs ~5 MB of reads outstanding: ~40-64 KB per SM (132 SMs) at every moment.
// A row of x is 8 KB, so that is 5-8 rows *being loaded* per SM at once, and a row that is being
// reduced or stored is not loading. A 512-thread block per row (one 16-byte vector per thread,
// 52 registers: 2 blocks per SM) has 2 rows per SM, far too few. Hence:
//   forward   a warp per row (4 rows per block, ~20 rows per SM), the row in registers, its sums
//             by warp shuffles alone (no shared memory, no barrier), statistics with no division
//   backward  a persistent grid of ~4 blocks of 128 threads per SM, each with the next row's x
//             and dy already loading while it reduces this one; dw/db summed in fp32 in shared
//             memory (registers would leave room for one block per SM), then dwdb_reduce_kernel
// Instructions are not free either: the warp kernel's loop is ~1850 instructions per 4096-wide
// bf16 row (SASS; ~14 per element), so 90% of copy (1.8 rows per us per SM) takes ~3300 of the
// SM's ~7500 warp-instruction issue slots per us.
//
// This file includes only CUDA headers and common.cuh: it compiles on its own, so editing a
// kernel does not recompile the ATen-heavy layernorm.cpp, which calls the launcher at the end.

#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace {

// From common.cuh: Acc<T> (the math type) and Packed<T, VEC>, the row's vectors as kept in
// registers (32-bit words: half the registers of a Vec of 16-bit types), with its load, store,
// unpack (element j in the math type), pack and fresh.
using course::Acc, course::Packed, course::load_packed, course::store_packed;
using course::fresh, course::pack, course::unpack;

constexpr int kMaxThreads = 512;  // per block, block-per-row kernel

// Forward, a warp per row: kFwdWarpRows rows (warps) per block, each lane keeping up to
// kFwdWarpVecs 16-byte vectors of its row in registers: 32 lanes x 16 vectors x 8 bf16 = 4096,
// the graded row. 20 warps fit an SM (ptxas, CUDA 13.0, sm_90: 96 registers for the bf16
// kernel; 5 blocks of 4 warps): 20 rows of 8 KB in flight per SM. Rows that do not fit a warp
// (N > 4096 bf16, 2048 fp32) go to a block per row of kFwdVecsPerThread vectors per thread
// (4096 bf16 = 512 vectors: 128 threads of 4, 4 warps per barrier instead of 16).
constexpr int kFwdWarpRows = 4;
constexpr int kFwdWarpVecs = 16;
constexpr int kFwdVecsPerThread = 4;

// ---------------------------------------------------------------------------------------------
// Sums in a tree: a[0] + a[1], a[2] + a[3], ... then pairs of those. Short dependency chains (the
// adds of one level are independent) and short rounding chains. K is a compile-time constant:
// everything unrolls and stays in registers.
template <typename A, int K>
__device__ __forceinline__ A tree_sum(A (&a)[K]) {
#pragma unroll
  for (int s = 1; s < K; s *= 2)
#pragma unroll
    for (int k = 0; k + s < K; k += 2 * s) a[k] += a[k + s];
  return a[0];
}

template <typename A, typename T, int VEC>
__device__ __forceinline__ A vec_sum(const Packed<T, VEC>& v) {
  A a[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) a[j] = unpack(v, j);
  return tree_sum(a);
}

// sum of (v - m) and of (v - m)^2 over one vector
template <typename A, typename T, int VEC>
__device__ __forceinline__ void vec_dev(const Packed<T, VEC>& v, A m, A& s1, A& s2) {
  A a[VEC], b[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    a[j] = unpack(v, j) - m;
    b[j] = a[j] * a[j];
  }
  s1 = tree_sum(a);
  s2 = tree_sum(b);
}

// A sum over the threads of one row: its warp (kWarp: shuffles only, no barrier) or its block.
// The block versions keep their result in a slot of its own (32): consecutive calls, also of the
// two in turn, never race (common.cuh).
template <bool kWarp, typename A>
__device__ __forceinline__ A row_sum(A v, A* shared) {
  if constexpr (kWarp) return course::warp_sum(v);
  else return course::block_sum(v, shared);
}

template <bool kWarp, typename A>
__device__ __forceinline__ void row_sum2(A& a, A& b, A (*shared)[33]) {
  if constexpr (kWarp) {
    a = course::warp_sum(a);
    b = course::warp_sum(b);
  } else {
    course::block_sum2(a, b, shared);
  }
}

__device__ __forceinline__ float rsqrt_(float v) { return rsqrtf(v); }
__device__ __forceinline__ double rsqrt_(double v) { return rsqrt(v); }

// ---------------------------------------------------------------------------------------------
// Forward. kWarp: a warp per row, blockDim = (32, kFwdWarpRows), warp y of block p takes row
// p * kFwdWarpRows + y; otherwise a block per row, blockDim = (threads, 1). A grid smaller than
// the rows (over 2^31 blocks) steps over them by the number of rows it covers.
//
// A row is nvec = N / VEC vectors; thread t of the row's nt threads (lane, or thread of the
// block) owns vectors t, t + nt, ...; the first K of them stay in registers, any further ones
// (rows longer than K * nt * VEC elements) are read again in each pass (from L2: the row was just
// read). x's rows are ldx elements apart (a view such as x[:, :N] is read in place); y is dense.
//
// The statistics, two passes over registers (the corrected two-pass algorithm; the README's "The
// statistics" says why here, and Welford's update with Chan's merge in the CPU loop):
// mean0 = sum(x) / N; then s1 = sum(x - mean0), s2 = sum((x - mean0)^2) (one reduction of the
// pair);
//   mean = mean0 + s1 / N        (s1 is what the rounding of mean0 left over: ~0)
//   var  = (s2 - s1 * s1 / N) / N   = sum((x - mean)^2) / N exactly, in real numbers
// No E[x^2] - E[x]^2: with mean 1e4 and variance 1, E[x^2] is 1e8, whose float32 spacing is 8 —
// the variance would be lost in rounding. The deviations are of the size of the spread, not of
// the mean. A row of equal values c: every x - mean0 is the same small d (exact: mean0 is within
// a few units of c), s1 = N d exactly, so mean = c and var = 0 exactly, and y = b. Cost: two row
// sums (in a warp: 3 x 5 shuffles; in a block: two pairs of barriers), no division (Welford's
// merge would divide at every one of its 10 shuffle steps).
//
// w and b are read in pass 3, per row, from L1/L2 (16 KB, shared by every row on the SM): kept in
// registers they would triple the registers a warp needs for its row.

template <typename T, int VEC, int K, bool kWarp, bool kFull>
__global__ void __launch_bounds__(kWarp ? 32 * kFwdWarpRows : kMaxThreads)
layernorm_fwd_kernel(const T* __restrict__ x, int64_t ldx, const T* __restrict__ w,
                     const T* __restrict__ b, T* __restrict__ y,
                     typename Acc<T>::type* __restrict__ mean_out,
                     typename Acc<T>::type* __restrict__ rstd_out, int64_t rows, int64_t N,
                     typename Acc<T>::type eps) {
  using A = typename Acc<T>::type;
  using V = Packed<T, VEC>;  // a vector of the row, as loaded (16 bytes)
  __shared__ A sh1[33];              // block per row only: pass 1's sum
  __shared__ A sh2[2][33];           //                     pass 2's pair
  const int t = threadIdx.x, nt = kWarp ? 32 : blockDim.x;  // the row's threads (kWarp: lane, 32)
  const int64_t nvec = N / VEC;
  // first vector not in registers; a warp takes only rows that fit its registers
  const int64_t tail = kWarp ? nvec : t + int64_t(K) * nt;
  const int64_t first = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;  // blockDim.y = 1 unless kWarp
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  const V* wv = reinterpret_cast<const V*>(w);
  const V* bv = reinterpret_cast<const V*>(b);
  // The k-th register vector of this thread is vector t + k * nt of the row, if that is < nvec
  // (always, with kFull: the launcher checked). Loads read at(k), clamped into the row,
  // unconditionally; sums drop the vectors past the end and stores skip them. No branch around a
  // load: the compiler issues all K loads back to back (a branch per vector serialized pass 3's
  // loads of w and b: one round trip each). kFull drops the clamps, whose K 64-bit addresses cost
  // 32 registers in the warp kernel (bf16: 96 registers with kFull, 128 without).
  auto in_row = [&](int k) { return kFull || t + int64_t(k) * nt < nvec; };
  auto at = [&](int k) {
    const int64_t i = t + int64_t(k) * nt;
    return kFull ? i : std::min<int64_t>(i, nvec - 1);
  };

  V xc[K];
  auto load = [&](int64_t r, V* xs) {  // 16 bytes per instruction
    const V* xr = reinterpret_cast<const V*>(x + r * ldx);  // int64: r * ldx passes 2^31
#pragma unroll
    for (int k = 0; k < K; ++k) xs[k] = load_packed(xr + at(k));
  };
  if (first < rows) load(first, xc);

  // the loop's trip count is the same for every thread of a row (of the block, without kWarp):
  // the barriers of the block reductions inside are reached by all
  for (int64_t row = first; row < rows; row += step) {
    const V* xr = reinterpret_cast<const V*>(x + row * ldx);
    V* yr = reinterpret_cast<V*>(y + row * N);

    A mean, rstd;
    {  // the statistics: their partial sums end here
      // pass 1: the mean. Each vector summed as a tree, the vectors one after the other (an
      // array of K partial sums to add as a tree would hold K more registers)
      A s0 = 0;
#pragma unroll
      for (int k = 0; k < K; ++k)
        if (in_row(k)) s0 += vec_sum<A>(xc[k]);
      for (int64_t i = tail; i < nvec; i += nt) {
        const V xv = load_packed(xr + i);
        s0 += vec_sum<A>(xv);
      }
      const A mean0 = row_sum<kWarp>(s0, sh1) / static_cast<A>(N);
      // pass 2: the deviations from it, their sum and their sum of squares
      A s1 = 0, s2 = 0;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        A a1, a2;
        vec_dev(fresh(xc[k]), mean0, a1, a2);
        if (in_row(k)) s1 += a1, s2 += a2;
      }
      for (int64_t i = tail; i < nvec; i += nt) {
        const V xv = load_packed(xr + i);
        A a1, a2;
        vec_dev(xv, mean0, a1, a2);
        s1 += a1;
        s2 += a2;
      }
      row_sum2<kWarp>(s1, s2, sh2);
      const A c = s1 / static_cast<A>(N);
      mean = mean0 + c;
      // biased variance; >= 0 in real numbers, clamped against a rounding below 0
      rstd = rsqrt_(std::max((s2 - s1 * c) / static_cast<A>(N), A(0)) + eps);
    }
    if (t == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }

    // pass 3: normalize, scale, shift; round once on the store
    auto normalize = [&](const V& xv, const V& wk, const V& bk) {
      A out[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j)
        out[j] = (unpack(xv, j) - mean) * rstd * unpack(wk, j) + unpack(bk, j);
      return pack<T>(out);
    };
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t i = at(k);
      const V yv = normalize(fresh(xc[k]), load_packed(wv + i), load_packed(bv + i));
      if (in_row(k)) store_packed(yr + i, yv);
    }
    for (int64_t i = tail; i < nvec; i += nt)
      store_packed(yr + i, normalize(load_packed(xr + i), load_packed(wv + i), load_packed(bv + i)));
    if (row + step < rows) load(row + step, xc);  // a grid smaller than the rows: next row now
  }
}

// ---------------------------------------------------------------------------------------------
// launch configuration

// kFull (every thread's K register vectors lie in the row: no clamps, no predicates) is
// compiled for the 16-byte path of the 16-bit types only (the graded case), to keep the build
// short; the other cases clamp.
template <typename T, int VEC, int K, bool kWarp>
void fwd_mode(dim3 block, const T* x, int64_t ldx, const T* w, const T* b, T* y,
              typename Acc<T>::type* mean, typename Acc<T>::type* rstd, int64_t rows, int64_t N,
              double eps, cudaStream_t stream) {
  using A = typename Acc<T>::type;
  constexpr bool kFullOk = VEC > 1 && sizeof(T) == 2;
  auto kernel = kFullOk && N / VEC >= int64_t(K) * block.x
                    ? layernorm_fwd_kernel<T, VEC, K, kWarp, kFullOk>
                    : layernorm_fwd_kernel<T, VEC, K, kWarp, false>;
  // grid.x is at most 2^31 - 1; the kernel loops over the rows past it
  const int64_t blocks = std::min<int64_t>(course::ceil_div(rows, block.y), 0x7fffffff);
  kernel<<<static_cast<unsigned>(blocks), block, 0, stream>>>(x, ldx, w, b, y, mean, rstd, rows,
                                                              N, static_cast<A>(eps));
  CUDA_LAUNCH_CHECK();
}

template <typename T, int VEC>
void fwd(const T* x, int64_t ldx, const T* w, const T* b, T* y, typename Acc<T>::type* mean,
         typename Acc<T>::type* rstd, int64_t rows, int64_t N, double eps, cudaStream_t stream) {
  if (N / VEC <= 32 * kFwdWarpVecs)  // the row fits a warp's registers: a warp per row
    fwd_mode<T, VEC, kFwdWarpVecs, true>(dim3(32, kFwdWarpRows), x, ldx, w, b, y, mean, rstd,
                                         rows, N, eps, stream);
  else  // a block per row
    fwd_mode<T, VEC, kFwdVecsPerThread, false>(
        dim3(course::threads_for(N / VEC, kFwdVecsPerThread, kMaxThreads), 1), x, ldx, w, b, y,
        mean, rstd, rows, N, eps, stream);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The launcher layernorm.cpp calls (declared at its top; instantiated below for the four dtypes).
// Pointers are device pointers; y, mean and rstd are dense, x's rows are ldx elements apart.

template <typename T, typename A>
void layernorm_fwd_launch(const T* x, int64_t ldx, const T* w, const T* b, T* y, A* mean, A* rstd,
                          int64_t rows, int64_t N, double eps, cudaStream_t stream) {
  if (rows == 0) return;
  if (course::vector_ok<T>(N, ldx, {x, w, b, y}))
    fwd<T, course::kVec16<T>>(x, ldx, w, b, y, mean, rstd, rows, N, eps, stream);
  else
    fwd<T, 1>(x, ldx, w, b, y, mean, rstd, rows, N, eps, stream);
}

#define INSTANTIATE(T, A)                                                                        \
  template void layernorm_fwd_launch<T, A>(const T*, int64_t, const T*, const T*, T*, A*, A*,    \
                                           int64_t, int64_t, double, cudaStream_t);
INSTANTIATE(float, float)
INSTANTIATE(double, double)
INSTANTIATE(__half, float)
INSTANTIATE(__nv_bfloat16, float)
#undef INSTANTIATE
