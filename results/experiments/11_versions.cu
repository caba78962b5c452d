// Exercise 11: the versions of the fp32 GEMM + bias + ReLU, from naive to the solution, timed
// against cuBLAS (fp32, TF32 off) in one binary. llm.c's dev/cuda layout: versions numbered,
// each a small step from the last.
//
//   version 1  naive: one output per thread, operands straight from global memory
//   version 2  shared-memory tiles 32 x 32 (the seed's sketch with zero-filled tails)
//   version 3  2-D register blocking: 128 x 128 block tile, 8 x 8 outputs per thread, BK = 8
//   version 4  + 16-byte loads, A tile stored transposed, float4 shared reads, padded rows
//   version 5  + double buffering: the solution (solutions/11_tiled_matmul/cuda), included as is
//
// Build and run (from the repository root; results/experiments/11_versions.py does both):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -o /tmp/v11 results/experiments/11_versions.cu -lcublas
//   /tmp/v11 4096 4096 4096            # M N K; every version, validated against cuBLAS
//   /tmp/v11 4096 4096 4096 3 5        # only versions 3 and 5
// Versions 4 and 5 (16-byte path) need K and N multiples of 4; version 5 falls back itself.
//
// Napkin math at 4096^3: 137.4 GFLOP; cuBLAS fp32 ~51 TFLOP/s on an H200 (2.7 ms).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

// version 5 is the graded solution itself: its launch_gemm<float>
#include "../../solutions/11_tiled_matmul/cuda/linear_relu_kernels.cu"

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// ---------------------------------------------------------------------------------------------
// kernels. Every one: Y[M, N] = relu(A[M, K] @ B[K, N] + bias[N]), all row-major.

// version 1: thread (m, n) walks k. A warp reads 32 adjacent B elements (coalesced) and one
// A element (broadcast): 2 loads per FMA, all from L1/L2.
__global__ void v1_naive(const float* A, const float* B, const float* bias, float* Y, int M,
                         int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc += A[int64_t(m) * K + k] * B[int64_t(k) * N + n];
  const float v = acc + bias[n];
  Y[int64_t(m) * N + n] = v < 0.f ? 0.f : v;
}

// version 2: 32 x 32 tiles through shared memory. Zero-fill outside the matrix (the seed's
// sketch skipped those loads and re-added the previous tile's values), two barriers per tile.
constexpr int T2 = 32;
__global__ void v2_tiled(const float* A, const float* B, const float* bias, float* Y, int M,
                         int N, int K) {
  __shared__ float As[T2][T2], Bs[T2][T2 + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * T2 + ty, n = blockIdx.x * T2 + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += T2) {
    As[ty][tx] = (m < M && k0 + tx < K) ? A[int64_t(m) * K + k0 + tx] : 0.f;
    Bs[ty][tx] = (k0 + ty < K && n < N) ? B[int64_t(k0 + ty) * N + n] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < T2; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();
  }
  if (m < M && n < N) {
    const float v = acc + bias[n];
    Y[int64_t(m) * N + n] = v < 0.f ? 0.f : v;
  }
}

// version 3: 128 x 128 per block, 256 threads, each 8 x 8 adjacent outputs in registers.
// A's tile is stored k-major (As[k][m]) so the inner loop reads a row of each tile.
constexpr int V_BM = 128, V_BN = 128, V_BK = 8, V_TM = 8, V_TN = 8;
__global__ void __launch_bounds__(256, 2)
v3_regblock(const float* A, const float* B, const float* bias, float* Y, int M, int N, int K) {
  __shared__ float As[V_BK][V_BM], Bs[V_BK][V_BN];
  const int t = threadIdx.x, ty = t / 16, tx = t % 16;
  const int m0 = blockIdx.y * V_BM, n0 = blockIdx.x * V_BN;
  float acc[V_TM][V_TN] = {};
  for (int k0 = 0; k0 < K; k0 += V_BK) {
    for (int i = t; i < V_BM * V_BK; i += 256) {  // A tile: 128 rows x 8 k, stored transposed
      const int r = i / V_BK, c = i % V_BK;
      As[c][r] = (m0 + r < M && k0 + c < K) ? A[int64_t(m0 + r) * K + k0 + c] : 0.f;
    }
    for (int i = t; i < V_BK * V_BN; i += 256) {  // B tile: 8 k x 128 columns
      const int r = i / V_BN, c = i % V_BN;
      Bs[r][c] = (k0 + r < K && n0 + c < N) ? B[int64_t(k0 + r) * N + n0 + c] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < V_BK; ++k) {
      float ra[V_TM], rb[V_TN];
#pragma unroll
      for (int i = 0; i < V_TM; ++i) ra[i] = As[k][ty * V_TM + i];
#pragma unroll
      for (int j = 0; j < V_TN; ++j) rb[j] = Bs[k][tx * V_TN + j];
#pragma unroll
      for (int i = 0; i < V_TM; ++i)
#pragma unroll
        for (int j = 0; j < V_TN; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < V_TM; ++i) {
    const int m = m0 + ty * V_TM + i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < V_TN; ++j) {
      const int n = n0 + tx * V_TN + j;
      if (n < N) {
        const float v = acc[i][j] + bias[n];
        Y[int64_t(m) * N + n] = v < 0.f ? 0.f : v;
      }
    }
  }
}

// version 4: version 3 with 16-byte global loads (one float4 of A and one of B per thread per
// tile), rows of 4 floats padding (the transposing stores hit 32 banks), and the quadrant
// layout: thread (ty, tx) owns rows ty*4 + {0..3} and 64 + ty*4 + {0..3} (columns alike), so
// its shared reads are 4 float4 per k step and conflict-free. Needs K % 4 == 0, N % 4 == 0.
constexpr int V_LD = V_BM + 4;
__global__ void __launch_bounds__(256, 2)
v4_vectorized(const float* A, const float* B, const float* bias, float* Y, int M, int N, int K) {
  __shared__ __align__(16) float As[V_BK * V_LD];
  __shared__ __align__(16) float Bs[V_BK * V_LD];
  const int t = threadIdx.x, ty = t / 16, tx = t % 16;
  const int m0 = blockIdx.y * V_BM, n0 = blockIdx.x * V_BN;
  const int ar = t / 2, ac = (t % 2) * 4;    // A: 128 rows x 8 k, 2 threads per row
  const int br = t / 32, bc = (t % 32) * 4;  // B: 8 k x 128 columns, 32 threads per row
  float acc[8][8] = {};
  for (int k0 = 0; k0 < K; k0 += V_BK) {
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
    if (m0 + ar < M && k0 + ac < K) a = *reinterpret_cast<const float4*>(A + int64_t(m0 + ar) * K + k0 + ac);
    if (k0 + br < K && n0 + bc < N) b = *reinterpret_cast<const float4*>(B + int64_t(k0 + br) * N + n0 + bc);
    As[(ac + 0) * V_LD + ar] = a.x;
    As[(ac + 1) * V_LD + ar] = a.y;
    As[(ac + 2) * V_LD + ar] = a.z;
    As[(ac + 3) * V_LD + ar] = a.w;
    *reinterpret_cast<float4*>(Bs + br * V_LD + bc) = b;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < V_BK; ++k) {
      const float4 a0 = *reinterpret_cast<const float4*>(As + k * V_LD + ty * 4);
      const float4 a1 = *reinterpret_cast<const float4*>(As + k * V_LD + 64 + ty * 4);
      const float4 b0 = *reinterpret_cast<const float4*>(Bs + k * V_LD + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + k * V_LD + 64 + tx * 4);
      const float ra[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float rb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] += ra[i] * rb[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + h * 64 + tx * 4;
      if (n >= N) continue;
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = acc[i][h * 4 + j] + bias[n + j];
        v[j] = v[j] < 0.f ? 0.f : v[j];
      }
      *reinterpret_cast<float4*>(Y + int64_t(m) * N + n) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

// the reference's epilogue on cuBLAS's output
__global__ void bias_relu_inplace(float* Y, const float* bias, int64_t M, int64_t N) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < M * N) {
    const float v = Y[i] + bias[i % N];
    Y[i] = v < 0.f ? 0.f : v;
  }
}

// ---------------------------------------------------------------------------------------------
// launchers

void run_version(int v, const float* A, const float* B, const float* bias, float* Y, int M,
                 int N, int K) {
  switch (v) {
    case 1: {
      const dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
      v1_naive<<<grid, block>>>(A, B, bias, Y, M, N, K);
      break;
    }
    case 2: {
      const dim3 block(T2, T2), grid((N + T2 - 1) / T2, (M + T2 - 1) / T2);
      v2_tiled<<<grid, block>>>(A, B, bias, Y, M, N, K);
      break;
    }
    case 3: {
      const dim3 grid((N + V_BN - 1) / V_BN, (M + V_BM - 1) / V_BM);
      v3_regblock<<<grid, 256>>>(A, B, bias, Y, M, N, K);
      break;
    }
    case 4: {
      const dim3 grid((N + V_BN - 1) / V_BN, (M + V_BM - 1) / V_BM);
      v4_vectorized<<<grid, 256>>>(A, B, bias, Y, M, N, K);
      break;
    }
    case 5:
      launch_gemm<float>(A, K, false, B, N, false, bias, true, Y, N, M, N, K, 0);
      break;
  }
  CK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------------------
// main: validate every version against cuBLAS, then time it

float time_ms(int reps, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 3; ++i) fn();  // warm up
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];  // the median
}

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int N = argc > 2 ? std::atoi(argv[2]) : 4096;
  const int K = argc > 3 ? std::atoi(argv[3]) : 4096;
  std::vector<int> versions;
  for (int i = 4; i < argc; ++i) versions.push_back(std::atoi(argv[i]));
  if (versions.empty()) versions = {1, 2, 3, 4, 5};

  // A ~ N(0, 1), B ~ N(0, 1/K), bias ~ N(0, 1/4): |Z| ~ 1 (as the exercise's benchmark)
  std::mt19937 gen(0);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> hA(size_t(M) * K), hB(size_t(K) * N), hb(N);
  for (auto& x : hA) x = nd(gen);
  const float sk = 1.f / std::sqrt(float(K));
  for (auto& x : hB) x = nd(gen) * sk;
  for (auto& x : hb) x = 0.5f * nd(gen);
  float *A, *B, *bias, *Y, *R;
  CK(cudaMalloc(&A, hA.size() * 4));
  CK(cudaMalloc(&B, hB.size() * 4));
  CK(cudaMalloc(&bias, hb.size() * 4));
  CK(cudaMalloc(&Y, size_t(M) * N * 4));
  CK(cudaMalloc(&R, size_t(M) * N * 4));
  CK(cudaMemcpy(A, hA.data(), hA.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(B, hB.data(), hB.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, hb.data(), hb.size() * 4, cudaMemcpyHostToDevice));

  // cuBLAS is column-major: Y^T[N, M] = B^T[N, K] A^T[K, M], which is row-major Y = A B.
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);  // plain fp32: no TF32 tensor cores
  const float one = 1.f, zero = 0.f;
  auto cublas = [&](float* out) {
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, out, N);
  };
  cublas(R);
  bias_relu_inplace<<<unsigned((int64_t(M) * N + 255) / 256), 256>>>(R, bias, M, N);
  CK(cudaDeviceSynchronize());
  std::vector<float> ref(size_t(M) * N), got(size_t(M) * N);
  CK(cudaMemcpy(ref.data(), R, ref.size() * 4, cudaMemcpyDeviceToHost));

  const double flops = 2.0 * M * N * K;
  const int reps = flops > 1e11 ? 10 : 30;
  const float ms_cublas = time_ms(reps, [&] { cublas(R); });
  std::printf("M=%d N=%d K=%d  (%.1f GFLOP)\n", M, N, K, flops / 1e9);
  std::printf("%-34s %10s %10s %10s  %s\n", "version", "ms", "TFLOP/s", "of cuBLAS", "check");
  std::printf("%-34s %10.3f %10.2f %9.1f%%  %s\n", "cuBLAS sgemm (TF32 off, no epilogue)",
              ms_cublas, flops / ms_cublas / 1e9, 100.0, "-");
  const char* names[] = {"", "1 naive", "2 shared-memory tiles 32x32", "3 register tile 8x8",
                         "4 + float4 loads, transposed As", "5 + double buffering (solution)"};
  for (int v : versions) {
    if (v < 1 || v > 5) continue;
    if (v == 4 && (K % 4 || N % 4)) {
      std::printf("%-34s needs K and N multiples of 4\n", names[v]);
      continue;
    }
    CK(cudaMemset(Y, 0xff, size_t(M) * N * 4));  // NaN: an unwritten element shows
    run_version(v, A, B, bias, Y, M, N, K);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), Y, got.size() * 4, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float tol = 1e-3f + 1e-3f * std::fabs(ref[i]);
      if (!(std::fabs(got[i] - ref[i]) <= tol)) {
        if (bad < 5)
          std::printf("  mismatch at [%zu, %zu]: %g vs %g\n", i / N, i % N, got[i], ref[i]);
        ++bad;
      }
    }
    const bool slow = v == 1 && flops > 2e11;
    const float ms = time_ms(slow ? 3 : reps, [&] { run_version(v, A, B, bias, Y, M, N, K); });
    std::printf("%-34s %10.3f %10.2f %9.1f%%  %s\n", names[v], ms, flops / ms / 1e9,
                100.0 * ms_cublas / ms, bad ? "WRONG" : "ok");
  }
  cublasDestroy(h);
  return 0;
}
