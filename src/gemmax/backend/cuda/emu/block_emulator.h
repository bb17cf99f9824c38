// Runs the threads of one CUDA-style block on the host, each thread a fiber.
//
// A fiber runs until it reaches a barrier (the block's, or its warp's for a warp collective) or
// returns; a scheduler on the calling thread then resumes the others in thread order. A barrier
// opens when every live thread of its scope has arrived. Everything runs on one OS thread, so a
// block's run is deterministic, and a missing barrier shows up as wrong data rather than as a
// rare race. A block whose threads wait at barriers that can never open (a __syncthreads that
// only some threads reach, a warp collective that only some lanes call) is reported as an error.
#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

namespace gemmax::emu {

class BlockEmulator {
 public:
  static constexpr int kMaxThreads = 1024;
  static constexpr size_t kSlotBytes = 64;  // per lane, for warp collectives

  BlockEmulator();
  ~BlockEmulator();
  BlockEmulator(const BlockEmulator&) = delete;
  BlockEmulator& operator=(const BlockEmulator&) = delete;

  // Runs body(thread) for threads [0, threads). Shared memory (smem_bytes) starts filled with
  // 0xff bytes (NaN as floats and bf16), so reading what no thread wrote shows.
  void run_block(int threads, size_t smem_bytes, const std::function<void(int)>& body);

  // Called from inside body. Each returns once every live thread of its scope has called it.
  void sync_block(int thread);
  void sync_warp(int thread);
  // A thread whose wait on an mbarrier failed lets the others run; a pass in which every thread
  // that ran only spun like this, while no mbarrier changed (note_progress), is a deadlock.
  void spin(int thread);
  void note_progress() { ++progress_; }
  // Bulk asynchronous copies in flight (TMA): each lands, and completes its bytes on its
  // mbarrier, when a thread waits on that barrier (land_async_copies), not when it is issued, so
  // that reading a stage before its barrier's phase completes reads stale bytes, as on the GPU.
  void issue_async_copy(const void* barrier, std::function<void()> land) {
    async_copies_.push_back({barrier, std::move(land)});
  }
  void land_async_copies(const void* barrier);
  char* smem() { return smem_.data(); }
  size_t smem_bytes() const { return smem_.size(); }
  // The warp-collective exchange slot of a lane (kSlotBytes).
  void* slot(int thread) { return slots_.data() + size_t(thread) * kSlotBytes; }
  void* lane_slot(int thread, int lane) { return slot(thread / 32 * 32 + lane); }

 private:
  enum class State : uint8_t { Runnable, AtBlock, AtWarp, Done };
  // A saved execution context: on x86-64 the stack pointer of a stack holding the callee-saved
  // registers (a switch is a handful of instructions, no system call); elsewhere a ucontext.
#if defined(__x86_64__)
  using Context = void*;
#else
  using Context = ucontext_t;
#endif
  struct Fiber {
    Context context;
    State state = State::Done;
  };
  static void trampoline();
  void start(int thread);
  static void switch_to(Context* save, Context* next);
  void wait(int thread, State at);
  void release_ready();
  void finish(int thread);

  std::vector<Fiber> fibers_;
  std::vector<std::unique_ptr<char[]>> stacks_;
  std::vector<char> smem_;
  std::vector<char> slots_;
  Context scheduler_;
  const std::function<void(int)>* body_ = nullptr;
  int threads_ = 0, live_ = 0, at_block_ = 0, running_ = -1;
  bool spun_ = false;  // the running fiber ended its turn in spin
  uint64_t progress_ = 0;
  struct AsyncCopy {
    const void* barrier;
    std::function<void()> land;
  };
  std::vector<AsyncCopy> async_copies_;
  std::vector<int> warp_live_, at_warp_;  // lanes of each warp; lanes waiting at its barrier
  std::exception_ptr error_;
};

// The emulator of the calling OS thread (each test thread gets its own).
BlockEmulator& block_emulator();

}  // namespace gemmax::emu
