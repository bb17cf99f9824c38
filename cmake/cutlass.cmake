# CUTLASS 3's sm90 grouped GEMM, the measured comparator of the own grouped-matmul kernels
# (bench/cutlass/, docs/CUDA_SM90.md). Its headers are a build dependency of the cuda backend's
# bench only, taken by pinned version (cmake/fetch_wheel_headers.cmake): the PyPI wheel
# nvidia-cutlass, or GEMMAX_CUTLASS_DIR. Nothing of the model's path uses it.
#
# Its translation unit takes minutes to compile, so its targets are not built by default:
#   cmake --build build --target gemmax_cutlass    (bin/gmm_cutlass; its GPU tests: gmm_cutlass --test)
# bench/build_gpu_prebuilt.sh builds and bundles them.
set(GEMMAX_CUTLASS_DIR "" CACHE PATH
    "CUTLASS include directory (holds cutlass/cutlass.h and cute/); empty: fetch the pinned wheel")
option(GEMMAX_CUTLASS_FETCH "Fetch the pinned CUTLASS headers when no directory is given" ON)
set(GEMMAX_CUTLASS_VERSION 4.2.0.0)
gemmax_wheel_headers(gemmax_cutlass_include
  NAME nvidia-cutlass VERSION ${GEMMAX_CUTLASS_VERSION}
  URL "https://files.pythonhosted.org/packages/21/6b/e86fc2fd536dd4b8bd2209aa31d7002610c501b0802337787eac9c9b328c/nvidia_cutlass-4.2.0.0-py3-none-any.whl"
  SHA256 f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
  INCLUDE cutlass_library/source/include CHECK cutlass/cutlass.h
  DIR "${GEMMAX_CUTLASS_DIR}" FETCH ${GEMMAX_CUTLASS_FETCH}
  HINT "the CUTLASS grouped-GEMM bench (target gemmax_cutlass) is left out. Offline: -DGEMMAX_CUTLASS_DIR=<include dir>")
if(gemmax_cutlass_include)
  # sm_90a only: CUTLASS's sm90 kernels are empty without the architecture-specific features.
  add_library(gemmax_gmm_cutlass STATIC EXCLUDE_FROM_ALL bench/cutlass/cutlass_gmm.cu)
  target_include_directories(gemmax_gmm_cutlass SYSTEM PRIVATE ${gemmax_cutlass_include})
  target_include_directories(gemmax_gmm_cutlass PUBLIC ${CMAKE_SOURCE_DIR}/bench/cutlass)
  target_compile_options(gemmax_gmm_cutlass PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
                               -diag-suppress=2908>)
  target_link_libraries(gemmax_gmm_cutlass PUBLIC gemmax_backend CUDA::cudart)
  # One binary carries the bench and its GPU tests (`gmm_cutlass --test`): the GPU run's folder
  # is limited, and each binary holds the whole cuda backend.
  add_executable(gmm_cutlass EXCLUDE_FROM_ALL bench/cutlass/gmm_cutlass_bench.cc)
  target_link_libraries(gmm_cutlass PRIVATE gemmax_gmm_cutlass gemmax_train)
  gemmax_module_host(gmm_cutlass)
  set_target_properties(gmm_cutlass PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  if(GEMMAX_TESTS)
    find_package(GTest REQUIRED)
    # Not in ctest: the tests need a GPU (bench/gpu_check.sh runs them in stage 3).
    target_sources(gmm_cutlass PRIVATE tests/backend/cuda/cutlass/gmm_cutlass_test.cc)
    target_compile_definitions(gmm_cutlass PRIVATE GEMMAX_CUTLASS_TESTS)
    target_link_libraries(gmm_cutlass PRIVATE GTest::gtest)
  endif()
  add_custom_target(gemmax_cutlass DEPENDS gmm_cutlass)
  message(STATUS "gemmax: CUTLASS ${GEMMAX_CUTLASS_VERSION} headers at ${gemmax_cutlass_include}: "
                 "target gemmax_cutlass (not built by default)")
endif()
