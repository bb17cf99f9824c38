// Functions that CUDA kernels call as well as host code: annotated for nvcc, plain C++ elsewhere.
#pragma once

#ifdef __CUDACC__
#define GEMMAX_HOST_DEVICE __host__ __device__
#else
#define GEMMAX_HOST_DEVICE
#endif
