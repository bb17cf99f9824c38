#include "gemmax/parallel/routing_comm.h"

#include "gemmax/base/error.h"

namespace gemmax {

DeviceRoutingComm::DeviceRoutingComm(Comm& host, std::unique_ptr<Comm> device)
    : Comm(host.rank(), host.size()), host_(host), device_(std::move(device)) {
  GEMMAX_CHECK(device_ && device_->rank() == host.rank() && device_->size() == host.size(),
               "the device comm must span the host comm's ranks");
}

DeviceRoutingComm::~DeviceRoutingComm() { pending_.clear(); }  // waits for what is in flight

std::string DeviceRoutingComm::name() const {
  return device_->name() + " (device buffers) + " + host_.name() + " (host buffers)";
}

uint64_t DeviceRoutingComm::start(const Collective& c) {
  const Tensor& buf = c.recv.defined() ? c.recv : c.send;
  const bool on_device = c.kind != Collective::Barrier && buf.device() == Device::Cuda;
  GEMMAX_CHECK(!c.send.defined() || !c.recv.defined() || c.send.device() == c.recv.device(),
               collective_name(c.kind), " ", c.what, ": one buffer on the device, one on the host");
  Comm& to = on_device ? *device_ : host_;
  CommRequest r;
  switch (c.kind) {
    case Collective::AllGather:
      r = to.all_gather(c.send, c.recv, c.what);
      break;
    case Collective::ReduceScatter:
      r = to.reduce_scatter(c.send, c.recv, c.what);
      break;
    case Collective::AllReduce:
      r = to.all_reduce(c.recv, c.op, c.what);
      break;
    case Collective::Broadcast:
      r = to.broadcast(c.recv, c.root, c.what);
      break;
    case Collective::AllToAll:
      r = to.all_to_all(c.send, c.send_counts, c.recv, c.recv_counts, c.what);
      break;
    case Collective::Barrier:
      to.barrier(c.what);
      break;
  }
  const uint64_t id = next_id_++;
  pending_.emplace(id, std::move(r));
  return id;
}

void DeviceRoutingComm::complete(uint64_t id) {
  auto it = pending_.find(id);
  GEMMAX_CHECK(it != pending_.end(), "no collective #", id, " in flight");
  CommRequest r = std::move(it->second);
  pending_.erase(it);
  r.wait();
}

}  // namespace gemmax
