// Helpers shared by the fuzz targets: the readers under test take file paths, so each input is
// written to a scratch folder first.
//
// Every target follows one contract: any input either succeeds or throws gemmax::Error. A
// crash, a sanitizer report, or any other exception (which escapes LLVMFuzzerTestOneInput and
// aborts) is a bug.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace gemmax::fuzz {

// A folder of this process's own, created on first use and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      path = std::filesystem::temp_directory_path() / ("gemmax_fuzz_" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::filesystem::path p = scratch_dir() / name;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return p.string();
}

// Splits an input into parts at each occurrence of `sep` (parts beyond `max_parts` stay in the
// last one). Seeds are written the same way, so the fuzzer mutates each part.
inline std::vector<std::string_view> split_input(std::string_view in, std::string_view sep,
                                                 size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const size_t at = in.find(sep);
    if (at == std::string_view::npos) break;
    parts.push_back(in.substr(0, at));
    in.remove_prefix(at + sep.size());
  }
  parts.push_back(in);
  return parts;
}

inline std::string_view as_view(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace gemmax::fuzz
