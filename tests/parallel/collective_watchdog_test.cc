// CollectiveWatchdog (the NCCL comm's deadline) against a fake device: collectives that complete
// are released once the host is done with them; one past comm_timeout_seconds, or an error the
// communicator reports, is reported once, naming the collective, before the communicator is
// aborted and the job ended. Time is passed in: nothing here sleeps.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "gemmax/parallel/collective_watchdog.h"

namespace gemmax {
namespace {

using Clock = CollectiveWatchdog::Clock;
using std::chrono::seconds;

struct FakeDevice final : CollectiveWatchdog::Device {
  std::map<void*, bool> complete;  // token -> completed
  std::string error;
  std::vector<std::string>* log;
  explicit FakeDevice(std::vector<std::string>* l) : log(l) {}
  bool done(void* token) override { return complete.at(token); }
  std::string async_error() override { return error; }
  void abort_comm() override { log->push_back("abort_comm"); }
  void release(void* token) override {
    log->push_back("release " + std::to_string(reinterpret_cast<uintptr_t>(token)));
  }
};

void* token(uintptr_t t) { return reinterpret_cast<void*>(t); }

struct Watched {
  std::vector<std::string> log;
  FakeDevice device{&log};
  CollectiveWatchdog dog{device, [this](const std::string& m) { log.push_back("report " + m); },
                         [this] { log.push_back("end"); }};
  int reports() const {
    int n = 0;
    for (const std::string& l : log) n += l.rfind("report ", 0) == 0;
    return n;
  }
};

TEST(CollectiveWatchdog, CompletedCollectivesAreReleasedOnceTheHostIsDoneWithThem) {
  Watched w;
  w.dog.set_timeout(10);
  const Clock::time_point t0 = Clock::now();
  w.device.complete = {{token(1), false}, {token(2), false}};
  w.dog.watch(1, "the all-gather of layer 0 (forward)", token(1), t0);
  w.dog.watch(2, "the reduce-scatter of layer 0 (backward)", token(2), t0);
  EXPECT_TRUE(w.dog.poll(t0 + seconds(1)));
  EXPECT_EQ(w.dog.in_flight(), 2u);
  w.device.complete[token(1)] = true;
  EXPECT_TRUE(w.dog.poll(t0 + seconds(2)));
  EXPECT_EQ(w.dog.in_flight(), 1u);
  EXPECT_EQ(w.dog.held(), 2u) << "the host still needs collective 1's event";
  w.dog.host_done(1);
  EXPECT_EQ(w.dog.held(), 1u);
  w.dog.host_done(2);  // the host is done before the device: released once it completes
  EXPECT_EQ(w.dog.held(), 1u);
  w.device.complete[token(2)] = true;
  EXPECT_TRUE(w.dog.poll(t0 + seconds(3)));
  EXPECT_EQ(w.dog.held(), 0u);
  EXPECT_EQ(w.log, (std::vector<std::string>{"release 1", "release 2"}));
}

TEST(CollectiveWatchdog, ACollectivePastTheDeadlineIsNamedThenTheCommAbortedThenTheJobEnded) {
  Watched w;
  w.dog.set_timeout(30);
  w.dog.set_progress("step 12");
  const Clock::time_point t0 = Clock::now();
  w.device.complete = {{token(7), true}, {token(8), false}, {token(9), false}};
  w.dog.watch(7, "the all-gather of layer 2 (forward)", token(7), t0);
  w.dog.watch(8, "the all-gather of layer 3 (forward)", token(8), t0 + seconds(5));
  w.dog.watch(9, "the reduce-scatter of layer 3 (backward)", token(9), t0 + seconds(6));
  EXPECT_TRUE(w.dog.poll(t0 + seconds(35))) << "30 s after collective 8 started, not more";
  EXPECT_EQ(w.reports(), 0);
  EXPECT_FALSE(w.dog.poll(t0 + seconds(36)));
  ASSERT_EQ(w.log.size(), 3u);
  const std::string& report = w.log[0];
  EXPECT_NE(report.find("the all-gather of layer 3 (forward) (collective #8)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("comm_timeout_seconds=30"), std::string::npos) << report;
  EXPECT_NE(report.find("this rank is at step 12"), std::string::npos) << report;
  EXPECT_EQ(w.log[1], "abort_comm");
  EXPECT_EQ(w.log[2], "end");
  EXPECT_FALSE(w.dog.poll(t0 + seconds(100)));
  EXPECT_EQ(w.log.size(), 3u) << "a fault is reported once";
}

TEST(CollectiveWatchdog, NoDeadlineWaitsForeverButACommErrorStillEndsTheJob) {
  Watched w;
  w.dog.set_timeout(0);
  const Clock::time_point t0 = Clock::now();
  w.device.complete = {{token(4), false}};
  w.dog.watch(4, "the all-reduce of the gradient norm", token(4), t0);
  EXPECT_TRUE(w.dog.poll(t0 + seconds(100000)));
  EXPECT_EQ(w.reports(), 0);
  w.device.error = "remote process exited or there was a network error";
  EXPECT_FALSE(w.dog.poll(t0 + seconds(100001)));
  ASSERT_EQ(w.log.size(), 3u);
  EXPECT_NE(w.log[0].find("the NCCL communicator failed (remote process exited or there was a "
                          "network error) during the all-reduce of the gradient norm "
                          "(collective #4)"),
            std::string::npos)
      << w.log[0];
  EXPECT_EQ(w.log[1], "abort_comm");
  EXPECT_EQ(w.log[2], "end");
}

TEST(CollectiveWatchdog, TokensLeftAreReleasedAtDestruction) {
  std::vector<std::string> log;
  FakeDevice device(&log);
  {
    CollectiveWatchdog dog(
        device, [](const std::string&) {}, [] {});
    device.complete = {{token(3), false}};
    dog.watch(3, "the broadcast of the weights", token(3));
    dog.start(std::chrono::milliseconds(1));  // the thread stops at destruction
  }
  EXPECT_EQ(log, (std::vector<std::string>{"release 3"}));
}

}  // namespace
}  // namespace gemmax
