#include "gemmax/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "gemmax/base/error.h"

namespace gemmax {
namespace fs = std::filesystem;
namespace {

std::string read_all(int fd) {
  std::string s;
  char buf[256];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    s.append(buf, size_t(n));
    at += n;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string this_host() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "pid 123 on host h, started 2026-12-01T10:00:00Z" from the file's "pid=123 host=h started=..."
std::string describe_holder(const std::string& text) {
  std::string pid = "?", host = "?", started = "?";
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
      if (k == "pid") pid = v;
      if (k == "host") host = v;
      if (k == "started") started = v;
    }
    i = j + 1;
  }
  return str_cat("pid ", pid, " on host ", host, ", started ", started);
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir) : path_((fs::path(dir) / "gemmax.lock").string()) {
  std::error_code ec;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec);
       p = p.parent_path()) {
    created_.push_back(p.string());
    if (p == p.root_path()) break;
  }
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    fail("cannot create the run directory '", dir, "': ", ec ? ec.message() : "not a folder",
         " (set base_output_directory to a writable folder)");
  // A file removed by a failed run between our open and our lock is not the folder's lock:
  // lock again until the path names the file we hold.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail("cannot open the run directory's lock file '", path_, "': ", std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) break;  // held by another: reported below
    struct stat held{}, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
    if (attempt == 100) fail("cannot lock the run directory '", dir, "': its lock file keeps changing");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    // The holder writes its name just after locking: give it a moment.
    std::string holder = read_all(fd_);
    for (int i = 0; i < 50 && holder.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      holder = read_all(fd_);
    }
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      fail("cannot lock the run directory '", dir, "' (", path_, "): ", std::strerror(err));
    fail("the run directory '", dir, "' is in use by another gemmax run (",
         holder.empty() ? std::string("its pid not written yet") : describe_holder(holder),
         "): nothing was written. Wait for it to end, stop it, or choose another run_name or "
         "base_output_directory");
  }
  if (const std::string before = read_all(fd_); !before.empty())
    recovered_ = "took over the lock of " + describe_holder(before) + ", which is no longer running";
  const std::string me =
      str_cat("pid=", ::getpid(), " host=", this_host(), " started=", now_text(), "\n");
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail("cannot write the run directory's lock file '", path_, "': ", std::strerror(err));
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // An empty file tells the next run that this one ended cleanly.
  [[maybe_unused]] const int t = ::ftruncate(fd_, 0);
  std::error_code ec;
  const fs::path dir = fs::path(path_).parent_path();
  if (!created_.empty() && fs::is_directory(dir, ec)) {
    bool only_lock = true;
    for (const auto& e : fs::directory_iterator(dir, ec))
      only_lock = only_lock && e.path().filename() == "gemmax.lock";
    if (only_lock && !ec) {
      fs::remove(path_, ec);  // while still locked: see the constructor's loop
      for (const std::string& d : created_) fs::remove(d, ec);  // each only if empty
    }
  }
  ::close(fd_);  // releases the flock
}

}  // namespace gemmax
