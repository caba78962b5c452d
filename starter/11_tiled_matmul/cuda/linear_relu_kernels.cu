// Exercise 11 — tiled_matmul: the CUDA kernels and their launchers.
//
//   C[M, N] = opA[M, K] · opB[K, N]  (+ bias[N], then relu, when asked)
//
// One GEMM serves the forward and both products of the backward; only where the operands live
// in memory changes:
//   forward   Y  = relu(A · B + bias)   opA = A [M, K] row-major        opB = B [K, N] row-major
//   backward  dA = dZ · Bᵀ              opA = dZ row-major              opB = Bᵀ, read from B (trans_b)
//             dB = Aᵀ · dZ              opA = Aᵀ, read from A (trans_a) opB = dZ row-major
//   opA(m, k) = trans_a ? A[k * lda + m] : A[m * lda + k]
//   opB(k, n) = trans_b ? B[n * ldb + k] : B[k * ldb + n]
// linear_relu.cpp passes transposed views this way: nothing is ever copied to transpose it.
//
// Napkin math, fp32, M = N = K = 4096 (the graded case): 2 M N K = 137.4 GFLOP against 201 MB
// of compulsory traffic (read A, B, write Y): ~2.7 ms at cuBLAS's fp32 rate on an H200
// (~51 TFLOP/s, TF32 off) and 47 us of bytes at 4.28 TB/s. Compute-bound by ~60x: the game is
// to keep the FMA units busy, i.e. to issue as few other instructions (loads from global and
// shared memory, address arithmetic, barriers) per FMA as possible. The README walks the steps.
//
// Only CUDA headers and common.cuh here: this file compiles in seconds.

#include "common.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace {

// TODO 5 (~15 lines): a first GEMM kernel, one thread per output element C[m, n]:
//   acc = sum over k of opA(m, k) * opB(k, n), in T; then + bias[n] (when bias is not null),
//   relu when asked, and store C[m * ldc + n]. Guard m < M and n < N (the grid rounds up).
// 2-D blocks of 16 x 16 threads, threadIdx.x along n: a warp then reads adjacent elements of
// B's row and writes adjacent elements of C. Index arithmetic in int64_t.
// Once every check passes, make it fast (the README's steps): shared-memory tiles, then a
// register tile per thread, 16-byte loads, double buffering.

// TODO 7 (~30 lines): dZ = dY * (Y > 0) and dbias = colsum(dZ), two kernels:
//   one in which each thread owns a column and a range of rows: it writes dZ and sums its
//   column over those rows; the block writes one partial row partials[blockIdx.y, :];
//   one that adds the P partial rows of each column (in a fixed order: deterministic).
// Select, do not multiply by the mask: dY = inf where Y = 0 must give 0, not NaN.

}  // namespace

// C[M, N] = opA · opB (+ bias[N]) (then relu). bias may be null (the backward's products).
template <typename T>
void launch_gemm(const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
                 const T* bias, bool relu, T* C, int64_t ldc, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream) {
  // TODO 6 (~6 lines): return at once if M or N is 0; a grid of ceil(N / 16) x ceil(M / 16)
  // blocks (course::ceil_div); launch your kernel on `stream`, then CUDA_LAUNCH_CHECK().
  throw std::runtime_error("launch_gemm not implemented yet (TODO 5 and 6 in "
                           "linear_relu_kernels.cu)");
}

// Rows of the partials buffer launch_relu_grad_colsum needs for M rows (the caller allocates
// [rows, N] of T). Match it to your kernel: ceil(M / the rows a block owns).
int64_t relu_grad_partial_rows(int64_t M) { return course::ceil_div(M, 128); }

// dz = dy * (y > 0), dbias = sum over rows of dz. dy, y, dz: [M, N] contiguous.
template <typename T>
void launch_relu_grad_colsum(const T* dy, const T* y, T* dz, T* partials, T* dbias, int64_t M,
                             int64_t N, cudaStream_t stream) {
  // TODO 7 (continued, ~8 lines): launch the two kernels on `stream`, each checked.
  throw std::runtime_error("launch_relu_grad_colsum not implemented yet (TODO 7 in "
                           "linear_relu_kernels.cu)");
}

template void launch_gemm<float>(const float*, int64_t, bool, const float*, int64_t, bool,
                                 const float*, bool, float*, int64_t, int64_t, int64_t, int64_t,
                                 cudaStream_t);
template void launch_gemm<double>(const double*, int64_t, bool, const double*, int64_t, bool,
                                  const double*, bool, double*, int64_t, int64_t, int64_t,
                                  int64_t, cudaStream_t);
template void launch_relu_grad_colsum<float>(const float*, const float*, float*, float*, float*,
                                             int64_t, int64_t, cudaStream_t);
template void launch_relu_grad_colsum<double>(const double*, const double*, double*, double*,
                                              double*, int64_t, int64_t, cudaStream_t);
