// common.cuh — the CUDA helpers every exercise hands out (llm.c keeps one common.h the same way).
//
// Kernel-side only: this header includes CUDA headers and nothing from PyTorch, so a `.cu` file
// that includes it (and not ATen) compiles in about a second. The grader puts this folder on the
// include path of every CUDA track: `#include "common.cuh"`.
//
//   course::Acc<T>::type       the math type: float for half/bfloat16/float, double for double
//   course::to_acc(v), from_acc<T>(a)   storage <-> math type, also under PyTorch's build flags
//                              (-D__CUDA_NO_HALF_CONVERSIONS__ and the bf16 one turn off the
//                              implicit conversions of __half and __nv_bfloat16)
//   course::Vec<T, N>          N elements moved as one load/store (16 bytes: kVec16<T> elements)
//   course::warp_sum/max       a value reduced over the 32 lanes of a warp, returned to each lane
//   course::block_sum/max      a value reduced over the block, returned to every thread
//   course::block_sum2         two values summed over the block at once (one pair of barriers)
//   course::Packed<T, N>       N elements kept as 32-bit words: the row a thread holds in
//                              registers (load_packed, store_packed, unpack, pack, fresh)
//   course::ceil_div, grid_for, num_sms, max_smem_per_block
//   course::threads_for        threads per block for a row of `nvec` vectors, `per_thread` each
//   course::vector_ok<T>       may rows of T be moved 16 bytes at a time (lengths, alignment)
//   CUDA_CHECK(expr)           throws course::CudaError (a std::exception) naming the error, the
//                              call, file and line; PyTorch turns it into a Python RuntimeError
//   CUDA_LAUNCH_CHECK()        the same for the launch just made (bad configuration, no kernel
//                              image for this GPU, ...)
//
// Exercises whose lesson is one of these helpers (04: the block reduction) keep their own copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// Only light C++ headers: <string> and <stdexcept> cost every .cu file's build 0.4-0.6 s (nvcc
// parses the host side three times, in C++20): 02's solution compiled in 1.25 s without them
// against 1.82 s with them on the 2-core CPU machine, and a one-line edit waits for that build.
// A file that throws std::runtime_error includes <stdexcept> itself.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <type_traits>

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t course_err_ = (expr);                                                  \
    if (course_err_ != cudaSuccess)                                                          \
      throw ::course::CudaError(course_err_, #expr, __FILE__, __LINE__);                     \
  } while (0)

#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

namespace course {

// What CUDA_CHECK throws: a std::exception (PyTorch turns any into a Python RuntimeError with
// its what()), its message formatted into a buffer of its own, so that no <string> is needed.
class CudaError : public std::exception {
 public:
  CudaError(cudaError_t err, const char* expr, const char* file, int line) {
    std::snprintf(msg_, sizeof msg_, "CUDA error: %s (%s at %s:%d)", cudaGetErrorString(err),
                  expr, file, line);
  }
  const char* what() const noexcept override { return msg_; }

 private:
  char msg_[512];
};

// The math type: 16-bit inputs are computed in float (their sums lose bits fast otherwise);
// double stays double so that torch.autograd.gradcheck, which needs float64, can run.
template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }

template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type a);
template <> __device__ __forceinline__ __half from_acc<__half>(float a) { return __float2half_rn(a); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float a) {
  return __float2bfloat16_rn(a);
}
template <> __device__ __forceinline__ float from_acc<float>(float a) { return a; }
template <> __device__ __forceinline__ double from_acc<double>(double a) { return a; }

// N elements of T loaded or stored as one instruction. The alignment makes the compiler emit
// one 16-byte access (LDG.128 / STG.128) when sizeof(T) * N == 16, the widest a thread can issue.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// Elements of T in 16 bytes: 4 floats, 8 halves or bfloat16s, 2 doubles.
template <typename T> constexpr int kVec16 = 16 / int(sizeof(T));

// May a pointer be read as Vec<T, N>? (views and odd offsets are not 16-byte aligned)
template <typename T, int N>
__host__ __device__ inline bool aligned_for(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * N) == 0;
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Streaming multiprocessors of the current device (asked once per process and device).
inline int num_sms() {
  static int cached[64] = {0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && cached[dev]) return cached[dev];
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (dev < 64) cached[dev] = sms;
  return sms;
}

// Blocks for a grid-stride loop over `work` items, `per_block` items per block per trip: enough
// to fill every SM `blocks_per_sm` times over, never more than the work needs (at least 1).
inline int grid_for(int64_t work, int per_block, int blocks_per_sm = 4) {
  const int64_t needed = ceil_div(work, per_block);
  const int64_t full = int64_t(num_sms()) * blocks_per_sm;
  return int(needed < 1 ? 1 : (needed < full ? needed : full));
}

// Shared memory one block may have (opt-in: 227 KB on Hopper), asked once per process and device.
inline int64_t max_smem_per_block() {
  static int cached[64] = {0};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && cached[dev]) return cached[dev];
  int v = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (dev < 64) cached[dev] = v;
  return v;
}

// Threads per block for a row of `nvec` vectors: enough that each thread keeps at most
// `per_thread` of them (4096 bf16 = 512 vectors: 128 threads of 4), a multiple of 32, at least
// 32 and at most `max_threads` (the kernel's launch bound).
inline int threads_for(int64_t nvec, int per_thread, int max_threads) {
  const int64_t t = (nvec + per_thread - 1) / per_thread;
  const int64_t warps32 = (t + 31) / 32 * 32;
  return static_cast<int>(warps32 < 32 ? 32 : warps32 > max_threads ? max_threads : warps32);
}

// 16-byte loads need every row to start 16-byte aligned: the row length N and the distance
// between rows `ld` multiples of kVec16<T>, and aligned base pointers (a sliced view can start
// anywhere; null pointers, the outputs not asked for, are skipped). Otherwise one element at a
// time.
template <typename T>
bool vector_ok(int64_t N, int64_t ld, std::initializer_list<const void*> ptrs) {
  constexpr int VEC = kVec16<T>;
  if (N % VEC != 0 || ld % VEC != 0) return false;
  for (const void* p : ptrs)
    if (p != nullptr && !aligned_for<T, VEC>(p)) return false;
  return true;
}

// ---- Packed: a vector of a row kept in registers ----------------------------------------------
// N elements of T as loaded and kept: 32-bit words (one 16-bit word for a single 2-byte
// element). Vec<__nv_bfloat16, 8> is fine to move data, but nvcc splits it into eight 16-bit
// registers and ptxas gives each a 32-bit register of its own: 2x the registers for a row that
// a thread keeps across passes (07's warp-per-row forward: ~200 registers with Vec, 128 with
// Packed). unpack(p, j) converts element j to the math type (bf16: a shift or a mask).
template <typename T, int N>
struct Packed {
  static constexpr int kBytes = int(sizeof(T)) * N;
  using Word = std::conditional_t<kBytes % 4 == 0, uint32_t, uint16_t>;
  static constexpr int kWords = kBytes / int(sizeof(Word));
  alignas(kBytes) Word w[kWords];
};

template <typename T, int N>
__device__ __forceinline__ typename Acc<T>::type unpack(const Packed<T, N>& p, int j) {
  constexpr bool kWide = sizeof(typename Packed<T, N>::Word) == 4;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // bf16 is the top half of a float
    if constexpr (kWide) return __uint_as_float(j % 2 ? p.w[j / 2] & 0xffff0000u : p.w[j / 2] << 16);
    else return to_acc(__ushort_as_bfloat16(p.w[0]));
  } else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (kWide)
      return to_acc(__ushort_as_half(uint16_t(j % 2 ? p.w[j / 2] >> 16 : p.w[j / 2] & 0xffffu)));
    else return to_acc(__ushort_as_half(p.w[0]));
  } else if constexpr (std::is_same_v<T, float>) {
    return __uint_as_float(p.w[j]);
  } else {
    static_assert(std::is_same_v<T, double>);
    return __hiloint2double(int(p.w[2 * j + 1]), int(p.w[2 * j]));
  }
}

// One Packed vector from / to memory as one access (LDG.128 / STG.128 for 16 bytes). Through
// uint4 explicitly: a Packed struct read through a reference, or copied, comes apart into four
// 32-bit loads (nvcc does not merge them again).
template <typename T, int N>
__device__ __forceinline__ Packed<T, N> load_packed(const Packed<T, N>* p) {
  Packed<T, N> r;
  if constexpr (sizeof(r) == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
  } else if constexpr (sizeof(r) == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    r.w[0] = u.x, r.w[1] = u.y;
  } else {
    r.w[0] = p->w[0];
  }
  return r;
}

template <typename T, int N>
__device__ __forceinline__ void store_packed(Packed<T, N>* p, const Packed<T, N>& v) {
  if constexpr (sizeof(v) == 16) *reinterpret_cast<uint4*>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  else if constexpr (sizeof(v) == 8) *reinterpret_cast<uint2*>(p) = make_uint2(v.w[0], v.w[1]);
  else p->w[0] = v.w[0];
}

// N math values rounded to T, packed (bf16, fp16: two per word, one cvt for the pair)
template <typename T, int N>
__device__ __forceinline__ Packed<T, N> pack(const typename Acc<T>::type (&v)[N]) {
  Packed<T, N> p;
  if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>) {
    if constexpr (N == 1) {
      const T h = from_acc<T>(v[0]);
      std::memcpy(&p.w[0], &h, 2);
    } else {
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) {
          const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
          std::memcpy(&p.w[k], &h, 4);
        } else {
          const __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
          std::memcpy(&p.w[k], &h, 4);
        }
      }
    }
  } else if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int j = 0; j < N; ++j) p.w[j] = __float_as_uint(v[j]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) {
      p.w[2 * j] = uint32_t(__double2loint(v[j]));
      p.w[2 * j + 1] = uint32_t(__double2hiint(v[j]));
    }
  }
  return p;
}

// A copy of p that the compiler cannot prove equal to p (an empty asm that "modifies" each
// word). A kernel that passes over its registers several times converts them again in each
// pass (a shift per bf16 element); without this, nvcc keeps the floats of the first pass alive
// for the later ones (07's forward: 255 registers instead of 96).
template <typename T, int N>
__device__ __forceinline__ Packed<T, N> fresh(Packed<T, N> p) {
#pragma unroll
  for (int i = 0; i < Packed<T, N>::kWords; ++i) {
    if constexpr (sizeof(p.w[0]) == 4) asm volatile("" : "+r"(p.w[i]));
    else asm volatile("" : "+h"(p.w[i]));
  }
  return p;
}

// ---- reductions ---------------------------------------------------------------------------------
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const A o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// Reduce over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// `shared` holds 33 values: one per warp, and slot 32 for the result, so back-to-back calls with
// the same buffer never race: a warp writes its slot for the next call only after the barrier
// that follows every read of this one.
template <typename A, typename Op>
__device__ __forceinline__ A block_reduce(A v, A* shared, A identity, Op warp_op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_op(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A t = lane < warps ? shared[lane] : identity;
    t = warp_op(t);
    if (lane == 0) shared[32] = t;
  }
  __syncthreads();
  return shared[32];
}

template <typename A>
__device__ __forceinline__ A block_sum(A v, A* shared) {
  return block_reduce(v, shared, A(0), [](A x) { return warp_sum(x); });
}

// Two sums over the block at once (one pair of barriers instead of two), returned to every
// thread. `shared` is [2][33]; slot 32 is the result, so back-to-back calls never race (as in
// block_reduce), also with calls of block_sum on shared[0].
template <typename A>
__device__ __forceinline__ void block_sum2(A& a, A& b, A (*shared)[33]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    shared[0][warp] = a;
    shared[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    A ta = lane < warps ? shared[0][lane] : A(0);
    A tb = lane < warps ? shared[1][lane] : A(0);
    ta = warp_sum(ta);
    tb = warp_sum(tb);
    if (lane == 0) {
      shared[0][32] = ta;
      shared[1][32] = tb;
    }
  }
  __syncthreads();
  a = shared[0][32];
  b = shared[1][32];
}

// For max: identity -inf (float/double); a block of all -inf returns -inf.
template <typename A>
__device__ __forceinline__ A block_max(A v, A* shared) {
  return block_reduce(v, shared, -A(INFINITY), [](A x) { return warp_max(x); });
}

}  // namespace course
