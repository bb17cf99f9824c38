#include "gemmax/base/strings.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <sstream>

namespace gemmax {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates)
    if (const size_t d = edit_distance(name, c); d < best_d) best_d = d, best = c;
  return best;
}

std::string format_bytes(double b) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (b >= double(1ull << 30))
    os << b / double(1ull << 30) << " GiB";
  else if (b >= double(1ull << 20))
    os << b / double(1ull << 20) << " MiB";
  else if (b >= 1024)
    os << b / 1024 << " KiB";
  else
    os << std::setprecision(0) << b << " B";
  return os.str();
}

std::string format_count(double n) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (n >= 1e9) os << n / 1e9 << "B";
  else if (n >= 1e6) os << n / 1e6 << "M";
  else if (n >= 1e3) os << n / 1e3 << "K";
  else os << std::setprecision(0) << n;
  return os.str();
}

std::vector<std::string> split_list(std::string_view list) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    std::string_view entry = list.substr(begin, end - begin);
    entry.remove_prefix(std::min(entry.find_first_not_of(" \t"), entry.size()));
    entry.remove_suffix(entry.size() - std::min(entry.find_last_not_of(" \t") + 1, entry.size()));
    if (!entry.empty()) out.emplace_back(entry);
    begin = end + 1;
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto byte = [&](size_t k) { return uint8_t(s[k]); };
    const uint8_t b = byte(i);
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence and the range its second byte must fall in (which excludes
    // overlong forms, surrogates and code points above U+10FFFF).
    size_t n;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return false;
    for (size_t k = 2; k < n; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return false;
    i += n;
  }
  return true;
}

}  // namespace gemmax
