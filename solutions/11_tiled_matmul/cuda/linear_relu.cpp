// Exercise 11 — tiled_matmul, solved: the ops' schemas, the input checks, the dtype dispatch and
// the C++ CPU path. The kernels are in linear_relu_kernels.cu (nvcc, CUDA headers only), so
// editing a kernel never recompiles this file, and this file includes only light ATen headers.
//
// Three ops in the namespace ex11_cuda; linear_relu.py gives them fake kernels and autograd:
//   linear_relu(A, B, bias) -> Y        Y = relu(A @ B + bias)   (the GEMM, epilogue fused)
//   matmul(A, B) -> C                   C = A @ B                (the same GEMM, no epilogue)
//   relu_grad_colsum(dY, Y) -> (dZ, dbias)   dZ = dY * (Y > 0), dbias = sum over rows of dZ
// The backward is matmul(dZ, B.t()) and matmul(A.t(), dZ): a transposed view is passed as
// it is (strides), and the GEMM reads it in place, so no transpose is ever materialized.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <tuple>
#include <vector>

// --- defined in linear_relu_kernels.cu --------------------------------------------------------
template <typename T>
void launch_gemm(const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
                 const T* bias, bool relu, T* C, int64_t ldc, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream);
int64_t relu_grad_partial_rows(int64_t M);
template <typename T>
void launch_relu_grad_colsum(const T* dy, const T* y, T* dz, T* partials, T* dbias, int64_t M,
                             int64_t N, cudaStream_t stream);

namespace {

// --- operands as they sit in memory ---------------------------------------------------------------
// A 2-D tensor is read in place when one of its dimensions is contiguous: row-major
// (stride(1) == 1: element (r, c) at r * ld + c) or column-major, i.e. the transpose of a
// row-major matrix (stride(0) == 1: element (r, c) at c * ld + r). B.t() and A.t() in the
// backward are the second kind. Anything else (a gapped view like x[:, ::2]) is copied once.
struct View {
  at::Tensor t;  // keeps a copy alive when one was made
  int64_t ld;
  bool trans;
};

View as_view(const at::Tensor& x) {
  const int64_t rows = x.size(0), cols = x.size(1);
  if (cols == 1 || x.stride(1) == 1)  // row-major; with one row any ld works: use cols
    return {x, rows == 1 ? cols : x.stride(0), false};
  if (rows == 1 || x.stride(0) == 1)  // column-major: the transpose of a row-major [cols, rows]
    return {x, cols == 1 ? rows : x.stride(1), true};
  at::Tensor c = x.contiguous();
  return {c, cols, false};
}

void check_matrix(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() == 2, name, " must be a 2-D matrix, got shape ", x.sizes());
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble, name,
              " must be float32 (or float64, for gradcheck), got ", x.scalar_type());
  TORCH_CHECK(x.is_cuda() || x.is_cpu(), name, " must be on a CUDA device or the CPU, got ",
              x.device());
}

void check_same(const at::Tensor& x, const char* name, const at::Tensor& a, const char* a_name) {
  TORCH_CHECK(x.device() == a.device(), name, " must be on ", a_name, "'s device ", a.device(),
              ", got ", x.device());
  TORCH_CHECK(x.scalar_type() == a.scalar_type(), name, " must have ", a_name, "'s dtype ",
              a.scalar_type(), ", got ", x.scalar_type());
}

// --- the CPU path: plain loops, the same math -----------------------------------------------------
// One function for all three products too. Loop order m, k, n: the inner loop walks a row of
// opB and of C (contiguous when B is row-major). Accumulates in T (float for float32).
template <typename T>
void gemm_cpu(const T* A, int64_t lda, bool ta, const T* B, int64_t ldb, bool tb, const T* bias,
              bool relu, T* C, int64_t M, int64_t N, int64_t K) {
  std::vector<T> row(N);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) row[n] = T(0);
    for (int64_t k = 0; k < K; ++k) {
      const T a = ta ? A[k * lda + m] : A[m * lda + k];
      for (int64_t n = 0; n < N; ++n) row[n] += a * (tb ? B[n * ldb + k] : B[k * ldb + n]);
    }
    for (int64_t n = 0; n < N; ++n) {
      T v = row[n] + (bias != nullptr ? bias[n] : T(0));
      if (relu) v = v < T(0) ? T(0) : v;
      C[m * N + n] = v;
    }
  }
}

template <typename T>
void relu_grad_colsum_cpu(const T* dy, const T* y, T* dz, T* dbias, int64_t M, int64_t N) {
  for (int64_t n = 0; n < N; ++n) dbias[n] = T(0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const T g = y[m * N + n] > T(0) ? dy[m * N + n] : T(0);
      dz[m * N + n] = g;
      dbias[n] += g;
    }
}

// C = A @ B (+ bias) (relu): the one entry to the GEMM, on either device.
at::Tensor gemm(const at::Tensor& A, const at::Tensor& B, const at::Tensor* bias, bool relu) {
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  at::Tensor C = at::empty({M, N}, A.options());
  if (M == 0 || N == 0) return C;
  const View a = as_view(A), b = as_view(B);
  const at::Tensor bc = bias != nullptr ? bias->contiguous() : at::Tensor();
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const T* bp = bc.defined() ? bc.const_data_ptr<T>() : nullptr;
    if (A.is_cuda()) {
      const c10::cuda::CUDAGuard guard(A.device());
      launch_gemm<T>(a.t.const_data_ptr<T>(), a.ld, a.trans, b.t.const_data_ptr<T>(), b.ld,
                     b.trans, bp, relu, C.mutable_data_ptr<T>(), N, M, N, K,
                     c10::cuda::getCurrentCUDAStream(A.device().index()).stream());
    } else {
      gemm_cpu<T>(a.t.const_data_ptr<T>(), a.ld, a.trans, b.t.const_data_ptr<T>(), b.ld, b.trans,
                  bp, relu, C.mutable_data_ptr<T>(), M, N, K);
    }
  };
  if (A.scalar_type() == at::kFloat) run(0.0f);
  else run(0.0);
  return C;
}

// --- the ops ----------------------------------------------------------------------------------------

at::Tensor linear_relu(const at::Tensor& A, const at::Tensor& B, const at::Tensor& bias) {
  check_matrix(A, "A");
  check_matrix(B, "B");
  check_same(B, "B", A, "A");
  TORCH_CHECK(B.size(0) == A.size(1), "B must have shape [K, N] with K = A.size(1) = ",
              A.size(1), " (A is ", A.sizes(), "), got B of shape ", B.sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == B.size(1), "bias must have shape [N] = [",
              B.size(1), "] (N = B.size(1)), got shape ", bias.sizes());
  check_same(bias, "bias", A, "A");
  return gemm(A, B, &bias, /*relu=*/true);
}

at::Tensor matmul(const at::Tensor& A, const at::Tensor& B) {
  check_matrix(A, "A");
  check_matrix(B, "B");
  check_same(B, "B", A, "A");
  TORCH_CHECK(B.size(0) == A.size(1), "B must have shape [K, N] with K = A.size(1) = ",
              A.size(1), " (A is ", A.sizes(), "), got B of shape ", B.sizes());
  return gemm(A, B, nullptr, /*relu=*/false);
}

std::tuple<at::Tensor, at::Tensor> relu_grad_colsum(const at::Tensor& dY_in, const at::Tensor& Y_in) {
  check_matrix(Y_in, "Y");
  check_same(dY_in, "dY", Y_in, "Y");
  TORCH_CHECK(dY_in.sizes() == Y_in.sizes(), "dY must have Y's shape ", Y_in.sizes(), ", got ",
              dY_in.sizes());
  // autograd may hand an expanded gradient (strides 0 after y.sum().backward()): read densely
  const at::Tensor dY = dY_in.contiguous(), Y = Y_in.contiguous();
  const int64_t M = Y.size(0), N = Y.size(1);
  at::Tensor dZ = at::empty({M, N}, Y.options());
  at::Tensor dbias = at::empty({N}, Y.options());
  auto run = [&](auto zero) {
    using T = decltype(zero);
    if (Y.is_cuda()) {
      const c10::cuda::CUDAGuard guard(Y.device());
      at::Tensor partials = at::empty({relu_grad_partial_rows(M), N}, Y.options());
      launch_relu_grad_colsum<T>(dY.const_data_ptr<T>(), Y.const_data_ptr<T>(),
                                 dZ.mutable_data_ptr<T>(), partials.mutable_data_ptr<T>(),
                                 dbias.mutable_data_ptr<T>(), M, N,
                                 c10::cuda::getCurrentCUDAStream(Y.device().index()).stream());
    } else {
      relu_grad_colsum_cpu<T>(dY.const_data_ptr<T>(), Y.const_data_ptr<T>(),
                              dZ.mutable_data_ptr<T>(), dbias.mutable_data_ptr<T>(), M, N);
    }
  };
  if (Y.scalar_type() == at::kFloat) run(0.0f);
  else run(0.0);
  return {dZ, dbias};
}

}  // namespace

TORCH_LIBRARY(ex11_cuda, m) {
  m.def("linear_relu(Tensor A, Tensor B, Tensor bias) -> Tensor");
  m.def("matmul(Tensor A, Tensor B) -> Tensor");
  m.def("relu_grad_colsum(Tensor dY, Tensor Y) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(ex11_cuda, CUDA, m) {
  m.impl("linear_relu", &linear_relu);
  m.impl("matmul", &matmul);
  m.impl("relu_grad_colsum", &relu_grad_colsum);
}

TORCH_LIBRARY_IMPL(ex11_cuda, CPU, m) {
  m.impl("linear_relu", &linear_relu);
  m.impl("matmul", &matmul);
  m.impl("relu_grad_colsum", &relu_grad_colsum);
}
