// TensorBoard event files, read back by this file's own decoder of the record framing, the
// CRC-32C and the protobuf wire format (independent of the writer and of the protobuf library),
// and checked step by step against metrics.jsonl: fresh runs, resumed runs that redo steps, and
// a run killed with SIGKILL.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gemmax/base/crc32c.h"
#include "gemmax/io/tfevents.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::expect_error;
using testing::TempDir;

// ---- an independent reader -------------------------------------------------------------------

// Bit by bit, straight from the definition (reflected polynomial 0x82F63B78).
uint32_t crc32c_bitwise(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// A protobuf wire-format cursor: varints, fixed32/64, length-delimited fields.
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) ADD_FAILURE() << "varint runs past the end";
      if (p >= end) return v;
      const uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "varint longer than 10 bytes";
    return v;
  }
  template <class T>
  T fixed() {
    T v;
    EXPECT_LE(sizeof(T), size_t(end - p));
    std::memcpy(&v, p, sizeof(T));  // little-endian host
    p += sizeof(T);
    return v;
  }
  Wire sub() {
    const uint64_t n = varint();
    EXPECT_LE(n, uint64_t(end - p));
    Wire w{p, p + n};
    p += n;
    return w;
  }
  void skip(int wire_type) {
    if (wire_type == 0)
      varint();
    else if (wire_type == 1)
      p += 8;
    else if (wire_type == 2)
      sub();
    else if (wire_type == 5)
      p += 4;
    else
      ADD_FAILURE() << "unexpected wire type " << wire_type;
  }
};

Event decode_event(const std::string& bytes) {
  Event e;
  Wire w{reinterpret_cast<const uint8_t*>(bytes.data()),
         reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size()};
  while (!w.done()) {
    const uint64_t key = w.varint();
    const int field = int(key >> 3), type = int(key & 7);
    if (field == 1 && type == 1) {
      e.wall_time = w.fixed<double>();
    } else if (field == 2 && type == 0) {
      e.step = int64_t(w.varint());
    } else if (field == 3 && type == 2) {
      Wire s = w.sub();
      e.file_version.assign(reinterpret_cast<const char*>(s.p), size_t(s.end - s.p));
    } else if (field == 5 && type == 2) {  // Summary
      Wire summary = w.sub();
      while (!summary.done()) {
        const uint64_t k = summary.varint();
        if (k != ((1 << 3) | 2)) {
          summary.skip(int(k & 7));
          continue;
        }
        Wire value = summary.sub();  // Summary.Value
        std::string tag;
        float v = NAN;
        while (!value.done()) {
          const uint64_t vk = value.varint();
          if (vk == ((1 << 3) | 2)) {
            Wire t = value.sub();
            tag.assign(reinterpret_cast<const char*>(t.p), size_t(t.end - t.p));
          } else if (vk == ((2 << 3) | 5)) {
            v = value.fixed<float>();
          } else {
            value.skip(int(vk & 7));
          }
        }
        EXPECT_FALSE(e.scalars.count(tag)) << "tag " << tag << " twice in one event";
        e.scalars[tag] = v;
      }
    } else {
      w.skip(type);
    }
  }
  return e;
}

// Every record of an event file, its framing and both CRCs checked.
std::vector<Event> read_event_file(const std::string& path) {
  const std::string bytes = testing::read_file(path);
  std::vector<Event> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << path << ": a record cut short at byte " << at;
    if (bytes.size() - at < 16) break;
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, bytes.data() + at, 8);
    std::memcpy(&len_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(len_crc, masked(crc32c_bitwise(bytes.data() + at, 8))) << path << " at " << at;
    EXPECT_LE(at + 16 + n, bytes.size()) << path << ": record past the end";
    if (at + 16 + n > bytes.size()) break;
    const std::string data = bytes.substr(at + 12, n);
    std::memcpy(&data_crc, bytes.data() + at + 12 + n, 4);
    EXPECT_EQ(data_crc, masked(crc32c_bitwise(data.data(), data.size()))) << path << " at " << at;
    out.push_back(decode_event(data));
    at += 16 + n;
  }
  return out;
}

// All event files of a folder in name order (TensorBoard's): the file_version event first in
// each, then the step events, returned together.
std::vector<Event> read_event_dir(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Event> steps;
  for (const std::string& f : files) {
    EXPECT_EQ(fs::path(f).filename().string().rfind("events.out.tfevents.", 0), 0u) << f;
    const std::vector<Event> events = read_event_file(f);
    EXPECT_FALSE(events.empty()) << f;
    if (events.empty()) continue;
    EXPECT_EQ(events[0].file_version, "brain.Event:2") << f;
    EXPECT_TRUE(events[0].scalars.empty()) << f;
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_TRUE(events[i].file_version.empty()) << f;
      EXPECT_GT(events[i].wall_time, 1.5e9) << "seconds since the epoch";
      steps.push_back(events[i]);
    }
  }
  return steps;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Every step of metrics.jsonl once, in order, in the events, with every value (as float32).
void expect_events_match_jsonl(const std::vector<Event>& events,
                               const std::vector<nlohmann::json>& lines) {
  ASSERT_EQ(events.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    const Event& e = events[i];
    EXPECT_EQ(e.step, j["step"].get<int64_t>());
    EXPECT_EQ(e.scalars.size(), j.size() - 1) << "the same names in both, step " << e.step;
    for (const auto& [key, value] : j.items()) {
      if (key == "step") continue;
      ASSERT_TRUE(e.scalars.count(key)) << key << " missing at step " << e.step;
      EXPECT_EQ(e.scalars.at(key), float(value.get<double>())) << key << " step " << e.step;
    }
  }
}

std::vector<std::string> run_args(const TempDir& dir, int64_t steps,
                                  std::vector<std::string> extra = {}) {
  std::vector<std::string> v = {"base_output_directory=" + dir.str(),
                                "run_name=r",
                                "base_emb_dim=32",
                                "max_target_length=32",
                                "per_device_batch_size=2",
                                "learning_rate_schedule_steps=8",
                                "log_period=1000",
                                "sample_max_new_tokens=0",
                                "steps=" + std::to_string(steps)};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

TrainSummary train(const std::vector<std::string>& args) {
  Trainer t(Config::defaults(args));
  std::ostringstream log;
  return t.run(log);
}

// ---- tests -----------------------------------------------------------------------------------

TEST(Crc32c, KnownVectors) {
  // The check value of the CRC catalogue, and RFC 3720's (iSCSI) test patterns.
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, 0), down(32, 0);
  for (int i = 0; i < 32; ++i) up[i] = char(i), down[i] = char(31 - i);
  EXPECT_EQ(crc32c(zeros), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones), 0x62a8ab43u);
  EXPECT_EQ(crc32c(up), 0x46dd794eu);
  EXPECT_EQ(crc32c(down), 0x113fdb5cu);
  EXPECT_EQ(crc32c(""), 0u);
  // Continuing a CRC equals one pass; the table agrees with the bitwise definition.
  const std::string text = "TensorBoard event files frame each record with CRC-32C";
  EXPECT_EQ(crc32c(text.data() + 9, text.size() - 9, crc32c(text.data(), 9)), crc32c(text));
  for (size_t n = 0; n <= text.size(); ++n)
    EXPECT_EQ(crc32c(text.data(), n), crc32c_bitwise(text.data(), n)) << n;
  EXPECT_EQ(mask_crc32c(0x12345678u), masked(0x12345678u));
}

TEST(EventFile, FramingProtobufAndNameAsTensorBoardReadsThem) {
  TempDir dir;
  std::string path;
  {
    EventFileWriter w(dir / "tb");
    path = w.path();
    const std::vector<NamedScalar> s0 = {{"learning/loss", 5.5}, {"perf/step_time_seconds", 0.25}};
    const std::vector<NamedScalar> s1 = {{"learning/loss", 1.0 / 3.0}};
    w.write_scalars(0, s0);
    w.write_scalars(123456789012, s1);
  }
  const std::string name = fs::path(path).filename().string();
  // events.out.tfevents.<10-digit seconds>.<hostname>.<pid>
  ASSERT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  const std::string secs = name.substr(20, 10);
  EXPECT_EQ(secs.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_NEAR(std::stod(secs), double(std::time(nullptr)), 60);
  EXPECT_EQ(name.substr(name.rfind('.') + 1), std::to_string(::getpid()));

  const std::vector<Event> events = read_event_file(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 0);
  EXPECT_EQ(events[1].scalars.at("learning/loss"), 5.5f);
  EXPECT_EQ(events[1].scalars.at("perf/step_time_seconds"), 0.25f);
  EXPECT_EQ(events[2].step, 123456789012);
  EXPECT_EQ(events[2].scalars.at("learning/loss"), float(1.0 / 3.0));
  EXPECT_LE(events[0].wall_time, events[2].wall_time);

  // The library's own reader agrees, and names damage with the file and offset.
  EXPECT_EQ(read_tfrecords(path).records.size(), 3u);
  const std::string bytes = testing::read_file(path);
  std::string damaged = bytes;
  damaged[damaged.size() - 6] ^= 0x10;  // in the last record's data
  testing::write_file(dir / "bad", damaged);
  expect_error([&] { read_tfrecords(dir / "bad"); }, {dir / "bad", "corrupted at byte", "CRC-32C"});
  testing::write_file(dir / "cut", bytes.substr(0, bytes.size() - 3));
  const TfRecords cut = read_tfrecords(dir / "cut");
  EXPECT_EQ(cut.records.size(), 2u);
  EXPECT_TRUE(cut.truncated_tail);
}

TEST(EventFile, NewFilesSortAfterOlderOnesAndDroppingKeepsEarlierSteps) {
  TempDir dir;
  const std::string tb = dir / "tb";
  std::vector<std::string> paths;
  for (int file = 0; file < 3; ++file) {
    EventFileWriter w(tb);
    paths.push_back(w.path());
    for (int s = 0; s < 3; ++s) {
      const std::vector<NamedScalar> v = {{"x", double(file * 3 + s)}};
      w.write_scalars(file * 3 + s, v);
    }
  }
  // Written within one second, still in creation order by name.
  EXPECT_TRUE(std::is_sorted(paths.begin(), paths.end()));
  EXPECT_EQ(list_event_files(tb), paths);

  drop_events_from(tb, 4);  // keeps 0..3: file 0 whole, file 1 step 3, file 2 removed
  EXPECT_EQ(list_event_files(tb), (std::vector<std::string>{paths[0], paths[1]}));
  const std::vector<Event> kept = read_event_dir(tb);
  ASSERT_EQ(kept.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(kept[s].step, s);
    EXPECT_EQ(kept[s].scalars.at("x"), float(s));
  }
  drop_events_from(tb, 4);  // nothing left to drop: the files stay as they are
  EXPECT_EQ(read_event_dir(tb).size(), 4u);
  drop_events_from(tb, 0);  // a fresh start
  EXPECT_TRUE(list_event_files(tb).empty());

  // A file damaged in the middle is named, not silently cut.
  {
    EventFileWriter w(tb);
    const std::vector<NamedScalar> v = {{"x", 1}};
    w.write_scalars(0, v);
    w.write_scalars(1, v);
    paths = {w.path()};
  }
  std::string bytes = testing::read_file(paths[0]);
  bytes[bytes.size() / 2] ^= 0x01;
  testing::write_file(paths[0], bytes);
  expect_error([&] { drop_events_from(tb, 1); }, {paths[0], "corrupted"});
}

TEST(TensorBoard, EveryStepOfARunAndOfItsResumeMatchesMetricsJsonl) {
  TempDir dir;
  const std::string tb = dir / "r/tensorboard";
  train(run_args(dir, 4, {"checkpoint_period=2"}));
  ASSERT_EQ(list_event_files(tb).size(), 1u);
  expect_events_match_jsonl(read_event_dir(tb), read_jsonl(dir / "r/metrics.jsonl"));
  EXPECT_EQ(read_event_dir(tb).size(), 4u);

  // Resume from step 2 (the step-4 checkpoint lost): steps 2 and 3 are redone, and must not
  // appear twice; the first file keeps steps 0 and 1, the new one holds 2..5.
  fs::remove_all(list_train_checkpoints(dir / "r/checkpoints").back().dir);
  train(run_args(dir, 6, {"checkpoint_period=2"}));
  const std::vector<std::string> files = list_event_files(tb);
  ASSERT_EQ(files.size(), 2u);
  const std::vector<Event> first = read_event_file(files[0]);
  ASSERT_EQ(first.size(), 3u);  // file_version, steps 0 and 1
  EXPECT_EQ(first[2].step, 1);
  const std::vector<nlohmann::json> lines = read_jsonl(dir / "r/metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  expect_events_match_jsonl(read_event_dir(tb), lines);

  // A fresh start in the same folder (no checkpoint) starts the events over too.
  fs::remove_all(dir / "r/checkpoints");
  train(run_args(dir, 2, {"checkpoint_period=2"}));
  ASSERT_EQ(list_event_files(tb).size(), 1u);
  expect_events_match_jsonl(read_event_dir(tb), read_jsonl(dir / "r/metrics.jsonl"));
}

TEST(TensorBoard, TheFolderAndTheSwitchAreMaxTextKeys) {
  TempDir dir;
  train(run_args(dir, 2, {"tensorboard_dir=" + dir / "elsewhere"}));
  EXPECT_FALSE(fs::exists(dir / "r/tensorboard"));
  expect_events_match_jsonl(read_event_dir(dir / "elsewhere"), read_jsonl(dir / "r/metrics.jsonl"));

  TempDir off;
  train(run_args(off, 2, {"enable_tensorboard=false"}));
  EXPECT_FALSE(fs::exists(off / "r/tensorboard"));
  EXPECT_EQ(read_jsonl(off / "r/metrics.jsonl").size(), 2u);

  // A folder that cannot be made is named with the keys that fix it, before any step.
  TempDir blocked;
  testing::write_file(blocked / "file", "");
  expect_error([&] { train(run_args(blocked, 2, {"tensorboard_dir=" + blocked / "file/tb"})); },
               {"file/tb", "tensorboard_dir", "enable_tensorboard=false"});
}

// Two runs share one tensorboard_dir: each writes, rewrites and removes only its own event
// files (named for the run folder that owns them), whether it starts fresh or resumes.
TEST(TensorBoard, RunsSharingAFolderNeverTouchEachOthersFiles) {
  TempDir dir;
  const std::string tb = "tensorboard_dir=" + dir / "shared";
  train(run_args(dir, 3, {tb, "run_name=a", "checkpoint_period=2"}));
  ASSERT_EQ(list_event_files(dir / "shared").size(), 1u);
  const std::string a_file = list_event_files(dir / "shared")[0];
  const std::string a_bytes = testing::read_file(a_file);

  train(run_args(dir, 2, {tb, "run_name=b"}));  // a fresh start of b
  ASSERT_EQ(list_event_files(dir / "shared").size(), 2u);
  EXPECT_EQ(testing::read_file(a_file), a_bytes) << "b's fresh start touched a's events";
  std::string b_file;
  for (const std::string& f : list_event_files(dir / "shared"))
    if (f != a_file) b_file = f;
  const std::string b_bytes = testing::read_file(b_file);
  EXPECT_EQ(read_event_file(b_file).size(), 3u);  // file_version, steps 0 and 1

  // a resumes from step 2 (its step-3 checkpoint lost): it drops its own step 2, not b's.
  fs::remove_all(list_train_checkpoints(dir / "a/checkpoints").back().dir);
  train(run_args(dir, 4, {tb, "run_name=a", "checkpoint_period=2"}));
  EXPECT_EQ(testing::read_file(b_file), b_bytes) << "a's resume touched b's events";
  std::vector<Event> a_steps;
  for (const std::string& f : list_event_files(dir / "shared"))
    if (f != b_file)
      for (const Event& e : read_event_file(f))
        if (e.file_version.empty()) a_steps.push_back(e);
  expect_events_match_jsonl(a_steps, read_jsonl(dir / "a/metrics.jsonl"));
  EXPECT_EQ(a_steps.size(), 4u);

  // b starts over (its checkpoints gone): its old file goes, a's stay.
  fs::remove_all(dir / "b/checkpoints");
  train(run_args(dir, 1, {tb, "run_name=b"}));
  EXPECT_FALSE(fs::exists(b_file));
  EXPECT_EQ(list_event_files(dir / "shared").size(), 3u);  // a's two, b's new one
}

// SIGKILL mid-run: every step that reached metrics.jsonl (and the console) is in the events,
// whole, because each event is written through to the OS before the step's other outputs.
TEST(TensorBoard, AKilledRunKeepsEveryLoggedStep) {
  TempDir dir;
  std::vector<std::string> args = run_args(dir, 1000, {"log_period=1"});
  const std::string log_path = dir / "log.txt";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    FILE* f = std::freopen(log_path.c_str(), "w", stdout);
    (void)f;
    std::vector<char*> argv = {const_cast<char*>(GEMMAX_BINARY), const_cast<char*>("train")};
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(GEMMAX_BINARY, argv.data());
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (testing::read_file(log_path).find("step     3 ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << testing::read_file(log_path);
  const std::vector<nlohmann::json> lines = read_jsonl(dir / "r/metrics.jsonl");
  ASSERT_GE(lines.size(), 4u) << testing::read_file(log_path);
  std::vector<Event> events = read_event_dir(dir / "r/tensorboard");
  ASSERT_GE(events.size(), lines.size());
  ASSERT_LE(events.size(), lines.size() + 1) << "at most the step being written";
  events.resize(lines.size());
  expect_events_match_jsonl(events, lines);
}

}  // namespace
}  // namespace gemmax
