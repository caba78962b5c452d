// Exercise 07 — layernorm, CUDA C++ track, solved: the ops the dispatcher sees.
//
//   layernorm_fwd(x, w, b, eps)                      -> (y, mean, rstd)
//   layernorm_bwd(dy, x, w, mean, rstd, output_mask) -> (dx?, dw?, db?)
//
// This file checks the inputs (every message names the argument), allocates the outputs, picks
// the device, dispatches on the dtype and calls either the CUDA launchers (layernorm_fwd.cu,
// layernorm_bwd.cu) or the CPU loops below. It includes light ATen headers only (not
// <torch/extension.h>), and no kernel: it compiles once (~25 s on 2 cores) and editing a kernel
// does not recompile it.

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "aten_cuda.h"

#include <cuda_bf16.h>  // the CUDA spellings of bfloat16 and half, for the launchers' types
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <vector>

// ---------------------------------------------------------------------------------------------
// the launchers (layernorm_fwd.cu, layernorm_bwd.cu: instantiated there for these four (T, A)
// pairs)

template <typename T, typename A>
void layernorm_fwd_launch(const T* x, int64_t ldx, const T* w, const T* b, T* y, A* mean, A* rstd,
                          int64_t rows, int64_t N, double eps, cudaStream_t stream);
template <typename T, typename A>
void layernorm_bwd_launch(const T* dy, const T* x, int64_t ldx, const T* w, const A* mean,
                          const A* rstd, T* dx, T* dw, T* db, A* partials, int64_t max_blocks,
                          int64_t rows, int64_t N, cudaStream_t stream);
int64_t layernorm_bwd_max_blocks(int64_t rows);

namespace {

// cuda_ptr turns at::BFloat16* into __nv_bfloat16* (at::Half* into __half*: the same
// 16 bits under two names) for the launchers; acc_t<T> is the math type (include/aten_cuda.h).
using course::acc_t;
using course::cuda_ptr;
using course::math_type;

// ---------------------------------------------------------------------------------------------
// argument checks (the same for CPU and CUDA) and layout

// The elements between consecutive rows, if x's rows are evenly spaced with their elements
// next to each other (x, x[:, :N] of a wider matrix, x[::2]); -1 otherwise (x.t(), x[:, ::2]).
// The kernels take this row stride, so such views are read in place, without a copy.
int64_t row_stride(const at::Tensor& x) {
  const int64_t N = x.size(-1);
  if (N > 1 && x.stride(-1) != 1) return -1;
  int64_t ld = -1, expect = 0;
  for (int64_t d = x.dim() - 2; d >= 0; --d) {  // the leading dims must merge into one
    if (x.size(d) == 1) continue;
    if (ld < 0) {
      ld = x.stride(d);
    } else if (x.stride(d) != expect) {
      return -1;
    }
    expect = x.stride(d) * x.size(d);
  }
  return ld < 0 ? N : ld;
}

// include/aten_cuda.h's checks: device, dtype, shape, strides; x, then w and b. The kernels take
// x's row stride, so views whose rows are evenly spaced are read in place; others are refused.
void check_param(const at::Tensor& p, const char* name, const at::Tensor& x) {
  course::check_like(p, name, x);
  course::check_vector(p, name, x.size(-1), "x's last dimension");
}

void check_x(const at::Tensor& x) {
  course::check_device(x, "x", /*cpu_ok=*/true);
  course::check_dtype(x, "x", {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble});
  course::check_rows(x, "x");
  TORCH_CHECK(row_stride(x) >= 0, "x must have rows of contiguous elements at a fixed stride "
              "(x, x[:, :N] or x[::2] are fine), got sizes ", x.sizes(), " and strides ",
              x.strides(), "; pass x.contiguous()");
}

void check_inputs(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  check_x(x);
  check_param(w, "w", x);
  check_param(b, "b", x);
}

void check_stats(const at::Tensor& s, const char* name, const at::Tensor& x) {
  TORCH_CHECK(s.numel() * x.size(-1) == x.numel() && s.device() == x.device() &&
                  s.scalar_type() == math_type(x) && s.is_contiguous(),
              name, " must be the ", name, " output of layernorm_fwd for this x (",
              x.numel() / x.size(-1), " values of ", math_type(x), "), got ", s.sizes(), " ",
              s.scalar_type());
}

at::Tensor empty_stats(const at::Tensor& x) {  // x's shape without the last dim (0-d for 1-d x)
  return at::empty(x.sizes().slice(0, x.dim() - 1), x.options().dtype(math_type(x)));
}

// ---------------------------------------------------------------------------------------------
// CPU: the same math as plain loops (where to get the formulas right before any kernel)

// The statistics of one row as (n, mean, M2 = sum (x - mean)^2), never as sum(x^2): with mean
// 1e4 and variance 1, sum(x^2) / N ~ 1e8 has a float32 spacing of 8 and the variance drowns.
// Welford's update inside chunks of 16 values, and the chunks merged pairwise with Chan's
// formula (a tree, as the GPU merges lanes and warps). One long chain of per-element updates
// would stall in float32: on a row of 4096 values near 1e4 the update d / n falls below half a
// unit in the mean's last place, and the mean drifts by tens of units in that place.
template <typename A>
struct Stats {
  A n, mean, m2;
};

template <typename A>
Stats<A> merge(const Stats<A>& a, const Stats<A>& b) {
  const A n = a.n + b.n, d = b.mean - a.mean, fb = b.n / n;
  return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * a.n * fb};
}

template <typename A, typename T>
Stats<A> row_stats(const T* x, int64_t n) {
  if (n > 16) {
    const int64_t h = n / 2;
    return merge(row_stats<A>(x, h), row_stats<A>(x + h, n - h));
  }
  A mu = 0, m2 = 0;  // Welford: a run of equal values keeps mu exact and m2 = 0
  for (int64_t j = 0; j < n; ++j) {
    const A v = static_cast<A>(x[j]);
    const A d = v - mu;
    mu += d / static_cast<A>(j + 1);
    m2 += d * (v - mu);
  }
  return {static_cast<A>(n), mu, m2};
}

template <typename T>
void fwd_cpu(const T* x, int64_t ldx, const T* w, const T* b, T* y, acc_t<T>* mean,
             acc_t<T>* rstd, int64_t rows, int64_t N, double eps) {
  using A = acc_t<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * ldx;
    const Stats<A> st = row_stats<A>(xr, N);
    const A mu = st.mean;
    const A rs = A(1) / std::sqrt(st.m2 / static_cast<A>(N) + static_cast<A>(eps));
    mean[r] = mu;
    rstd[r] = rs;
    for (int64_t j = 0; j < N; ++j)
      y[r * N + j] = static_cast<T>((static_cast<A>(xr[j]) - mu) * rs * static_cast<A>(w[j]) +
                                    static_cast<A>(b[j]));
  }
}

template <typename T>
void bwd_cpu(const T* dy, const T* x, int64_t ldx, const T* w, const acc_t<T>* mean,
             const acc_t<T>* rstd, T* dx, T* dw, T* db, int64_t rows, int64_t N) {
  using A = acc_t<T>;
  std::vector<A> dw_acc(N, A(0)), db_acc(N, A(0));  // fp32 sums, rounded once at the end
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * ldx;
    const T* dyr = dy + r * N;
    const A mu = mean[r], rs = rstd[r];
    A s1 = 0, s2 = 0;
    for (int64_t j = 0; j < N; ++j) {
      const A xh = (static_cast<A>(xr[j]) - mu) * rs, d = static_cast<A>(dyr[j]);
      const A g = d * static_cast<A>(w[j]);
      s1 += g;
      s2 += g * xh;
      dw_acc[j] += d * xh;
      db_acc[j] += d;
    }
    if (dx) {
      const A c1 = s1 / static_cast<A>(N), c2 = s2 / static_cast<A>(N);
      for (int64_t j = 0; j < N; ++j) {
        const A xh = (static_cast<A>(xr[j]) - mu) * rs;
        const A g = static_cast<A>(dyr[j]) * static_cast<A>(w[j]);
        dx[r * N + j] = static_cast<T>(rs * (g - c1 - xh * c2));
      }
    }
  }
  for (int64_t j = 0; j < N; ++j) {
    if (dw) dw[j] = static_cast<T>(dw_acc[j]);
    if (db) db[j] = static_cast<T>(db_acc[j]);
  }
}

// ---------------------------------------------------------------------------------------------
// the ops

std::tuple<at::Tensor, at::Tensor, at::Tensor> layernorm_fwd(const at::Tensor& x,
                                                             const at::Tensor& w_in,
                                                             const at::Tensor& b_in, double eps) {
  check_inputs(x, w_in, b_in);
  TORCH_CHECK(eps >= 0, "eps must be >= 0, got ", eps);
  const int64_t N = x.size(-1), rows = x.numel() / N, ldx = row_stride(x);
  const bool cuda = x.is_cuda();
  TORCH_CHECK(!cuda || rows < (int64_t(1) << 31), "x has too many rows for one launch: ", rows);
  std::optional<c10::cuda::CUDAGuard> guard;
  if (cuda) guard.emplace(x.device());  // custom ops get no device guard from the dispatcher
  const at::Tensor w = w_in.contiguous(), b = b_in.contiguous();  // N elements: cheap
  at::Tensor y = at::empty(x.sizes(), x.options());  // dense, whatever x's row stride
  at::Tensor mean = empty_stats(x), rstd = empty_stats(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_fwd", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    const scalar_t* bp = b.const_data_ptr<scalar_t>();
    scalar_t* yp = y.mutable_data_ptr<scalar_t>();
    A* mp = mean.mutable_data_ptr<A>();
    A* rp = rstd.mutable_data_ptr<A>();
    if (cuda)
      layernorm_fwd_launch(cuda_ptr(xp), ldx, cuda_ptr(wp), cuda_ptr(bp), cuda_ptr(yp), mp, rp,
                           rows, N, eps, c10::cuda::getCurrentCUDAStream());
    else
      fwd_cpu(xp, ldx, wp, bp, yp, mp, rp, rows, N, eps);
  });
  return {y, mean, rstd};
}

// output_mask = which of (dx, dw, db) autograd asked for (ctx.needs_input_grad); the others are
// returned as None and not computed.
std::tuple<std::optional<at::Tensor>, std::optional<at::Tensor>, std::optional<at::Tensor>>
layernorm_bwd(const at::Tensor& dy_in, const at::Tensor& x, const at::Tensor& w_in,
              const at::Tensor& mean, const at::Tensor& rstd, std::array<bool, 3> output_mask) {
  check_x(x);
  check_param(w_in, "w", x);
  TORCH_CHECK(dy_in.sizes() == x.sizes() && dy_in.scalar_type() == x.scalar_type() &&
                  dy_in.device() == x.device(),
              "dy must have x's shape, dtype and device: ", x.sizes(), " ", x.scalar_type(), " on ",
              x.device(), ", got ", dy_in.sizes(), " ", dy_in.scalar_type(), " on ",
              dy_in.device());
  check_stats(mean, "mean", x);
  check_stats(rstd, "rstd", x);
  const int64_t N = x.size(-1), rows = x.numel() / N, ldx = row_stride(x);
  const bool cuda = x.is_cuda();
  std::optional<c10::cuda::CUDAGuard> guard;
  if (cuda) guard.emplace(x.device());
  // dy often arrives strided (the gradient of y.sum() is one value expanded): copy it then
  const at::Tensor dy = dy_in.contiguous(), w = w_in.contiguous();
  const auto [want_dx, want_dw, want_db] = output_mask;
  std::optional<at::Tensor> dx, dw, db;
  if (want_dx) dx = at::empty(x.sizes(), x.options());
  if (want_dw) dw = at::empty(w.sizes(), w.options());
  if (want_db) db = at::empty(w.sizes(), w.options());
  if (!want_dx && !want_dw && !want_db) return {dx, dw, db};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "layernorm_bwd", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t* dyp = dy.const_data_ptr<scalar_t>();
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = w.const_data_ptr<scalar_t>();
    const A* mp = mean.const_data_ptr<A>();
    const A* rp = rstd.const_data_ptr<A>();
    scalar_t* dxp = dx ? dx->mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dwp = dw ? dw->mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dbp = db ? db->mutable_data_ptr<scalar_t>() : nullptr;
    if (!cuda) {
      bwd_cpu(dyp, xp, ldx, wp, mp, rp, dxp, dwp, dbp, rows, N);
      return;
    }
    // dw/db partials: one fp32 row each per block of the persistent backward kernel
    const int64_t max_blocks = (want_dw || want_db) ? layernorm_bwd_max_blocks(rows) : 0;
    at::Tensor partials = at::empty({2, max_blocks, N}, x.options().dtype(math_type(x)));
    layernorm_bwd_launch(cuda_ptr(dyp), cuda_ptr(xp), ldx, cuda_ptr(wp), mp, rp, cuda_ptr(dxp),
                         cuda_ptr(dwp), cuda_ptr(dbp), partials.mutable_data_ptr<A>(), max_blocks,
                         rows, N, c10::cuda::getCurrentCUDAStream());
  });
  return {dx, dw, db};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// registration: the schema once, then one implementation per backend. The fake (meta) kernels
// and the autograd formula are registered from Python (layernorm.py).

TORCH_LIBRARY(ex07_cuda, m) {
  m.def("layernorm_fwd(Tensor x, Tensor w, Tensor b, float eps) -> (Tensor, Tensor, Tensor)");
  m.def("layernorm_bwd(Tensor dy, Tensor x, Tensor w, Tensor mean, Tensor rstd, "
        "bool[3] output_mask) -> (Tensor?, Tensor?, Tensor?)");
}

TORCH_LIBRARY_IMPL(ex07_cuda, CUDA, m) {
  m.impl("layernorm_fwd", &layernorm_fwd);
  m.impl("layernorm_bwd", &layernorm_bwd);
}

TORCH_LIBRARY_IMPL(ex07_cuda, CPU, m) {
  m.impl("layernorm_fwd", &layernorm_fwd);
  m.impl("layernorm_bwd", &layernorm_bwd);
}
