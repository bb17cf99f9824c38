// The deadline of device collectives (the NCCL comm). Their completion is queued on a stream,
// so no host thread waits for one until a step's synchronisation, which would wait forever on a
// rank that hangs (or a network that failed). The watchdog polls every collective in flight:
// one that has not completed `timeout` seconds after it started (comm_timeout_seconds, as the
// MPI comm), or an error the communicator reports, is reported once, naming the collective; then
// the communicator is aborted (its kernels return) and the owner ends the job.
//
// The device side is an interface (NCCL and CUDA events in comm_nccl.cc, a fake in the tests),
// and time is passed in, so the polling logic is tested without a GPU and without sleeping.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace gemmax {

class CollectiveWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // What the watchdog asks of the device. Called from the polling thread, one call at a time.
  struct Device {
    virtual ~Device() = default;
    // Whether the collective behind `token` (its completion event) has completed.
    virtual bool done(void* token) = 0;
    // The communicator's asynchronous error ("" when none: ncclCommGetAsyncError).
    virtual std::string async_error() = 0;
    // Aborts the communicator: its pending kernels return (ncclCommAbort).
    virtual void abort_comm() = 0;
    // The token is no longer needed (its event is destroyed).
    virtual void release(void* token) = 0;
  };

  // On a fault, once: report(message), then Device::abort_comm(), then end() (which may not
  // return: it ends the job).
  CollectiveWatchdog(Device& device, std::function<void(const std::string&)> report,
                     std::function<void()> end);
  ~CollectiveWatchdog();  // stops the polling thread; releases the tokens left
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Seconds a collective may run (0: no deadline; async errors are still caught).
  void set_timeout(double seconds);
  // Where this rank stands ("step 12"), for the message.
  void set_progress(std::string where);

  // Collective `id` (described as "the all-gather of layer 3 (forward)") started at `started`;
  // `token` is the device's handle on its completion.
  void watch(uint64_t id, std::string description, void* token,
             Clock::time_point started = Clock::now());
  // The host needs collective `id`'s token no more: released once it has completed.
  void host_done(uint64_t id);

  // One round: releases what has completed and the host is done with, checks the async error
  // and the deadlines. Returns false once a fault was reported (then polls do nothing).
  bool poll(Clock::time_point now = Clock::now());
  // Runs poll() every `period` on a thread of its own until destruction.
  void start(std::chrono::milliseconds period);

  size_t in_flight() const;  // watched and not completed
  size_t held() const;       // tokens not yet released

 private:
  struct Entry {
    std::string description;
    void* token;
    Clock::time_point started;
    bool completed = false, host_done = false;
  };

  Device& device_;
  std::function<void(const std::string&)> report_;
  std::function<void()> end_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;
  double timeout_ = 0;
  std::string where_;
  bool faulted_ = false;
  std::thread thread_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

}  // namespace gemmax
