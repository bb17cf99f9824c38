#include "gemmax/backend/cpu/isa.h"

#include "gemmax/base/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gemmax::cpu {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  if (!(f && dq && bw && vl)) return false;
  // The OS must save the ZMM state (XCR0 bits 1, 2, 5, 6, 7).
  unsigned xlo, xhi;
  __asm__("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 0xe6) != 0xe6) return false;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
  return a & (1u << 5);  // AVX512_BF16
#else
  return false;
#endif
}

Isa choose_isa(const std::string& requested) {
  if (requested == "auto") return cpu_has_avx512_bf16() ? Isa::Avx512Bf16 : Isa::Portable;
  if (requested == "avx2") return Isa::Portable;
  if (requested == "avx512_bf16") {
    if (!cpu_has_avx512_bf16())
      fail(
          "cpu_isa=avx512_bf16: this CPU has no AVX-512 BF16 instructions; use cpu_isa=auto "
          "(or avx2 for the portable path)");
    return Isa::Avx512Bf16;
  }
  fail("unknown cpu_isa '", requested, "': expected auto, avx512_bf16 or avx2");
}

const char* isa_name(Isa isa) { return isa == Isa::Avx512Bf16 ? "avx512_bf16" : "avx2 (portable)"; }

}  // namespace gemmax::cpu
