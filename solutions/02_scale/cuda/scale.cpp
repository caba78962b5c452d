// Exercise 02 — scale, solved: the op the dispatcher sees, torch.ops.ex02.scale(x, a) = a * x.
//
// This file checks the input (every message names x and says what to do), allocates the output,
// picks the device and the stream, dispatches on the dtype and calls the launcher in
// scale_kernels.cu, then registers the op. It has no kernel: it compiles once (the ATen headers
// are most of a build) and editing a kernel does not recompile it (README: Two files).
//
// Only light headers: <torch/extension.h> pulls in all of libtorch's C++ API and pybind11, and
// makes a build take ~76 s instead of ~25 s on 2 cores (54 s vs 16 s on 16 cores).

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "aten_cuda.h"

#include <cuda_bf16.h>  // the CUDA spellings of bfloat16 and half, for the launcher's types
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

// The launcher (scale_kernels.cu, instantiated there for (float, float), (double, double),
// (__half, float) and (__nv_bfloat16, float)): T is the element type, A the math type of `a`.
template <typename T, typename A>
void scale_launch(const T* x, T* out, A a, int64_t n, cudaStream_t stream);

namespace {

// cuda_ptr turns at::BFloat16* into __nv_bfloat16* (at::Half* into __half*: the same
// 16 bits under two names) for the launchers; acc_t<T> is the math type (include/aten_cuda.h).
// `a` is converted to acc_t once, here: converting it to bfloat16 instead would round it (1.7
// becomes 1.703125).
using course::acc_t;
using course::cuda_ptr;

at::Tensor scale(const at::Tensor& x, double a) {
  // Check everything before touching the GPU (aten_cuda.h: device, dtype, then strides; each
  // message names x and what it must be).
  course::check_device(x, "x");
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  // The kernels walk memory with stride 1: a strided view (x[::2], x.t() of a matrix) would be
  // read in the wrong order. Copying it here would hide an extra pass over memory; refusing says
  // where that pass would go.
  course::check_contiguous(x, "x");
  const at::ScalarType dtype = x.scalar_type();

  // Custom ops get no device guard from the dispatcher: make x's GPU the current one, so the
  // kernel runs there and getCurrentCUDAStream() below is that GPU's stream.
  const c10::cuda::CUDAGuard device_guard(x.device());
  at::Tensor out = at::empty_like(x);  // same shape, dtype, device; contiguous like x
  const int64_t n = x.numel();
  if (n == 0) return out;  // a launch with 0 blocks is an error ("invalid configuration")

  // PyTorch's current stream, not the default stream: the op is then ordered after the work that
  // produced x and before whatever uses out, also inside torch.cuda.stream(...) blocks and CUDA
  // graphs, without synchronizing anything.
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "scale", [&] {
    scale_launch(cuda_ptr(x.const_data_ptr<scalar_t>()), cuda_ptr(out.mutable_data_ptr<scalar_t>()),
                 static_cast<acc_t<scalar_t>>(a), n, stream);
  });
  return out;
}

}  // namespace

// The schema: one string, parsed by PyTorch; "float" in a schema is a C++ double.
TORCH_LIBRARY(ex02, m) {
  m.def("scale(Tensor x, float a) -> Tensor");
}

// Registered as CompositeExplicitAutograd: one kernel for every device, so a CPU tensor reaches
// scale() and its TORCH_CHECK names x. Registered for the CUDA key alone, a CPU tensor would be
// stopped by the dispatcher with a generic "Could not run 'ex02::scale' with arguments from the
// 'CPU' backend" and a list of thirty dispatch keys, which tells the caller nothing about x.
// (Either way no autograd formula is registered: gradients through scale are not supported.)
TORCH_LIBRARY_IMPL(ex02, CompositeExplicitAutograd, m) {
  m.impl("scale", &scale);
}
