// aten_cuda.h — the binding side's helpers: what a `.cpp` that knows ATen needs to call the
// launchers of a kernel file that knows only CUDA (common.cuh's side). Host code only.
//
//   course::cuda_ptr(p)     at::BFloat16* -> __nv_bfloat16*, at::Half* -> __half* (the same 16
//                           bits under two names); float and double pointers pass unchanged
//   course::acc_t<T>        the math type: float for half, bfloat16 and float; double for double
//   course::math_type(x)    the same as an ATen dtype, for tensors of per-row statistics
//
// The grader puts this folder on the include path of every CUDA track: #include "aten_cuda.h".
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace course {

template <typename T> struct Cuda { using type = T; };
template <> struct Cuda<c10::BFloat16> { using type = __nv_bfloat16; };
template <> struct Cuda<c10::Half> { using type = __half; };

template <typename T>
auto cuda_ptr(const T* p) { return reinterpret_cast<const typename Cuda<T>::type*>(p); }
template <typename T>
auto cuda_ptr(T* p) { return reinterpret_cast<typename Cuda<T>::type*>(p); }

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline at::ScalarType math_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace course
