// Two builds of one loop: the cpu backend's elementwise kernels are written once, as plain
// vectorisable C++ marked GEMMAX_SIMD_BODY, and called either as they are (compiled for the
// build's target, AVX2 at x86-64-v3) or through a wrapper marked GEMMAX_AVX512, into which
// the compiler inlines the body and vectorises it 16 lanes wide. The backend picks the wrapper
// when its kernels run the AVX-512 path (isa.h).
#pragma once

#define GEMMAX_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
#define GEMMAX_SIMD_BODY [[gnu::always_inline]] inline
