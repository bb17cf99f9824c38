// Quantised weights.
#include "gemmax/backend/reference/common.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/base/nf4.h"

namespace gemmax {

void ReferenceBackend::do_dequantize_nf4(const DequantizeNf4Args& args, NoDims) {
  const auto& [out, codes, absmax, block] = args;
  const uint8_t* q = codes.data<uint8_t>();
  const float* scale = absmax.data<float>();
  const int64_t n = out.numel();
  dispatch<float, bf16, double>(out, "dequantize_nf4", [&]<class T>() {
    T* o = out.data<T>();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) o[i] = T(nf4_value(nf4_index_at(q, i)) * scale[i / block]);
  });
}

}  // namespace gemmax
