// Exercise 03 — bias_relu, solved: the pybind11 binding, the input checks, the device dispatch,
// the tensors around the CUDA launchers, and the C++ CPU path.
//
// This is the file that knows PyTorch's C++ API: ATen (at::Tensor, its ops, the dtype dispatch)
// and pybind11 with torch's type casters, which is what lets `m.def` below turn at::Tensor
// arguments into Python tensors and back. <torch/extension.h>, the usual one-stop header, brings
// the same two plus the whole C++ frontend (torch::nn, optimizers, data loaders), which this
// file does not use: with the two headers below it compiles in about half the time
// (docs/performance.md, "build-times"). It holds no kernel: editing a kernel recompiles only
// bias_relu_kernels.cu.
//
// Python sees two functions, `bias_relu_ext.forward` and `bias_relu_ext.backward`;
// bias_relu.py wraps them in a torch.autograd.Function.

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

// ---------------------------------------------------------------------------------------------
// the CPU path: plain loops, the same math as the kernels (fp32 for fp16/bf16, fp64 for fp64).
// Single-threaded on purpose: it is the reference-sized fallback (and what the checks run
// without a GPU), and one thread summing grad_bias row by row is deterministic for free.

at::Tensor forward_cpu(const at::Tensor& x, const at::Tensor& bias, double scale) {
  at::Tensor y = at::empty_like(x);
  const int64_t M = x.size(0), N = x.size(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "bias_relu_forward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* bp = bias.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    const acc_t s = static_cast<acc_t>(scale);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const acc_t z = static_cast<acc_t>(xp[i * N + j]) * s + static_cast<acc_t>(bp[j]);
        yp[i * N + j] = static_cast<scalar_t>(z < acc_t(0) ? acc_t(0) : z);
      }
    }
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_y, const at::Tensor& y,
                                                double scale) {
  at::Tensor grad_x = at::empty_like(y);
  const int64_t M = y.size(0), N = y.size(1);
  at::Tensor grad_bias = at::empty({N}, y.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, y.scalar_type(), "bias_relu_backward_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* gp = grad_y.const_data_ptr<scalar_t>();
    const scalar_t* yp = y.const_data_ptr<scalar_t>();
    scalar_t* gxp = grad_x.mutable_data_ptr<scalar_t>();
    scalar_t* gbp = grad_bias.mutable_data_ptr<scalar_t>();
    const acc_t s = static_cast<acc_t>(scale);
    std::vector<acc_t> sum(N, acc_t(0));  // fp32 column sums, rounded once at the end
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        const int64_t k = i * N + j;
        const acc_t g = static_cast<acc_t>(yp[k]) > acc_t(0) ? static_cast<acc_t>(gp[k]) : acc_t(0);
        gxp[k] = static_cast<scalar_t>(g * s);
        sum[j] += g;
      }
    }
    for (int64_t j = 0; j < N; ++j) gbp[j] = static_cast<scalar_t>(sum[j]);
  });
  return {grad_x, grad_bias};
}

// ---------------------------------------------------------------------------------------------
// the CUDA path: the tensors around the launchers. cuda_ptr turns at::BFloat16* into
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

// ---------------------------------------------------------------------------------------------
// what Python calls: check, make contiguous, dispatch on the device

at::Tensor bias_relu_forward(const at::Tensor& x, const at::Tensor& bias, double scale) {
  // Every message names the argument and says what was expected and what came: a learner (or
  // a user of the module) reads this, not a stack trace.
  course::check_device(x, "x", /*cpu_ok=*/true);
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, N], got shape ", x.sizes());
  course::check_like(bias, "bias", x);
  course::check_vector(bias, "bias", x.size(1), "N = x.size(1)");
  // The kernels read rows as dense memory. A strided view (x.t(), x[:, ::2]) is copied once
  // here: one extra pass over x, paid only by callers who pass one (free when x is contiguous).
  const at::Tensor xc = x.contiguous();
  const at::Tensor bc = bias.contiguous();
  return x.is_cuda() ? forward_cuda(xc, bc, scale) : forward_cpu(xc, bc, scale);
}

std::tuple<at::Tensor, at::Tensor> bias_relu_backward(const at::Tensor& grad_y, const at::Tensor& y,
                                                      double scale) {
  course::check_device(y, "y", /*cpu_ok=*/true);
  course::check_dtype(y, "y", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  TORCH_CHECK(y.dim() == 2, "y must be the 2-D output of forward, got shape ", y.sizes());
  course::check_like(grad_y, "grad_y", y, "y");
  TORCH_CHECK(grad_y.sizes() == y.sizes(), "grad_y must have y's shape ", y.sizes(), ", got ",
              grad_y.sizes());
  // Refused rather than copied: autograd hands backward whatever gradient it has, e.g. an
  // expanded one with strides (0, 0) after y.sum().backward(). The autograd.Function decides
  // to pay for .contiguous(); a kernel reading it as dense memory would read garbage.
  course::check_contiguous(grad_y, "grad_y");
  course::check_contiguous(y, "y");
  return y.is_cuda() ? backward_cuda(grad_y, y, scale) : backward_cpu(grad_y, y, scale);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "bias_relu: y = relu(x * scale + bias), forward and backward, on CUDA and CPU";
  m.def("forward", &bias_relu_forward, "y = relu(x * scale + bias) for x [M, N], bias [N]",
        py::arg("x"), py::arg("bias"), py::arg("scale"));
  m.def("backward", &bias_relu_backward,
        "(grad_x, grad_bias) = (grad_y * (y > 0) * scale, sum over rows of grad_y * (y > 0))",
        py::arg("grad_y"), py::arg("y"), py::arg("scale"));
}
