// Crash-safe file writing: a file appears at its final path complete or not at all.
//
// The bytes go to a temporary file in the same directory (so the final rename stays within one
// file system and is atomic). commit() checks, fsyncs the file, renames it over the final path
// and fsyncs the directory, so that after a crash either the old or the new file is there.
// Any failure removes the temporary and throws gemmax::Error naming the path and the OS error.
//
//   AtomicFile f(path);
//   f.write(header.data(), header.size());
//   f.write(t.raw(), t.nbytes());
//   f.commit();              // without it, the destructor removes the temporary
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gemmax {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // not committed: closes and removes the temporary, never throws
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Writes all n bytes (retrying short writes); on error removes the temporary and throws.
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Makes the file visible at path(). After commit (or a failure) no more writes are allowed.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  [[noreturn]] void abort_with(const std::string& what, int err);
  void discard() noexcept;

  std::string path_, temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Writes a whole small file (configs, indexes) atomically.
void write_file_atomic(const std::string& path, std::string_view contents);

// fsyncs a directory, so that renames and unlinks in it survive a crash. Throws on error.
void fsync_directory(const std::string& dir);

// While set, every AtomicFile write and commit fails (removing its temporary) with an error
// saying the write was interrupted: a forced stop abandons a checkpoint being saved. Safe to
// call from a signal handler.
void set_writes_interrupted(bool interrupted);

}  // namespace gemmax
