#include <gtest/gtest.h>

#include "gemmax/io/atomic_file.h"
#include "test_util.h"

namespace gemmax {
namespace {

using testing::expect_error;
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

TEST(AtomicFile, InjectedDiskFullKeepsOldFile) {
  TempDir dir;
  const std::string path = dir / "state.bin";
  write_file(path, "previous");
  inject_write_failure_after_bytes_for_testing(5);
  AtomicFile f(path);
  f.write("abc");  // 3 of the 5 allowed bytes
  expect_error([&] { f.write("defgh"); }, {path, "No space left on device"});
  EXPECT_EQ(read_file(path), "previous");
  EXPECT_EQ(dir.list(), std::vector<std::string>{"state.bin"});
  // The fault fires once; writing again works.
  write_file_atomic(path, "next");
  EXPECT_EQ(read_file(path), "next");
}

TEST(AtomicFile, InjectionCountsAcrossFilesAndCanBeDisarmed) {
  TempDir dir;
  inject_write_failure_after_bytes_for_testing(10);
  write_file_atomic(dir / "a", "0123456");  // 7 bytes
  expect_error([&] { write_file_atomic(dir / "b", "0123456"); }, {dir / "b", "No space"});
  EXPECT_EQ(dir.list(), std::vector<std::string>{"a"});
  inject_write_failure_after_bytes_for_testing(0);
  inject_write_failure_after_bytes_for_testing(-1);
  write_file_atomic(dir / "c", "fine");
  EXPECT_EQ(read_file(dir / "c"), "fine");
}

TEST(AtomicFile, MissingDirectoryIsAClearError) {
  TempDir dir;
  expect_error([&] { write_file_atomic(dir / "no/such/dir/file", "x"); },
               {"no/such/dir/file", "No such file or directory"});
}

}  // namespace
}  // namespace gemmax
