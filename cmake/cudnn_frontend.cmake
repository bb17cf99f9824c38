# cuDNN's fused attention (cuda_attention=cudnn, backend/cuda/cudnn_attention.cc) is built on
# cuDNN's C++ frontend, which is header-only. It is a build dependency of the cuda backend,
# fetched here by pinned version (the PyPI wheel nvidia-cudnn-frontend, checked by SHA256) into
# the build tree, or taken from GEMMAX_CUDNN_FRONTEND_DIR (an unpacked include directory: for a
# machine without network). Nothing is fetched at run time. Without the frontend, or without
# cuDNN itself (cudnn.h, libcudnn), the path is left out and cuda_attention=cudnn says so.
set(GEMMAX_CUDNN_FRONTEND_DIR "" CACHE PATH
    "cuDNN frontend include directory (holds cudnn_frontend.h); empty: fetch the pinned wheel")
option(GEMMAX_CUDNN_FRONTEND_FETCH "Fetch the pinned cuDNN frontend when no directory is given" ON)
set(GEMMAX_CUDNN_FRONTEND_VERSION 1.32.0)
set(GEMMAX_WITH_CUDNN FALSE)
gemmax_wheel_headers(gemmax_cudnn_fe
  NAME nvidia-cudnn-frontend VERSION ${GEMMAX_CUDNN_FRONTEND_VERSION}
  URL "https://files.pythonhosted.org/packages/11/02/660e2dd9f9d9f940e1641443771730612c3aadaafbc5ef7a93cc313d519d/nvidia_cudnn_frontend-1.32.0-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
  SHA256 c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
  INCLUDE include CHECK cudnn_frontend.h
  DIR "${GEMMAX_CUDNN_FRONTEND_DIR}" FETCH ${GEMMAX_CUDNN_FRONTEND_FETCH}
  HINT "cuda_attention=cudnn is left out. Offline: -DGEMMAX_CUDNN_FRONTEND_DIR=<include dir>")
find_path(GEMMAX_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(GEMMAX_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
if(gemmax_cudnn_fe AND GEMMAX_CUDNN_INCLUDE_DIR AND GEMMAX_CUDNN_LIBRARY AND TARGET CUDA::nvrtc)
  set(GEMMAX_WITH_CUDNN TRUE)
  # Only this file sees the frontend (its JSON serialisation left out): nothing else rebuilds.
  set_source_files_properties(${CMAKE_SOURCE_DIR}/src/gemmax/backend/cuda/cudnn_attention.cc
    PROPERTIES COMPILE_DEFINITIONS "GEMMAX_WITH_CUDNN_FRONTEND;CUDNN_FRONTEND_SKIP_JSON_LIB"
               COMPILE_OPTIONS "-isystem;${gemmax_cudnn_fe};-isystem;${GEMMAX_CUDNN_INCLUDE_DIR}")
  # The frontend's headers call NVRTC (for engines of newer GPUs that it compiles at run time).
  target_link_libraries(gemmax_cuda PRIVATE ${GEMMAX_CUDNN_LIBRARY} CUDA::nvrtc)
  message(STATUS "gemmax: cuDNN attention with frontend ${gemmax_cudnn_fe} and ${GEMMAX_CUDNN_LIBRARY}")
elseif(gemmax_cudnn_fe)
  message(STATUS "gemmax: no cuDNN (cudnn.h, libcudnn) beside CUDA: cuda_attention=cudnn left out")
else()
  message(STATUS "gemmax: no cuDNN frontend (not fetched, no GEMMAX_CUDNN_FRONTEND_DIR): "
                 "cuda_attention=cudnn left out")
endif()
