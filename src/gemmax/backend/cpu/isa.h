// Which instructions the cpu backend's products run on: one microkernel family per
// instruction, chosen once per machine from CPUID and the OS's permission, never from timing
// (a machine's runs stay bit-identical), or forced by the config key cpu_kernels.
//
//   amx          AMX-BF16 tiles (tdpbf16ps), where the CPU has them and the OS grants them
//                (Intel Sapphire, Emerald and Granite Rapids);
//   amx_emulated the same kernel over a host emulation of the tile instructions, built from
//                Intel's definition: runs on any CPU, slowly (tests, CI);
//   avx512_fp32  AVX-512 FP32 FMA on bf16 data widened to fp32 (Intel without AMX, where
//                vdpbf16ps has half the FMA units' throughput);
//   avx512_bf16  AVX-512 BF16 dot products, vdpbf16ps (AMD Zen 4/5, where it runs at full rate);
//   avx2         portable C++ vectorised for the build's target (AVX2 + FMA at x86-64-v3).
//
// fp32 products run on AVX-512 FMA in every family but avx2. The elementwise kernels (norms,
// attention's softmax, loss, AdamW) run 16 lanes wide whenever the family is not avx2 and the
// CPU has AVX-512 BF16 (wide_vectors), else at the build's width.
#pragma once

#include <string>

namespace gemmax::cpu {

enum class Isa { Amx, AmxEmulated, Avx512Fp32, Avx512Bf16, Avx2 };

// What this CPU (and its OS) offers.
struct CpuFeatures {
  std::string vendor;   // "GenuineIntel", "AuthenticAMD", ...
  bool avx512 = false;  // AVX-512 F/BW/DQ/VL with the OS saving ZMM state
  bool avx512_bf16 = false;
  bool amx_bf16 = false;     // AMX-TILE + AMX-BF16 in CPUID
  bool amx_granted = false;  // ... and the OS gave this process the tile data state
};
const CpuFeatures& cpu_features();  // probed once (asks the OS for AMX when the CPU has it)
bool cpu_has_avx512_bf16();

// cpu_kernels: "auto" (see isa.cc for the rule) or a family name. A family this CPU cannot run
// is an error naming what is missing; `why`, when given, receives the reason for the choice.
Isa choose_isa(const std::string& requested, std::string* why = nullptr);
const char* isa_name(Isa isa);
// Whether this CPU can run the family (amx_emulated and avx2 run everywhere).
bool isa_runs_here(Isa isa);

inline bool wide_vectors(Isa isa) { return isa != Isa::Avx2 && cpu_has_avx512_bf16(); }

}  // namespace gemmax::cpu
