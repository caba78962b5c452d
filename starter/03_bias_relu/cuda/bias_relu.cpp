// Exercise 03 — bias_relu: the pybind11 binding, the input checks, the device dispatch and the
// C++ CPU path (TODOs 2, 3, 4 and 7).
//
// This is the one file that includes <torch/extension.h>: it brings pybind11 and torch's whole
// C++ API, which is what lets `m.def` below turn Python tensors into at::Tensor arguments and
// back. That is also why it takes about a minute to compile (76 s on 2 cores) against ~25 s
// for a file with light headers, and why the kernels live in bias_relu_kernels.cu: editing a
// kernel recompiles only that file, never this one.
//
// Given: the includes, the declarations of the CUDA launchers (the contract between the two
// files: same names and signatures on both sides, or the module fails to load with
// "undefined symbol"), the function signatures and the PYBIND11_MODULE block, which is the
// same in every extension. Yours: the bodies.

#include <torch/extension.h>

#include <ATen/OpMathType.h>

#include <tuple>
#include <vector>

// Defined in bias_relu_kernels.cu (compiled by nvcc, linked into the same module).
at::Tensor bias_relu_forward_cuda(const at::Tensor& x, const at::Tensor& bias, double scale);
std::tuple<at::Tensor, at::Tensor> bias_relu_backward_cuda(const at::Tensor& grad_y,
                                                           const at::Tensor& y, double scale);

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

}  // namespace

// TODO 2 (about 8 lines): check the inputs, each message naming the argument, e.g.
//     TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, N], got shape ", x.sizes());
//   x: 2-D; a supported dtype; on a CUDA device or the CPU. bias: 1-D of size N = x.size(1);
//   on x's device; x's dtype.
// TODO 4 (about 3 lines): the kernels read rows as dense memory: make x and bias contiguous
//   (.contiguous() is free when they already are), then call bias_relu_forward_cuda when
//   x.is_cuda(), forward_cpu otherwise.
at::Tensor bias_relu_forward(const at::Tensor& x, const at::Tensor& bias, double scale) {
  TORCH_CHECK(false, "bias_relu_forward: not implemented yet (TODOs 2-4 in cuda/bias_relu.cpp: "
                     "check the inputs, the CPU loop, the dispatch)");
  return at::Tensor();
}

// TODO 7a (about 8 lines): check grad_y against y (same shape, device, dtype; contiguous:
// refuse a strided grad_y naming it, bias_relu.py makes it contiguous), then dispatch:
// bias_relu_backward_cuda or backward_cpu.
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
