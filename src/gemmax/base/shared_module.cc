#include "gemmax/base/shared_module.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "gemmax/base/error.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;

std::vector<fs::path> candidates(const char* file, const char* env_var) {
  if (const char* env = std::getenv(env_var); env && *env) return {fs::path(env)};
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec || dir.empty()) return {};
  return {dir / file, dir / ".." / "lib" / file, dir / ".." / "bin" / file};
}

// dlerror's text, read as a person needs it: which file could not be found or did not fit.
void explain(SharedModule& m, const std::string& dl, const char* needs) {
  const std::string cannot_open = ": cannot open shared object file";
  const size_t at = dl.find(cannot_open);
  if (at != std::string::npos && fs::path(dl.substr(0, at)).filename() != fs::path(m.path).filename()) {
    m.failure = SharedModule::Failure::kMissingLibrary;
    m.error = str_cat("cannot load ", m.path, ": it needs ", dl.substr(0, at),
                      ", which the loader cannot find (", dl, "). Install ", needs,
                      ", or add the folder that holds them to LD_LIBRARY_PATH");
    return;
  }
  m.failure = SharedModule::Failure::kOther;
  m.error = str_cat("cannot load ", m.path, ": ", dl);
  if (dl.find("undefined symbol") != std::string::npos)
    m.error += ". It was built from other gemmax sources than this binary: use the one built "
               "with this gemmax";
}

}  // namespace

SharedModule open_shared_module(const char* file, const char* env_var, const char* needs) {
  SharedModule m;
  for (const fs::path& p : candidates(file, env_var)) {
    const std::string where = p.lexically_normal().string();
    if (std::find(m.looked_in.begin(), m.looked_in.end(), where) != m.looked_in.end()) continue;
    m.looked_in.push_back(where);  // ../bin beside bin/ is bin/ itself
    std::error_code ec;
    if (m.path.empty() && fs::is_regular_file(p, ec)) m.path = where;
  }
  if (m.path.empty()) {
    m.failure = SharedModule::Failure::kNotFound;
    std::string where;
    for (const std::string& p : m.looked_in) where += str_cat(where.empty() ? "" : ", ", p);
    m.error = str_cat("no ", file, " (looked in ", where, ")");
    return m;
  }
  m.handle = ::dlopen(m.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m.handle == nullptr) {
    const char* dl = ::dlerror();
    explain(m, dl ? dl : "unknown dlopen error", needs);
  }
  return m;
}

void* module_symbol(const SharedModule& m, const char* name) {
  return m.handle ? ::dlsym(m.handle, name) : nullptr;
}

}  // namespace gemmax
