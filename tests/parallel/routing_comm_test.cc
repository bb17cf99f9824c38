// DeviceRoutingComm: collectives on device buffers go to the device comm (NCCL on a GPU), those
// on host buffers and barriers to the host comm (MPI), each once, and complete in order.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "gemmax/parallel/routing_comm.h"
#include "test_util.h"

namespace gemmax {
namespace {

// A comm of one rank that records what it was asked to do.
class RecordingComm final : public Comm {
 public:
  explicit RecordingComm(std::vector<std::string>* log, std::string tag)
      : Comm(0, 1), log_(log), tag_(std::move(tag)) {}
  std::string name() const override { return tag_; }

 protected:
  uint64_t start(const Collective& c) override {
    log_->push_back(tag_ + " start " + collective_name(c.kind) + " " + c.what);
    return next_++;
  }
  void complete(uint64_t id) override {
    log_->push_back(tag_ + " complete " + std::to_string(id));
  }

 private:
  std::vector<std::string>* log_;
  std::string tag_;
  uint64_t next_ = 1;
};

// Host memory labelled as device memory: what the routing looks at.
Tensor device_tensor(const Shape& shape) {
  auto data = std::make_shared<std::vector<float>>(size_t(shape_numel(shape)));
  auto st = std::make_shared<Storage>();
  st->ptr = data->data();
  st->bytes = data->size() * sizeof(float);
  st->device = Device::Cuda;
  st->owned = false;
  st->keep_alive = data;
  return Tensor::from_storage(std::move(st), shape, DType::F32);
}

TEST(DeviceRoutingComm, DeviceBuffersGoToTheDeviceCommTheRestToTheHostComm) {
  std::vector<std::string> log;
  RecordingComm host(&log, "host");
  DeviceRoutingComm comm(host, std::make_unique<RecordingComm>(&log, "device"));
  EXPECT_EQ(comm.name(), "device (device buffers) + host (host buffers)");
  const Tensor d = device_tensor({4}), h = control_buffer({4}, DType::F32);
  CommRequest a = comm.all_gather(d, device_tensor({4}), "layer 0");
  CommRequest b = comm.all_reduce(h, ReduceOp::Max, "flags");
  comm.reduce_scatter(device_tensor({4}), d, "grads").wait();
  comm.broadcast(h, 0, "the step").wait();
  comm.barrier("the folder");
  b.wait();
  a.wait();
  const std::vector<std::string> want = {
      "device start all-gather layer 0", "host start all-reduce flags",
      "device start reduce-scatter grads", "device complete 2",
      "host start broadcast the step",     "host complete 2",
      "host start barrier the folder",     "host complete 3",
      "host complete 1",                   "device complete 1"};
  EXPECT_EQ(log, want);
  EXPECT_EQ(comm.stats().collectives, 5);
}

TEST(DeviceRoutingComm, ABufferOnEachSideIsRefused) {
  std::vector<std::string> log;
  RecordingComm host(&log, "host");
  DeviceRoutingComm comm(host, std::make_unique<RecordingComm>(&log, "device"));
  testing::expect_error(
      [&] { comm.all_gather(control_buffer({4}, DType::F32), device_tensor({4}), "layer 1"); },
      {"layer 1", "one buffer on the device, one on the host"});
}

}  // namespace
}  // namespace gemmax
