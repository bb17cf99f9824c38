#include "gemmax/parallel/comm.h"

#include <cstring>
#include <exception>

#include "gemmax/base/timer.h"

namespace gemmax {

CommStats CommStats::operator-(const CommStats& o) const {
  CommStats d;
  d.all_gather_bytes = all_gather_bytes - o.all_gather_bytes;
  d.reduce_scatter_bytes = reduce_scatter_bytes - o.reduce_scatter_bytes;
  d.all_reduce_bytes = all_reduce_bytes - o.all_reduce_bytes;
  d.broadcast_bytes = broadcast_bytes - o.broadcast_bytes;
  d.all_to_all_bytes = all_to_all_bytes - o.all_to_all_bytes;
  d.collectives = collectives - o.collectives;
  d.wait_seconds = wait_seconds - o.wait_seconds;
  return d;
}

const char* collective_name(Collective::Kind kind) {
  switch (kind) {
    case Collective::AllGather:
      return "all-gather";
    case Collective::ReduceScatter:
      return "reduce-scatter";
    case Collective::AllReduce:
      return "all-reduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Barrier:
      return "barrier";
    case Collective::AllToAll:
      return "all-to-all";
  }
  return "?";
}

Tensor control_buffer(const Shape& shape, DType dtype) {
  static MemoryTracker control;
  return Tensor::empty(shape, dtype, MemKind::Workspace, control);
}

CommRequest& CommRequest::operator=(CommRequest&& o) noexcept {
  if (this != &o) {
    if (comm_) comm_->finish(*this);
    comm_ = o.comm_;
    id_ = o.id_;
    send_ = std::move(o.send_);
    recv_ = std::move(o.recv_);
    o.comm_ = nullptr;
  }
  return *this;
}

CommRequest::~CommRequest() {
  if (!comm_) return;
  try {
    comm_->finish(*this);
  } catch (const std::exception&) {
    // Dropped while unwinding from another error, which is the one to report (a destructor must
    // not throw).
  }
}

void CommRequest::wait() {
  if (comm_) comm_->finish(*this);
}

void Comm::finish(CommRequest& r) {
  Comm* comm = r.comm_;
  r.comm_ = nullptr;  // released even if complete() throws
  Timer timer;
  comm->complete(r.id_);
  comm->stats_.wait_seconds += timer.seconds();
  r.send_ = Tensor();
  r.recv_ = Tensor();
}

CommRequest Comm::submit(Collective c) {
  const char* name = collective_name(c.kind);
  const Tensor& buf = c.recv;
  if (c.kind != Collective::Barrier) {
    GEMMAX_CHECK(buf.defined(), name, " of ", c.what, ": no buffer");
    GEMMAX_CHECK(!c.send.defined() || c.send.dtype() == buf.dtype(), name, " of ", c.what,
                 ": send ", c.send.str(), " and receive ", buf.str(), " differ in dtype");
  }
  switch (c.kind) {
    case Collective::AllGather:
      GEMMAX_CHECK(buf.numel() == c.send.numel() * size_, "all-gather of ", c.what, ": ", buf.str(),
                   " is not ", size_, " x ", c.send.str());
      stats_.all_gather_bytes += int64_t(buf.nbytes());
      break;
    case Collective::ReduceScatter:
      GEMMAX_CHECK(c.send.numel() == buf.numel() * size_, "reduce-scatter of ", c.what, ": ",
                   c.send.str(), " is not ", size_, " x ", buf.str());
      GEMMAX_CHECK(is_float(buf.dtype()), "reduce-scatter of ", c.what, ": ", buf.str(),
                   " is not a floating-point tensor");
      stats_.reduce_scatter_bytes += int64_t(c.send.nbytes());
      break;
    case Collective::AllReduce:
      stats_.all_reduce_bytes += int64_t(buf.nbytes());
      break;
    case Collective::Broadcast:
      GEMMAX_CHECK(c.root >= 0 && c.root < size_, "broadcast of ", c.what, " from rank ", c.root,
                   " of ", size_);
      stats_.broadcast_bytes += int64_t(buf.nbytes());
      break;
    case Collective::Barrier:
      break;
    case Collective::AllToAll: {
      GEMMAX_CHECK(int(c.send_counts.size()) == size_ && int(c.recv_counts.size()) == size_,
                   "all-to-all of ", c.what, ": one count per rank");
      GEMMAX_CHECK(c.send_counts[rank_] == c.recv_counts[rank_], "all-to-all of ", c.what,
                   ": rank ", rank_, " sends itself ", c.send_counts[rank_],
                   " elements but receives ", c.recv_counts[rank_]);
      int64_t out = 0, in = 0;
      for (int q = 0; q < size_; ++q) {
        GEMMAX_CHECK(c.send_counts[q] >= 0 && c.recv_counts[q] >= 0, "all-to-all of ", c.what,
                     ": negative count for rank ", q);
        out += c.send_counts[q], in += c.recv_counts[q];
      }
      GEMMAX_CHECK(out == c.send.numel() && in == buf.numel(), "all-to-all of ", c.what, ": ",
                   c.send.str(), " and ", buf.str(), " for ", out, " and ", in, " elements");
      stats_.all_to_all_bytes += (out - c.send_counts[rank_]) * int64_t(dtype_size(buf.dtype()));
      break;
    }
  }
  stats_.collectives += 1;
  CommRequest r;
  r.id_ = start(c);
  r.comm_ = this;
  r.send_ = std::move(c.send);
  r.recv_ = std::move(c.recv);
  return r;
}

CommRequest Comm::all_gather(const Tensor& send, const Tensor& recv, std::string what) {
  return submit({Collective::AllGather, send, recv, ReduceOp::Sum, 0, {}, {}, std::move(what)});
}

CommRequest Comm::reduce_scatter(const Tensor& send, const Tensor& recv, std::string what) {
  return submit({Collective::ReduceScatter, send, recv, ReduceOp::Sum, 0, {}, {}, std::move(what)});
}

CommRequest Comm::all_reduce(const Tensor& buf, ReduceOp op, std::string what) {
  return submit({Collective::AllReduce, Tensor(), buf, op, 0, {}, {}, std::move(what)});
}

CommRequest Comm::broadcast(const Tensor& buf, int root, std::string what) {
  return submit(
      {Collective::Broadcast, Tensor(), buf, ReduceOp::Sum, root, {}, {}, std::move(what)});
}

CommRequest Comm::all_to_all(const Tensor& send, std::vector<int64_t> send_counts,
                             const Tensor& recv, std::vector<int64_t> recv_counts,
                             std::string what) {
  return submit({Collective::AllToAll, send, recv, ReduceOp::Sum, 0, std::move(send_counts),
                 std::move(recv_counts), std::move(what)});
}

void Comm::barrier(std::string what) {
  submit({Collective::Barrier, Tensor(), Tensor(), ReduceOp::Sum, 0, {}, {}, std::move(what)})
      .wait();
}

uint64_t SingleComm::start(const Collective& c) {
  // One rank: a gather or scatter is a copy; a reduction or broadcast leaves the buffer as it is.
  const bool copies = c.kind == Collective::AllGather || c.kind == Collective::ReduceScatter ||
                      c.kind == Collective::AllToAll;
  if (copies && c.send.raw() != c.recv.raw())
    std::memcpy(c.recv.raw(), c.send.raw(), c.recv.nbytes());
  return 0;
}

}  // namespace gemmax
