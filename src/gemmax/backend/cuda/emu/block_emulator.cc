#include "gemmax/backend/cuda/emu/block_emulator.h"

#include <cstring>

#include "gemmax/base/error.h"

namespace gemmax::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
thread_local BlockEmulator* t_current = nullptr;

}  // namespace

#if defined(__x86_64__)
// gemmax_emu_switch(void** save, void* next): pushes the callee-saved registers, stores the stack
// pointer in *save, continues on the stack `next` (made by this function or by start()).
extern "C" void gemmax_emu_switch(void** save, void* next);
asm(R"(
  .text
  .globl gemmax_emu_switch
  .type gemmax_emu_switch, @function
gemmax_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gemmax_emu_switch, .-gemmax_emu_switch
)");

void BlockEmulator::switch_to(Context* save, Context* next) { gemmax_emu_switch(save, *next); }

// A new fiber's stack: six zero registers under the address of trampoline, placed so that the
// stack is aligned as at a function's entry once `ret` has taken that address.
void BlockEmulator::start(int thread) {
  char* top = stacks_[thread].get() + kStackBytes;
  auto** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(top) & ~uintptr_t(15)) - 16);
  sp[0] = reinterpret_cast<void*>(&BlockEmulator::trampoline);
  sp -= 6;
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  fibers_[thread].context = sp;
}
#else
void BlockEmulator::switch_to(Context* save, Context* next) { swapcontext(save, next); }

void BlockEmulator::start(int thread) {
  Fiber& f = fibers_[thread];
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stacks_[thread].get();
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, &BlockEmulator::trampoline, 0);
}
#endif

BlockEmulator::BlockEmulator()
    : fibers_(kMaxThreads),
      slots_(kMaxThreads * kSlotBytes),
      warp_live_(kMaxThreads / 32),
      at_warp_(kMaxThreads / 32) {}

BlockEmulator::~BlockEmulator() = default;

BlockEmulator& block_emulator() {
  thread_local BlockEmulator emulator;
  return emulator;
}

void BlockEmulator::trampoline() {
  BlockEmulator& e = *t_current;
  const int t = e.running_;
  try {
    (*e.body_)(t);
  } catch (...) {
    if (!e.error_) e.error_ = std::current_exception();
  }
  e.finish(t);
  switch_to(&e.fibers_[t].context, &e.scheduler_);  // never resumed
  __builtin_unreachable();
}

void BlockEmulator::run_block(int threads, size_t smem_bytes,
                              const std::function<void(int)>& body) {
  GEMMAX_CHECK(threads > 0 && threads <= kMaxThreads, "emulated block of ", threads, " threads");
  smem_.assign(smem_bytes, char(0xff));
  body_ = &body;
  threads_ = live_ = threads;
  at_block_ = 0;
  error_ = nullptr;
  async_copies_.clear();
  for (int w = 0; w < (threads + 31) / 32; ++w) {
    warp_live_[w] = std::min(32, threads - 32 * w);
    at_warp_[w] = 0;
  }
  while (int(stacks_.size()) < threads) stacks_.push_back(std::make_unique<char[]>(kStackBytes));
  BlockEmulator* outer = t_current;
  t_current = this;
  for (int t = 0; t < threads; ++t) {
    start(t);
    fibers_[t].state = State::Runnable;
  }
  while (live_ > 0 && !error_) {
    bool progressed = false, only_spun = true;
    const uint64_t progress = progress_;
    for (int t = 0; t < threads && !error_; ++t) {
      if (fibers_[t].state != State::Runnable) continue;
      running_ = t;
      spun_ = false;
      switch_to(&scheduler_, &fibers_[t].context);
      progressed = true;
      only_spun = only_spun && spun_;
    }
    if (progressed && only_spun && progress == progress_ && !error_) {
      t_current = outer;
      fail("emulated block deadlocked: every running thread waits on an mbarrier phase that no "
           "thread or copy can complete any more (a missing arrive, or expect_tx bytes that "
           "never arrive)");
    }
    if (!progressed && !error_) {
      int block = 0, warp = 0;
      for (int t = 0; t < threads; ++t) {
        block += fibers_[t].state == State::AtBlock;
        warp += fibers_[t].state == State::AtWarp;
      }
      t_current = outer;
      fail("emulated block deadlocked: ", block, " threads wait at the block barrier and ", warp,
           " at a warp collective that not every live thread of its scope reaches");
    }
  }
  t_current = outer;
  running_ = -1;
  if (error_) std::rethrow_exception(error_);
}

void BlockEmulator::release_ready() {
  if (at_block_ > 0 && at_block_ == live_) {
    for (int t = 0; t < threads_; ++t)
      if (fibers_[t].state == State::AtBlock) fibers_[t].state = State::Runnable;
    at_block_ = 0;
  }
  for (int w = 0; w < (threads_ + 31) / 32; ++w) {
    if (at_warp_[w] == 0 || at_warp_[w] != warp_live_[w]) continue;
    for (int t = 32 * w; t < std::min(threads_, 32 * w + 32); ++t)
      if (fibers_[t].state == State::AtWarp) fibers_[t].state = State::Runnable;
    at_warp_[w] = 0;
  }
}

void BlockEmulator::wait(int thread, State at) {
  Fiber& f = fibers_[thread];
  f.state = at;
  if (at == State::AtBlock)
    ++at_block_;
  else
    ++at_warp_[thread / 32];
  release_ready();
  if (f.state != State::Runnable) switch_to(&f.context, &scheduler_);
}

void BlockEmulator::sync_block(int thread) { wait(thread, State::AtBlock); }
void BlockEmulator::sync_warp(int thread) { wait(thread, State::AtWarp); }

void BlockEmulator::spin(int thread) {
  spun_ = true;
  switch_to(&fibers_[thread].context, &scheduler_);
}

void BlockEmulator::land_async_copies(const void* barrier) {
  // Landing may not issue copies, so the list is walked by index and compacted after.
  size_t kept = 0;
  for (size_t i = 0; i < async_copies_.size(); ++i) {
    if (async_copies_[i].barrier == barrier)
      async_copies_[i].land();
    else
      async_copies_[kept++] = std::move(async_copies_[i]);
  }
  async_copies_.resize(kept);
}

void BlockEmulator::finish(int thread) {
  fibers_[thread].state = State::Done;
  --live_;  // a returned thread no longer holds the block barrier; a warp collective still needs
            // every lane of the warp, as on the GPU
  release_ready();
}

}  // namespace gemmax::emu
