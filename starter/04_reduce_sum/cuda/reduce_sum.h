// Exercise 04 — reduce_sum: what reduce_sum.cpp (host, ATen) calls in reduce_sum_kernels.cu (nvcc).
//
// Raw pointers and a stream only, so the kernels file needs no PyTorch header and rebuilds in
// seconds. at::Half and at::BFloat16 have the layout of __half and __nv_bfloat16: the .cpp passes
// them with reinterpret_cast.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ex04 {

// The result type: float for half, bfloat16 and float; double for double.
template <typename T> struct Out { using type = float; };
template <> struct Out<double> { using type = double; };

// How many blocks share one row of `cols` elements when there are `rows` rows. When it is more
// than 1, each block writes one partial sum to a workspace of rows * splits values, and a second
// kernel adds each row's partials in a fixed order.
int splits_for(int64_t rows, int64_t cols, int element_size);

// out[r] = sum of x[r, 0:cols] for r < rows (x contiguous). `partials` holds rows * splits
// values (unused when splits == 1). A flat sum is the case rows = 1.
template <typename T>
void sum_rows(const T* x, int64_t rows, int64_t cols, int splits,
              typename Out<T>::type* partials, typename Out<T>::type* out, cudaStream_t stream);

}  // namespace ex04
