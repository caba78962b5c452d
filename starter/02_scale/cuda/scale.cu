// Exercise 02 — scale: a CUDA kernel end to end.
//
// Write out = a * x for a CUDA tensor x of any shape (0-d and empty included) in float32,
// float16, bfloat16 or float64, called from Python as torch.ops.ex02.scale(x, a).
// Read exercises/02_scale/README.md first; grade with `make exercise-02`.
//
// The steps, in the order to do them (the numbers match the TODOs below):
//   0. delete the "not implemented yet" line in scale()
//   1. input checks                                   (about 4 lines)
//   2. the kernel: a grid-stride loop, fp32 math       (about 4 lines)
//   3. dtype dispatch, launch on the current stream, launch check   (about 10 lines)
//      -> every correctness check should pass now; run `make exercise-02`
//   4. the fast path: 16-byte vector loads and stores (about 20 lines) -> performance credit

#include <ATen/Dispatch.h>          // AT_DISPATCH_FLOATING_TYPES_AND2
#include <ATen/OpMathType.h>        // at::opmath_type<T>: float for half/bfloat16/float, double for double
#include <ATen/core/Tensor.h>       // at::Tensor
#include <ATen/ops/empty_like.h>    // at::empty_like
#include <c10/cuda/CUDAException.h> // C10_CUDA_KERNEL_LAUNCH_CHECK, C10_CUDA_CHECK
#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard
#include <c10/cuda/CUDAStream.h>    // c10::cuda::getCurrentCUDAStream
#include <torch/library.h>          // TORCH_LIBRARY, TORCH_LIBRARY_IMPL

#include <algorithm>
#include <cstdint>

// These light headers instead of <torch/extension.h> (all of libtorch's C++ API and pybind11)
// make the build ~3x faster: ~25 s instead of ~76 s on 2 cores.

namespace {

constexpr int kThreads = 256;  // threads per block

// 16 bytes of T in one struct, aligned to 16, so that copying one moves it with a single 16-byte
// load or store: 4 float, 8 half/bfloat16, 2 double. You need it in step 4.
template <typename T>
struct alignas(16) Vector {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// TODO 2 (about 4 lines): out[i] = a * x[i] for every i < n, with a grid-stride loop:
//   start at this thread's global index, step by the number of threads in the whole grid,
//   so that any grid size covers any n. Use int64_t for the index and the step (an int
//   overflows past 2^31 - 1 elements) and do the math in opmath_t (float for half and
//   bfloat16): static_cast<scalar_t>(a * static_cast<opmath_t>(x[i])).
template <typename scalar_t, typename opmath_t = at::opmath_type<scalar_t>>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                             opmath_t a, int64_t n) {
}

// TODO 4 (about 20 lines, once everything passes): the same loop over Vector<scalar_t>
//   (reinterpret_cast the pointers; i < n / kSize), scaling each of the kSize elements, then
//   the last n % kSize elements one by one. Launch it from scale() only when x and out are
//   both 16-byte aligned: reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0. A view such as
//   x = base[1:] is not, and a 16-byte load from it fails with "misaligned address".
//   For more speed, load several vectors per thread before storing any (see the README).

at::Tensor scale(const at::Tensor& x, double a) {
  // Step 0: delete this line when you start.
  TORCH_CHECK(false, "scale: not implemented yet (see TODO 1 in cuda/scale.cu)");

  // TODO 1 (about 4 lines): refuse what the kernel cannot handle, with a message that names x
  //   and says what to do: TORCH_CHECK(condition, "scale: x must ..., but ...", ...).
  //   x must be a CUDA tensor (x.is_cuda()); its dtype (x.scalar_type()) one of at::kFloat,
  //   at::kHalf, at::kBFloat16, at::kDouble; and contiguous (x.is_contiguous()) unless you
  //   handle strides.

  // Run on x's GPU (custom ops get no device guard from the dispatcher).
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor out = at::empty_like(x);

  // TODO 3 (about 10 lines):
  //   - return out at once if x is empty (a launch with 0 blocks is an error)
  //   - pick the block count: enough for n, capped at a few per SM (cudaDeviceGetAttribute with
  //     cudaDevAttrMultiProcessorCount and x.device().index()); the grid-stride loop does the rest
  //   - AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "scale",
  //     [&] { ... }): inside, scalar_t is the element type; pass x.const_data_ptr<scalar_t>(),
  //     out.mutable_data_ptr<scalar_t>() and static_cast<at::opmath_type<scalar_t>>(a)
  //   - launch on PyTorch's current stream: kernel<<<blocks, kThreads, 0,
  //     c10::cuda::getCurrentCUDAStream()>>>(...)
  //   - then C10_CUDA_KERNEL_LAUNCH_CHECK(): a failed launch is otherwise silent
  return out;
}

}  // namespace

// Given: the schema (parsed by PyTorch; "float" in a schema is a C++ double) ...
TORCH_LIBRARY(ex02, m) {
  m.def("scale(Tensor x, float a) -> Tensor");
}

// ... and the registration. CompositeExplicitAutograd means one kernel for every device, so a CPU
// tensor reaches scale() and your TORCH_CHECK can name x. Registered for the CUDA key alone, a
// CPU tensor would be stopped by the dispatcher with a generic "Could not run 'ex02::scale' with
// arguments from the 'CPU' backend" that tells the caller nothing about x.
TORCH_LIBRARY_IMPL(ex02, CompositeExplicitAutograd, m) {
  m.impl("scale", &scale);
}
