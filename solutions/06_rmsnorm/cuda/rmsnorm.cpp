// Exercise 06 — rmsnorm, CUDA C++ track, solved: the ops the dispatcher sees.
//
//   rmsnorm_fwd(x, w, eps)       -> (y, rstd)
//   rmsnorm_bwd(dy, x, w, rstd)  -> (dx, dw)
//
// This file checks the inputs (every message names the argument), allocates the outputs, picks
// the device, dispatches on the dtype and calls either the CUDA launchers (rmsnorm_kernels.cu)
// or the CPU loops below. It includes light ATen headers only (not <torch/extension.h>), and no
// kernel: it compiles once (~25 s on 2 cores) and editing a kernel does not recompile it.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "aten_cuda.h"

#include <cuda_bf16.h>  // the CUDA spellings of bfloat16 and half, for the launchers' types
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

// ---------------------------------------------------------------------------------------------
// the launchers (rmsnorm_kernels.cu, instantiated there for these four (T, A) pairs)

template <typename T, typename A>
void rmsnorm_fwd_launch(const T* x, const T* w, T* y, A* rstd, int64_t rows, int64_t N,
                        double eps, cudaStream_t stream);
template <typename T, typename A>
void rmsnorm_bwd_launch(const T* dy, const T* x, const T* w, const A* rstd, T* dx, T* dw,
                        A* partials, int64_t max_blocks, int64_t rows, int64_t N,
                        cudaStream_t stream);
int64_t rmsnorm_bwd_max_blocks(int64_t rows);

namespace {

// cuda_ptr turns at::BFloat16* into __nv_bfloat16* (at::Half* into __half*: the same
// 16 bits under two names) for the launchers; acc_t<T> is the math type (include/aten_cuda.h).
using course::acc_t;
using course::cuda_ptr;
using course::math_type;

// ---------------------------------------------------------------------------------------------
// argument checks (the same for CPU and CUDA) and shapes

// include/aten_cuda.h's checks: device, dtype, shape, strides; x, then w. The kernels take no
// row stride, so a strided x is refused, naming it (a hidden copy would be a pass over memory).
void check_inputs(const at::Tensor& x, const at::Tensor& w) {
  course::check_device(x, "x", /*cpu_ok=*/true);
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  course::check_rows(x, "x");
  TORCH_CHECK(x.size(-1) < (int64_t(1) << 31), "x's rows must have fewer than 2^31 elements, got ",
              x.size(-1));
  course::check_contiguous(x, "x");
  course::check_like(w, "w", x);
  course::check_vector(w, "w", x.size(-1), "x's last dimension");
}

void check_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& w,
                    const at::Tensor& rstd) {
  check_inputs(x, w);
  TORCH_CHECK(dy.sizes() == x.sizes() && dy.scalar_type() == x.scalar_type() &&
                  dy.device() == x.device(),
              "dy must have x's shape, dtype and device");
  TORCH_CHECK(rstd.numel() * x.size(-1) == x.numel() && rstd.device() == x.device() &&
                  rstd.scalar_type() == math_type(x),
              "rstd must be the second output of rmsnorm_fwd for this x");
}

// rstd has x's shape without the last dimension (a 0-d tensor for a 1-d x)
at::Tensor empty_rstd(const at::Tensor& x) {
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(math_type(x)));
}

// ---------------------------------------------------------------------------------------------
// CPU: the same math as plain loops (where to get the formulas right before any kernel)

template <typename T>
void fwd_cpu(const T* x, const T* w, T* y, acc_t<T>* rstd, int64_t rows, int64_t N, double eps) {
  using A = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * N;
    A ss = 0;
    for (int64_t j = 0; j < N; ++j) ss += static_cast<A>(xr[j]) * static_cast<A>(xr[j]);
    const A rs = A(1) / std::sqrt(ss / static_cast<A>(N) + static_cast<A>(eps));
    rstd[r] = rs;
    for (int64_t j = 0; j < N; ++j)
      y[r * N + j] = static_cast<T>(static_cast<A>(xr[j]) * rs * static_cast<A>(w[j]));
  }
}

template <typename T>
void bwd_cpu(const T* dy, const T* x, const T* w, const acc_t<T>* rstd, T* dx, T* dw,
             int64_t rows, int64_t N) {
  using A = acc_t<T>;
  std::vector<A> dw_acc(N, A(0));  // fp32 sums, rounded once at the end
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * N;
    const A rs = rstd[r];
    A s = 0;
    for (int64_t j = 0; j < N; ++j)
      s += static_cast<A>(x[o + j]) * static_cast<A>(w[j]) * static_cast<A>(dy[o + j]);
    const A c = s * rs * rs / static_cast<A>(N);
    for (int64_t j = 0; j < N; ++j) {
      const A xv = static_cast<A>(x[o + j]), dyv = static_cast<A>(dy[o + j]);
      dx[o + j] = static_cast<T>(rs * (static_cast<A>(w[j]) * dyv - xv * c));
      dw_acc[j] += dyv * xv * rs;
    }
  }
  for (int64_t j = 0; j < N; ++j) dw[j] = static_cast<T>(dw_acc[j]);
}

// ---------------------------------------------------------------------------------------------
// the ops

std::tuple<at::Tensor, at::Tensor> rmsnorm_fwd(const at::Tensor& x_in, const at::Tensor& w_in,
                                               double eps) {
  check_inputs(x_in, w_in);
  const bool cuda = x_in.is_cuda();
  std::optional<c10::cuda::CUDAGuard> guard;
  if (cuda) guard.emplace(x_in.device());  // custom ops get no device guard from the dispatcher
  const at::Tensor& x = x_in;                // contiguous: checked above
  const at::Tensor w = w_in.contiguous();  // N elements: a copy, if any, costs nothing
  const int64_t N = x.size(-1), rows = x.numel() / N;
  TORCH_CHECK(!cuda || rows < (int64_t(1) << 31), "x has too many rows for one launch: ", rows);
  at::Tensor y = at::empty_like(x);
  at::Tensor rstd = empty_rstd(x);
  if (rows == 0) return {y, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_fwd", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    A* rp = rstd.mutable_data_ptr<A>();
    if (cuda)
      rmsnorm_fwd_launch(cuda_ptr(xp), cuda_ptr(wp), cuda_ptr(yp), rp, rows, N, eps,
                         c10::cuda::getCurrentCUDAStream());
    else
      fwd_cpu(xp, wp, yp, rp, rows, N, eps);
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_bwd(const at::Tensor& dy_in, const at::Tensor& x_in,
                                               const at::Tensor& w_in, const at::Tensor& rstd_in) {
  check_backward(dy_in, x_in, w_in, rstd_in);
  const bool cuda = x_in.is_cuda();
  std::optional<c10::cuda::CUDAGuard> guard;
  if (cuda) guard.emplace(x_in.device());
  // dy often arrives strided (the gradient of a sum is an expanded scalar): copy it then
  const at::Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), w = w_in.contiguous(),
                   rstd = rstd_in.contiguous();
  const int64_t N = x.size(-1), rows = x.numel() / N;
  at::Tensor dx = at::empty_like(x);
  at::Tensor dw = at::empty_like(w);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "rmsnorm_bwd", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* dyp = dy.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    const A* rp = rstd.const_data_ptr<A>();
    scalar_t* dxp = dx.mutable_data_ptr<scalar_t>();
    scalar_t* dwp = dw.mutable_data_ptr<scalar_t>();
    if (!cuda) {
      bwd_cpu(dyp, xp, wp, rp, dxp, dwp, rows, N);
      return;
    }
    // dw partials: one row of the math type per block of the persistent backward kernel
    const int64_t max_blocks = rmsnorm_bwd_max_blocks(rows);
    at::Tensor partials = at::empty({max_blocks, N}, x.options().dtype(math_type(x)));
    rmsnorm_bwd_launch(cuda_ptr(dyp), cuda_ptr(xp), cuda_ptr(wp), rp, cuda_ptr(dxp),
                       cuda_ptr(dwp), partials.mutable_data_ptr<A>(), max_blocks, rows, N,
                       c10::cuda::getCurrentCUDAStream());
  });
  return {dx, dw};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// registration: the schema once, then one implementation per backend. The fake (meta) kernels
// and the autograd formula are registered from Python (rmsnorm.py).

TORCH_LIBRARY(ex06_cuda, m) {
  m.def("rmsnorm_fwd(Tensor x, Tensor w, float eps) -> (Tensor, Tensor)");
  m.def("rmsnorm_bwd(Tensor dy, Tensor x, Tensor w, Tensor rstd) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ex06_cuda, CUDA, m) {
  m.impl("rmsnorm_fwd", &rmsnorm_fwd);
  m.impl("rmsnorm_bwd", &rmsnorm_bwd);
}

TORCH_LIBRARY_IMPL(ex06_cuda, CPU, m) {
  m.impl("rmsnorm_fwd", &rmsnorm_fwd);
  m.impl("rmsnorm_bwd", &rmsnorm_bwd);
}
