// Exercise 09 — rmsnorm_quant, CUDA track, solved: the op's schema, the input checks, the dtype
// dispatch, the CUDA launch and the C++ CPU path.
//
// Light headers only (no <torch/extension.h>, no pybind11): this file compiles once, in ~25 s
// on 2 cores; editing a kernel recompiles only rmsnorm_quant_kernels.cu. The op is registered
// with TORCH_LIBRARY, so Python calls it as torch.ops.ex09_cuda.rmsnorm_quant (rmsnorm_quant.py
// adds the fake kernel that torch.compile and opcheck need).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "aten_cuda.h"  // the argument checks every exercise shares

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

// The kernels' element types, declared here without the CUDA headers: at::Half and
// at::BFloat16 have the same 2-byte layout, so their pointers are passed by reinterpret_cast.
struct __half;
struct __nv_bfloat16;

// Defined in rmsnorm_quant_kernels.cu.
void rmsnorm_quant_cuda_f32(const float* x, const float* w, int8_t* q, float* scale, int64_t rows,
                            int64_t row_stride, int64_t N, float eps, cudaStream_t stream);
void rmsnorm_quant_cuda_f16(const __half* x, const __half* w, int8_t* q, float* scale,
                            int64_t rows, int64_t row_stride, int64_t N, float eps,
                            cudaStream_t stream);
void rmsnorm_quant_cuda_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, int8_t* q,
                             float* scale, int64_t rows, int64_t row_stride, int64_t N, float eps,
                             cudaStream_t stream);

namespace {

constexpr float kQMax = 127.f;

// include/aten_cuda.h's checks: device, dtype, shape, strides (row_stride_of below); x, then w.
void check_inputs(const at::Tensor& x, const at::Tensor& w) {
  course::check_device(x, "x", /*cpu_ok=*/true);
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16});
  course::check_rows(x, "x");
  TORCH_CHECK(x.size(-1) < (int64_t(1) << 31), "x's rows must have fewer than 2^31 elements, got ",
              x.size(-1));
  course::check_like(w, "w", x);
  course::check_vector(w, "w", x.size(-1), "x's last dimension");
}

// The distance between row starts, in elements. The kernels read each row in place, so any x
// whose rows are contiguous works: a contiguous x, or a 2-D view such as x[:, a:b] of wider
// rows. Anything else (a transpose, every other column) is refused: a hidden copy would be a
// full extra pass over memory, and the caller should see it.
int64_t row_stride_of(const at::Tensor& x) {
  const int64_t N = x.size(-1);
  if (x.is_contiguous()) return N;
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1,
              "x must be contiguous, or a 2-D view whose rows are contiguous (x.stride(-1) == "
              "1); got shape ", x.sizes(), " and strides ", x.strides(),
              ": call x.contiguous() first");
  return x.size(0) == 1 ? N : x.stride(0);
}

std::tuple<at::Tensor, at::Tensor> empty_outputs(const at::Tensor& x) {
  at::Tensor q = at::empty(x.sizes(), x.options().dtype(at::kChar));
  at::Tensor scale = at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(at::kFloat));
  return {q, scale};
}

// ---------------------------------------------------------------------------------------------
// CUDA

std::tuple<at::Tensor, at::Tensor> rmsnorm_quant_cuda(const at::Tensor& x, const at::Tensor& w_in,
                                                      double eps) {
  check_inputs(x, w_in);
  const int64_t row_stride = row_stride_of(x);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor w = w_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  TORCH_CHECK(rows < (int64_t(1) << 31), "x has too many rows for one launch: ", rows);
  auto [q, scale] = empty_outputs(x);
  if (rows == 0) return {q, scale};
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  int8_t* qp = q.mutable_data_ptr<int8_t>();
  float* sp = scale.mutable_data_ptr<float>();
  const float e = static_cast<float>(eps);
  switch (x.scalar_type()) {
    case at::kFloat:
      rmsnorm_quant_cuda_f32(x.const_data_ptr<float>(), w.const_data_ptr<float>(), qp, sp, rows,
                             row_stride, N, e, stream);
      break;
    case at::kHalf:
      rmsnorm_quant_cuda_f16(reinterpret_cast<const __half*>(x.const_data_ptr<at::Half>()),
                             reinterpret_cast<const __half*>(w.const_data_ptr<at::Half>()), qp,
                             sp, rows, row_stride, N, e, stream);
      break;
    default:
      rmsnorm_quant_cuda_bf16(
          reinterpret_cast<const __nv_bfloat16*>(x.const_data_ptr<at::BFloat16>()),
          reinterpret_cast<const __nv_bfloat16*>(w.const_data_ptr<at::BFloat16>()), qp, sp, rows,
          row_stride, N, e, stream);
  }
  return {q, scale};
}

// ---------------------------------------------------------------------------------------------
// CPU: the same math as plain loops (where to get the rules right before any kernel). The sum
// of squares is kept in double: one thread summing 65536 squares in float drifts further from
// the float64 reference than a GPU's tree of partial sums does.

template <typename T>
void quantize_rows_cpu(const T* x, const T* w, int8_t* q, float* scale, int64_t rows,
                       int64_t row_stride, int64_t N, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * row_stride;
    int8_t* qr = q + r * N;
    double ss = 0.0;
    float mx = 0.f;
    for (int64_t c = 0; c < N; ++c) {
      const float xv = static_cast<float>(xr[c]);
      ss += double(xv) * xv;
      mx = std::max(mx, std::fabs(xv * static_cast<float>(w[c])));
    }
    const float rstd = 1.f / std::sqrt(static_cast<float>(ss / N) + eps);
    const float amax = mx * rstd;  // = max|(x*w)*rstd|: rounding is monotonic
    const bool nonzero = amax > 0.f;
    const float safe = nonzero ? amax : kQMax;
    scale[r] = safe / kQMax;
    const float inv = nonzero ? kQMax / safe : 0.f;
    for (int64_t c = 0; c < N; ++c) {
      const float y = (static_cast<float>(xr[c]) * static_cast<float>(w[c])) * rstd;
      const float v = std::nearbyint(y * inv);  // the default rounding mode: half to even
      qr[c] = static_cast<int8_t>(std::min(std::max(v, -kQMax), kQMax));
    }
  }
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_quant_cpu(const at::Tensor& x, const at::Tensor& w_in,
                                                     double eps) {
  check_inputs(x, w_in);
  const int64_t row_stride = row_stride_of(x);
  const at::Tensor w = w_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  auto [q, scale] = empty_outputs(x);
  int8_t* qp = q.mutable_data_ptr<int8_t>();
  float* sp = scale.mutable_data_ptr<float>();
  const float e = static_cast<float>(eps);
  switch (x.scalar_type()) {
    case at::kFloat:
      quantize_rows_cpu(x.const_data_ptr<float>(), w.const_data_ptr<float>(), qp, sp, rows,
                        row_stride, N, e);
      break;
    case at::kHalf:
      quantize_rows_cpu(x.const_data_ptr<at::Half>(), w.const_data_ptr<at::Half>(), qp, sp, rows,
                        row_stride, N, e);
      break;
    default:
      quantize_rows_cpu(x.const_data_ptr<at::BFloat16>(), w.const_data_ptr<at::BFloat16>(), qp,
                        sp, rows, row_stride, N, e);
  }
  return {q, scale};
}

}  // namespace

TORCH_LIBRARY(ex09_cuda, m) {
  m.def("rmsnorm_quant(Tensor x, Tensor w, float eps) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ex09_cuda, CUDA, m) { m.impl("rmsnorm_quant", &rmsnorm_quant_cuda); }

TORCH_LIBRARY_IMPL(ex09_cuda, CPU, m) { m.impl("rmsnorm_quant", &rmsnorm_quant_cpu); }
