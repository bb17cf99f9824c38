#include "gemmax/io/no_clobber.h"

#include <algorithm>
#include <filesystem>

#include "gemmax/base/error.h"

namespace gemmax {
namespace fs = std::filesystem;
namespace {

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

bool same_file(const fs::path& a, const fs::path& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec) && !ec;
}

// `inner` lies inside folder `outer` (strictly below it), by path or by identity of a folder
// on the way up.
bool inside(const fs::path& inner, const fs::path& outer) {
  for (fs::path p = inner.parent_path(); !p.empty(); p = p.parent_path()) {
    if (same_file(p, outer)) return true;
    if (p == p.root_path()) break;
  }
  return false;
}

std::string shown(const PathRole& r, const fs::path& at) {
  const std::string s = at.string();
  return str_cat(r.name, "='", r.path, "'", s == fs::absolute(r.path).lexically_normal().string()
                                                ? std::string()
                                                : " (" + s + ")");
}

}  // namespace

void refuse_outputs_over_inputs(const std::vector<PathRole>& outputs,
                                const std::vector<PathRole>& inputs) {
  const char* fix = ": nothing was written; choose another output path";
  for (size_t i = 0; i < outputs.size(); ++i) {
    const PathRole& out = outputs[i];
    if (out.path.empty()) continue;
    const fs::path o = resolved(out.path);
    for (const PathRole& in : inputs) {
      if (in.path.empty()) continue;
      const fs::path n = resolved(in.path);
      if (same_file(o, n))
        fail("the output ", shown(out, o), " is the input ", shown(in, n),
             "; writing it would destroy the input", fix);
      if (inside(o, n))
        fail("the output ", shown(out, o), " lies inside the input folder ", shown(in, n),
             "; writing it would change the input", fix);
      if (out.folder && inside(n, o))
        fail("the input ", shown(in, n), " lies inside the output folder ", shown(out, o),
             ", whose files the command replaces and removes", fix);
    }
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(o, resolved(outputs[j].path)))
        fail("the outputs ", shown(outputs[j], resolved(outputs[j].path)), " and ",
             shown(out, o), " are the same file", fix);
  }
}

}  // namespace gemmax
