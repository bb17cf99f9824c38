// Tensors (base/tensor.h): a host read of a tensor in GPU memory is refused, naming it and the
// way to read it.
#include "gemmax/base/tensor.h"

#include <gtest/gtest.h>

#include <memory>

#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;

TEST(TensorData, RefusesAHostReadOfADeviceTensor) {
  float host[4] = {};
  auto st = std::make_shared<Storage>();
  st->ptr = host;  // stands in for a device pointer; never dereferenced
  st->bytes = sizeof(host);
  st->device = Device::Cuda;
  st->owned = false;
  const Tensor t = Tensor::from_storage(st, {4}, DType::F32);
  expect_error([&] { (void)t.data<float>(); }, {"float32[4]", "is in GPU memory", "to_host"});
}

}  // namespace
}  // namespace gemmax
