// Exercise 02 — scale: a CUDA kernel end to end. The op (yours: TODO 1 and the dispatch of TODO 3).
//
// Write out = a * x for a CUDA tensor x of any shape (0-d and empty included) in float32,
// float16, bfloat16 or float64, called from Python as torch.ops.ex02.scale(x, a).
// Read exercises/02_scale/README.md first; grade with `make exercise-02`.
//
// Two files (README: Two files): this one is the op PyTorch sees (checks, output, dtype dispatch,
// stream, registration); the kernels and their launcher are in scale_kernels.cu. The steps, in
// the order to do them (the numbers match the TODOs in both files):
//   0. here: delete the "not implemented yet" line in scale()
//   1. here: input checks                                            (about 4 lines)
//   2. scale_kernels.cu: the kernel, a grid-stride loop, fp32 math   (about 4 lines)
//   3. scale_kernels.cu: the launch in scale_launch (about 4 lines); here: the dtype dispatch
//      that calls it on the current stream (about 6 lines)
//      -> every correctness check should pass now; run `make exercise-02`
//   4. scale_kernels.cu: the fast path, 16-byte vector loads and stores (about 20 lines)

#include <ATen/Dispatch.h>          // AT_DISPATCH_FLOATING_TYPES_AND2
#include <ATen/core/Tensor.h>       // at::Tensor
#include <ATen/ops/empty_like.h>    // at::empty_like
#include <c10/cuda/CUDAGuard.h>     // c10::cuda::CUDAGuard
#include <c10/cuda/CUDAStream.h>    // c10::cuda::getCurrentCUDAStream
#include <torch/library.h>          // TORCH_LIBRARY, TORCH_LIBRARY_IMPL

#include "aten_cuda.h"

#include <cuda_bf16.h>              // __nv_bfloat16: the CUDA spelling of at::BFloat16
#include <cuda_fp16.h>              // __half: the CUDA spelling of at::Half
#include <cuda_runtime_api.h>       // cudaStream_t

#include <cstdint>
#include <type_traits>

// These light headers instead of <torch/extension.h> (all of libtorch's C++ API and pybind11)
// make the build ~3x faster.

// Given: the launcher in scale_kernels.cu. T is the element type (float, double, __half,
// __nv_bfloat16), A the math type of a (float, or double for double).
template <typename T, typename A>
void scale_launch(const T* x, T* out, A a, int64_t n, cudaStream_t stream);

namespace {

// Given: cuda_ptr turns at::BFloat16* into __nv_bfloat16* (at::Half* into __half*: the same
// 16 bits under two names) for the launchers; acc_t<T> is the math type (include/aten_cuda.h).
using course::acc_t;
using course::cuda_ptr;

at::Tensor scale(const at::Tensor& x, double a) {
  // Step 0: delete this line when you start.
  TORCH_CHECK(false, "scale: not implemented yet (see TODO 1 in cuda/scale.cpp)");

  // TODO 1 (about 4 lines): refuse what the kernel cannot handle, with a message that names x
  //   and says what it must be: TORCH_CHECK(condition, "x must ..., got ", ...). In this order:
  //   x must be a CUDA tensor (x.is_cuda()); its dtype (x.scalar_type()) one of at::kFloat,
  //   at::kHalf, at::kBFloat16, at::kDouble; and contiguous (x.is_contiguous()) unless you
  //   handle strides. (include/aten_cuda.h words these three the same way in every exercise:
  //   course::check_device, check_dtype, check_contiguous.)

  // Run on x's GPU (custom ops get no device guard from the dispatcher).
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor out = at::empty_like(x);

  // TODO 3, this file's part (about 6 lines):
  //   - return out at once if x is empty (a launch with 0 blocks is an error)
  //   - AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "scale",
  //     [&] { ... }): inside, scalar_t is the element type; call
  //     scale_launch(cuda_ptr(x.const_data_ptr<scalar_t>()),
  //                  cuda_ptr(out.mutable_data_ptr<scalar_t>()),
  //                  static_cast<acc_t<scalar_t>>(a), x.numel(), stream)
  //   - with stream = c10::cuda::getCurrentCUDAStream(): PyTorch's current stream, not the
  //     default one (README: Hints)
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
