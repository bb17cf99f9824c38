// Collective communication between the ranks of a data-parallel run: the interface FSDP
// (parallel/fsdp.h) is built on. Implementations:
//   single    one rank (no MPI): every collective is a copy or nothing;
//   mpi       Open MPI, on host buffers (the reference and cpu backends), with a progress thread
//             so that non-blocking collectives advance while the caller computes, and a timeout
//             that names the rank a collective waits for (parallel/comm_mpi.h);
//   nccl      NCCL on device buffers and a CUDA stream, bootstrapped over MPI (parallel/comm_nccl.h);
//   planning  rank 0 of N that moves nothing: the memory plan runs the sharded step on it
//             (parallel/planning_comm.h).
//
// Every collective is non-blocking: it returns a CommRequest, and the buffers may be touched
// again only after its wait(). Every rank must start the same collectives in the same order.
// Results are bit-identical on all ranks (all_reduce included: replicated values never drift).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemmax/base/tensor.h"

namespace gemmax {

enum class ReduceOp : uint8_t { Sum, Max };

// What a rank's collectives moved and how long it waited, summed since the comm was made. Sizes
// are the collectives' payloads: the gathered buffer of an all-gather, the buffer reduced by a
// reduce-scatter or an all-reduce (a ring moves (N-1)/N of that per rank, twice for an all-reduce),
// and what an all-to-all sent to the other ranks (what it keeps is not counted).
struct CommStats {
  int64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
  int64_t all_to_all_bytes = 0;  // what this rank sent to the others
  int64_t broadcast_bytes = 0;
  int64_t collectives = 0;
  double wait_seconds = 0;  // blocked in wait()

  CommStats operator-(const CommStats& o) const;
};

struct Collective {
  enum Kind : uint8_t { AllGather, ReduceScatter, AllReduce, Broadcast, Barrier, AllToAll };
  Kind kind = Barrier;
  Tensor send, recv;  // all_reduce and broadcast work in place on `recv`
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  // all-to-all: the elements sent to and received from each rank, back to back in rank order.
  std::vector<int64_t> send_counts, recv_counts;
  std::string what;  // for errors and timeouts: "all-gather of layer 3 (forward)"
};
const char* collective_name(Collective::Kind kind);

// A host buffer for control messages between ranks (counts, flags, digests, configs): counted
// apart from the process's MemoryTracker, whose peaks a run's memory plan accounts for.
Tensor control_buffer(const Shape& shape, DType dtype);

class Comm;

// A collective in flight. wait() completes it (and is implied by destruction); the request holds
// its buffers until then.
class CommRequest {
 public:
  CommRequest() = default;
  CommRequest(CommRequest&& o) noexcept { *this = std::move(o); }
  CommRequest& operator=(CommRequest&& o) noexcept;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;
  ~CommRequest();

  void wait();
  bool pending() const { return comm_ != nullptr; }

 private:
  friend class Comm;
  Comm* comm_ = nullptr;
  uint64_t id_ = 0;
  Tensor send_, recv_;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual std::string name() const = 0;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // recv [size * n] = every rank's send [n], rank after rank (same dtype).
  CommRequest all_gather(const Tensor& send, const Tensor& recv, std::string what = "");
  // recv [n] = the sum over ranks of their send[rank * n, (rank + 1) * n).
  CommRequest reduce_scatter(const Tensor& send, const Tensor& recv, std::string what = "");
  // buf = the sum (max) over ranks of buf, in place.
  CommRequest all_reduce(const Tensor& buf, ReduceOp op, std::string what = "");
  // buf = root's buf.
  CommRequest broadcast(const Tensor& buf, int root, std::string what = "");
  // Each rank sends send_counts[q] elements to rank q (send holds them rank after rank) and
  // receives recv_counts[q] from rank q into recv, rank after rank; the counts must agree
  // pairwise.
  CommRequest all_to_all(const Tensor& send, std::vector<int64_t> send_counts, const Tensor& recv,
                         std::vector<int64_t> recv_counts, std::string what = "");
  void barrier(std::string what);

  const CommStats& stats() const { return stats_; }
  // Where this rank's caller stands ("step 12"), reported by other ranks' timeouts.
  virtual void set_progress(const std::string& where) {}
  // Seconds a collective may wait for other ranks before the job is aborted (0: forever).
  virtual void set_timeout(double seconds) {}
  // Ends every rank of the job with exit code `code` (after an error on this one). Returns only
  // on a single-rank comm.
  virtual void abort(int code) {}

 protected:
  Comm(int rank, int size) : rank_(rank), size_(size) {}
  // Starts a checked collective; returns an id for complete().
  virtual uint64_t start(const Collective& c) = 0;
  // Blocks until the collective is done (on a device: until the caller's stream waits for it).
  // Throws gemmax::Error if it failed.
  virtual void complete(uint64_t id) = 0;

 private:
  friend class CommRequest;
  CommRequest submit(Collective c);
  void finish(CommRequest& r);

  int rank_, size_;
  CommStats stats_;
};

// The one-rank comm of a run without a launcher.
class SingleComm final : public Comm {
 public:
  SingleComm() : Comm(0, 1) {}
  std::string name() const override { return "single"; }

 protected:
  uint64_t start(const Collective& c) override;
  void complete(uint64_t) override {}
};

}  // namespace gemmax
