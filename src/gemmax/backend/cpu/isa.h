// Which vector instructions the cpu backend's kernels use.
//
// The fast path needs AVX-512 with the BF16 dot-product instruction (vdpbf16ps: Intel Cooper
// Lake / Sapphire Rapids and later, AMD Zen 4 and later). Without it the kernels run a portable
// path (AVX2 + FMA when the build targets it): the same arithmetic in fp32, slower. The path is
// chosen once, from CPUID, or forced by the config key cpu_isa.
#pragma once

#include <string>

namespace gemmax::cpu {

enum class Isa {
  Avx512Bf16,  // AVX-512 F/BW/VL/DQ + BF16 dot products
  Portable,    // compiler-vectorised C++ (AVX2 + FMA at the default -march=x86-64-v3)
};

// What this CPU supports.
bool cpu_has_avx512_bf16();

// cpu_isa: "auto" (the best this CPU supports), "avx512_bf16" (an error if unsupported),
// "avx2" (the portable path). Throws gemmax::Error for other names.
Isa choose_isa(const std::string& requested);
const char* isa_name(Isa isa);

}  // namespace gemmax::cpu
