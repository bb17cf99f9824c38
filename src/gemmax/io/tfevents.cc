#include "gemmax/io/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gemmax/base/crc32c.h"
#include "gemmax/base/error.h"
#include "gemmax/io/atomic_file.h"
#include "gemmax/io/tfevents.pb.h"

namespace gemmax {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "events.out.tfevents.";

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char(uint8_t(v >> (8 * i))));
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The <seconds> field of an event file name, or -1.
int64_t name_seconds(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  int64_t s = 0;
  size_t i = kPrefix.size();
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) s = s * 10 + (name[i] - '0');
  return i == kPrefix.size() ? -1 : s;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  std::string h = buf;
  std::replace(h.begin(), h.end(), '/', '_');
  return h;
}

std::string serialize(const tfevents::Event& e) {
  std::string s;
  if (!e.SerializeToString(&s)) fail("cannot encode a TensorBoard event (step ", e.step(), ")");
  return s;
}

}  // namespace

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  for (int i = 0; i < 8; ++i) out.push_back(char(uint8_t(uint64_t(data.size()) >> (8 * i))));
  put_u32(out, mask_crc32c(crc32c(out.data(), 8)));
  out.append(data);
  put_u32(out, mask_crc32c(crc32c(data)));
  return out;
}

TfRecords read_tfrecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read TensorBoard event file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  TfRecords r;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) {
      r.truncated_tail = true;
      break;
    }
    const char* p = bytes.data() + at;
    if (uint32_t(get_le(p + 8, 4)) != mask_crc32c(crc32c(p, 8)))
      fail("TensorBoard event file '", path, "' is corrupted at byte ", at,
           " (the record length fails its CRC-32C)");
    const uint64_t n = get_le(p, 8);
    if (bytes.size() - at - 12 < n + 4) {
      r.truncated_tail = true;
      break;
    }
    const std::string_view data(p + 12, n);
    if (uint32_t(get_le(p + 12 + n, 4)) != mask_crc32c(crc32c(data)))
      fail("TensorBoard event file '", path, "' is corrupted at byte ", at,
           " (the record data fails its CRC-32C)");
    r.records.emplace_back(data);
    at += 12 + n + 4;
  }
  return r;
}

std::vector<std::string> list_event_files(const std::string& dir, const std::string& owner) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  const std::string suffix = owner.empty() ? std::string() : "." + owner;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind(kPrefix, 0) == 0 && name.ends_with(suffix))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

EventFileWriter::EventFileWriter(const std::string& dir, const std::string& owner) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail("cannot create the TensorBoard folder '", dir, "': ", ec ? ec.message() : "not a folder",
         " (set tensorboard_dir to a writable folder, or enable_tensorboard=false)");
  const double wall = now_seconds();
  // Named after every older file of the folder (a resumed run started within the same second
  // as the last file), since TensorBoard reads the files in name order.
  int64_t seconds = int64_t(wall);
  for (const std::string& f : list_event_files(dir))
    seconds = std::max(seconds, name_seconds(fs::path(f).filename().string()) + 1);
  char name[64];
  std::snprintf(name, sizeof name, "%010lld", (long long)seconds);
  path_ = (fs::path(dir) /
           (std::string(kPrefix) + name + "." + hostname() + "." + std::to_string(::getpid()) +
            (owner.empty() ? std::string() : "." + owner)))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create TensorBoard event file '", path_, "': ", std::strerror(errno));
  tfevents::Event version;
  version.set_wall_time(wall);
  version.set_file_version("brain.Event:2");
  write_record(serialize(version));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFileWriter::write_scalars(int64_t step, std::span<const NamedScalar> scalars) {
  tfevents::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tfevents::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(float(value));
  }
  write_record(serialize(e));
}

void EventFileWriter::write_record(std::string_view data) {
  const std::string rec = tfrecord(data);
  size_t done = 0;
  while (done < rec.size()) {
    const ssize_t n = ::write(fd_, rec.data() + done, rec.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("writing TensorBoard event file '", path_, "' failed: ", std::strerror(errno),
           " (disk full?)");
    done += size_t(n);
  }
}

void drop_events_from(const std::string& dir, int64_t step, const std::string& owner) {
  for (const std::string& path : list_event_files(dir, owner)) {
    const TfRecords file = read_tfrecords(path);
    std::string kept;
    bool changed = file.truncated_tail, any_summary = false;
    for (const std::string& rec : file.records) {
      tfevents::Event e;
      if (!e.ParseFromString(rec))
        fail("TensorBoard event file '", path, "' holds a record that is not an Event");
      if (e.step() >= step) {
        changed = true;
        continue;
      }
      any_summary = any_summary || e.has_summary();
      kept += tfrecord(rec);
    }
    if (!changed) continue;
    if (any_summary) {
      write_file_atomic(path, kept);
    } else {
      std::error_code ec;
      fs::remove(path, ec);
      if (ec) fail("cannot remove '", path, "': ", ec.message());
    }
  }
}

}  // namespace gemmax
