// Exercise 02 — scale, solved: the kernels and their launcher. out = a * x.
//
// Contents:
//   scale_kernel       version 1: grid-stride loop, one element per thread per trip, any alignment
//   scale_kernel_vec   version 2: 16-byte vector loads and stores, one tile of kThreads x
//                      kVecsPerThread vectors per block, every load of a thread issued before its
//                      first store; the last n % (16 / sizeof(T)) elements one by one
//   scale_launch       raw pointers + a stream: picks the kernel and the grid, launches, checks
//                      the launch. Called by scale.cpp (which knows ATen); instantiated at the end
//                      for the four dtypes
//
// This file includes only CUDA headers and common.cuh: it compiles in seconds, so editing a
// kernel does not recompile the ATen-heavy scale.cpp (README: Two files).
//
// Napkin math, the graded case (bf16, n = 2^28): each element is read once (2 B) and written once
// (2 B): 4 B * 2^28 = 1.07 GB of traffic and 2^28 multiplies. At the measured copy bandwidth
// (reads + writes) of an H200, ~4.28 TB/s, that is 1.07e9 / 4.28e12 = ~251 us; on an H100
// (~3.0 TB/s) ~358 us. One multiply per 4 bytes is nothing for the arithmetic units (an H100 does
// ~60 TFLOP/s in fp32, i.e. 2^28 multiplies in ~5 us): the kernel is a copy with a multiply in the
// middle, and all that matters is how close it streams to the copy bandwidth.
//
// What it takes to stream at that rate (Little's law): bytes in flight = bandwidth * latency
// = 4.28 TB/s * ~0.7 us = ~3 MB, or ~23 KB of loads outstanding on each of the 132 SMs. One
// 2-byte load per thread from 2048 resident threads is only 4 KB per SM. One 16-byte load per
// thread is 32 KB (PyTorch's own kernel: 99.5% of copy); kVecsPerThread = 2 makes it 64 KB.
//
// The grid (issue 13). The first vector kernel launched one wave of blocks (132 SMs x 8 blocks of
// 256) and let every thread loop with a grid-stride step, its 4 loads per trip a whole grid
// (4.3 MB) apart: 92% of copy (275.5 us on an H200) while PyTorch's `a * x` reached 99.5%
// (254.2 us). PyTorch (ATen/native/cuda/CUDALoops.cuh, vectorized_elementwise_kernel) does no
// loop at all: blocks of 128 threads, each thread one 16-byte vector (8 bf16: elems_per_thread 8
// for 2-byte in + 2-byte out on sm_90), and a full grid of ceil(n / 1024) blocks, 262,144 for the
// graded case; the block scheduler hands the next block to whichever SM frees a slot. Version 2
// does the same with kVecsPerThread vectors per thread. Why that should stream better: a block
// reads one contiguous tile (128 x 2 x 16 B = 4 KB) and consecutive blocks read consecutive
// tiles, so the ~2,100 blocks resident at any moment (132 SMs x 16) sweep one ~8.6 MB window of
// memory from front to back (DRAM pages opened and read through), where the one-wave grid had
// 270,336 threads each touching 4 places 4.3 MB apart per trip; the end is even (the last of ~62
// waves is 2,112 blocks of ~4 us each, while a persistent block ends only when its whole share
// is done); and the tile loop below runs once. Graded case: 2^25 vectors / 256 per block =
// 131,072 blocks. Which of these matters how much is measured, not assumed: the experiment
// 02_variants.py timed the constants below (and the old kernel) against `a * x` and a copy in
// one run (git history: it and its log gpu-2026-11-22-r2/02-variants.txt are among the first
// rounds' files removed in commit 3e7a589; docs/performance.md says how to read one).

#include "common.cuh"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace {

using course::Acc;
using course::from_acc;
using course::to_acc;

// ---------------------------------------------------------------------------------------------
// The constants 02_variants.py varied (it edited these lines in a copy; git history, above):
constexpr int kThreads = 128;       // threads per block of the vector kernel (PyTorch: 128)
constexpr int kVecsPerThread = 1;   // 16-byte vectors a thread loads before it stores any.
                                    // H200, 2^28 bf16 (02_variants.py, 2026-11-22): 1 -> 256.8
                                    // us (98.9% of copy, = eager 256.9), 2 -> 257.3, 4 -> 269.5;
                                    // the old one-wave grid-stride kernel 276.1 (92.0%)
constexpr int kBlocksPerSM = 0;     // 0: a full grid, one tile per block (PyTorch's way);
                                    // k > 0: at most SMs x k blocks, each looping over tiles
constexpr bool kStreaming = false;  // true: evict-first cache hints (__ldcs / __stcs): every byte
                                    // is touched once, so L2 need not keep any of it

constexpr int kScalarThreads = 256;  // threads per block of version 1
constexpr int kVectorBytes = 16;     // the widest load one thread can issue (LDG.128)

// The one line of math: 16-bit values widened to float, multiplied in float and rounded once
// on the way back, as PyTorch does; double stays double. `a` arrives already in the math type.
template <typename T>
__device__ __forceinline__ T scale_one(T x, typename Acc<T>::type a) {
  return from_acc<T>(a * to_acc(x));
}

// ---------------------------------------------------------------------------------------------
// Version 1: a grid-stride loop, one element per thread per trip. Works for any pointer and any n;
// used when x or out is not 16-byte aligned (e.g. x = base[1:]). Indices are int64: with int,
// i + stride overflows past 2^31 - 1 elements (4 GiB of bf16), which tensors do reach.
template <typename T>
__global__ void __launch_bounds__(kScalarThreads)
scale_kernel(const T* __restrict__ x, T* __restrict__ out, typename Acc<T>::type a, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = scale_one(x[i], a);
  }
}

// ---------------------------------------------------------------------------------------------
// Version 2: 16-byte vectors, one tile of kTile vectors per block.

// One 16-byte vector: 4 float, 8 half/bfloat16, 2 double (common.cuh: alignas(16)).
template <typename T>
using Vector = course::Vec<T, course::kVec16<T>>;

template <typename T>
__device__ __forceinline__ Vector<T> load16(const Vector<T>* p) {
  if constexpr (kStreaming) {
    const int4 r = __ldcs(reinterpret_cast<const int4*>(p));
    Vector<T> v;
    memcpy(&v, &r, sizeof(v));  // a register move, not a copy through memory
    return v;
  } else {
    return *p;
  }
}

template <typename T>
__device__ __forceinline__ void store16(Vector<T>* p, const Vector<T>& v) {
  if constexpr (kStreaming) {
    int4 r;
    memcpy(&r, &v, sizeof(r));
    __stcs(reinterpret_cast<int4*>(p), r);
  } else {
    *p = v;
  }
}

template <typename T>
__device__ __forceinline__ void scale_vector(Vector<T>& v, typename Acc<T>::type a) {
#pragma unroll
  for (int k = 0; k < course::kVec16<T>; ++k) v.v[k] = scale_one(v.v[k], a);
}

// 2048 resident threads per SM on Hopper: ask ptxas to fit all of them (<= 32 registers).
template <typename T>
__global__ void __launch_bounds__(kThreads, 2048 / kThreads)
scale_kernel_vec(const T* __restrict__ x, T* __restrict__ out, typename Acc<T>::type a, int64_t n) {
  using V = Vector<T>;
  constexpr int kSize = course::kVec16<T>;         // elements per vector
  constexpr int kTile = kThreads * kVecsPerThread;  // vectors per block per tile
  const V* __restrict__ xv = reinterpret_cast<const V*>(x);
  V* __restrict__ outv = reinterpret_cast<V*>(out);
  const int64_t n_vec = n / kSize;  // whole vectors
  const int64_t full_tiles = n_vec / kTile;

  // With kBlocksPerSM = 0 the grid has a block per tile and this loop runs once (or not at all,
  // in the block that gets the partial tile).
  for (int64_t tile = blockIdx.x; tile < full_tiles; tile += gridDim.x) {
    // Thread t takes vectors t, t + kThreads, ...: each load instruction of a warp reads 32
    // neighbouring vectors, 512 contiguous bytes (coalesced), and the kVecsPerThread loads are
    // independent, so they are all in flight before the first result is needed. The offsets
    // u * kThreads * 16 B are constants folded into the instructions.
    const V* src = xv + tile * kTile + threadIdx.x;
    V* dst = outv + tile * kTile + threadIdx.x;
    V v[kVecsPerThread];
#pragma unroll
    for (int u = 0; u < kVecsPerThread; ++u) v[u] = load16<T>(src + u * kThreads);
#pragma unroll
    for (int u = 0; u < kVecsPerThread; ++u) {
      scale_vector<T>(v[u], a);
      store16<T>(dst + u * kThreads, v[u]);
    }
  }

  // The rest, by the last block (with a full grid, the one whose tile is partial): fewer than
  // kTile whole vectors (bounds-checked, one at a time), then the n % kSize elements after the
  // last whole vector (at most 7, for bf16), one each for the first threads. In the graded case
  // (2^28 is a multiple of 8 x 256) there is none: the other blocks never test a bound.
  if (blockIdx.x == gridDim.x - 1) {
#pragma unroll 1  // cold code: unrolled, it spilled registers (the cap is 32 for 16 blocks/SM)
    for (int64_t i = full_tiles * kTile + threadIdx.x; i < n_vec; i += kThreads) {
      V v = load16<T>(xv + i);
      scale_vector<T>(v, a);
      store16<T>(outv + i, v);
    }
    const int64_t t = n_vec * kSize + threadIdx.x;  // kSize - 1 < kThreads: one pass covers it
    if (t < n) out[t] = scale_one(x[t], a);
  }
}

// ---------------------------------------------------------------------------------------------
// Launch configuration

bool is_aligned(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % kVectorBytes == 0;
}

// How many blocks of this kernel fit on one SM at once (registers, warps). It depends only on the
// kernel and the GPU model, so it is asked once per kernel (one static per template argument).
template <auto kKernel, int kBlockThreads>
int resident_blocks_per_sm() {
  static const int blocks = [] {
    int b = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kKernel, kBlockThreads, 0));
    return std::max(b, 1);
  }();
  return blocks;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The launcher scale.cpp calls (declared at its top). x and out are device pointers to n
// contiguous elements on the current device; n >= 1; `a` is already in the math type A.
template <typename T, typename A>
void scale_launch(const T* x, T* out, A a, int64_t n, cudaStream_t stream) {
  static_assert(std::is_same_v<A, typename Acc<T>::type>, "a comes in the math type of T");
  // Alignment is a property of the pointer, not of n: x = base[1:] starts 2 bytes into a bf16
  // buffer, and a 16-byte load from there faults ("misaligned address"). out comes fresh from
  // the allocator (aligned), so in practice this tests x.
  if (is_aligned(x) && is_aligned(out)) {
    constexpr int kTile = kThreads * kVecsPerThread;
    // one block per tile, the partial one included, and at least one (n < 8 has no whole
    // vector but still a tail)
    int64_t blocks = std::max<int64_t>(course::ceil_div(n / course::kVec16<T>, kTile), 1);
    if (kBlocksPerSM > 0) {  // a capped grid: the blocks loop over the tiles
      const int fit = resident_blocks_per_sm<scale_kernel_vec<T>, kThreads>();
      blocks = std::min<int64_t>(blocks, int64_t(course::num_sms()) * std::min(kBlocksPerSM, fit));
    }
    // gridDim.x may be up to 2^31 - 1: 2^31 tiles of 4 KB is 8 TB, far past any GPU's memory
    scale_kernel_vec<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, a, n);
  } else {
    // One full wave: every SM gets as many blocks as fit on it at once, and the grid-stride loop
    // covers the rest. More would only wait for a free slot; small inputs get just enough
    // blocks for one element per thread.
    const int64_t wave =
        int64_t(course::num_sms()) * resident_blocks_per_sm<scale_kernel<T>, kScalarThreads>();
    const int64_t blocks = std::min(course::ceil_div(n, kScalarThreads), wave);
    scale_kernel<T><<<static_cast<unsigned>(blocks), kScalarThreads, 0, stream>>>(x, out, a, n);
  }
  // A bad launch (too many threads, no kernel image for this GPU, ...) fails silently:
  // cudaGetLastError is the only place it shows. Check it here (a C++ exception: PyTorch turns it
  // into a Python RuntimeError), or it surfaces in some later, unrelated call.
  CUDA_LAUNCH_CHECK();
}

template void scale_launch<float, float>(const float*, float*, float, int64_t, cudaStream_t);
template void scale_launch<double, double>(const double*, double*, double, int64_t, cudaStream_t);
template void scale_launch<__half, float>(const __half*, __half*, float, int64_t, cudaStream_t);
template void scale_launch<__nv_bfloat16, float>(const __nv_bfloat16*, __nv_bfloat16*, float,
                                                 int64_t, cudaStream_t);
