// The binary links no CUDA or MPI library (read from its ELF dynamic sections, following each
// needed library as the loader would); the cuda module loads on demand and serves backend=cuda;
// a missing module, a module whose CUDA library is missing, a module of other sources and a
// library that is no module are each refused with an error naming the file and the fix.
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/error.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;

// The DT_NEEDED and DT_RUNPATH entries of an ELF64 file's dynamic section.
struct DynamicEntries {
  std::vector<std::string> needed;
  std::vector<std::string> runpath;
};

DynamicEntries read_dynamic(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto at = [&](uint64_t off, size_t n) {
    GEMMAX_CHECK(off + n <= bytes.size(), file.string(), ": truncated ELF");
    return bytes.data() + off;
  };
  Elf64_Ehdr eh;
  std::memcpy(&eh, at(0, sizeof eh), sizeof eh);
  GEMMAX_CHECK(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64,
               file.string(), " is not an ELF64 file");
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  for (size_t i = 0; i < ph.size(); ++i)
    std::memcpy(&ph[i], at(eh.e_phoff + i * eh.e_phentsize, sizeof(Elf64_Phdr)), sizeof(Elf64_Phdr));
  // A virtual address inside a loaded segment, as a file offset.
  auto offset_of = [&](uint64_t vaddr) -> uint64_t {
    for (const Elf64_Phdr& p : ph)
      if (p.p_type == PT_LOAD && vaddr >= p.p_vaddr && vaddr < p.p_vaddr + p.p_filesz)
        return vaddr - p.p_vaddr + p.p_offset;
    fail(file.string(), ": address ", vaddr, " is in no loaded segment");
  };
  DynamicEntries out;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_DYNAMIC) continue;
    std::vector<Elf64_Dyn> dyn(p.p_filesz / sizeof(Elf64_Dyn));
    std::memcpy(dyn.data(), at(p.p_offset, dyn.size() * sizeof(Elf64_Dyn)), dyn.size() * sizeof(Elf64_Dyn));
    uint64_t strtab = 0;
    for (const Elf64_Dyn& d : dyn)
      if (d.d_tag == DT_STRTAB) strtab = offset_of(d.d_un.d_ptr);
    for (const Elf64_Dyn& d : dyn) {
      if (d.d_tag != DT_NEEDED && d.d_tag != DT_RUNPATH && d.d_tag != DT_RPATH) continue;
      const std::string s = at(strtab + d.d_un.d_val, 1);
      if (d.d_tag == DT_NEEDED) {
        out.needed.push_back(s);
      } else {
        std::stringstream parts(s);
        for (std::string dir; std::getline(parts, dir, ':');)
          out.runpath.push_back(std::regex_replace(dir, std::regex("\\$ORIGIN"), file.parent_path().string()));
      }
    }
  }
  return out;
}

// Every library `file` needs, directly or through the libraries it needs, by file name: each is
// looked for on its needer's run path, then in the system's library folders (/etc/ld.so.conf's
// and the defaults), as the loader looks.
std::set<std::string> needed_closure(const fs::path& file) {
  std::vector<std::string> system = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64",
                                     "/usr/lib64", "/lib", "/usr/lib"};
  for (const fs::path conf : {"/etc/ld.so.conf"}) {
    std::vector<fs::path> files = {conf};
    if (fs::is_directory("/etc/ld.so.conf.d"))
      for (const auto& e : fs::directory_iterator("/etc/ld.so.conf.d")) files.push_back(e.path());
    for (const fs::path& f : files) {
      std::ifstream in(f);
      for (std::string line; std::getline(in, line);)
        if (!line.empty() && line[0] == '/') system.push_back(line);
    }
  }
  std::set<std::string> seen;
  std::vector<fs::path> todo = {file};
  while (!todo.empty()) {
    const fs::path f = todo.back();
    todo.pop_back();
    const DynamicEntries d = read_dynamic(f);
    for (const std::string& lib : d.needed) {
      if (!seen.insert(lib).second) continue;
      std::vector<std::string> dirs = d.runpath;
      dirs.insert(dirs.end(), system.begin(), system.end());
      for (const std::string& dir : dirs)
        if (fs::exists(fs::path(dir) / lib)) {
          todo.push_back(fs::path(dir) / lib);
          break;
        }
    }
  }
  return seen;
}

const std::regex kCudaOrMpi("^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nvrtc|nccl|nvJitLink|mpi.*|"
                            "open-pal|open-rte|pmix|hwloc)\\.so.*");

TEST(CudaModule, TheBinaryNeedsNoCudaOrMpiLibrary) {
  const std::set<std::string> libs = needed_closure(GEMMAX_ENGINE);
  EXPECT_TRUE(libs.count("libc.so.6")) << "the reader follows the binary's libraries";
  for (const std::string& lib : libs)
    EXPECT_FALSE(std::regex_match(lib, kCudaOrMpi)) << GEMMAX_ENGINE << " needs " << lib;
  // Its launcher (bin/gemmax) is static: no library is mapped before it blocks the signals.
  EXPECT_TRUE(read_dynamic(GEMMAX_BINARY).needed.empty());
}

TEST(CudaModule, TheModuleCarriesTheCudaLibraries) {
  if (!GEMMAX_CUDA_MODULE_BUILT) GTEST_SKIP() << "built without CUDA: no module";
  const fs::path module = fs::path(GEMMAX_ENGINE).parent_path() / "libgemmax_cuda.so";
  const std::set<std::string> libs = needed_closure(module);
  EXPECT_TRUE(libs.count("libcublasLt.so.13") || libs.count("libcublasLt.so.12"))
      << "the check above would see a CUDA library";
  for (const std::string& lib : read_dynamic(module).needed)
    EXPECT_FALSE(lib.find("gemmax") != std::string::npos) << "the module links no gemmax library";
}

// `gemmax info --backends` with the environment `env`: what it says of the cuda backend.
std::string cuda_line(const std::string& env, const std::string& binary = GEMMAX_BINARY) {
  std::string out;
  testing::run_command(env + " " + binary + " info --backends", &out);
  const size_t at = out.find("cuda:  ");
  return at == std::string::npos ? out : out.substr(at);
}

TEST(CudaModule, AMissingModuleIsNamedWithTheFix) {
  const std::string line = cuda_line("GEMMAX_CUDA_MODULE=/no/such/libgemmax_cuda.so");
  EXPECT_NE(line.find("cannot load"), std::string::npos) << line;
  EXPECT_NE(line.find("/no/such/libgemmax_cuda.so (GEMMAX_CUDA_MODULE) does not exist"),
            std::string::npos)
      << line;

  // The binary alone in a folder (with its launcher): the module is looked for beside it.
  testing::TempDir dir;
  fs::copy_file(GEMMAX_BINARY, dir / "gemmax");
  fs::copy_file(GEMMAX_ENGINE, dir / "gemmax-engine");
  const std::string alone = cuda_line("GEMMAX_CUDA_MODULE=", (dir / "gemmax"));
  EXPECT_NE(alone.find(dir / "libgemmax_cuda.so"), std::string::npos) << alone;
  EXPECT_NE(alone.find(GEMMAX_CUDA_MODULE_BUILT ? "is not beside this gemmax"
                                                : "built without CUDA (CMake found no nvcc)"),
            std::string::npos)
      << alone;
  // A run that asks for it fails with the same words, and writes nothing.
  std::string out;
  const int rc = testing::run_command("GEMMAX_CUDA_MODULE= " + (dir / "gemmax") +
                                          " train backend=cuda steps=1 base_output_directory=" +
                                          (dir / "runs"),
                                      &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: backend=cuda: "), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "runs")) << out;
}

TEST(CudaModule, AModuleWhoseLibraryIsMissingNamesTheLibrary) {
  const std::string line = cuda_line(str_cat("GEMMAX_CUDA_MODULE=", GEMMAX_FAKE_MODULE_MISSING));
  EXPECT_NE(line.find(str_cat("cannot load ", GEMMAX_FAKE_MODULE_MISSING,
                              ": it needs libgemmax_fake_absent.so, which the loader cannot find")),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("LD_LIBRARY_PATH"), std::string::npos) << line;
}

TEST(CudaModule, AModuleOfOtherSourcesIsRefused) {
  const std::string line = cuda_line(str_cat("GEMMAX_CUDA_MODULE=", GEMMAX_FAKE_MODULE_OTHER));
  EXPECT_NE(line.find(str_cat("the cuda module ", GEMMAX_FAKE_MODULE_OTHER,
                              " was built from other gemmax sources than this binary")),
            std::string::npos)
      << line;
}

TEST(CudaModule, ALibraryThatIsNoModuleIsRefused) {
  const std::string line = cuda_line(str_cat("GEMMAX_CUDA_MODULE=", GEMMAX_FAKE_ABSENT));
  EXPECT_NE(line.find(str_cat(GEMMAX_FAKE_ABSENT, " is not a gemmax cuda module")), std::string::npos)
      << line;
}

// The module built with this tree loads in this process (the tests' binary exports the engine
// to it as gemmax does) and makes the cuda backend, or says why this machine cannot run it.
TEST(CudaModule, TheBuiltModuleLoadsAndServesBackendCuda) {
  std::string why;
  if (!GEMMAX_CUDA_MODULE_BUILT) {
    EXPECT_FALSE(cuda::cuda_module_loads(&why));
    EXPECT_NE(why.find("built without CUDA"), std::string::npos) << why;
    return;
  }
  ASSERT_TRUE(cuda::cuda_module_loads(&why)) << why;
  const cuda::LoadedModule& m = cuda::cuda_module();
  EXPECT_EQ(fs::path(m.path).filename(), "libgemmax_cuda.so");
  EXPECT_NE(m.versions.find("CUDA runtime"), std::string::npos) << m.versions;
  if (cuda::cuda_device_available(&why)) {
    EXPECT_EQ(make_backend("cuda")->name(), "cuda");
  } else {
    try {
      make_backend("cuda");
      ADD_FAILURE() << "backend=cuda without a device";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "backend=cuda: " + why);
    }
  }
  const std::string line = cuda_line("GEMMAX_CUDA_MODULE=");
  EXPECT_NE(line.find("module " + m.path), std::string::npos) << line;
  EXPECT_NE(line.find("device:"), std::string::npos) << line;
}

// Several ranks load the MPI module; a missing one is named.
TEST(MpiModule, AMissingModuleIsNamedWithTheFix) {
  std::string out;
  const int rc = testing::run_command(
      "OMPI_COMM_WORLD_SIZE=2 GEMMAX_MPI_MODULE=/no/such/libgemmax_mpi.so " +
          std::string(GEMMAX_BINARY) + " train steps=1 base_output_directory=/no/such/runs",
      &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("started as one of 2 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("/no/such/libgemmax_mpi.so"), std::string::npos) << out;
}

}  // namespace
}  // namespace gemmax
