#include "gemmax/base/convert.h"

#include <cstring>
#include <limits>
#include <type_traits>

namespace gemmax {

uint16_t double_to_bf16_bits(double d) { return bf16::round_bits(d); }

namespace {

// Reads element i of a float tensor as double (exact for every float source dtype).
template <class Src>
double load(const Src* p, int64_t i) {
  if constexpr (std::is_same_v<Src, bf16>)
    return double(float(p[i]));
  else if constexpr (std::is_same_v<Src, uint16_t>)
    return double(half_to_float(p[i]));
  else
    return double(p[i]);
}

template <class Src>
void convert_float(const Src* src, const Tensor& dst, int64_t n) {
  switch (dst.dtype()) {
    case DType::F32: {
      float* out = dst.data<float>();
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) out[i] = float(load(src, i));
      return;
    }
    case DType::F64: {
      double* out = dst.data<double>();
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) out[i] = load(src, i);
      return;
    }
    case DType::BF16: {
      uint16_t* out = static_cast<uint16_t*>(dst.raw());
      if constexpr (std::is_same_v<Src, double>) {
#pragma omp parallel for if (n > (1 << 16))
        for (int64_t i = 0; i < n; ++i) out[i] = double_to_bf16_bits(src[i]);
      } else {  // every other source is exact in float, so one rounding
#pragma omp parallel for if (n > (1 << 16))
        for (int64_t i = 0; i < n; ++i) out[i] = bf16::round_bits(float(load(src, i)));
      }
      return;
    }
    default: break;
  }
  fail("convert_dtype: cannot convert to ", dtype_name(dst.dtype()));
}

}  // namespace

Tensor convert_dtype(const Tensor& src, DType dst, MemKind kind) {
  GEMMAX_CHECK(src.defined(), "convert_dtype: undefined source tensor");
  GEMMAX_CHECK(src.device() == Device::Host, "convert_dtype: source ", src.str(),
               " is not in host memory");
  const DType from = src.dtype();
  const int64_t n = src.numel();
  auto refuse = [&](const char* why) -> Tensor {
    fail("convert_dtype: cannot convert ", src.str(), " to ", dtype_name(dst), ": ", why);
  };
  if (from == dst) {
    Tensor out = Tensor::empty(src.shape(), dst, kind);
    if (n > 0) std::memcpy(out.raw(), src.raw(), src.nbytes());
    return out;
  }
  if (dst == DType::F16) return refuse("float16 is supported as a source only");
  const bool float_to_float = is_float(from) && is_float(dst);
  const bool int_to_int =
      (from == DType::I32 || from == DType::I64) && (dst == DType::I32 || dst == DType::I64);
  if (!float_to_float && !int_to_int)
    return refuse(
        "supported are float32/float64/bfloat16(/float16 source) among themselves, "
        "and int32 <-> int64");

  Tensor out = Tensor::empty(src.shape(), dst, kind);
  if (n == 0) return out;
  switch (from) {
    case DType::F32: convert_float(src.data<float>(), out, n); break;
    case DType::F64: convert_float(src.data<double>(), out, n); break;
    case DType::BF16: convert_float(src.data<bf16>(), out, n); break;
    case DType::F16: convert_float(static_cast<const uint16_t*>(src.raw()), out, n); break;
    case DType::I32: {
      const int32_t* in = src.data<int32_t>();
      int64_t* o = out.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = in[i];
      break;
    }
    case DType::I64: {
      const int64_t* in = src.data<int64_t>();
      int32_t* o = out.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) {
        if (in[i] < std::numeric_limits<int32_t>::min() ||
            in[i] > std::numeric_limits<int32_t>::max())
          fail("convert_dtype: element ", i, " of ", src.str(), " is ", in[i],
               ", which does not fit in int32; keep the tensor as int64");
        o[i] = int32_t(in[i]);
      }
      break;
    }
    case DType::U8: break;  // refused above
  }
  return out;
}

void convert_into(const Tensor& src, const Tensor& dst) {
  GEMMAX_CHECK(src.numel() == dst.numel(), "convert_into: ", src.str(), " into ", dst.str());
  if (src.dtype() == dst.dtype()) {  // no staging copy: the sources can be a model's largest table
    if (src.raw() != dst.raw()) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return;
  }
  const Tensor c = convert_dtype(src, dst.dtype());
  std::memcpy(dst.raw(), c.raw(), c.nbytes());
}

}  // namespace gemmax
