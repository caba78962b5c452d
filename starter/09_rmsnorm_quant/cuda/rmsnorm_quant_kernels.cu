// Exercise 09 — rmsnorm_quant, CUDA track: the kernels and their launchers. Your file.
//
//   y     = (x * w) * rsqrt(mean(x^2) + eps)          fp32 math, per row
//   scale = max|y| / 127   (1 where max|y| = 0)       fp32, one per row
//   q     = clamp(rintf(y / scale), -127, 127)        int8; rintf rounds half to even
//
// Launchers (called by rmsnorm_quant.cpp): rmsnorm_quant_cuda_{f32,f16,bf16}.
//
// Only CUDA headers and common.cuh here: this file compiles in about a second.
//
// Napkin math, (32768, 4096) bf16, M N = 134,217,728 elements:
//   read x   2 B each  268.4 MB     write q      1 B each    134.2 MB
//   read w   8 KB                   write scale  4 B a row   0.13 MB
//   total 402.8 MB -> 94 us at 4.28 TB/s (copy bandwidth measured on an H200, 2026-11-21)
// 7 flops per element against ~3 bytes: the ALUs idle; only the bytes count. A block of 256
// threads per 4096-element row: each thread issues two 16-byte loads and two 8-byte stores.

#include "common.cuh"

#include <cstdint>
#include <stdexcept>

namespace {

using course::Vec;

constexpr float kQMax = 127.f;
constexpr int kMaxThreads = 1024;

// (torch builds with __CUDA_NO_HALF_CONVERSIONS__: 16-bit types convert through intrinsics)
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// TODO 2 (~45 lines): rmsnorm_quant_rows_kernel<T, VEC, VPT>, one block per row. Each thread
//   loads up to VPT vectors of VEC elements of the row (course::Vec<T, VEC>: 16 bytes), keeps
//   them in registers as floats, and the block
//     1. sums the squares (course::block_sum) -> rstd,
//     2. turns its values into y = (x * w) * rstd and finds max|y| (course::block_max),
//     3. thread 0 stores the row's scale (1 for an all-zero row: never 0 / 0); every thread
//        quantizes its values (rintf, clamp to [-127, 127] in float, then convert) and stores
//        them VEC bytes at a time (course::Vec<int8_t, VEC>).
//   The row is read from memory once. Use one __shared__ float[33] for both reductions
//   (common.cuh explains why that is safe back to back) and nothing else in it.
// TODO 3 (~20 lines, after TODO 2 passes): a kernel for rows longer than the registers hold
//   (N > 8192 or so): two passes over the row, the second mostly from L2.

// TODO 4 (~15 lines): pick the kernel and the block size, launch on `stream`, and check the
//   launch (CUDA_LAUNCH_CHECK). 16-byte loads need N, the row stride and the pointers aligned.
template <typename T>
void launch(const T* x, const T* w, int8_t* q, float* scale, int64_t rows, int64_t row_stride,
            int64_t N, float eps, cudaStream_t stream) {
  throw std::runtime_error("rmsnorm_quant (cuda track, CUDA path) is not implemented yet: write "
                           "the kernel and its launcher in rmsnorm_quant_kernels.cu");
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
