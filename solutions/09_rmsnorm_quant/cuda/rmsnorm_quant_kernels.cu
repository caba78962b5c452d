// Exercise 09 — rmsnorm_quant, CUDA track, solved: the kernels and their launchers.
//
//   y     = (x * w) * rsqrt(mean(x^2) + eps)          fp32 math, per row
//   scale = max|y| / 127   (1 where max|y| = 0)       fp32, one per row
//   q     = clamp(rintf(y / scale), -127, 127)        int8; rintf rounds half to even
//
// Kernels:
//   rmsnorm_quant_rows_kernel<T, VEC, VPT, MAXT, MINB>   one block per row; each thread loads VPT
//       vectors of VEC elements (16 bytes when VEC = kVec16<T>), ALL of them before any math,
//       and keeps x*w in registers through ONE block reduction of the pair (sum x^2, max|x*w|)
//       and the quantization: x is read from memory once, and the block meets at one barrier
//       per row (max|y| = rstd * max|x*w|). Rows up to VEC * VPT * 1024 elements (32768 bf16 /
//       16384 fp32 with 16-byte loads; 8192 one at a time). MAXT, MINB: its launch bounds.
//   rmsnorm_quant_loop_kernel<T>             longer rows: pass 1 sums x^2 and finds max|x*w|
//       together (rstd > 0 is one number per row, so max|y| = rstd * max|x*w|); pass 2 reads the
//       row again (mostly from L2) and quantizes.
// Launchers (called by rmsnorm_quant.cpp): rmsnorm_quant_cuda_{f32,f16,bf16}.
//
// Only CUDA headers and common.cuh here: this file compiles in a few seconds.
//
// Napkin math, (32768, 4096) bf16, M N = 134,217,728 elements:
//   read x   2 B each  268.4 MB     write q      1 B each    134.2 MB
//   read w   8 KB                   write scale  4 B a row   0.13 MB
//   total 402.8 MB -> 94 us at 4.28 TB/s (copy bandwidth measured on an H200, 2026-11-21)
// 7 flops per element against ~3 bytes: the ALUs idle; only the bytes count, and what decides
// the speed is how many bytes each SM keeps in flight. Little's law: ~4.3 TB/s over 132 SMs is
// ~33 bytes per ns per SM; at ~0.6-1 us of DRAM latency under load that is 20-33 KB in flight
// per SM, all the time. A block of 128 threads per 4096-element row: each thread issues four
// 16-byte loads of x (and four of w, from L1/L2) and four 8-byte stores.
//   - All of a row's loads must be in the air at once: 8 KB. The first version of this kernel
//     loaded and used one vector at a time (each load sat in an `if (c < N)` block with its
//     math, and ptxas kept the blocks in order: load, wait, math, next load), so each thread
//     had one 16-byte load of x outstanding: 2 KB per row, ~18 KB per SM at 9 rows, under the
//     20-33 KB -> 136.4 us, 69.5% of copy (H200, 2026-11-22). Now the loads come first, under
//     the bounds test, and out-of-row vectors are zeros (they add 0 to the sum and to the max),
//     so the math has no branch: the SASS issues all 8 loads before the first multiply, and
//     each row has its 8 KB in flight, ~72 KB per SM at 9 rows.
//   - Rows resident per SM: ptxas (13.0, sm_90) gives the 16-byte kernel 50 registers for bf16
//     and fp16, 44 for fp32 (the one-element path 47-48), no spills; 50 is allocated as 56 ->
//     65536 / (56 * 128) = 9 blocks of 4 warps per SM. 256 threads of two vectors (35
//     registers, allocated 40) hold 6 rows per SM, and each row waits at its barrier for eight
//     warps.
//   - One barrier per row (block_sum_max): a block that meets twice (sum, then max) leaves its
//     warps with no loads in flight twice as long between rows.
//
// ---- Variants ------------------------------------------------------------------------------
// results/experiments/09_cuda_variants.py builds this file with some of the constants below set
// to other values (text edits of a temporary copy) and times each variant at (32768, 4096) bf16
// against the Triton solution's kernel (~104 us, 91% of copy); `--nvcc` prints each variant's
// registers without a GPU. The values here are the default. Registers are ptxas 13.0, sm_90,
// bf16, at the graded case.
//
//   kVecsPerThread     16-byte vectors per thread: 4096 bf16 = 512 vectors -> 128 threads at 4
//                      (50 registers, 9 rows per SM); 2: 256 threads (35, 6 rows); 8: 64
//                      threads (88 registers, under a bound of 128 threads: with 1024 it
//                      spills); 16: one warp per row (191 registers).
//   kLoadsFirst        true: every load of the thread's part of the row issued before any math.
//                      false: the first version (each vector loaded, then used, in turn).
//   kPairedReduction   true: one exchange of the pair (one barrier). false: the sum, then the
//                      max, each its own exchange (two barriers).
//   kRowsPerBlock      rows sharing one block, tpr threads each, one barrier for all of them
//                      (2: 59 registers). 1: one block per row.
//   kWarpRows          rows of exactly one warp reduce with shuffles alone (no shared memory,
//                      no barrier). Off by default: the seed's race that the tests rebuild from
//                      this file (tests/test_ex09_rmsnorm_quant.py, rows of 256 bf16 = one
//                      warp) shows only through the exchange in `red`.
//   kStreaming         x loaded with __ldcs and q stored with __stcs (evict-first: x and q are
//                      touched once; w stays in L1).
//   kPersistent        a grid of as many blocks as fit at once (occupancy API), each looping
//                      over rows: w loaded once per block, the next row's x prefetched into
//                      registers before this row's barrier. 115 registers (4 rows per SM)
//                      with the bound (128); (128, 5): 96 and 36 bytes of spills.
//   kSmallBlock,       blocks of at most kSmallBlock threads (rows up to 4096 bf16 at 4 vectors
//   kSmallMinBlocks    a thread) run an instantiation with __launch_bounds__(kSmallBlock,
//                      kSmallMinBlocks), bigger blocks one with __launch_bounds__(
//                      kMaxBlockThreads); 0: one instantiation for all. ptxas caps registers
//                      at 65536 / (threads * min blocks): (128, 10) -> 47 registers, 10 rows
//                      per SM, no spills; (128, 12) -> 40, 12 rows, 24 bytes of spills. (The
//                      default's (1024) caps at 64, above what it uses. __maxnreg__ would cap
//                      registers alone; nvcc refuses it beside __launch_bounds__.)
//   kMaxBlockThreads   the launch bound of the big instantiation, which caps threads per row:
//                      longer rows take the one-element or the loop kernel.

#include "common.cuh"

#include <atomic>
#include <cstdint>
#include <cstring>

namespace {

using course::Vec;

constexpr int kVecsPerThread = 4;     // 16-byte path: 4096 bf16 -> 128 threads of 4 vectors
constexpr bool kLoadsFirst = true;    // all loads in flight before any math (false: old kernel)
constexpr bool kPairedReduction = true;  // one exchange of (sum x^2, max|x*w|), one barrier
constexpr int kRowsPerBlock = 1;      // one block per row
constexpr bool kWarpRows = false;     // one-warp rows still exchange through shared memory
// Measured on an H200, 2026-11-22 (results/experiments/09_cuda_variants.py, graded case):
// first kernel 138.4 us (68.5% of copy), loads first 126.3 us (75.1%), + evict-first loads and
// stores 123.8 us, + __launch_bounds__(128, 10) 123.3 us (76.9%: the default below); 256
// threads 143.8 us, a warp per row 218.4 us, persistent 167.5 us. The Triton kernel: 104.8 us.
constexpr bool kStreaming = true;     // x by __ldcs, q by __stcs: each byte is touched once
constexpr bool kPersistent = false;   // one block per row, the grid as long as the rows
constexpr int kSmallBlock = 128;      // a 128-thread instantiation, __launch_bounds__(128, 10):
constexpr int kSmallMinBlocks = 10;   // <= 48 registers (47, no spills): 10 rows per SM
constexpr int kMaxBlockThreads = 1024;  // <= 64 registers; rows of up to 1024 threads

constexpr float kQMax = 127.f;
constexpr int kMaxThreads = kMaxBlockThreads / kRowsPerBlock;  // threads per row, at most
constexpr int kScalarsPerThread = 8;  // one-element path (rows not 16-byte aligned)
constexpr int kLoopThreads = 1024;

// (torch builds with __CUDA_NO_HALF_CONVERSIONS__: 16-bit types convert through intrinsics)
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round half to even (rintf), clamp in float, then convert: a conversion first would wrap a
// value past 127 around (or, with the GPU's saturating cvt, hide the mistake on one path only).
__device__ __forceinline__ int8_t quantize(float y, float inv) {
  const float r = rintf(y * inv);
  return static_cast<int8_t>(fminf(fmaxf(r, -kQMax), kQMax));
}

// From the row's max|y|: the scale to store, and the factor 127 / max|y| to multiply by.
// An all-zero row (max 0) gets scale 1 and factor 0, so q = 0 and nothing divides by zero.
struct RowScale {
  float scale, inv;
};
__device__ __forceinline__ RowScale row_scale(float amax) {
  const bool nonzero = amax > 0.f;
  const float safe = nonzero ? amax : kQMax;
  return {safe / kQMax, nonzero ? kQMax / safe : 0.f};
}

// One vector of x (evict-first with kStreaming: each byte of x is read once) and of q.
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_x(const T* p) {
  if constexpr (kStreaming && sizeof(T) * VEC == 16) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
    Vec<T, VEC> v;
    memcpy(&v, &u, 16);
    return v;
  } else {
    return *reinterpret_cast<const Vec<T, VEC>*>(p);
  }
}

template <int VEC>
__device__ __forceinline__ void store_q(int8_t* p, const Vec<int8_t, VEC>& v) {
  if constexpr (kStreaming && VEC == 8) {
    uint2 u;
    memcpy(&u, &v, 8);
    __stcs(reinterpret_cast<uint2*>(p), u);
  } else if constexpr (kStreaming && VEC == 4) {
    unsigned u;
    memcpy(&u, &v, 4);
    __stcs(reinterpret_cast<unsigned*>(p), u);
  } else {
    *reinterpret_cast<Vec<int8_t, VEC>*>(p) = v;
  }
}

// (sum of squares, max|x*w|) over the warps of one row, in ONE exchange: each warp reduces its
// pair with shuffles, lane 0 parks it in red[warp], one barrier, then every warp reduces the
// row's (at most 32) partials itself, so no second barrier and no result slot. The row's warps
// are red[first .. first + wpr) (all of the block's with one row per block). Two back-to-back
// block_sum/block_max calls would cost four barriers, and the second would wait for the first.
// Call it once per buffer: a second use of `red` would need a barrier after the reads below.
__device__ __forceinline__ float2 block_sum_max(float ss, float mx, float2* red, int first,
                                                int wpr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  ss = course::warp_sum(ss);
  mx = course::warp_max(mx);
  if (lane == 0) red[warp] = make_float2(ss, mx);
  __syncthreads();
  const float2 p = lane < wpr ? red[first + lane] : make_float2(0.f, 0.f);  // |x*w| >= 0
  return make_float2(course::warp_sum(p.x), course::warp_max(p.y));
}

// The variant with two exchanges (kPairedReduction = false): the sum through red[].x, one
// barrier, then the max through red[].y, a second barrier. (The fields differ, so the second
// write never lands on a slot the first exchange is still reading.)
__device__ __forceinline__ float2 block_sum_then_max(float ss, float mx, float2* red, int first,
                                                     int wpr) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  ss = course::warp_sum(ss);
  if (lane == 0) red[warp].x = ss;
  __syncthreads();
  ss = course::warp_sum(lane < wpr ? red[first + lane].x : 0.f);
  mx = course::warp_max(mx);
  if (lane == 0) red[warp].y = mx;
  __syncthreads();
  mx = course::warp_max(lane < wpr ? red[first + lane].y : 0.f);
  return make_float2(ss, mx);
}

__device__ __forceinline__ float2 row_sum_max(float ss, float mx, float2* red, int first,
                                              int wpr) {
  if (kWarpRows && wpr == 1)  // block-uniform (tpr is): no barrier skipped by some threads only
    return make_float2(course::warp_sum(ss), course::warp_max(mx));
  if constexpr (kPairedReduction) return block_sum_max(ss, mx, red, first, wpr);
  else return block_sum_then_max(ss, mx, red, first, wpr);
}

// tpr threads per row (a multiple of 32), kRowsPerBlock rows per block. Without kPersistent
// the loop below runs once: block b holds rows b * kRowsPerBlock + (0 .. kRowsPerBlock-1).
template <typename T, int VEC, int VPT, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB)
rmsnorm_quant_rows_kernel(const T* __restrict__ x,      // [rows, N], row r at x + r * row_stride
                          const T* __restrict__ w,      // [N]
                          int8_t* __restrict__ q,       // [rows, N] contiguous
                          float* __restrict__ scale,    // [rows]
                          int64_t rows, int64_t row_stride, int N, float eps, int tpr) {
  __shared__ float2 red[32];  // block_sum_max's (sum, max) per warp: nothing else here
  __shared__ float2 red_alt[kPersistent ? 32 : 1];  // persistent: every other row's exchange
  const int group = kRowsPerBlock == 1 ? 0 : int(threadIdx.x) / tpr;  // this thread's row
  const int tid = int(threadIdx.x) - group * tpr;                      // ... and place in it
  const int wpr = tpr >> 5;                                            // warps per row
  const int64_t step = kPersistent ? int64_t(gridDim.x) * kRowsPerBlock : rows;

  // this thread's part of the row: the raw vectors as loaded, then x*w in registers from the
  // math to the store (kPersistent: the raw x stays instead, beside the next row's in xn, and
  // x*w is formed again for the store)
  Vec<T, VEC> xv[VPT], wv[VPT], xn[kPersistent ? VPT : 1];
  float v[VPT][VEC];

  int64_t base = int64_t(blockIdx.x) * kRowsPerBlock;  // the block's first row
  if constexpr (kPersistent) {  // w once for every row of this block; x of the first row
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = (k * tpr + tid) * VEC;
      wv[k] = {};
      xv[k] = {};
      if (c < N) wv[k] = *reinterpret_cast<const Vec<T, VEC>*>(w + c);
      if (base + group < rows && c < N)
        xv[k] = load_x<T, VEC>(x + (base + group) * row_stride + c);
    }
  }
#pragma unroll 1
  for (int it = 0; base < rows; base += step, ++it) {  // block-uniform: every barrier is met
    const int64_t row = base + group;
    const bool live = row < rows;
    const T* xr = x + row * row_stride;
    int8_t* qr = q + row * N;

    if constexpr (kLoadsFirst && !kPersistent) {
      // every load of this thread first, so all of the row's bytes are in flight at once
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int c = (k * tpr + tid) * VEC;
        if (live && c < N) {
          xv[k] = load_x<T, VEC>(xr + c);
          wv[k] = *reinterpret_cast<const Vec<T, VEC>*>(w + c);  // L1/L2 hits
        } else {  // zeros: they add nothing to the sum or the max, so the math needs no branch
          xv[k] = {};
          wv[k] = {};
        }
      }
    }
    float ss = 0.f, mx = 0.f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = (k * tpr + tid) * VEC;
      if (kLoadsFirst || kPersistent || (live && c < N)) {  // (loaded: zeros past the row)
        if constexpr (!kLoadsFirst && !kPersistent) {  // the first version: load, then use
          xv[k] = load_x<T, VEC>(xr + c);
          wv[k] = *reinterpret_cast<const Vec<T, VEC>*>(w + c);
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xf = to_float(xv[k].v[j]);
          ss += xf * xf;
          v[k][j] = xf * to_float(wv[k].v[j]);
          mx = fmaxf(mx, fabsf(v[k][j]));
        }
      }
    }
    if constexpr (kPersistent) {  // the next row's x, in flight across this row's barrier
      const int64_t next = row + step;
#pragma unroll
      for (int k = 0; k < VPT; ++k) {
        const int c = (k * tpr + tid) * VEC;
        if (next < rows && c < N) xn[k] = load_x<T, VEC>(x + next * row_stride + c);
        else xn[k] = {};
      }
    }
    // One block reduction for both: rstd > 0 is one number per row, so max|y| = rstd * max|x*w|
    // (fp32 rounding is monotonic: exactly the largest |(x*w)*rstd| computed below).
    const float2 red_out = row_sum_max(ss, mx, (kPersistent && (it & 1)) ? red_alt : red,
                                       group * wpr, wpr);
    const float rstd = rsqrtf(red_out.x / N + eps);
    const RowScale s = row_scale(red_out.y * rstd);
    if (live && tid == 0) scale[row] = s.scale;

#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int c = (k * tpr + tid) * VEC;
      if (live && c < N) {
        Vec<int8_t, VEC> qv;  // VEC bytes: one 8-byte store for bf16/fp16, 4 bytes for fp32
        if constexpr (!kPersistent) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) qv.v[j] = quantize(v[k][j] * rstd, s.inv);
        } else {  // the same product as v[k][j], formed again
#pragma unroll
          for (int j = 0; j < VEC; ++j)
            qv.v[j] = quantize((to_float(xv[k].v[j]) * to_float(wv[k].v[j])) * rstd, s.inv);
        }
        store_q<VEC>(qr + c, qv);
      }
    }
    if constexpr (!kPersistent) break;  // one pass: no loop for registers to live across
#pragma unroll
    for (int k = 0; k < VPT; ++k) xv[k] = xn[k];  // (persistent: the prefetched row is next)
  }
}

template <typename T>
__global__ void __launch_bounds__(kLoopThreads)
rmsnorm_quant_loop_kernel(const T* __restrict__ x, const T* __restrict__ w,
                          int8_t* __restrict__ q, float* __restrict__ scale,
                          int64_t row_stride, int N, float eps) {
  __shared__ float2 red[32];
  const T* xr = x + int64_t(blockIdx.x) * row_stride;
  int8_t* qr = q + int64_t(blockIdx.x) * N;
  float ss = 0.f, mx = 0.f;
  for (int c = threadIdx.x; c < N; c += blockDim.x) {
    const float xv = to_float(xr[c]);
    ss += xv * xv;
    mx = fmaxf(mx, fabsf(xv * to_float(w[c])));
  }
  const float2 red_out = block_sum_max(ss, mx, red, 0, blockDim.x >> 5);
  const float rstd = rsqrtf(red_out.x / N + eps);
  // fp32 rounding is monotonic: rstd * max|x*w| is exactly the largest |(x*w)*rstd| below
  const RowScale s = row_scale(red_out.y * rstd);
  if (threadIdx.x == 0) scale[blockIdx.x] = s.scale;
  for (int c = threadIdx.x; c < N; c += blockDim.x)
    qr[c] = quantize((to_float(xr[c]) * to_float(w[c])) * rstd, s.inv);
}

// Threads for `items` per row at `per_thread` each: a multiple of 32, at least 32.
inline int threads_for(int64_t items, int per_thread) {
  const int64_t t = course::ceil_div(items, per_thread);
  return int(t < 32 ? 32 : (t + 31) / 32 * 32);
}

// kPersistent: blocks of `threads` that fit on the GPU at once (asked once per kernel and block
// size: the occupancy query costs microseconds of host time, a launch ~3).
template <typename T, int VEC, int VPT, int MAXT, int MINB>
int64_t resident_blocks(int threads) {
  static std::atomic<int64_t> cached{0};  // (threads << 32) | blocks per SM
  const int64_t c = cached.load(std::memory_order_relaxed);
  int per_sm = 0;
  if ((c >> 32) == threads) {
    per_sm = int(c & 0xffffffff);
  } else {
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, rmsnorm_quant_rows_kernel<T, VEC, VPT, MAXT, MINB>, threads, 0));
    cached.store((int64_t(threads) << 32) | per_sm, std::memory_order_relaxed);
  }
  return int64_t(per_sm < 1 ? 1 : per_sm) * course::num_sms();
}

template <typename T, int VEC, int VPT, int MAXT, int MINB>
void launch_rows_bounded(const T* x, const T* w, int8_t* q, float* scale, int64_t rows,
                         int64_t row_stride, int tpr, int N, float eps, cudaStream_t stream) {
  int64_t blocks = course::ceil_div(rows, kRowsPerBlock);
  if constexpr (kPersistent) {
    const int64_t resident = resident_blocks<T, VEC, VPT, MAXT, MINB>(tpr * kRowsPerBlock);
    blocks = blocks < resident ? blocks : resident;
  }
  rmsnorm_quant_rows_kernel<T, VEC, VPT, MAXT, MINB>
      <<<static_cast<unsigned>(blocks), tpr * kRowsPerBlock, 0, stream>>>(
          x, w, q, scale, rows, row_stride, N, eps, tpr);
}

// With kSmallBlock, the same kernel under two launch bounds: small blocks (the graded 4096-bf16
// rows) under a tighter register cap, so more rows fit an SM; big ones must allow 1024 threads.
template <typename T, int VEC, int VPT>
void launch_rows(const T* x, const T* w, int8_t* q, float* scale, int64_t rows,
                 int64_t row_stride, int tpr, int N, float eps, cudaStream_t stream) {
  if constexpr (kSmallBlock > 0) {
    if (tpr * kRowsPerBlock <= kSmallBlock) {
      launch_rows_bounded<T, VEC, VPT, kSmallBlock, kSmallMinBlocks>(x, w, q, scale, rows,
                                                                     row_stride, tpr, N, eps,
                                                                     stream);
      return;
    }
  }
  launch_rows_bounded<T, VEC, VPT, kMaxBlockThreads, 1>(x, w, q, scale, rows, row_stride, tpr,
                                                         N, eps, stream);
}

template <typename T>
void launch(const T* x, const T* w, int8_t* q, float* scale, int64_t rows, int64_t row_stride,
            int64_t N, float eps, cudaStream_t stream) {
  constexpr int V = course::kVec16<T>;
  const int n = static_cast<int>(N);
  // 16-byte loads need every row start 16-byte aligned: N and the row stride multiples of V,
  // and aligned base pointers (a sliced view can start anywhere). q's rows then start at
  // multiples of V bytes, as its V-byte stores need.
  const bool vec_ok = N % V == 0 && row_stride % V == 0 && course::aligned_for<T, V>(x) &&
                      course::aligned_for<T, V>(w);
  if (vec_ok && course::ceil_div(N, V * kVecsPerThread) <= kMaxThreads) {
    launch_rows<T, V, kVecsPerThread>(x, w, q, scale, rows, row_stride,
                                      threads_for(N / V, kVecsPerThread), n, eps, stream);
  } else if (course::ceil_div(N, kScalarsPerThread) <= kMaxThreads) {
    launch_rows<T, 1, kScalarsPerThread>(x, w, q, scale, rows, row_stride,
                                         threads_for(N, kScalarsPerThread), n, eps, stream);
  } else {
    rmsnorm_quant_loop_kernel<T><<<static_cast<unsigned>(rows), kLoopThreads, 0, stream>>>(
        x, w, q, scale, row_stride, n, eps);
  }
  CUDA_LAUNCH_CHECK();
}

}  // namespace

void rmsnorm_quant_cuda_f32(const float* x, const float* w, int8_t* q, float* scale,
                            int64_t rows, int64_t row_stride, int64_t N, float eps,
                            cudaStream_t stream) {
  launch(x, w, q, scale, rows, row_stride, N, eps, stream);
}

void rmsnorm_quant_cuda_f16(const __half* x, const __half* w, int8_t* q, float* scale,
                            int64_t rows, int64_t row_stride, int64_t N, float eps,
                            cudaStream_t stream) {
  launch(x, w, q, scale, rows, row_stride, N, eps, stream);
}

void rmsnorm_quant_cuda_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, int8_t* q,
                             float* scale, int64_t rows, int64_t row_stride, int64_t N, float eps,
                             cudaStream_t stream) {
  launch(x, w, q, scale, rows, row_stride, N, eps, stream);
}
