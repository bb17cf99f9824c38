// TensorBoard event files: Event protos (tfevents.proto) framed as TFRecords, in
// <dir>/events.out.tfevents.<seconds>.<hostname>.<pid>, TensorBoard's naming, followed by
// .<owner> when the writer names one: the run that owns the file. A folder shared by several
// runs (tensorboard_dir) holds each run's files under its own owner, and a run lists, rewrites
// and removes only its own.
//
// A record is the data's length (uint64, little-endian), the masked CRC-32C of those 8 bytes,
// the data, and the masked CRC-32C of the data. Every file starts with a file_version event
// ("brain.Event:2"). TensorBoard reads a folder's files in name order and takes a record cut
// short at the end of a file for one not written yet; so the writer makes each new file's name
// sort after the folder's older ones, and writes each record straight to the OS: a reader
// sees every step as it is written, and a killed process loses none it wrote.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemmax {

using NamedScalar = std::pair<std::string, double>;

class EventFileWriter {
 public:
  // Creates `dir` if missing and a new event file in it (named for `owner` if not empty).
  // Throws gemmax::Error naming the path.
  explicit EventFileWriter(const std::string& dir, const std::string& owner = "");
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One event holding `scalars` (stored as float32, TensorBoard's simple_value) at `step`,
  // stamped with the current wall time.
  void write_scalars(int64_t step, std::span<const NamedScalar> scalars);
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view data);

  std::string path_;
  int fd_ = -1;
};

// `data` framed as one record.
std::string tfrecord(std::string_view data);

// The records of a file, in order. A record cut short at the end (a writer killed part-way)
// is left out and reported by `truncated_tail`; a length or data CRC that does not match is an
// error naming the file and the byte offset.
struct TfRecords {
  std::vector<std::string> records;
  bool truncated_tail = false;
};
TfRecords read_tfrecords(const std::string& path);

// The event files in `dir` (events.out.tfevents.*), in name order; none if it does not exist.
// With an `owner`, only the files of that owner.
std::vector<std::string> list_event_files(const std::string& dir, const std::string& owner = "");

// Keeps, in every event file of `dir`, only the events of steps before `step`: each file that
// changes is rewritten atomically (a file left with no summary is removed), so that a run
// resumed from step `step` appends its redone steps without duplicates, and TensorBoard, which
// reads the files one after another, sees each step once. Throws naming a corrupted file.
// With an `owner`, only that owner's files are read and changed.
void drop_events_from(const std::string& dir, int64_t step, const std::string& owner = "");

}  // namespace gemmax
