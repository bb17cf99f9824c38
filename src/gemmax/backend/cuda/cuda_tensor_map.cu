// TMA tensor maps on the GPU: the driver's cuTensorMapEncodeTiled writes the CUtensorMap that
// cp.async.bulk.tensor reads, from the plain fields of a kern::TensorMap2d (which the host
// emulator reads instead), and of a kern::TensorMap3d.
#include <cuda.h>

#include "gemmax/backend/cuda/cuda_backend.h"
#include "gemmax/base/strings.h"

namespace gemmax::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static_assert(sizeof(CUtensorMap) == sizeof(kern::TensorMap2d{}.driver));
static_assert(sizeof(CUtensorMap) == sizeof(kern::TensorMap3d{}.driver));

}  // namespace

void CudaPlatform::encode_tensor_map(kern::TensorMap2d& m) {
  find_encode_tiled();
  GEMMAX_CHECK(m.elem_bytes == 2, "cuda backend: tensor maps of bfloat16 only, got ", m.elem_bytes,
               "-byte elements");
  const cuuint64_t dims[2] = {cuuint64_t(m.dims[0]), cuuint64_t(m.dims[1])};
  const cuuint64_t strides[1] = {cuuint64_t(m.row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(m.box[0]), cuuint32_t(m.box[1])};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = reinterpret_cast<EncodeTiled>(encode_tiled_)(
      reinterpret_cast<CUtensorMap*>(m.driver), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(m.base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      static_cast<CUtensorMapSwizzle>(int(m.swizzle)), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  GEMMAX_CHECK(r == CUDA_SUCCESS, "cuda backend: cuTensorMapEncodeTiled failed (CUresult ", int(r),
               ") for a ", m.dims[1], " x ", m.dims[0], " tensor, box ", m.box[1], " x ", m.box[0]);
}

void CudaPlatform::encode_tensor_map(kern::TensorMap3d& m) {
  find_encode_tiled();
  GEMMAX_CHECK(m.elem_bytes == 2, "cuda backend: tensor maps of bfloat16 only, got ", m.elem_bytes,
               "-byte elements");
  const cuuint64_t dims[3] = {cuuint64_t(m.dims[0]), cuuint64_t(m.dims[1]), cuuint64_t(m.dims[2])};
  const cuuint64_t strides[2] = {cuuint64_t(m.strides[0]), cuuint64_t(m.strides[1])};
  const cuuint32_t box[3] = {cuuint32_t(m.box[0]), cuuint32_t(m.box[1]), cuuint32_t(m.box[2])};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = reinterpret_cast<EncodeTiled>(encode_tiled_)(
      reinterpret_cast<CUtensorMap*>(m.driver), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
      const_cast<void*>(m.base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      static_cast<CUtensorMapSwizzle>(int(m.swizzle)), CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  GEMMAX_CHECK(r == CUDA_SUCCESS, "cuda backend: cuTensorMapEncodeTiled failed (CUresult ", int(r),
               ") for a ", m.dims[2], " x ", m.dims[1], " x ", m.dims[0], " tensor, box ", m.box[2],
               " x ", m.box[1], " x ", m.box[0]);
}

void CudaPlatform::find_encode_tiled() {
  if (!encode_tiled_) {
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_tiled_, 12000,
                                                cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    GEMMAX_CHECK(found == cudaDriverEntryPointSuccess && encode_tiled_,
                 "cuda backend: the driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 "
                 "driver): update the NVIDIA driver, or cuda_gmm=mma and cuda_attention=mma");
  }
}

}  // namespace gemmax::cuda
