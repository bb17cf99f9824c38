#include <gtest/gtest.h>

#include "gemmax/io/atomic_file.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
using testing::FileSizeLimit;
using testing::read_file;
using testing::TempDir;
using testing::write_file;

TEST(AtomicFile, CommitReplacesAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir / "out.bin";
  write_file(path, "old contents");
  {
    AtomicFile f(path);
    f.write("new ");
    EXPECT_EQ(read_file(path), "old contents");  // not visible before commit
    f.write("contents");
    EXPECT_EQ(f.bytes_written(), 12u);
    f.commit();
    expect_error([&] { f.write("x"); }, {"already committed"});
  }
  EXPECT_EQ(read_file(path), "new contents");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, AbandonedFileIsRemoved) {
  TempDir dir;
  const std::string path = dir / "out.bin";
  write_file(path, "keep me");
  {
    AtomicFile f(path);
    f.write("partial");
  }  // no commit, e.g. an exception while producing the data
  EXPECT_EQ(read_file(path), "keep me");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"out.bin"});
}

// A write the OS refuses part-way (here a file-size limit: EFBIG, as a full disk gives ENOSPC).
TEST(AtomicFile, FailedWriteKeepsOldFile) {
  TempDir dir;
  const std::string path = dir / "state.bin";
  write_file(path, "previous");
  {
    FileSizeLimit limit(5);
    AtomicFile f(path);
    f.write("abc");  // 3 of the 5 bytes the limit allows
    expect_error([&] { f.write("defgh"); },
                 {path, "File too large", "after 5 bytes", "was left as it was"});
    EXPECT_EQ(read_file(path), "previous");
    EXPECT_EQ(dir.list(), std::vector<std::string>{"state.bin"});
  }
  // The failure left nothing behind that stops the next write.
  write_file_atomic(path, "next");
  EXPECT_EQ(read_file(path), "next");
}

// A write that fails in one piece (no short write first) is the same clean failure; the file
// already complete at the limit is kept.
TEST(AtomicFile, WholeFileRefusedLeavesNoTemporary) {
  TempDir dir;
  {
    FileSizeLimit limit(7);
    write_file_atomic(dir / "a", "0123456");  // exactly the limit
    expect_error([&] { write_file_atomic(dir / "b", "01234567"); }, {dir / "b", "File too large"});
  }
  EXPECT_EQ(dir.list(), std::vector<std::string>{"a"});
  EXPECT_EQ(read_file(dir / "a"), "0123456");
}

TEST(AtomicFile, MissingDirectoryIsAClearError) {
  TempDir dir;
  expect_error([&] { write_file_atomic(dir / "no/such/dir/file", "x"); },
               {"no/such/dir/file", "No such file or directory"});
}

}  // namespace
}  // namespace gemmax
