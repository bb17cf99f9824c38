#include "gemmax/base/dtype.h"

#include "gemmax/base/error.h"

namespace gemmax {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "float32" || s == "fp32" || s == "f32") return DType::F32;
  if (s == "float64" || s == "fp64" || s == "f64") return DType::F64;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  if (s == "float16" || s == "fp16" || s == "f16") return DType::F16;
  if (s == "int32" || s == "i32") return DType::I32;
  if (s == "int64" || s == "i64") return DType::I64;
  if (s == "uint8" || s == "u8") return DType::U8;
  fail("unknown dtype '", s, "': expected one of float32, bfloat16, float64");
}

bool is_float(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

}  // namespace gemmax
