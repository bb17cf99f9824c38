// One owner per run folder: an advisory lock (flock) on run_dir/gemmax.lock, held for the life
// of the run.
//
// The lock file holds the owner's pid, host and start time, so a second process can say who
// holds the folder. The kernel drops a flock when its holder dies however it dies (even by
// SIGKILL), so a lock file left by a dead process is not held: the next run takes it over and
// says whose it was. A run that ends leaves the file (empty) in place, except a run that fails
// before writing anything else: it removes the lock and the folders it created, leaving no
// trace. A process that locked a file which was removed meanwhile sees it (the path no longer
// names its file) and locks afresh, so two processes never both hold the folder. flock on
// network file systems depends on the server; run folders belong on a local or flock-capable
// file system.
#pragma once

#include <string>
#include <vector>

namespace gemmax {

class RunDirLock {
 public:
  // Creates `dir` if missing and locks it. Throws gemmax::Error naming the holder (pid, host,
  // start time) when another process holds it; then nothing in `dir` was written.
  explicit RunDirLock(const std::string& dir);
  // Releases the lock. The file stays, unless the folder holds nothing else and this lock
  // created it: then the file and the folders it created go.
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // "took over the lock of pid P on host H (started T), which is no longer running", or "".
  const std::string& recovered() const { return recovered_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, recovered_;
  std::vector<std::string> created_;  // folders this lock created, deepest first
  int fd_ = -1;
};

}  // namespace gemmax
