#include "gemmax/parallel/comm_mpi.h"

#include "gemmax/base/module_interface.h"  // generated: GEMMAX_MODULE_INTERFACE

#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "gemmax/base/dtype.h"
#include "gemmax/base/error.h"

namespace gemmax {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Tags of the watch communicator: a rank whose collective timed out pings the others; their
// progress threads answer with a Report.
constexpr int kPingTag = 101, kReportTag = 102;

struct Report {
  int64_t submitted = 0, completed = 0;  // collectives this rank's caller started / finished
  char last[96] = {};                    // what the newest started collective is
  char where[96] = {};                   // the caller's progress note ("step 12")
};

void copy_text(char (&dst)[96], const std::string& src) {
  std::snprintf(dst, sizeof dst, "%s", src.c_str());
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;  // summed by bf16_sum_op below
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

// Sum of bfloat16 vectors: each pair added in fp32 and rounded once.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16(float(a[i]) + float(b[i]));
}

// One collective as the progress thread runs it: raw pointers only (the caller's CommRequest
// holds the tensors, so that buffers are freed on the caller's thread, at the caller's points).
struct Task {
  uint64_t id = 0;
  Collective::Kind kind = Collective::Barrier;
  ReduceOp op = ReduceOp::Sum;
  DType dtype = DType::U8;
  void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // elements of send (all-gather) / recv (reduce-scatter) / the buffer
  int root = 0;
  std::vector<int> send_counts, send_displs, recv_counts, recv_displs;  // all-to-all
  std::string what;

  enum State { Queued, Running, Done, Failed } state = Queued;
  int phase = 0;  // a summed all-reduce runs as a reduce-scatter, then an all-gather
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> scratch;  // the padded all-reduce buffer
  Clock::time_point started;
  std::string error;
};

}  // namespace

struct MpiComm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;   // the collectives
  MPI_Comm watch = MPI_COMM_NULL;  // pings and reports of the timeout diagnosis
  MPI_Op bf16_op = MPI_OP_NULL;
  int rank = 0, size = 1;

  std::mutex mu;
  std::condition_variable submitted, finished;
  std::deque<Task*> queue;                          // submitted, not started (guarded by mu)
  std::map<uint64_t, std::unique_ptr<Task>> tasks;  // every unfinished task (guarded by mu)
  uint64_t next_id = 1, completed = 0;
  std::string last_what, where;
  double timeout = 0;
  int abort_code = -1;
  bool stop = false;
  std::thread progress;

  // ---- the progress thread: the only thread that calls MPI while it runs ---------------------
  void run();
  // Starts the task's next phase: 1 if one started, 0 if none is left, -1 on an MPI error (with
  // the message in t.error).
  int begin(Task& t);
  // Marks the task done or failed and wakes its waiter; `t` may be gone once this returns.
  void finish(Task* t);
  void answer_pings();
  [[noreturn]] void diagnose_and_abort(const Task& t);
};

namespace {

// A floating-point sum all-reduce runs as two collectives (reduce-scatter, then all-gather);
// everything else as one.
int phases(const Task& t) {
  const bool two = t.kind == Collective::AllReduce && t.op == ReduceOp::Sum && is_float(t.dtype);
  return two ? 2 : 1;
}

// Elements must fit MPI's int counts.
int checked_count(int64_t n, const std::string& what) {
  if (n > INT_MAX)
    fail("the collective ", what, " moves ", n, " elements, more than MPI's limit of ", INT_MAX,
         " per call");
  return int(n);
}

}  // namespace

int MpiComm::Impl::begin(Task& t) {
  const MPI_Datatype type = mpi_type(t.dtype);
  const size_t elem = dtype_size(t.dtype);
  const bool sum_bf16 = t.dtype == DType::BF16 && t.op == ReduceOp::Sum;
  const MPI_Op sum = sum_bf16 ? bf16_op : MPI_SUM;
  const int n = int(t.count);
  int rc = MPI_SUCCESS;
  switch (t.kind) {
    case Collective::AllGather:
      if (t.phase > 0) return 0;
      rc = MPI_Iallgather(t.send, n, type, t.recv, n, type, comm, &t.request);
      break;
    case Collective::ReduceScatter:
      if (t.phase > 0) return 0;
      rc = MPI_Ireduce_scatter_block(t.send, t.recv, n, type, sum, comm, &t.request);
      break;
    case Collective::Broadcast:
      if (t.phase > 0) return 0;
      rc = MPI_Ibcast(t.recv, n, type, t.root, comm, &t.request);
      break;
    case Collective::Barrier:
      if (t.phase > 0) return 0;
      rc = MPI_Ibarrier(comm, &t.request);
      break;
    case Collective::AllToAll:
      if (t.phase > 0) return 0;
      rc = MPI_Ialltoallv(t.send, t.send_counts.data(), t.send_displs.data(), type, t.recv,
                          t.recv_counts.data(), t.recv_displs.data(), type, comm, &t.request);
      break;
    case Collective::AllReduce: {
      const bool exact = t.op == ReduceOp::Max || !is_float(t.dtype);
      if (exact) {  // max and integer sums do not depend on the order of the reduction
        if (t.phase > 0) return 0;
        rc = MPI_Iallreduce(MPI_IN_PLACE, t.recv, n, type, t.op == ReduceOp::Max ? MPI_MAX : sum,
                            comm, &t.request);
        break;
      }
      // A floating-point sum: reduce-scatter then all-gather, so that each element is reduced
      // once, on one rank, and every rank receives the same bits.
      const int64_t chunk = (t.count + size - 1) / size;
      if (t.phase == 0) {
        t.scratch.assign(size_t(chunk * (size + 1)) * elem, 0);
        std::memcpy(t.scratch.data(), t.recv, size_t(t.count) * elem);
        rc = MPI_Ireduce_scatter_block(t.scratch.data(), t.scratch.data() + chunk * size * elem,
                                       int(chunk), type, sum, comm, &t.request);
      } else if (t.phase == 1) {
        rc = MPI_Iallgather(t.scratch.data() + chunk * size * elem, int(chunk), type,
                            t.scratch.data(), int(chunk), type, comm, &t.request);
      } else {
        std::memcpy(t.recv, t.scratch.data(), size_t(t.count) * elem);
        t.scratch.clear();
        return 0;
      }
      break;
    }
  }
  if (rc != MPI_SUCCESS) {
    t.error = str_cat(collective_name(t.kind), " of ", t.what, " failed on rank ", rank, ": ",
                      mpi_error(rc));
    return -1;
  }
  t.phase += 1;
  return 1;
}

void MpiComm::Impl::finish(Task* t) {
  std::lock_guard<std::mutex> lock(mu);
  t->state = t->error.empty() ? Task::Done : Task::Failed;
  completed += 1;
  finished.notify_all();
}

void MpiComm::Impl::answer_pings() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, watch, &flag, &status);
    if (!flag) return;
    uint64_t id = 0;
    MPI_Recv(&id, 1, MPI_UINT64_T, status.MPI_SOURCE, kPingTag, watch, MPI_STATUS_IGNORE);
    Report r;
    {
      std::lock_guard<std::mutex> lock(mu);
      r.submitted = int64_t(next_id - 1);
      r.completed = int64_t(completed);
      copy_text(r.last, last_what);
      copy_text(r.where, where);
    }
    MPI_Send(&r, sizeof r, MPI_BYTE, status.MPI_SOURCE, kReportTag, watch);
  }
}

void MpiComm::Impl::diagnose_and_abort(const Task& t) {
  std::string msg = str_cat("rank ", rank, " of ", size, ": the ", collective_name(t.kind), " of ",
                            t.what, " (collective #", t.id, ") has not completed after ", timeout,
                            " s (comm_timeout_seconds=", timeout, ")");
  // Ask every other rank where it stands; a rank that answers but has not started this collective
  // is stuck (or slow) before it; a rank that does not answer has died or stopped making progress.
  std::vector<MPI_Request> pings;
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    pings.push_back(MPI_REQUEST_NULL);
    MPI_Isend(&t.id, 1, MPI_UINT64_T, q, kPingTag, watch, &pings.back());
  }
  std::map<int, Report> reports;
  const auto asked = Clock::now();
  const double grace = std::min(10.0, std::max(1.0, timeout / 2));
  while (int(reports.size()) < size - 1 && seconds_since(asked) < grace) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kReportTag, watch, &flag, &status);
    if (flag) {
      Report r;
      MPI_Recv(&r, sizeof r, MPI_BYTE, status.MPI_SOURCE, kReportTag, watch, MPI_STATUS_IGNORE);
      reports[status.MPI_SOURCE] = r;
      continue;
    }
    answer_pings();  // others may be diagnosing too
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    auto it = reports.find(q);
    if (it == reports.end()) {
      msg += str_cat("; rank ", q, " does not answer (it died, or hangs inside MPI)");
      continue;
    }
    const Report& r = it->second;
    if (r.submitted < int64_t(t.id))
      msg += str_cat("; rank ", q, " hangs before it: its last collective is #", r.submitted, " (",
                     r.last, ") at ", r.where);
    else
      msg += str_cat("; rank ", q, " is in it too (at ", r.where, ")");
  }
  std::fprintf(stderr, "error: %s. Aborting every rank.\n", msg.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

void MpiComm::Impl::run() {
  std::vector<Task*> running;  // started, in submission order
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      if (abort_code >= 0) {
        lock.unlock();
        MPI_Abort(MPI_COMM_WORLD, abort_code);
        std::abort();
      }
      if (running.empty() && queue.empty()) {
        if (stop) return;
        // Idle: wake for new work, and now and then to answer other ranks' pings.
        submitted.wait_for(lock, std::chrono::milliseconds(20));
      }
      while (!queue.empty()) {
        Task* t = queue.front();
        queue.pop_front();
        t->state = Task::Running;
        t->started = Clock::now();
        running.push_back(t);
      }
    }
    // Every rank must issue its collectives in the same order: a task's first phase waits until
    // every earlier task has issued all of its phases.
    bool progressed = false, blocked = false;
    for (size_t i = 0; i < running.size();) {
      Task* t = running[i];
      int next = 1;  // 1: a phase runs, 0: all done, -1: failed
      if (t->phase == 0) {
        if (blocked) {
          ++i;
          continue;
        }
        next = begin(*t);
        progressed = true;
      } else {
        int done = 0;
        const int rc = MPI_Test(&t->request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          t->error = str_cat(collective_name(t->kind), " of ", t->what, " failed on rank ", rank,
                             ": ", mpi_error(rc));
          next = -1;
        } else if (done) {
          next = begin(*t);
          progressed = true;
        }
      }
      if (next == 1) {
        blocked = blocked || t->phase < phases(*t);
        ++i;
        continue;
      }
      running.erase(running.begin() + long(i));
      finish(t);
    }
    answer_pings();
    if (!running.empty() && timeout > 0 && seconds_since(running.front()->started) > timeout)
      diagnose_and_abort(*running.front());
    if (!running.empty() && !progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

MpiComm::MpiComm(std::unique_ptr<Impl> impl, int rank, int size)
    : Comm(rank, size), impl_(std::move(impl)) {
  impl_->progress = std::thread([this] { impl_->run(); });
}

std::unique_ptr<MpiComm> MpiComm::world(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) fail("MPI is already initialised: make one MpiComm::world per process");
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED)
    fail("this MPI library does not support MPI_THREAD_SERIALIZED (gemmax's progress thread ",
         "makes the MPI calls); use Open MPI from the Debian packages");
  auto impl = std::make_unique<Impl>();
  MPI_Comm_rank(MPI_COMM_WORLD, &impl->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &impl->size);
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->watch);
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(impl->watch, MPI_ERRORS_RETURN);
  MPI_Op_create(&bf16_sum, 1, &impl->bf16_op);
  const int rank = impl->rank, size = impl->size;
  return std::unique_ptr<MpiComm>(new MpiComm(std::move(impl), rank, size));
}

MpiComm::~MpiComm() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->submitted.notify_all();
  impl_->progress.join();
  MPI_Op_free(&impl_->bf16_op);
  MPI_Comm_free(&impl_->watch);
  MPI_Comm_free(&impl_->comm);
  MPI_Finalize();
}

void MpiComm::set_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->timeout = seconds;
}

void MpiComm::set_progress(const std::string& where) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->where = where;
}

void MpiComm::abort(int code) {
  if (size() == 1) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->abort_code = code;
  }
  impl_->submitted.notify_all();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // MPI_Abort ends the process
}

uint64_t MpiComm::start(const Collective& c) {
  auto t = std::make_unique<Task>();
  t->kind = c.kind;
  t->op = c.op;
  t->root = c.root;
  t->what = c.what.empty() ? std::string("a buffer") : c.what;
  if (c.kind != Collective::Barrier) {
    t->dtype = c.recv.dtype();
    t->recv = c.recv.raw();
    t->send = c.send.defined() ? c.send.raw() : nullptr;
    const int64_t n = c.kind == Collective::AllGather ? c.send.numel() : c.recv.numel();
    t->count = checked_count(n, t->what);
    // all-to-all: counts and displacements are ints; the received total is checked above
    if (c.kind == Collective::AllToAll) checked_count(c.send.numel(), t->what);
    for (size_t q = 0; q < c.send_counts.size(); ++q) {
      t->send_displs.push_back(q == 0 ? 0 : t->send_displs.back() + t->send_counts.back());
      t->recv_displs.push_back(q == 0 ? 0 : t->recv_displs.back() + t->recv_counts.back());
      t->send_counts.push_back(checked_count(c.send_counts[q], t->what));
      t->recv_counts.push_back(checked_count(c.recv_counts[q], t->what));
    }
    if (c.op == ReduceOp::Sum &&
        (c.kind == Collective::ReduceScatter || c.kind == Collective::AllReduce))
      GEMMAX_CHECK(t->dtype != DType::F16, collective_name(c.kind), " of ", t->what,
                   ": float16 sums are not supported");
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  t->id = impl_->next_id++;
  impl_->last_what = str_cat(collective_name(c.kind), " of ", t->what);
  const uint64_t id = t->id;
  impl_->queue.push_back(t.get());
  impl_->tasks[id] = std::move(t);
  impl_->submitted.notify_all();
  return id;
}

void MpiComm::complete(uint64_t id) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto it = impl_->tasks.find(id);
  GEMMAX_CHECK(it != impl_->tasks.end(), "no collective #", id);
  Task* t = it->second.get();
  impl_->finished.wait(lock, [t] { return t->state == Task::Done || t->state == Task::Failed; });
  const std::string error = t->error;
  impl_->tasks.erase(it);
  if (!error.empty()) fail(error);
}

}  // namespace gemmax

extern "C" const char* gemmax_mpi_interface() { return GEMMAX_MODULE_INTERFACE __VERSION__; }

extern "C" gemmax::Comm* gemmax_mpi_world(int* argc, char*** argv) {
  return gemmax::MpiComm::world(argc, argv).release();
}
