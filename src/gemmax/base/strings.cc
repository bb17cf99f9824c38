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

}  // namespace gemmax
