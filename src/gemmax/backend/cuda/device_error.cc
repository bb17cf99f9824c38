#include "gemmax/backend/cuda/device_error.h"

#include "gemmax/base/error.h"

namespace gemmax::cuda {
namespace {

const char* op_name(int32_t op) {
  switch (op) {
    case kern::kOpEmbedding:
      return "embedding_forward";
    case kern::kOpCrossEntropy:
      return "softcap_cross_entropy";
    case kern::kOpRouteSort:
      return "route_sort";
    case kern::kOpGmm:
      return "gmm";
    case kern::kOpGmmDlhs:
      return "gmm_dlhs";
    case kern::kOpGmmDrhs:
      return "gmm_drhs";
    case kern::kOpDecode:
      return "attention_decode";
  }
  return "a kernel";
}

}  // namespace

void raise_device_error(const kern::DeviceError& e) {
  using E = kern::DeviceError;
  const char* op = op_name(e.op);
  switch (e.code) {
    case E::kNone:
      return;
    case E::kTokenOutOfRange:
      fail(op, ": token id ", e.a, " at position ", e.b, " is outside the vocabulary [0, ", e.c,
           ")");
    case E::kTargetOutOfRange:
      fail(op, ": target id ", e.a, " at row ", e.b, " is outside the vocabulary [0, ", e.c, ")");
    case E::kExpertOutOfRange:
      fail(op, ": expert id ", e.a, " at index ", e.b, " out of range [0, ", e.c, ")");
    case E::kGroupSizes:
      fail(op, ": group sizes sum to ", e.a, " but there are ", e.b, " rows");
    case E::kRowMap:
      fail(op, ": row map entry ", e.a, " at ", e.b, " is outside [0, ", e.c, ")");
    case E::kNoVisibleSlot:
      fail(op, ": the query at position ", e.a,
           " sees no cache slot; write its own key before attending");
  }
  fail("a kernel recorded error code ", e.code, " (", op, ")");
}

}  // namespace gemmax::cuda
