// Exercise 07 — layernorm, CUDA C++ track: the backward kernels and their launcher (the forward
// is in layernorm_fwd.cu). Yours to write: layernorm_bwd_kernel and dwdb_reduce_kernel (TODO
// 5-6; the README's Steps say when each check starts to pass). The launchers at the end are given.
//
//   x̂ = (x - mean) * rstd,  g = dy * w     mean, rstd: saved by the forward (fp32; fp64 for fp64)
//   dx = rstd * (g - mean(g) - x̂ * mean(g * x̂))
//   dw = sum over rows of dy * x̂,  db = sum over rows of dy
//
// Napkin math, (32768, 4096) bf16: 268 MB per tensor.
//   backward  read x, dy; write dx (+ dw/db partials, ~9 MB)     805 MB -> 201 us at 4 TB/s
// Memory-bound by two orders of magnitude: read each byte once, write each byte once, keep
// enough loads in flight.
//
// This file includes only CUDA headers and common.cuh: it compiles in seconds, so editing a
// kernel does not recompile the ATen-heavy layernorm.cpp.

#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace {

// From common.cuh: Acc<T> (the math type), Vec (16 bytes moved at once), and to_acc / from_acc,
// storage <-> math type (PyTorch's build flags turn off the implicit conversions of __half and
// __nv_bfloat16).
using course::Acc, course::Vec, course::to_acc, course::from_acc;

constexpr int kMaxThreads = 512;   // per block
constexpr int kBwdVecsPerThread = 1;  // row vectors (16 bytes each) a thread keeps in registers
constexpr int kBwdBlocksPerSM = 2;  // persistent backward: blocks per SM (at most)

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
  __shared__ A shared[2][33];  // for course::block_sum2
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
  //     over the row (course::block_sum2), then dx = rstd * (g - (s1 + x̂ * s2) / N); with kDwDb,
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

template <typename T, int VEC, bool kDx, bool kDwDb>
int64_t bwd(const T* dy, const T* x, int64_t ldx, const T* w, const typename Acc<T>::type* mean,
            const typename Acc<T>::type* rstd, T* dx, typename Acc<T>::type* part_w,
            typename Acc<T>::type* part_b, int64_t max_blocks, int64_t rows, int64_t N,
            cudaStream_t stream) {
  auto kernel = layernorm_bwd_kernel<T, VEC, kBwdVecsPerThread, kDx, kDwDb>;
  const int threads = course::threads_for(N / VEC, kBwdVecsPerThread, kMaxThreads);
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
