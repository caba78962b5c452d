// Exercise 04 — reduce_sum, solved: the ops, their input checks, the CPU path and the
// registration with PyTorch's dispatcher.
//
//   ex04_cuda::reduce_sum(Tensor x) -> Tensor        0-d: the sum of every element of x
//   ex04_cuda::reduce_sum_rows(Tensor x) -> Tensor   [M]: the sum of each row of x [M, N]
//
// The result is float32 for float16, bfloat16 and float32 inputs (a 16-bit result would throw
// away the bits the float32 sum kept) and float64 for float64.
//
// Light headers only (no <torch/extension.h>): this file compiles in ~15-25 s, once; the kernels
// live in reduce_sum_kernels.cu, which nvcc rebuilds alone in seconds when you edit it.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "aten_cuda.h"
#include "reduce_sum.h"

namespace {

// ---------------------------------------------------------------------------------------------
// checks (aten_cuda.h): device, dtype, shape, strides; every message names x

void check_x(const at::Tensor& x) {
  course::check_device(x, "x", /*cpu_ok=*/true);
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  // The kernels walk memory with stride 1. A strided view (x.t(), x[:, ::2]) would be read in
  // the wrong order; copying it here would hide a whole extra pass over memory (as slow as the
  // sum itself), so it is refused and the caller decides.
  course::check_contiguous(x, "x");
}

at::ScalarType result_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// ---------------------------------------------------------------------------------------------
// CPU path: plain loops. One accumulator per row in double, rounded once at the end: as exact
// as a float64 sum, and deterministic (one thread, one order).

void sum_rows_cpu(const at::Tensor& x, int64_t rows, int64_t cols, at::Tensor& out) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_sum_cpu", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    out_t* op = out.mutable_data_ptr<out_t>();
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(xp[r * cols + c]);
      op[r] = static_cast<out_t>(s);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// CUDA path: the launch plan, a workspace for the per-block partials, the launches

void sum_rows_cuda(const at::Tensor& x, int64_t rows, int64_t cols, at::Tensor& out) {
  // Custom ops get no device guard from the dispatcher: make x's GPU the current one, so the
  // kernels run there and getCurrentCUDAStream() is that GPU's stream.
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), "x has ", rows,
              " rows: at most 2^31 - 1 are supported (one block per row)");
  const int splits = rows == 0 ? 1 : ex04::splits_for(rows, cols, int(x.element_size()));
  // one partial per block; the allocator hands it back to PyTorch's cache when we return
  at::Tensor partials = at::empty({splits > 1 ? rows * splits : 0}, out.options());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "reduce_sum_cuda", [&] {
    using out_t = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    // at::Half / at::BFloat16 have the layout of __half / __nv_bfloat16
    using cuda_t = std::conditional_t<std::is_same_v<scalar_t, at::Half>, __half,
                   std::conditional_t<std::is_same_v<scalar_t, at::BFloat16>, __nv_bfloat16,
                                      scalar_t>>;
    ex04::sum_rows<cuda_t>(reinterpret_cast<const cuda_t*>(x.const_data_ptr<scalar_t>()),
                                 rows, cols, splits, partials.mutable_data_ptr<out_t>(),
                                 out.mutable_data_ptr<out_t>(), stream);
  });
}

void sum_rows_any(const at::Tensor& x, int64_t rows, int64_t cols, at::Tensor& out) {
  if (x.is_cuda()) {
    sum_rows_cuda(x, rows, cols, out);
  } else {
    sum_rows_cpu(x, rows, cols, out);
  }
}

// ---------------------------------------------------------------------------------------------
// the ops

at::Tensor reduce_sum(const at::Tensor& x) {
  check_x(x);
  at::Tensor out = at::empty(at::IntArrayRef{}, x.options().dtype(result_type(x)));
  sum_rows_any(x, 1, x.numel(), out);  // the whole tensor as one row
  return out;
}

at::Tensor reduce_sum_rows(const at::Tensor& x) {
  check_x(x);
  TORCH_CHECK(x.dim() == 2, "x must be 2-D [M, N], got shape ", x.sizes());
  at::Tensor out = at::empty({x.size(0)}, x.options().dtype(result_type(x)));
  sum_rows_any(x, x.size(0), x.size(1), out);
  return out;
}

}  // namespace

TORCH_LIBRARY(ex04_cuda, m) {
  m.def("reduce_sum(Tensor x) -> Tensor");
  m.def("reduce_sum_rows(Tensor x) -> Tensor");
}

// One implementation per device key. A tensor on any other device is stopped by the dispatcher.
TORCH_LIBRARY_IMPL(ex04_cuda, CUDA, m) {
  m.impl("reduce_sum", &reduce_sum);
  m.impl("reduce_sum_rows", &reduce_sum_rows);
}

TORCH_LIBRARY_IMPL(ex04_cuda, CPU, m) {
  m.impl("reduce_sum", &reduce_sum);
  m.impl("reduce_sum_rows", &reduce_sum_rows);
}
