// Exercise 11 — tiled_matmul, solved: one GEMM kernel (shared-memory tiles, 8x8 register tiles,
// 16-byte loads, double buffering) with a fused bias + ReLU epilogue, and the small kernel that
// masks the incoming gradient and sums its columns.
//
//   C[M, N] = opA[M, K] · opB[K, N]  (+ bias[N], then relu, when asked)
//
// One kernel serves the forward and both backward products; only where the operands live in
// memory changes, and two template flags say how:
//   forward   Y  = relu(A · B + bias)   A [M, K] row-major,             B [K, N] row-major
//   backward  dA = dZ · Bᵀ              dZ [M, N] row-major,            Bᵀ read from B: TRANS_B
//             dB = Aᵀ · dZ              Aᵀ read from A: TRANS_A,        dZ [M, N] row-major
// A transposed operand is never copied: the tile loader reads it along its contiguous dimension
// and writes the tile into shared memory in the layout the inner loop wants.
//
// Kernels:
//   gemm_kernel<T, TRANS_A, TRANS_B, VEC>   128x128 output tile per block of 256 threads, BK = 8
//   relu_grad_partials_kernel<T>            dZ = dY * (Y > 0), and per block a partial column sum
//   column_sum_kernel<T>                    dbias = the sum of the partial rows, in a fixed order
// Launchers (called by linear_relu.cpp): launch_gemm<T>, launch_relu_grad_colsum<T>.
//
// Napkin math, fp32, M = N = K = 4096 (the graded case):
//   flops   2 M N K = 137.4 GFLOP (one multiply-add = 2 flops)
//   bytes   read A and B once (2 x 67 MB), write Y (67 MB): 201 MB, 47 us at 4.28 TB/s.
//   at cuBLAS's fp32 rate on an H200 (~51 TFLOP/s measured, TF32 off): 2.7 ms. The bytes are
//   2% of that: a GEMM this size is compute-bound by ~60x. What limits a CUDA-core GEMM is how
//   many instructions besides the FMAs it issues (shared-memory loads, address math, barriers).
//   This kernel: per k step a thread does 64 FMAs against 4 shared-memory loads of 16 bytes
//   (8 values of A and 8 of B): 16 FMAs per load instruction. Per 128x128x8 tile a block reads
//   2 x 4 KB from global memory for 128 x 128 x 8 = 131072 FMAs: 16 FMAs per byte from L2/DRAM.
//   A is re-read once per tile column (N/128 = 32 times) and B once per tile row (M/128 = 32):
//   32 x 134 MB = 4.3 GB over 2.7 ms ~ 1.6 TB/s, mostly from L2: far below what L2 delivers.
//   Backward: two more GEMMs of 2 M N K each (dA, dB), plus one pass over dY, Y, dZ for the
//   mask and dbias (3 x 67 MB, ~50 us): forward + backward = 6 M N K flops, ~8.1 ms at 51 TFLOP/s.

#include "common.cuh"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace {

// --- the GEMM's tiling --------------------------------------------------------------------------
// A block computes a BM x BN tile of C; it walks K in steps of BK, staging a BM x BK slice of
// opA and a BK x BN slice of opB in shared memory. Each of its 256 threads owns an 8x8 piece of
// the tile (TM x TN accumulators in registers), split in four 4x4 quadrants 64 rows/columns
// apart: thread (ty, tx) has rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, likewise for columns.
// Four adjacent columns per quadrant make each shared-memory read one 16-byte load, and 16
// threads reading 16 adjacent groups of 4 floats touch all 32 banks once: no conflicts (a
// thread owning 8 adjacent columns would make every other pair of threads collide).
constexpr int BM = 128, BN = 128, BK = 8;
constexpr int TM = 8, TN = 8;
constexpr int kThreads = (BM / TM) * (BN / TN);  // 256
constexpr int kHalf = BM / 2;                    // 64: the offset of the second quadrant
// Shared tiles are stored k-major: As[k][m], Bs[k][n], so the inner loop reads a row of each.
// 4 floats of padding per row: the transposing stores (a K-contiguous operand written column-
// wise) then land in 32 different banks instead of two threads per bank, and a row stays a
// multiple of 16 bytes so the 16-byte reads stay aligned.
constexpr int kPad = 4;
constexpr int kLd = BM + kPad;  // 132 (BM == BN)
static_assert(BM == BN, "one padded row length serves both tiles");
static_assert(BK * BM == 4 * kThreads, "each thread stages exactly 4 elements of each tile");

// One operand as it sits in memory: element (r, c) of the *stored* matrix is p[r * ld + c].
struct Operand {
  const void* p;
  int64_t ld;          // row stride of the stored matrix, in elements
  int64_t rows, cols;  // of the stored matrix
};

// The 4 elements a thread stages per tile, from stored row r, columns c .. c+3; zero outside
// the matrix. Zero, not "skip": the last K tile (K % BK != 0) is then summed as 0 * 0 instead of
// the previous tile's leftovers, and rows/columns past M and N compute zeros nobody stores.
// VEC: one 16-byte load (the launcher checked cols % 4 == 0, ld % 4 == 0 and a 16-byte aligned
// base, so the 4 elements are either all inside or all outside, and aligned).
template <typename T, bool VEC>
__device__ __forceinline__ void load4(const Operand& op, int64_t r, int64_t c, T (&out)[4]) {
  const T* p = static_cast<const T*>(op.p);
  if constexpr (VEC) {
    static_assert(sizeof(T) == 4, "the 16-byte path is for float");
    if (r < op.rows && c < op.cols) {
      const float4 v = *reinterpret_cast<const float4*>(p + r * op.ld + c);
      out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    } else {
      out[0] = out[1] = out[2] = out[3] = T(0);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      out[j] = (r < op.rows && c + j < op.cols) ? p[r * op.ld + c + j] : T(0);
  }
}

// Where thread t's 4 elements sit in the stored tile, and where they go in shared memory.
// A stored tile is either "tall" (128 stored rows x 8 stored columns: a K-contiguous operand,
// i.e. A row-major or Bᵀ) or "wide" (8 x 128: an M- or N-contiguous operand, i.e. B row-major
// or Aᵀ). Either way 2 or 32 threads cover a stored row with 16-byte pieces: coalesced.
//   tall: t -> stored row t / 2 (an m or n), columns (t % 2) * 4 .. +3 (k):  S[k][mn] transposed
//   wide: t -> stored row t / 32 (a k), columns (t % 32) * 4 .. +3 (m or n): S[k][mn] as is
template <bool TALL>
struct Stage {
  static __device__ __forceinline__ int row(int t) { return TALL ? t / 2 : t / 32; }
  static __device__ __forceinline__ int col(int t) { return TALL ? (t % 2) * 4 : (t % 32) * 4; }
  template <typename T>
  static __device__ __forceinline__ void store(T* s, int t, const T (&v)[4]) {
    const int r = row(t), c = col(t);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (TALL) s[(c + j) * kLd + r] = v[j];  // transpose: k becomes the shared row
      else s[r * kLd + c + j] = v[j];
    }
  }
};

// 4 consecutive values from shared memory (one 16-byte LDS.128 for float).
template <typename T>
__device__ __forceinline__ void lds4(const T* s, T* v) {
  if constexpr (sizeof(T) == 4) {
    const float4 f = *reinterpret_cast<const float4*>(s);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = s[j];
  }
}

// C = opA · opB (+ bias, relu). TRANS_A: opA[m][k] is stored as A[k][m] (so opA = Aᵀ of a
// row-major A). TRANS_B: opB[k][n] is stored as B[n][k]. VEC: 16-byte global loads and stores.
// Grid: (ceil(N / BN), ceil(M / BM)); block: 256 threads. 2 blocks per SM: 128 registers each.
template <typename T, bool TRANS_A, bool TRANS_B, bool VEC>
__global__ void __launch_bounds__(kThreads, 2)
gemm_kernel(Operand a, Operand b, const T* __restrict__ bias, bool relu, T* __restrict__ c,
            int64_t ldc, int64_t M, int64_t N, int64_t K) {
  // Two buffers per operand: while the block computes on one, the next tile's global loads are
  // in flight into registers and then written to the other (double buffering).
  __shared__ __align__(16) T As[2][BK * kLd];
  __shared__ __align__(16) T Bs[2][BK * kLd];

  constexpr bool A_TALL = !TRANS_A;  // A row-major: K-contiguous, a 128 x 8 stored tile
  constexpr bool B_TALL = TRANS_B;   // Bᵀ: K-contiguous too
  using SA = Stage<A_TALL>;
  using SB = Stage<B_TALL>;
  const int t = threadIdx.x;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;

  // stored coordinates of this thread's 4 elements in tile k0 (tall: (m or n, k); wide: (k, ..))
  auto a_at = [&](int64_t k0, T (&v)[4]) {
    if (A_TALL) load4<T, VEC>(a, m0 + SA::row(t), k0 + SA::col(t), v);
    else load4<T, VEC>(a, k0 + SA::row(t), m0 + SA::col(t), v);
  };
  auto b_at = [&](int64_t k0, T (&v)[4]) {
    if (B_TALL) load4<T, VEC>(b, n0 + SB::row(t), k0 + SB::col(t), v);
    else load4<T, VEC>(b, k0 + SB::row(t), n0 + SB::col(t), v);
  };

  T acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = T(0);

  T av[4], bv[4];  // the staged elements of the next tile, in registers
  a_at(0, av);
  b_at(0, bv);
  SA::store(As[0], t, av);
  SB::store(Bs[0], t, bv);
  __syncthreads();

  const int ty = t / (BN / TN), tx = t % (BN / TN);  // 16 x 16 threads
  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    const bool more = k0 + BK < K;
    if (more) {  // issue the next tile's global loads now; they land during the FMAs below
      a_at(k0 + BK, av);
      b_at(k0 + BK, bv);
    }
    const T* as = As[buf];
    const T* bs = Bs[buf];
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      T ra[TM], rb[TN];
      lds4(as + k * kLd + ty * 4, ra);
      lds4(as + k * kLd + kHalf + ty * 4, ra + 4);
      lds4(bs + k * kLd + tx * 4, rb);
      lds4(bs + k * kLd + kHalf + tx * 4, rb + 4);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    if (more) {  // the other buffer: nobody reads it until after the barrier below
      SA::store(As[buf ^ 1], t, av);
      SB::store(Bs[buf ^ 1], t, bv);
    }
    // The barrier between tiles: the stores above must land before anyone computes on them,
    // and nobody may overwrite this buffer (next trip) while another warp still reads it.
    __syncthreads();
    buf ^= 1;
  }

  // Epilogue, fused: bias and relu applied in registers, C written once.
  // Output columns of this thread: n0 + tx*4 + {0..3} and n0 + 64 + tx*4 + {0..3}.
  T bcol[TN];
#pragma unroll
  for (int j = 0; j < TN; ++j) {
    const int64_t n = n0 + (j < 4 ? tx * 4 + j : kHalf + tx * 4 + j - 4);
    bcol[j] = (bias != nullptr && n < N) ? bias[n] : T(0);  // bias is per column: bias[n]
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t m = m0 + (i < 4 ? ty * 4 + i : kHalf + ty * 4 + i - 4);
    if (m >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + h * kHalf + tx * 4;
      T v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = acc[i][h * 4 + j] + bcol[h * 4 + j];
        if (relu) v[j] = v[j] < T(0) ? T(0) : v[j];  // NaN stays NaN, as torch.relu
      }
      T* out = c + m * ldc + n;
      if constexpr (VEC) {
        if (n < N) *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (n + j < N) out[j] = v[j];
      }
    }
  }
}

// --- dZ = dY * (Y > 0) and dbias = colsum(dZ) ---------------------------------------------------
// A block is 32 columns x 8 row lanes and owns kRowsPerBlock rows: a warp reads 32 adjacent
// columns of one row (128 bytes). Each thread sums its column over its rows in registers; the
// block adds its 8 lanes through shared memory and writes one partial row: partials[y, cols].
// column_sum_kernel then adds the partial rows in a fixed order: no atomics, the same bits on
// every run.
constexpr int kColX = 32, kColY = 8;
constexpr int64_t kRowsPerBlock = 128;

template <typename T>
__global__ void __launch_bounds__(kColX * kColY)
relu_grad_partials_kernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dz,
                          T* __restrict__ partials, int64_t M, int64_t N) {
  __shared__ T red[kColY][kColX];
  const int64_t n = int64_t(blockIdx.x) * kColX + threadIdx.x;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerBlock;
  const int64_t r1 = r0 + kRowsPerBlock < M ? r0 + kRowsPerBlock : M;
  T s = T(0);
  if (n < N) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      // a select, not a multiply by the mask: dY = inf where Y = 0 must give 0, not NaN
      const T g = y[r * N + n] > T(0) ? dy[r * N + n] : T(0);
      dz[r * N + n] = g;
      s += g;
    }
  }
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && n < N) {
    T tsum = T(0);
#pragma unroll
    for (int j = 0; j < kColY; ++j) tsum += red[j][threadIdx.x];
    partials[int64_t(blockIdx.y) * N + n] = tsum;
  }
}

template <typename T>
__global__ void __launch_bounds__(kColX * kColY)
column_sum_kernel(const T* __restrict__ partials, T* __restrict__ out, int64_t P, int64_t N) {
  __shared__ T red[kColY][kColX];
  const int64_t n = int64_t(blockIdx.x) * kColX + threadIdx.x;
  T s = T(0);
  if (n < N)
    for (int64_t p = threadIdx.y; p < P; p += kColY) s += partials[p * N + n];
  red[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && n < N) {
    T tsum = T(0);
#pragma unroll
    for (int j = 0; j < kColY; ++j) tsum += red[j][threadIdx.x];
    out[n] = tsum;
  }
}

// 16-byte loads and stores need whole, aligned groups of 4 floats in every stored row of every
// operand and of C: the contiguous dimension and the row stride multiples of 4, and 16-byte
// aligned base pointers (a view like x[:, 1:] is contiguous per row, yet not aligned).
bool vectorizable(const Operand& a, const Operand& b, const void* c, int64_t ldc, int64_t N) {
  auto ok = [](const void* p, int64_t ld, int64_t cols) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0 && ld % 4 == 0 && cols % 4 == 0;
  };
  return ok(a.p, a.ld, a.cols) && ok(b.p, b.ld, b.cols) && ok(c, ldc, N);
}

template <typename T, bool TA, bool TB>
void launch_gemm_t(const Operand& a, const Operand& b, const T* bias, bool relu, T* c, int64_t ldc,
                   int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(course::ceil_div(N, BN)),
                  static_cast<unsigned>(course::ceil_div(M, BM)));
  if constexpr (sizeof(T) == 4) {
    if (vectorizable(a, b, c, ldc, N)) {
      gemm_kernel<T, TA, TB, true><<<grid, kThreads, 0, stream>>>(a, b, bias, relu, c, ldc, M, N, K);
      CUDA_LAUNCH_CHECK();
      return;
    }
  }
  gemm_kernel<T, TA, TB, false><<<grid, kThreads, 0, stream>>>(a, b, bias, relu, c, ldc, M, N, K);
  CUDA_LAUNCH_CHECK();
}

}  // namespace

// C[M, N] = opA · opB (+ bias[N]) (then relu). opA[m][k] = A[m * lda + k], or A[k * lda + m]
// when trans_a; opB[k][n] = B[k * ldb + n], or B[n * ldb + k] when trans_b. bias may be null.
template <typename T>
void launch_gemm(const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
                 const T* bias, bool relu, T* C, int64_t ldc, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  if (course::ceil_div(M, BM) > 65535)
    throw std::runtime_error("linear_relu: M = " + std::to_string(M) +
                             " rows need more than 65535 tile rows (the grid's y limit)");
  const Operand a{A, lda, trans_a ? K : M, trans_a ? M : K};
  const Operand b{B, ldb, trans_b ? N : K, trans_b ? K : N};
  if (!trans_a && !trans_b) launch_gemm_t<T, false, false>(a, b, bias, relu, C, ldc, M, N, K, stream);
  else if (!trans_a && trans_b) launch_gemm_t<T, false, true>(a, b, bias, relu, C, ldc, M, N, K, stream);
  else if (trans_a && !trans_b) launch_gemm_t<T, true, false>(a, b, bias, relu, C, ldc, M, N, K, stream);
  else launch_gemm_t<T, true, true>(a, b, bias, relu, C, ldc, M, N, K, stream);
}

// Rows of the partials buffer launch_relu_grad_colsum needs for M rows (the caller allocates
// [rows, N] of T).
int64_t relu_grad_partial_rows(int64_t M) { return course::ceil_div(M, kRowsPerBlock); }

// dz = dy * (y > 0), dbias = sum over rows of dz. dy, y, dz: [M, N] contiguous.
template <typename T>
void launch_relu_grad_colsum(const T* dy, const T* y, T* dz, T* partials, T* dbias, int64_t M,
                             int64_t N, cudaStream_t stream) {
  if (N == 0) return;
  const int64_t P = relu_grad_partial_rows(M);
  const dim3 block(kColX, kColY);
  const unsigned gx = static_cast<unsigned>(course::ceil_div(N, kColX));
  if (P > 0) {
    if (P > 65535)
      throw std::runtime_error("linear_relu backward: M = " + std::to_string(M) +
                               " rows need more than 65535 row blocks");
    relu_grad_partials_kernel<T><<<dim3(gx, static_cast<unsigned>(P)), block, 0, stream>>>(
        dy, y, dz, partials, M, N);
    CUDA_LAUNCH_CHECK();
  }
  column_sum_kernel<T><<<gx, block, 0, stream>>>(partials, dbias, P, N);  // P = 0: zeros
  CUDA_LAUNCH_CHECK();
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
