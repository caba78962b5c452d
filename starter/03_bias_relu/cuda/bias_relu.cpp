// Exercise 03 — bias_relu: the pybind11 binding, the input checks, the device dispatch and the
// C++ CPU path (TODOs 2, 3, 4 and 7).
//
// This is the file that knows PyTorch's C++ API: ATen (at::Tensor, its ops, the dtype dispatch)
// and pybind11 with torch's type casters, which is what lets `m.def` below turn Python tensors
// into at::Tensor arguments and back. <torch/extension.h>, the usual one-stop header, brings the
// same two plus the whole C++ frontend (torch::nn, optimizers, ...), which this file does not
// use: with the two headers below it compiles in about half the time (docs/performance.md,
// "build-times"). The kernels live in bias_relu_kernels.cu, which includes no PyTorch header:
// editing a kernel recompiles only that file (a few seconds), never this one.
//
// Given: the includes, the declarations of the CUDA launchers (the contract between the two
// files: same names and signatures on both sides, or the module fails to load with
// "undefined symbol"), the CUDA path around them (forward_cuda, backward_cuda), the function
// signatures and the PYBIND11_MODULE block, which is the same in every extension. Yours: the
// bodies.

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/utils/pybind.h>  // pybind11, and its casters for at::Tensor

#include "aten_cuda.h"

#include <cuda_bf16.h>  // the CUDA spellings of bfloat16 and half, for the launchers' types
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <tuple>
#include <vector>

// Defined in bias_relu_kernels.cu (compiled by nvcc, linked into the same module), instantiated
// there for T = float, double, __half, __nv_bfloat16 with A their math type (float; double for
// double). Raw device pointers and a stream: the kernels' file needs no PyTorch header.
template <typename T, typename A>
void bias_relu_fwd_launch(const T* x, const T* bias, T* y, int64_t M, int64_t N, A scale,
                          cudaStream_t stream);
template <typename T>
int64_t bias_relu_bwd_partial_rows(const T* grad_y, const T* y, const T* grad_x, int64_t M,
                                   int64_t N);
template <typename T, typename A>
void bias_relu_bwd_launch(const T* grad_y, const T* y, T* grad_x, T* grad_bias, A* partials,
                          int64_t partial_rows, int64_t M, int64_t N, A scale,
                          cudaStream_t stream);

namespace {

bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

// TODO 3 (about 12 lines): y = relu(x * scale + bias) on the CPU, x contiguous [M, N].
//   y = at::empty_like(x); then
//   AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "forward_cpu", [&] {
//     using acc_t = at::opmath_type<scalar_t>;   // float for fp16/bf16: compute in float32
//     const scalar_t* xp = x.const_data_ptr<scalar_t>();  ... two loops over i < M, j < N:
//     element (i, j) is xp[i * N + j], its bias bp[j]
//   });
at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& bias, double scale) {
  TORCH_CHECK(false, "forward_cpu: not implemented yet (TODO 3 in cuda/bias_relu.cpp)");
  return at::Tensor();
}

// TODO 7b (about 15 lines): the CPU backward, grad_y and y contiguous [M, N].
//   grad_x[i, j] = (y[i, j] > 0 ? grad_y[i, j] : 0) * scale
//   grad_bias[j] = sum over i of (y[i, j] > 0 ? grad_y[i, j] : 0)
//   Sum in acc_t (a std::vector<acc_t> of N zeros), cast to scalar_t once at the end.
std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_y, const at::Tensor& y,
                                                double scale) {
  TORCH_CHECK(false, "backward_cpu: not implemented yet (TODO 7 in cuda/bias_relu.cpp)");
  return {};
}

// ---------------------------------------------------------------------------------------------
// Given: the CUDA path, the tensors around the launchers (TODO 5 and 8 write those). cuda_ptr turns at::BFloat16* into
// __nv_bfloat16* (at::Half* into __half*: the same 16 bits under two names); acc_t<T> is the math
// type (include/aten_cuda.h).

using course::acc_t;
using course::cuda_ptr;

at::Tensor forward_cuda(const at::Tensor& x, const at::Tensor& bias, double scale) {
  const c10::cuda::CUDAGuard guard(x.device());  // launch on x's GPU, not on GPU 0
  at::Tensor y = at::empty_like(x);
  const int64_t M = x.size(0), N = x.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                  "bias_relu_forward_cuda", [&] {
    // the stream PyTorch is using right now (torch.cuda.stream(...) included), never stream 0
    bias_relu_fwd_launch(cuda_ptr(x.const_data_ptr<scalar_t>()),
                         cuda_ptr(bias.const_data_ptr<scalar_t>()),
                         cuda_ptr(y.mutable_data_ptr<scalar_t>()), M, N,
                         static_cast<acc_t<scalar_t>>(scale), c10::cuda::getCurrentCUDAStream());
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_y, const at::Tensor& y,
                                                 double scale) {
  const c10::cuda::CUDAGuard guard(y.device());
  const int64_t M = y.size(0), N = y.size(1);
  at::Tensor grad_x = at::empty_like(y);
  at::Tensor grad_bias = at::empty({N}, y.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(),
                                  "bias_relu_backward_cuda", [&] {
    using T = typename course::Cuda<scalar_t>::type;
    using A = acc_t<scalar_t>;
    const T* gyp = cuda_ptr(grad_y.const_data_ptr<scalar_t>());
    const T* yp = cuda_ptr(y.const_data_ptr<scalar_t>());
    T* gxp = cuda_ptr(grad_x.mutable_data_ptr<scalar_t>());
    // one partial row per block row of the backward's grid (the launcher says how many), in
    // fp32 whatever the storage dtype (fp64 for fp64): rounding each partial to fp16 would
    // throw away the accuracy the fp32 accumulation bought
    const int64_t rows = bias_relu_bwd_partial_rows(gyp, yp, gxp, M, N);
    const at::Tensor partials = at::empty({rows, N}, y.options().dtype(course::math_type(y)));
    bias_relu_bwd_launch(gyp, yp, gxp, cuda_ptr(grad_bias.mutable_data_ptr<scalar_t>()),
                         partials.mutable_data_ptr<A>(), rows, M, N, static_cast<A>(scale),
                         c10::cuda::getCurrentCUDAStream());
  });
  return {grad_x, grad_bias};
}

}  // namespace

// TODO 2 (about 8 lines): check the inputs, each message naming the argument, e.g.
//     TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, N], got shape ", x.sizes());
//   x: 2-D; a supported dtype; on a CUDA device or the CPU. bias: 1-D of size N = x.size(1);
//   on x's device; x's dtype.
// TODO 4 (about 3 lines): the kernels read rows as dense memory: make x and bias contiguous
//   (.contiguous() is free when they already are), then call forward_cuda (given above)
//   when x.is_cuda(), forward_cpu otherwise.
at::Tensor bias_relu_forward(const at::Tensor& x, const at::Tensor& bias, double scale) {
  TORCH_CHECK(false, "bias_relu_forward: not implemented yet (TODOs 2-4 in cuda/bias_relu.cpp: "
                     "check the inputs, the CPU loop, the dispatch)");
  return at::Tensor();
}

// TODO 7a (about 8 lines): check grad_y against y (same shape, device, dtype; contiguous:
// refuse a strided grad_y naming it, bias_relu.py makes it contiguous), then dispatch:
// backward_cuda or backward_cpu.
std::tuple<at::Tensor, at::Tensor> bias_relu_backward(const at::Tensor& grad_y, const at::Tensor& y,
                                                      double scale) {
  TORCH_CHECK(false, "bias_relu_backward: not implemented yet (TODO 7 in cuda/bias_relu.cpp)");
  return {};
}

// Given. Python sees bias_relu_ext.forward(x, bias, scale) and bias_relu_ext.backward(grad_y,
// y, scale); pybind11 converts tensors, the float and the returned tuple. TORCH_EXTENSION_NAME
// is the module name the build passes in (bias_relu_ext).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "bias_relu: y = relu(x * scale + bias), forward and backward, on CUDA and CPU";
  m.def("forward", &bias_relu_forward, "y = relu(x * scale + bias) for x [M, N], bias [N]",
        py::arg("x"), py::arg("bias"), py::arg("scale"));
  m.def("backward", &bias_relu_backward,
        "(grad_x, grad_bias) = (grad_y * (y > 0) * scale, sum over rows of grad_y * (y > 0))",
        py::arg("grad_y"), py::arg("y"), py::arg("scale"));
}
