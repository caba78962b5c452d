// Exercise 12 — matmul_tc, CUTLASS track: the ATen half of the op (given complete)
// torch.ops.ex12_cutlass.matmul_act(A, B, bias, act) -> act(A @ B + bias).
//
// Checks the inputs (refusing, by name, what TMA cannot load), allocates the output and the
// CUTLASS workspace with PyTorch's allocator, launches on the current stream, and registers the
// schema. The kernel is in matmul_tc_kernels.cu, which includes CUTLASS and no ATen.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <mutex>
#include <string>

#include "matmul_tc.h"

namespace {

int act_code(const std::string& act) {
  if (act == "none") return kActNone;
  if (act == "relu") return kActRelu;
  if (act == "gelu_tanh") return kActGeluTanh;
  TORCH_CHECK(false, "act must be one of \"none\", \"relu\", \"gelu_tanh\", got \"", act, "\"");
  return -1;
}

// TMA loads and stores boxes whose rows start on 16-byte boundaries: 8 elements of bf16/fp16.
bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

void check_sm90a(cudaStream_t stream) {
  static std::once_flag once;
  static std::string problem;
  std::call_once(once, [stream] {
    bool yes = false;
    problem = built_for_sm90a(&yes, stream);
    if (problem.empty() && !yes) {
      problem = "this library was built without sm_90a code: CUTLASS's Hopper kernels (TMA, "
                "wgmma) need nvcc -gencode arch=compute_90a,code=sm_90a (TORCH_CUDA_ARCH_LIST="
                "9.0a) and an sm_90 GPU (H100/H200)";
    }
  });
  TORCH_CHECK(problem.empty(), problem);
}

at::Tensor matmul_act(const at::Tensor& A, const at::Tensor& B, const at::Tensor& bias,
                      c10::string_view act_name) {
  const int act = act_code(std::string(act_name));
  TORCH_CHECK(A.dim() == 2, "A must be 2-D [M, K], got shape ", A.sizes());
  TORCH_CHECK(B.dim() == 2, "B must be 2-D [K, N], got shape ", B.sizes());
  TORCH_CHECK(B.size(0) == A.size(1), "B must have A.shape[1] = ", A.size(1),
              " rows (B is [K, N]), got shape ", B.sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == B.size(1), "bias must have shape [",
              B.size(1), "] (B's columns), got ", bias.sizes());
  const auto dtype = A.scalar_type();
  TORCH_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf,
              "A must be bfloat16 or float16 (tensor cores, fp32 accumulation), got ", dtype);
  TORCH_CHECK(B.scalar_type() == dtype, "B must have A's dtype ", dtype, ", got ",
              B.scalar_type());
  TORCH_CHECK(bias.scalar_type() == dtype, "bias must have A's dtype ", dtype, ", got ",
              bias.scalar_type());
  TORCH_CHECK(A.is_cuda(), "A must be on a CUDA device, got ", A.device());
  TORCH_CHECK(B.device() == A.device(), "B must be on A's device ", A.device(), ", got ",
              B.device());
  TORCH_CHECK(bias.device() == A.device(), "bias must be on A's device ", A.device(), ", got ",
              bias.device());
  const int64_t M = A.size(0), K = A.size(1), N = B.size(1);
  // What TMA needs, refused by name (the Triton track takes any shape and stride):
  TORCH_CHECK(K % 8 == 0, "A: K = A.shape[1] = ", K, " must be a multiple of 8 for this "
              "CUTLASS kernel (TMA loads rows that start on 16-byte boundaries); pad K with zeros");
  TORCH_CHECK(N % 8 == 0, "B: N = B.shape[1] = ", N, " must be a multiple of 8 for this "
              "CUTLASS kernel (TMA loads rows that start on 16-byte boundaries); pad N");
  TORCH_CHECK(A.stride(1) == 1 && A.stride(0) % 8 == 0 && A.stride(0) >= K && aligned16(A),
              "A must be row-major with 16-byte aligned rows (stride(1) = 1, stride(0) a "
              "multiple of 8), got strides ", A.strides(), "; call A.contiguous()");
  TORCH_CHECK(B.stride(1) == 1 && B.stride(0) % 8 == 0 && B.stride(0) >= N && aligned16(B),
              "B must be row-major [K, N] with 16-byte aligned rows (stride(1) = 1, stride(0) a "
              "multiple of 8), got strides ", B.strides(), "; call B.contiguous()");
  TORCH_CHECK(bias.stride(0) == 1 && aligned16(bias),
              "bias must be contiguous and 16-byte aligned, got stride ", bias.stride(0));
  TORCH_CHECK(M < (int64_t(1) << 31) && N < (int64_t(1) << 31) && K < (int64_t(1) << 31),
              "A and B: each of M, N, K must be below 2^31");

  c10::cuda::CUDAGuard guard(A.device());
  at::Tensor D = at::empty({M, N}, A.options());
  if (M == 0 || N == 0) return D;
  TORCH_CHECK(K > 0, "A: K = 0 (an empty sum) is not supported: act(bias) needs no GEMM");

  const int device = A.device().index();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  check_sm90a(stream);
  static int sm_count[64] = {0};
  if (sm_count[device] == 0) {
    cudaDeviceGetAttribute(&sm_count[device], cudaDevAttrMultiProcessorCount, device);
  }
  MatmulProblem p{A.data_ptr(), B.data_ptr(), bias.data_ptr(), D.data_ptr(),
                  static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                  A.stride(0), B.stride(0), D.stride(0), act,
                  dtype == at::kBFloat16 ? kBFloat16 : kFloat16, device, sm_count[device]};
  size_t bytes = 0;
  std::string err = matmul_act_run(p, nullptr, 0, &bytes, stream);
  TORCH_CHECK(err.empty(), err);
  // the persistent scheduler needs little or no workspace; PyTorch's caching allocator gives it
  at::Tensor workspace = at::empty({static_cast<int64_t>(bytes)}, A.options().dtype(at::kByte));
  err = matmul_act_run(p, workspace.data_ptr(), bytes, nullptr, stream);
  TORCH_CHECK(err.empty(), err);
  return D;
}

}  // namespace

TORCH_LIBRARY(ex12_cutlass, m) {
  m.def("matmul_act(Tensor A, Tensor B, Tensor bias, str act) -> Tensor");
}

TORCH_LIBRARY_IMPL(ex12_cutlass, CUDA, m) {
  m.impl("matmul_act", &matmul_act);
}
