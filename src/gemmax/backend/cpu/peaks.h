// The machine's limit for `gemmax bench`: the rate each multiply-accumulate instruction of
// this CPU retires when nothing else limits it (a register-resident loop of independent
// accumulators), measured on every thread at once.
#pragma once

#include <string>
#include <vector>

namespace gemmax::cpu {

struct InstructionPeak {
  std::string name;   // "fp32 FMA zmm (vfmadd231ps)", ...
  double tflops = 0;  // all threads together
  int threads = 0;
  double per_thread() const { return tflops / threads; }
};

// The instructions this CPU (and OS) can run: fp32 FMA ymm always; fp32 FMA zmm with AVX-512;
// bf16 dot zmm with AVX-512 BF16; AMX tdpbf16ps where granted. Each runs for about `seconds`.
std::vector<InstructionPeak> instruction_peaks(int threads, double seconds = 0.2);

}  // namespace gemmax::cpu
