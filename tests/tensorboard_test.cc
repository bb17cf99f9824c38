// TensorBoard event files, read back by this file's own decoder of the record framing, the
// CRC-32C and the protobuf wire format (independent of the writer and of the protobuf library).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>

#include "gemmax/base/crc32c.h"
#include "gemmax/io/tfevents.h"
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

}  // namespace
}  // namespace gemmax
