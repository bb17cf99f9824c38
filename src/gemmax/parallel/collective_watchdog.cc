#include "gemmax/parallel/collective_watchdog.h"

#include <utility>

#include "gemmax/base/error.h"

namespace gemmax {

CollectiveWatchdog::CollectiveWatchdog(Device& device,
                                       std::function<void(const std::string&)> report,
                                       std::function<void()> end)
    : device_(device), report_(std::move(report)), end_(std::move(end)) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [id, e] : entries_) device_.release(e.token);
}

void CollectiveWatchdog::set_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_ = seconds;
}

void CollectiveWatchdog::set_progress(std::string where) {
  std::lock_guard<std::mutex> lock(mu_);
  where_ = std::move(where);
}

void CollectiveWatchdog::watch(uint64_t id, std::string description, void* token,
                               Clock::time_point started) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_[id] = Entry{std::move(description), token, started};
}

void CollectiveWatchdog::host_done(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.host_done = true;
  if (it->second.completed) {
    device_.release(it->second.token);
    entries_.erase(it);
  }
}

bool CollectiveWatchdog::poll(Clock::time_point now) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (faulted_) return false;
    // The oldest collective still running names the fault (ids grow with submission).
    const Entry* oldest = nullptr;
    uint64_t oldest_id = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = it->second;
      if (!e.completed) e.completed = device_.done(e.token);
      if (e.completed && e.host_done) {
        device_.release(e.token);
        it = entries_.erase(it);
        continue;
      }
      if (!e.completed && oldest == nullptr) {
        oldest = &e;
        oldest_id = it->first;
      }
      ++it;
    }
    const std::string at = where_.empty() ? "" : str_cat("; this rank is at ", where_);
    const std::string error = device_.async_error();
    if (!error.empty()) {
      message = str_cat(
          "the NCCL communicator failed (", error, ")",
          oldest ? str_cat(" during ", oldest->description, " (collective #", oldest_id, ")")
                 : std::string(),
          at);
    } else if (oldest && timeout_ > 0) {
      const double waited = std::chrono::duration<double>(now - oldest->started).count();
      if (waited > timeout_)
        message = str_cat(oldest->description, " (collective #", oldest_id,
                          ") has not completed on the device after ", timeout_,
                          " s (comm_timeout_seconds=", timeout_,
                          "): another rank hangs before it or died, or the network stalls", at);
    }
    if (message.empty()) return true;
    faulted_ = true;
  }
  // Said first: aborting the communicator may fail whatever the host thread does next with it.
  report_(message);
  {
    std::lock_guard<std::mutex> lock(mu_);
    device_.abort_comm();
  }
  end_();
  return false;
}

void CollectiveWatchdog::start(std::chrono::milliseconds period) {
  thread_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
      lock.unlock();
      const bool healthy = poll();
      lock.lock();
      if (!healthy) return;
    }
  });
}

size_t CollectiveWatchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += e.completed ? 0 : 1;
  return n;
}

size_t CollectiveWatchdog::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace gemmax
