// aten_cuda.h — the binding side's helpers: what a `.cpp` that knows ATen needs to call the
// launchers of a kernel file that knows only CUDA (common.cuh's side). Host code only.
//
//   course::cuda_ptr(p)     at::BFloat16* -> __nv_bfloat16*, at::Half* -> __half* (the same 16
//                           bits under two names); float and double pointers pass unchanged
//   course::acc_t<T>        the math type: float for half, bfloat16 and float; double for double
//   course::math_type(x)    the same as an ATen dtype, for tensors of per-row statistics
//
// Argument checks, the same wording and order in every exercise: the arguments in the op's
// order, and for each its device, its dtype, its shape, then its strides. Every message names
// the argument, what it must be and what it is, so the caller sees which input to fix:
//   course::check_device(x, "x", cpu_ok)    a CUDA tensor (or a CPU one, for ops with a CPU path)
//   course::check_dtype(x, "x", {at::kFloat, at::kHalf, ...})
//   course::check_like(w, "w", x)            on x's device, with x's dtype
//   course::check_rows(x, "x")               at least 1-D, a last dimension (the rows) of >= 1
//   course::check_vector(w, "w", N, "x's last dimension")   shape [N]
//   course::check_contiguous(x, "x")         for an argument whose strides the kernel does not
//                                            take: refused, naming it (never a hidden copy)
//
// The grader puts this folder on the include path of every CUDA track: #include "aten_cuda.h".
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <initializer_list>
#include <string>
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

// The dtype as Python spells it (float32, not Float), for messages.
inline std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kDouble: return "float64";
    case at::kChar: return "int8";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

inline void check_device(const at::Tensor& t, const char* name, bool cpu_ok = false) {
  TORCH_CHECK(t.is_cuda() || (cpu_ok && t.is_cpu()), name,
              cpu_ok ? " must be on a CUDA device or the CPU, got " : " must be a CUDA tensor, got ",
              t.device());
}

inline void check_dtype(const at::Tensor& t, const char* name,
                        std::initializer_list<at::ScalarType> allowed) {
  for (const at::ScalarType a : allowed)
    if (t.scalar_type() == a) return;
  std::string names;
  int i = 0;
  for (const at::ScalarType a : allowed)
    names += (i++ == 0 ? "" : i == int(allowed.size()) ? " or " : ", ") + dtype_name(a);
  TORCH_CHECK(false, name, " must be ", names, ", got ", dtype_name(t.scalar_type()));
}

inline void check_like(const at::Tensor& t, const char* name, const at::Tensor& x,
                       const char* x_name = "x") {
  TORCH_CHECK(t.device() == x.device(), name, " must be on ", x_name, "'s device ", x.device(),
              ", got ", t.device());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), name, " must have ", x_name, "'s dtype ",
              dtype_name(x.scalar_type()), ", got ", dtype_name(t.scalar_type()));
}

inline void check_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, name,
              " must have a last dimension of at least 1 (the rows), got shape ", x.sizes());
}

inline void check_vector(const at::Tensor& t, const char* name, int64_t n, const char* what) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == n, name, " must have shape [", n, "] (", what,
              "), got ", t.sizes());
}

inline void check_contiguous(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous, got sizes ", t.sizes(),
              " and strides ", t.strides(), " (pass ", name, ".contiguous())");
}

}  // namespace course
