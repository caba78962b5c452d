// Exercise 12 — matmul_tc, CUTLASS track, solved: D = act(A @ B + bias) on Hopper tensor cores.
//
// Contents:
//   MatmulAct           the activation, chosen at run time (one kernel per dtype, not three)
//   GemmFor<T>          the kernel type: a CUTLASS 3.x CollectiveBuilder mainloop (TMA loads,
//                       wgmma, warp-specialized, persistent) and an epilogue that fuses the
//                       per-column bias, the activation and the cast (LinCombPerColBiasEltAct)
//   matmul_act_run      the launcher the .cpp calls: raw pointers, sizes, a stream; no ATen
//   built_for_sm90a     did nvcc build the wgmma/TMA code (sm_90a), or only the fallback?
//
// Only CUDA and CUTLASS headers here: ATen's headers live in matmul_tc.cpp, so changing one
// file rebuilds one object. This file is the slow one (~the CUTLASS templates).
//
// Napkin math, the graded case (bf16, M = N = K = 8192, act = relu): 2 M N K = 1.10e12 flops.
// Bytes: read A and B once (2 * 8192^2 * 2 B = 268 MB), write D (134 MB): 403 MB, ~94 us at the
// H200's measured 4.28 TB/s, against ~1551 us at the measured cuBLAS rate (709 TFLOP/s): the op
// is compute-bound by ~16x, and the whole game is keeping the tensor cores fed. Fusing the
// epilogue saves the separate relu pass of F.linear + relu: read D and write it again, 268 MB,
// ~63 us at copy speed, ~4% of the GEMM.
//
// Tile 128 x 256 x 64 (bf16): each k-step loads 128*64 + 64*256 = 24576 elements (48 KB) into
// shared memory and does 2*128*256*64 = 4.2 Mflop on them: 85 flop/byte from shared memory, and
// per CTA a 128x256 fp32 accumulator (128 KB in registers of 2 consumer warpgroups: 128 floats
// per thread). With 4+ pipeline stages (~192 KB of the 227 KB of smem) TMA runs ahead of wgmma.
// Cluster 2x1: the two CTAs of a cluster share B's tile through TMA multicast, halving its L2
// reads. The grid is persistent (one CTA per SM, looping over tiles), so the epilogue of one
// tile overlaps the next tile's loads.

// NDEBUG before any CUTLASS header: CuTe's device-side assert() compiles to a call of
// __assert_fail, and any function call inside the kernel makes ptxas serialize the wgmma
// pipeline ("wgmma.mma_async instructions are serialized ... crossing function boundary"),
// a large slowdown. torch's extension build does not define NDEBUG for nvcc.
#ifndef NDEBUG
#define NDEBUG
#endif

#if __has_include(<cutlass/cutlass.h>)
#define MATMUL_TC_HAVE_CUTLASS 1
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>
#include <cute/tensor.hpp>
#else
#define MATMUL_TC_HAVE_CUTLASS 0
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "matmul_tc.h"

#if MATMUL_TC_HAVE_CUTLASS

using namespace cute;

// ---------------------------------------------------------------------------------------------
// The activation, applied by the epilogue to alpha * acc + bias (fp32) before the cast.
// Sm90Compute passes `Arguments` (taken from the scalar version) to the Array version on every
// fragment: a uniform branch per fragment costs nothing next to the GEMM, and it turns three
// template instantiations per dtype (each ~a minute of nvcc) into one.
template <class T>
struct MatmulAct {
  static const bool kIsHeavy = true;  // gelu's exp: tells the epilogue not to unroll too far
  struct Arguments {
    int act = kActNone;
  };
  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args) const {
    if (args.act == kActRelu) {
      return x > T(0) ? x : T(0);  // relu(NaN) = NaN, as torch.relu
    }
    if (args.act == kActGeluTanh) {
      // 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3)
      // exact in fp32 and finite everywhere: exp(-2u) = inf for x << 0 gives -0, as it should.
      // __fdividef / __expf: the fast intrinsics (2 ulp at these arguments, far below a
      // 16-bit output's rounding). A plain `/` or expf would compile to a called slow-path
      // subroutine, and a function call inside the kernel makes ptxas serialize the wgmma
      // pipeline ("wgmma pipeline crossing function boundary"): a large loss for the GEMM.
      T u = T(0.7978845608028654f) * (x + T(0.044715f) * x * x * x);
#if defined(__CUDA_ARCH__)
      return __fdividef(x, T(1) + __expf(-T(2) * u));  // x / inf = 0 for x << 0
#else
      return x / (T(1) + expf(-T(2) * u));
#endif
    }
    return x;
  }
};

template <class T, int N>
struct MatmulAct<cutlass::Array<T, N>> {
  static const bool kIsHeavy = true;
  using Arguments = typename MatmulAct<T>::Arguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v,
                                                      Arguments const& args) const {
    MatmulAct<T> one;
    cutlass::Array<T, N> out;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = one(v[i], args);
    return out;
  }
};

// ---------------------------------------------------------------------------------------------
// The kernel type for one element type (cutlass::bfloat16_t or cutlass::half_t).
//
//   A [M, K] row-major (K contiguous), B [K, N] row-major (N contiguous: "MN-major", which
//   wgmma reads directly for 16-bit types), D [M, N] row-major, bias [N].
//   No C operand (ElementC = void): D = act(1 * acc + bias), nothing else is read.
template <class T>
struct GemmFor {
  using ElementA = T;
  using ElementB = T;
  using ElementD = T;
  using ElementBias = T;
  using ElementAccumulator = float;  // wgmma accumulates in fp32
  using ElementCompute = float;      // the epilogue's math: bias add and activation in fp32
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  // TMA moves 16-byte aligned boxes: 8 elements of a 16-bit type. Hence K % 8 and N % 8.
  static constexpr int kAlign = 128 / cutlass::sizeof_bits<T>::value;

  using TileShape = Shape<_128, _256, _64>;  // CTA tile M x N x K (see the napkin math above)
  using ClusterShape = Shape<_2, _1, _1>;    // 2 CTAs along M share B's tile (TMA multicast)
  // Cooperative: two consumer warpgroups split one 128 x 256 tile (each 64 x 256), a producer
  // warp issues the TMA loads; persistent over tiles.
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<
      MatmulAct, ElementD, ElementCompute, ElementBias, /*ElementSource=*/ElementD,
      /*ElementScalar=*/ElementCompute>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute,
      void, LayoutD, kAlign,  // C: none
      ElementD, LayoutD, kAlign, EpilogueSchedule, Fusion>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlign, ElementB,
      LayoutB, kAlign, ElementAccumulator, TileShape, ClusterShape,
      // as many pipeline stages as fit in shared memory next to the epilogue's buffers
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                          CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

template <class T>
typename GemmFor<T>::Gemm::Arguments make_arguments(const MatmulProblem& p) {
  using G = GemmFor<T>;
  using Kernel = typename G::GemmKernel;
  // Strides in CuTe's (M, K, L) / (N, K, L) / (M, N, L) convention; the row strides come from
  // the tensors, so a row-major view with padded rows works too.
  typename Kernel::StrideA stride_a =
      cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, make_shape(p.M, p.K, 1));
  typename Kernel::StrideB stride_b =
      cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, make_shape(p.N, p.K, 1));
  typename Kernel::StrideD stride_d =
      cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, make_shape(p.M, p.N, 1));
  get<0>(stride_a) = p.lda;  // A[m, k] at m * lda + k
  get<1>(stride_b) = p.ldb;  // B[k, n] at k * ldb + n (B is N-major: stride 1 along N)
  get<0>(stride_d) = p.ldd;

  typename G::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {p.M, p.N, p.K, 1},
      {reinterpret_cast<const T*>(p.A), stride_a, reinterpret_cast<const T*>(p.B), stride_b},
      {{}, nullptr, stride_d, reinterpret_cast<T*>(p.D), stride_d}};
  auto& fusion = args.epilogue.thread;
  fusion.alpha = 1.0f;
  fusion.beta = 0.0f;
  fusion.bias_ptr = reinterpret_cast<const T*>(p.bias);
  fusion.activation.act = p.act;
  args.hw_info.device_id = p.device;
  args.hw_info.sm_count = p.sm_count;
  return args;
}

template <class T>
std::string run(const MatmulProblem& p, void* workspace, size_t workspace_bytes,
                size_t* needed, cudaStream_t stream) {
  using Gemm = typename GemmFor<T>::Gemm;
  auto args = make_arguments<T>(p);
  size_t size = Gemm::get_workspace_size(args);
  if (needed != nullptr) {
    *needed = size;
    return "";
  }
  if (size > workspace_bytes) return "workspace too small";
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) {
    return std::string("CUTLASS cannot run this problem: ") + cutlassGetStatusString(status);
  }
  status = gemm.initialize(args, workspace, stream);
  if (status != cutlass::Status::kSuccess) {
    return std::string("CUTLASS initialize failed: ") + cutlassGetStatusString(status);
  }
  status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess) {
    return std::string("CUTLASS launch failed: ") + cutlassGetStatusString(status);
  }
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return std::string("CUDA error: ") + cudaGetErrorString(err);
  return "";
}

#endif  // MATMUL_TC_HAVE_CUTLASS

// ---------------------------------------------------------------------------------------------
// Built for sm_90a? The wgmma and TMA instructions exist only in the "arch-specific" target
// sm_90a; built for plain sm_90, CUTLASS compiles its kernel body to a printf and no math, so
// every output would stay unwritten. A one-thread probe asks the device code how it was built.
__global__ void sm90a_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

std::string built_for_sm90a(bool* yes, cudaStream_t stream) {
  // on the caller's stream (the op's current stream), like every launch of the op
  int* d = nullptr;
  int h = 0;
  cudaError_t err = cudaMalloc(&d, sizeof(int));
  if (err == cudaSuccess) {
    sm90a_probe<<<1, 1, 0, stream>>>(d);
    err = cudaGetLastError();
  }
  if (err == cudaSuccess) err = cudaMemcpyAsync(&h, d, sizeof(int), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (d != nullptr) cudaFree(d);
  *yes = h == 1;
  // no kernel image for this GPU at all: an sm_90a binary on a GPU that is not sm_90
  if (err == cudaErrorNoKernelImageForDevice) {
    cudaGetLastError();  // clear it: the error is reported by the caller, in words
    *yes = false;
    return "";
  }
  return err == cudaSuccess ? "" : std::string("CUDA error: ") + cudaGetErrorString(err);
}

std::string matmul_act_run(const MatmulProblem& p, void* workspace, size_t workspace_bytes,
                           size_t* needed, cudaStream_t stream) {
#if MATMUL_TC_HAVE_CUTLASS
  if (p.dtype == kBFloat16) return run<cutlass::bfloat16_t>(p, workspace, workspace_bytes, needed, stream);
#if !defined(MATMUL_TC_BF16_ONLY)  // -DMATMUL_TC_BF16_ONLY: half the build time while iterating
  if (p.dtype == kFloat16) return run<cutlass::half_t>(p, workspace, workspace_bytes, needed, stream);
#endif
  return "unsupported dtype (this build has no kernel for it)";
#else
  (void)p; (void)workspace; (void)workspace_bytes; (void)needed; (void)stream;
  return kNeedsCutlass;
#endif
}
