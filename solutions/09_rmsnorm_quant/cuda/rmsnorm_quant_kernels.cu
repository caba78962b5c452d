// Exercise 09 — rmsnorm_quant, CUDA track, solved: the kernels and their launchers.
//
//   y     = (x * w) * rsqrt(mean(x^2) + eps)          fp32 math, per row
//   scale = max|y| / 127   (1 where max|y| = 0)       fp32, one per row
//   q     = clamp(rintf(y / scale), -127, 127)        int8; rintf rounds half to even
//
// Kernels:
//   rmsnorm_quant_rows_kernel<T, VEC, VPT>   one block per row; each thread loads VPT vectors
//       of VEC elements (16 bytes when VEC = kVec16<T>) and keeps x*w in registers through ONE
//       block reduction of the pair (sum x^2, max|x*w|) and the quantization: x is read from
//       memory once, and the block meets at one barrier per row (max|y| = rstd * max|x*w|).
//       Rows up to VEC * VPT * 1024 elements (32768 bf16 / 16384 fp32 with 16-byte loads; 8192
//       one at a time).
//   rmsnorm_quant_loop_kernel<T>             longer rows: pass 1 sums x^2 and finds max|x*w|
//       together (rstd > 0 is one number per row, so max|y| = rstd * max|x*w|); pass 2 reads the
//       row again (mostly from L2) and quantizes.
// Launchers (called by rmsnorm_quant.cpp): rmsnorm_quant_cuda_{f32,f16,bf16}.
//
// Only CUDA headers and common.cuh here: this file compiles in about a second.
//
// Napkin math, (32768, 4096) bf16, M N = 134,217,728 elements:
//   read x   2 B each  268.4 MB     write q      1 B each    134.2 MB
//   read w   8 KB                   write scale  4 B a row   0.13 MB
//   total 402.8 MB -> 94 us at 4.28 TB/s (copy bandwidth measured on an H200, 2026-11-21)
// 7 flops per element against ~3 bytes: the ALUs idle; only the bytes count, and what decides
// how many are in flight is how many rows each SM holds at once (registers) and how long each
// row's block lives (barriers). A block of 128 threads per 4096-element row: each thread issues
// four 16-byte loads (and four of w, from L1/L2) and four 8-byte stores; 51 registers (ptxas,
// sm_90) let 9 such rows share an SM, against 5 for 256 threads of two vectors (42 registers).

#include "common.cuh"

#include <cstdint>

namespace {

using course::Vec;

constexpr float kQMax = 127.f;
constexpr int kMaxThreads = 1024;
constexpr int kVecsPerThread = 4;     // 16-byte path: 4096 bf16 -> 128 threads of 4 vectors
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

// (sum of squares, max|x*w|) over the block, in ONE exchange: each warp reduces its pair with
// shuffles, lane 0 parks it in red[warp], one barrier, then every warp reduces the (at most 32)
// partials itself, so no second barrier and no result slot. Two back-to-back block_sum/block_max
// calls would cost four barriers, and the second would wait for the first. Call it once per
// buffer: a second use of `red` would need a barrier after the reads below.
__device__ __forceinline__ float2 block_sum_max(float ss, float mx, float2* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  ss = course::warp_sum(ss);
  mx = course::warp_max(mx);
  if (lane == 0) red[warp] = make_float2(ss, mx);
  __syncthreads();
  const float2 p = lane < warps ? red[lane] : make_float2(0.f, 0.f);  // |x*w| >= 0: 0 is neutral
  return make_float2(course::warp_sum(p.x), course::warp_max(p.y));
}

template <typename T, int VEC, int VPT>
__global__ void __launch_bounds__(kMaxThreads)
rmsnorm_quant_rows_kernel(const T* __restrict__ x,      // [rows, N], row r at x + r * row_stride
                          const T* __restrict__ w,      // [N]
                          int8_t* __restrict__ q,       // [rows, N] contiguous
                          float* __restrict__ scale,    // [rows]
                          int64_t row_stride, int N, float eps) {
  __shared__ float2 red[32];  // block_sum_max's (sum, max) per warp: nothing else here
  const T* xr = x + int64_t(blockIdx.x) * row_stride;
  int8_t* qr = q + int64_t(blockIdx.x) * N;

  // this thread's part of the row, x*w in registers from the load to the store
  float v[VPT][VEC];
  float ss = 0.f, mx = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = (k * blockDim.x + threadIdx.x) * VEC;
    if (c < N) {
      const Vec<T, VEC> xv = *reinterpret_cast<const Vec<T, VEC>*>(xr + c);
      const Vec<T, VEC> wv = *reinterpret_cast<const Vec<T, VEC>*>(w + c);  // L1/L2 hits
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xf = to_float(xv.v[j]);
        ss += xf * xf;
        v[k][j] = xf * to_float(wv.v[j]);
        mx = fmaxf(mx, fabsf(v[k][j]));
      }
    }
  }
  // One block reduction for both: rstd > 0 is one number per row, so max|y| = rstd * max|x*w|
  // (fp32 rounding is monotonic: exactly the largest |(x*w)*rstd| computed below).
  const float2 red_out = block_sum_max(ss, mx, red);
  const float rstd = rsqrtf(red_out.x / N + eps);
  const RowScale s = row_scale(red_out.y * rstd);
  if (threadIdx.x == 0) scale[blockIdx.x] = s.scale;

#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int c = (k * blockDim.x + threadIdx.x) * VEC;
    if (c < N) {
      Vec<int8_t, VEC> qv;  // VEC bytes: one 8-byte store for bf16/fp16, 4 bytes for fp32
#pragma unroll
      for (int j = 0; j < VEC; ++j) qv.v[j] = quantize(v[k][j] * rstd, s.inv);
      *reinterpret_cast<Vec<int8_t, VEC>*>(qr + c) = qv;
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
    const float xv = to_float(xr[c]);
    ss += xv * xv;
    mx = fmaxf(mx, fabsf(xv * to_float(w[c])));
  }
  const float2 red_out = block_sum_max(ss, mx, red);
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

template <typename T>
void launch(const T* x, const T* w, int8_t* q, float* scale, int64_t rows, int64_t row_stride,
            int64_t N, float eps, cudaStream_t stream) {
  constexpr int V = course::kVec16<T>;
  const unsigned grid = static_cast<unsigned>(rows);
  const int n = static_cast<int>(N);
  // 16-byte loads need every row start 16-byte aligned: N and the row stride multiples of V,
  // and aligned base pointers (a sliced view can start anywhere). q's rows then start at
  // multiples of V bytes, as its V-byte stores need.
  const bool vec_ok = N % V == 0 && row_stride % V == 0 && course::aligned_for<T, V>(x) &&
                      course::aligned_for<T, V>(w);
  if (vec_ok && course::ceil_div(N, V * kVecsPerThread) <= kMaxThreads) {
    rmsnorm_quant_rows_kernel<T, V, kVecsPerThread>
        <<<grid, threads_for(N / V, kVecsPerThread), 0, stream>>>(x, w, q, scale, row_stride, n,
                                                                   eps);
  } else if (course::ceil_div(N, kScalarsPerThread) <= kMaxThreads) {
    rmsnorm_quant_rows_kernel<T, 1, kScalarsPerThread>
        <<<grid, threads_for(N, kScalarsPerThread), 0, stream>>>(x, w, q, scale, row_stride, n,
                                                                 eps);
  } else {
    rmsnorm_quant_loop_kernel<T><<<grid, kLoopThreads, 0, stream>>>(x, w, q, scale, row_stride,
                                                                     n, eps);
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
