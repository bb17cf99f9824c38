#include "gemmax/backend/cpu/isa.h"

#include <cstring>

#include "gemmax/base/error.h"
#include "gemmax/base/strings.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace gemmax::cpu {
namespace {

#if defined(__x86_64__)
uint64_t xcr0() {
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux keeps AMX's tile data (XSTATE component 18) off until a process asks for it.
bool request_amx() {
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) == 0;
}

CpuFeatures probe() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;
  __get_cpuid(1, &a, &b, &c, &d);
  if (!(c & (1u << 27))) return f;  // OSXSAVE: xgetbv is usable
  const uint64_t x = xcr0();
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  f.avx512 = f512 && dq && bw && vl && (x & 0xe6) == 0xe6;  // XCR0: SSE, AVX, opmask, ZMM
  f.amx_bf16 = (d & (1u << 24)) && (d & (1u << 22));        // AMX-TILE, AMX-BF16
  unsigned a1, b1, c1, d1;
  if (f.avx512 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = a1 & (1u << 5);
  if (f.amx_bf16) f.amx_granted = (x & (3ull << 17)) == (3ull << 17) && request_amx();
  return f;
}
#else
CpuFeatures probe() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = probe();
  return f;
}

bool cpu_has_avx512_bf16() { return cpu_features().avx512_bf16; }

bool isa_runs_here(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Amx:
      return f.amx_bf16 && f.amx_granted && f.avx512;
    case Isa::Avx512Fp32:
      return f.avx512;
    case Isa::Avx512Bf16:
      return f.avx512_bf16;
    case Isa::AmxEmulated:
    case Isa::Avx2:
      return true;
  }
  return false;
}

// auto: AMX where granted; else on AVX-512, the BF16 dot product where it runs at the FMA
// units' rate (AMD Zen 4/5 split it into FMAs at full width) and FP32 FMA elsewhere (Intel's
// vdpbf16ps retires at half the FMA rate: 83 vs 168 GFLOP/s per core on Emerald Rapids); else
// AVX2.
Isa choose_isa(const std::string& requested, std::string* why) {
  const CpuFeatures& f = cpu_features();
  auto say = [&](std::string s) {
    if (why) *why = std::move(s);
  };
  if (requested == "auto") {
    if (isa_runs_here(Isa::Amx)) {
      say("auto: AMX-BF16 granted by the OS");
      return Isa::Amx;
    }
    const std::string amx = f.amx_bf16 ? "AMX present but not granted by the OS; " : "no AMX; ";
    const bool amd = f.vendor == "AuthenticAMD";
    if (f.avx512_bf16 && amd) {
      say("auto: " + amx + "AMD with AVX-512 BF16 (vdpbf16ps at the FMA rate)");
      return Isa::Avx512Bf16;
    }
    if (f.avx512) {
      say("auto: " + amx +
          (f.avx512_bf16 ? "AVX-512 BF16 at half the FMA rate on " + f.vendor
                         : std::string("AVX-512 without BF16")) +
          ", so FP32 FMA");
      return Isa::Avx512Fp32;
    }
    say("auto: no AVX-512 on this CPU (avx2 kernels, slower)");
    return Isa::Avx2;
  }
  Isa isa;
  const char* need = nullptr;
  if (requested == "amx") {
    isa = Isa::Amx;
    need = !f.amx_bf16      ? "no AMX-BF16 instructions (CPUID)"
           : !f.amx_granted ? "AMX-BF16 in the CPU, but the OS did not grant its tile state "
                              "(arch_prctl ARCH_REQ_XCOMP_PERM failed; Linux 5.16+ grants it)"
                            : "no AVX-512";
  } else if (requested == "amx_emulated") {
    isa = Isa::AmxEmulated;
  } else if (requested == "avx512_fp32") {
    isa = Isa::Avx512Fp32;
    need = "no AVX-512 F/BW/DQ/VL (or the OS does not save the ZMM registers)";
  } else if (requested == "avx512_bf16") {
    isa = Isa::Avx512Bf16;
    need = "no AVX-512 BF16 instructions";
  } else if (requested == "avx2") {
    isa = Isa::Avx2;
  } else {
    fail("unknown cpu_kernels '", requested,
         "': expected auto, amx, amx_emulated, avx512_fp32, avx512_bf16 or avx2");
  }
  if (!isa_runs_here(isa))
    fail("cpu_kernels=", requested, ": this CPU (", f.vendor, ") has ", need,
         "; use cpu_kernels=auto (", isa_name(choose_isa("auto")), " here)");
  say("forced by cpu_kernels=" + requested);
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Amx:
      return "amx";
    case Isa::AmxEmulated:
      return "amx_emulated";
    case Isa::Avx512Fp32:
      return "avx512_fp32";
    case Isa::Avx512Bf16:
      return "avx512_bf16";
    case Isa::Avx2:
      return "avx2";
  }
  return "?";
}

}  // namespace gemmax::cpu
