// The seam between matmul_tc.cpp (ATen: checks, allocation, registration) and
// matmul_tc_kernels.cu (CUTLASS: the kernel). Plain types only, so neither side pulls in the
// other's heavy headers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

enum MatmulAct_t : int { kActNone = 0, kActRelu = 1, kActGeluTanh = 2 };
enum MatmulDtype : int { kBFloat16 = 0, kFloat16 = 1 };

// What a build without CUTLASS's headers says (nvidia-cutlass not installed, or its include
// folders not on the include path).
constexpr const char* kNeedsCutlass =
    "needs nvidia-cutlass (pip install nvidia-cutlass): CUTLASS's headers were not found when "
    "this track was built";

struct MatmulProblem {
  const void* A;      // [M, K], row m at A + m * lda
  const void* B;      // [K, N], row k at B + k * ldb
  const void* bias;   // [N]
  void* D;            // [M, N], row m at D + m * ldd
  int M, N, K;
  int64_t lda, ldb, ldd;  // in elements
  int act;            // MatmulAct_t
  int dtype;          // MatmulDtype
  int device;         // CUDA device index
  int sm_count;       // SMs of that device (the persistent grid's size)
};

// Runs the GEMM on `stream`; returns "" on success, else what went wrong. With `needed` set it
// only stores the workspace size the problem needs (bytes) and launches nothing.
std::string matmul_act_run(const MatmulProblem& p, void* workspace, size_t workspace_bytes,
                           size_t* needed, cudaStream_t stream);

// Whether the device code was built for sm_90a (wgmma, TMA) on the current device.
std::string built_for_sm90a(bool* yes, cudaStream_t stream);
