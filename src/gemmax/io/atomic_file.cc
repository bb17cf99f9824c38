#include "gemmax/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {

std::atomic<uint64_t> g_temp_counter{0};
std::atomic<bool> g_interrupted{false};  // set from a signal handler: must be lock-free
static_assert(std::atomic<bool>::is_always_lock_free);

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

void set_writes_interrupted(bool interrupted) { g_interrupted.store(interrupted); }

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  GEMMAX_CHECK(!path_.empty(), "AtomicFile: empty path");
  const std::filesystem::path p(path_);
  const std::string base = p.filename().string();
  if (base.empty() || base == "." || base == "..")
    fail("cannot write '", path_, "': the path names a directory, not a file");
  // A hidden name in the same directory; pid + counter make it unique, O_EXCL makes sure.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = (p.parent_path() / ("." + base + ".tmp." + std::to_string(::getpid()) + "." +
                                std::to_string(g_temp_counter.fetch_add(1))))
                .string();
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  const int err = errno;
  fail("cannot create a temporary file next to '", path_, "' (", temp_, "): ", std::strerror(err),
       "; check that the directory exists and is writable");
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
  fd_ = -1;
}

void AtomicFile::abort_with(const std::string& what, int err) {
  discard();
  fail("writing '", path_, "' failed: ", what, ": ", std::strerror(err), " (after ", written_,
       " bytes; the temporary file was removed and '", path_, "' was left as it was)");
}

void AtomicFile::write(const void* data, size_t n) {
  if (fd_ < 0) fail("writing '", path_, "': the file was already committed or abandoned");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (g_interrupted.load()) abort_with("interrupted by a forced stop", EINTR);
    const size_t chunk = std::min<size_t>(n, size_t(1) << 30);
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      abort_with("write", errno);
    }
    if (w == 0) abort_with("write returned 0", EIO);
    p += w;
    n -= size_t(w);
    written_ += uint64_t(w);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail("committing '", path_, "': the file was already committed or abandoned");
  if (g_interrupted.load()) abort_with("interrupted by a forced stop", EINTR);
  if (::fsync(fd_) != 0) abort_with("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {  // NFS and some others report write errors only here
    const int err = errno;
    ::unlink(temp_.c_str());
    fail("writing '", path_, "' failed: close: ", std::strerror(err),
         " (the temporary file was removed)");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    fail("cannot rename '", temp_, "' to '", path_, "': ", std::strerror(err),
         " (the temporary file was removed)");
  }
  fsync_directory(parent_dir(path_));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory '", dir, "' to sync it: ", std::strerror(errno));
  if (::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: the file system cannot sync directories
    const int err = errno;
    ::close(fd);
    fail("fsync of directory '", dir, "' failed: ", std::strerror(err));
  }
  ::close(fd);
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile f(path);
  f.write(contents);
  f.commit();
}

}  // namespace gemmax
