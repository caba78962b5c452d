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
//   total 402.8 MB -> 94 us at 4.28 TB/s (an H200's copy ceiling; the measured ceiling and this
//   kernel's time against it are in docs/performance.md)
// 7 flops per element against ~3 bytes: the ALUs idle; only the bytes count, and what decides
// the speed is how many bytes each SM keeps in flight. Little's law: ~4.3 TB/s over 132 SMs is
// ~33 bytes per ns per SM; at ~0.6-1 us of DRAM latency under load that is 20-33 KB in flight
// per SM, all the time. A block of 128 threads per 4096-element row: each thread issues four
// 16-byte loads of x (and four of w, from L1/L2) and four 8-byte stores.
//   - All of a row's loads must be in the air at once: 8 KB. A kernel that loads and uses one
//     vector at a time (each load in an `if (c < N)` block with its math: ptxas keeps the blocks
//     in order: load, wait, math, next load) has one 16-byte load of x outstanding per thread:
//     2 KB per row, ~18 KB per SM at 9 rows, under the 20-33 KB. Here the loads come first,
//     under the bounds test, and out-of-row vectors are zeros (they add 0 to the sum and to the
//     max), so the math has no branch: the SASS issues all 8 loads before the first multiply,
//     and each row has its 8 KB in flight, ~72 KB per SM at 9 rows.
//   - Rows resident per SM: the 128-thread instantiation is bounded by __launch_bounds__(128,
//     10): at most 48 registers (ptxas 13.0, sm_90: 47, no spills), so 10 rows per SM. 256
//     threads of two vectors hold fewer rows per SM, and each row waits at its barrier for eight
//     warps; a warp per row needs ~190 registers.
//   - One barrier per row (block_sum_max): a block that meets twice (sum, then max) leaves its
//     warps with no loads in flight twice as long between rows.
//   - x and q are touched once: loaded with __ldcs and stored with __stcs (evict-first), so that
//     w stays in L1.

#include "common.cuh"

#include <cstdint>
#include <cstring>

namespace {

using course::Vec;
using course::to_acc;

constexpr int kVecsPerThread = 4;     // 16-byte path: 4096 bf16 -> 128 threads of 4 vectors
constexpr int kSmallBlock = 128;      // a 128-thread instantiation, __launch_bounds__(128, 10):
constexpr int kSmallMinBlocks = 10;   // <= 48 registers (47, no spills): 10 rows per SM
constexpr int kMaxThreads = 1024;     // the other instantiation's bound: threads per row, at most
constexpr float kQMax = 127.f;
constexpr int kScalarsPerThread = 8;  // one-element path (rows not 16-byte aligned)
constexpr int kLoopThreads = 1024;

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

// One vector of x (evict-first: each byte of x is read once) and of q (written once).
template <typename T, int VEC>
__device__ __forceinline__ Vec<T, VEC> load_x(const T* p) {
  if constexpr (sizeof(T) * VEC == 16) {
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
  if constexpr (VEC == 8) {
    uint2 u;
    memcpy(&u, &v, 8);
    __stcs(reinterpret_cast<uint2*>(p), u);
  } else if constexpr (VEC == 4) {
    unsigned u;
    memcpy(&u, &v, 4);
    __stcs(reinterpret_cast<unsigned*>(p), u);
  } else {
    *reinterpret_cast<Vec<int8_t, VEC>*>(p) = v;
  }
}

// (sum of squares, max|x*w|) over the warps of one row, in ONE exchange: each warp reduces its
// pair with shuffles, lane 0 parks it in red[warp], one barrier, then every warp reduces the
// row's (at most 32) partials itself, so no second barrier and no result slot. Two back-to-back
// block_sum/block_max calls would cost four barriers, and the second would wait for the first.
// Call it once per buffer: a second use of `red` would need a barrier after the reads below.
__device__ __forceinline__ float2 block_sum_max(float ss, float mx, float2* red, int warps) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  ss = course::warp_sum(ss);
  mx = course::warp_max(mx);
  if (lane == 0) red[warp] = make_float2(ss, mx);
  __syncthreads();
  const float2 p = lane < warps ? red[lane] : make_float2(0.f, 0.f);  // |x*w| >= 0
  return make_float2(course::warp_sum(p.x), course::warp_max(p.y));
}

template <typename T, int VEC, int VPT, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB)
rmsnorm_quant_rows_kernel(const T* __restrict__ x,      // [rows, N], row r at x + r * row_stride
                          const T* __restrict__ w,      // [N]
                          int8_t* __restrict__ q,       // [rows, N] contiguous
                          float* __restrict__ scale,    // [rows]
                          int64_t rows, int64_t row_stride, int N, float eps,
                          int tpr) {                    // threads per row: the block's
  __shared__ float2 red[32];  // block_sum_max's (sum, max) per warp: nothing else here
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;  // a block per row
  if (row >= rows) return;
  const T* xr = x + row * row_stride;
  int8_t* qr = q + row * N;

  // this thread's part of the row: the raw vectors as loaded, then x*w in registers from the
  // math to the store
  Vec<T, VEC> xv[VPT], wv[VPT];
  float v[VPT][VEC];
  // every load of this thread first, so all of the row's bytes are in flight at once
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = (k * tpr + tid) * VEC;
    if (c < N) {
      xv[k] = load_x<T, VEC>(xr + c);
      wv[k] = *reinterpret_cast<const Vec<T, VEC>*>(w + c);  // L1/L2 hits
    } else {  // zeros: they add nothing to the sum or the max, so the math needs no branch
      xv[k] = {};
      wv[k] = {};
    }
  }
  float ss = 0.f, mx = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {  // (loaded: zeros past the row)
      const float xf = to_acc(xv[k].v[j]);
      ss += xf * xf;
      v[k][j] = xf * to_acc(wv[k].v[j]);
      mx = fmaxf(mx, fabsf(v[k][j]));
    }
  }
  // One block reduction for both: rstd > 0 is one number per row, so max|y| = rstd * max|x*w|
  // (fp32 rounding is monotonic: exactly the largest |(x*w)*rstd| computed below).
  const float2 red_out = block_sum_max(ss, mx, red, tpr >> 5);
  const float rstd = rsqrtf(red_out.x / N + eps);
  const RowScale s = row_scale(red_out.y * rstd);
  if (tid == 0) scale[row] = s.scale;

#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = (k * tpr + tid) * VEC;
    if (c < N) {
      Vec<int8_t, VEC> qv;  // VEC bytes: one 8-byte store for bf16/fp16, 4 bytes for fp32
#pragma unroll
      for (int j = 0; j < VEC; ++j) qv.v[j] = quantize(v[k][j] * rstd, s.inv);
      store_q<VEC>(qr + c, qv);
    }
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
    const float xv = to_acc(xr[c]);
    ss += xv * xv;
    mx = fmaxf(mx, fabsf(xv * to_acc(w[c])));
  }
  const float2 red_out = block_sum_max(ss, mx, red, blockDim.x >> 5);
  const float rstd = rsqrtf(red_out.x / N + eps);
  // fp32 rounding is monotonic: rstd * max|x*w| is exactly the largest |(x*w)*rstd| below
  const RowScale s = row_scale(red_out.y * rstd);
  if (threadIdx.x == 0) scale[blockIdx.x] = s.scale;
  for (int c = threadIdx.x; c < N; c += blockDim.x)
    qr[c] = quantize((to_acc(xr[c]) * to_acc(w[c])) * rstd, s.inv);
}

// Threads for `items` per row at `per_thread` each: a multiple of 32, at least 32.
inline int threads_for(int64_t items, int per_thread) {
  const int64_t t = course::ceil_div(items, per_thread);
  return int(t < 32 ? 32 : (t + 31) / 32 * 32);
}

// The same kernel under two launch bounds: small blocks (the graded 4096-bf16 rows) under a
// tighter register cap, so more rows fit an SM; big ones must allow 1024 threads.
template <typename T, int VEC, int VPT>
void launch_rows(const T* x, const T* w, int8_t* q, float* scale, int64_t rows,
                 int64_t row_stride, int tpr, int N, float eps, cudaStream_t stream) {
  auto kernel = tpr <= kSmallBlock
                    ? rmsnorm_quant_rows_kernel<T, VEC, VPT, kSmallBlock, kSmallMinBlocks>
                    : rmsnorm_quant_rows_kernel<T, VEC, VPT, kMaxThreads, 1>;
  kernel<<<static_cast<unsigned>(rows), tpr, 0, stream>>>(x, w, q, scale, rows, row_stride, N, eps,
                                                          tpr);
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
