// Exercise 02 — scale: the kernels and their launcher (yours: TODO 2, 3 and 4).
//
// out = a * x, for n contiguous elements of float32, float16, bfloat16 or float64. scale.cpp
// (the op PyTorch calls: checks, output, dtype dispatch) calls scale_launch() at the end of this
// file with raw device pointers and PyTorch's current stream. Read exercises/02_scale/README.md
// first; grade with `make exercise-02`.
//
// The steps, in the order to do them (the numbers match the TODOs in both files):
//   0. scale.cpp: delete the "not implemented yet" line in scale()
//   1. scale.cpp: input checks                                       (about 4 lines)
//   2. here: the kernel, a grid-stride loop with fp32 math           (about 4 lines)
//   3. here: the launch in scale_launch, and in scale.cpp the dtype dispatch that calls it on
//      the current stream                                            (about 4 + 6 lines)
//      -> every correctness check should pass now; run `make exercise-02`
//   4. here: the fast path, 16-byte vector loads and stores          (about 20 lines)
//
// This file includes only CUDA headers and common.cuh (include/common.cuh: to_acc, from_acc,
// Vec, ceil_div, num_sms, CUDA_CHECK): it compiles in seconds, and editing it does not recompile
// the ATen-heavy scale.cpp.

#include "common.cuh"

#include <algorithm>
#include <cstdint>

namespace {

using course::Acc;      // Acc<T>::type: float for __half, __nv_bfloat16 and float; double for double
using course::from_acc;  // from_acc<T>(float or double) -> T, rounded once
using course::to_acc;    // to_acc(T) -> float or double

constexpr int kThreads = 256;  // threads per block

// 16 bytes of T in one struct, aligned to 16, so that copying one moves it with a single 16-byte
// load or store: 4 float, 8 __half/__nv_bfloat16, 2 double. You need it in step 4.
template <typename T>
using Vector = course::Vec<T, course::kVec16<T>>;

// TODO 2 (about 4 lines): out[i] = a * x[i] for every i < n, with a grid-stride loop:
//   start at this thread's global index, step by the number of threads in the whole grid,
//   so that any grid size covers any n. Use int64_t for the index and the step (an int
//   overflows past 2^31 - 1 elements) and do the math in the math type (float for __half and
//   __nv_bfloat16; `a` already is one): from_acc<T>(a * to_acc(x[i])).
template <typename T>
__global__ void scale_kernel(const T* __restrict__ x, T* __restrict__ out,
                             typename Acc<T>::type a, int64_t n) {
}

// TODO 4 (about 20 lines, once everything passes): the same over Vector<T> (reinterpret_cast the
//   pointers; n / kVec16<T> whole vectors; .v[k] is element k of a vector), scaling each of its
//   elements, then the last n % kVec16<T> elements one by one. Launch it from scale_launch only
//   when x and out are both 16-byte aligned: reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0.
//   A view such as x = base[1:] is not, and a 16-byte load from it fails with "misaligned
//   address". For more speed, load several vectors per thread before storing any (README:
//   Hints).

}  // namespace

// The launcher scale.cpp calls. x and out are device pointers to n >= 1 contiguous elements on
// the current GPU; `a` comes already converted to the math type A (float, or double for double).
template <typename T, typename A>
void scale_launch(const T* x, T* out, A a, int64_t n, cudaStream_t stream) {
  // TODO 3 (about 4 lines):
  //   - pick the block count: enough for n (course::ceil_div(n, kThreads)), capped at a few
  //     blocks per SM (course::num_sms()); the grid-stride loop does the rest
  //   - launch on the stream you were given: scale_kernel<T><<<blocks, kThreads, 0, stream>>>(...)
  //   - then CUDA_LAUNCH_CHECK(): a failed launch (0 blocks, too many threads, no kernel image for
  //     this GPU) is otherwise silent
}

// Given: the four versions scale.cpp can call (T, and the math type of a).
template void scale_launch<float, float>(const float*, float*, float, int64_t, cudaStream_t);
template void scale_launch<double, double>(const double*, double*, double, int64_t, cudaStream_t);
template void scale_launch<__half, float>(const __half*, __half*, float, int64_t, cudaStream_t);
template void scale_launch<__nv_bfloat16, float>(const __nv_bfloat16*, __nv_bfloat16*, float,
                                                 int64_t, cudaStream_t);
