// Shared helpers for the test suite: random tensors, small configs and finite differences.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "gemmax/base/error.h"
#include "gemmax/base/rng.h"
#include "gemmax/base/tensor.h"
#include "gemmax/config/model_config.h"
#include "gemmax/data/batch.h"
#include "gemmax/data/tokenizer.h"
#include "gemmax/model/params.h"

namespace gemmax::testing {

// ---- files and processes ---------------------------------------------------------------------

// A new empty folder under GoogleTest's temp dir, removed with its contents at scope end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "gemmax_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
    if (info != nullptr) name += std::string("_") + info->name();
    path = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
  std::string str() const { return path.string(); }
  // Names of the entries in the folder, sorted.
  std::vector<std::string> list() const { return list_of(path.string()); }
  static std::vector<std::string> list_of(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path path;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A real write failure, as a full disk gives one: while it lives, no file of this process may grow
// past `bytes` (RLIMIT_FSIZE), and a write that would fails with EFBIG ("File too large") instead
// of raising SIGXFSZ. The limit is per file and process-wide (every thread's writes).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    if (::getrlimit(RLIMIT_FSIZE, &saved_) != 0 ||
        ::sigaction(SIGXFSZ, &ignore, &saved_action_) != 0)
      throw std::runtime_error("FileSizeLimit: cannot read RLIMIT_FSIZE or ignore SIGXFSZ");
    rlimit lower = saved_;
    lower.rlim_cur = std::min<rlim_t>(rlim_t(bytes), saved_.rlim_max);
    if (::setrlimit(RLIMIT_FSIZE, &lower) != 0) {
      ::sigaction(SIGXFSZ, &saved_action_, nullptr);
      throw std::runtime_error("FileSizeLimit: cannot lower RLIMIT_FSIZE");
    }
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::sigaction(SIGXFSZ, &saved_action_, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  struct sigaction saved_action_ {};
};

// Runs f, expects a gemmax::Error whose message holds every one of `parts`; returns the message.
template <class F>
std::string expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected a gemmax::Error containing '" << (parts.empty() ? "" : parts[0])
                << "'";
  return "";
}

// Runs a shell command; returns its exit status, with stdout and stderr in *out.
inline int run_command(const std::string& cmd, std::string* out) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#ifdef GEMMAX_MPIEXEC
// The launcher as the tests start it, without `-np` (empty when built without MPI): more ranks
// than CI's 2 cores (--oversubscribe), as root in its containers, and with a temp folder of this
// test process's own. Open MPI keeps each job's session folder under TMPDIR/ompi.HOST.UID, which
// the last job to end removes: two jobs sharing it race, one removing it while the other creates
// its own folder there ("orte_session_dir failed").
inline std::string mpiexec() {
  if (std::string(GEMMAX_MPIEXEC).empty()) return "";
  struct SessionBase {
    std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) / ("gemmax_mpi_" + std::to_string(::getpid()));
    SessionBase() { std::filesystem::create_directories(path); }
    ~SessionBase() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const SessionBase base;
  return "TMPDIR=" + base.path.string() + " " + GEMMAX_MPIEXEC +
         " --allow-run-as-root --oversubscribe";
}
#endif

#ifdef GEMMAX_BINARY
// The gemmax binary under test, run with `args`: its exit status, and stdout and stderr together.
struct CliResult {
  int status = -1;
  std::string out;
};
inline CliResult run_gemmax(const std::string& args) {
  CliResult r;
  r.status = run_command(std::string(GEMMAX_BINARY) + " " + args, &r.out);
  return r;
}
#endif

// A tensor of arbitrary bytes (any dtype; NaN patterns included): for bit-exact IO round trips.
inline Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng());
  return t;
}

// ---- numbers ---------------------------------------------------------------------------------

inline Tensor random_tensor(const Shape& shape, Rng& rng, double scale = 1.0,
                            DType dtype = DType::F64) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) set_from_double(t, i, scale * rng.normal());
  return t;
}

// Random values on the bfloat16 grid (normal(0, scale) rounded to bf16), held in `dtype`: every
// floating dtype holds them exactly, so runs in different dtypes read the very same numbers.
inline Tensor random_bf16_grid(const Shape& shape, Rng& rng, double scale = 1.0,
                               DType dtype = DType::F32) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i)
    set_from_double(t, i, double(float(bf16(scale * rng.normal()))));
  return t;
}

// A host int32 tensor [n] of `values` (token ids, group sizes, positions).
inline Tensor int32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::I32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

inline double inner(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += get_as_double(a, i) * get_as_double(b, i);
  return s;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(get_as_double(a, i) - get_as_double(b, i)));
  return m;
}

// Compares analytic[i] with the central difference of loss() in x[i], for `samples` indices
// spread over x (all of them if x is small). fp64 throughout.
inline void expect_grad_matches_fd(const std::string& what, const Tensor& x, const Tensor& analytic,
                                   const std::function<double()>& loss, int samples = 12,
                                   double h = 1e-6, double tol = 1e-6) {
  ASSERT_EQ(x.numel(), analytic.numel()) << what;
  const int64_t n = x.numel();
  const int64_t stride = n <= samples ? 1 : n / samples;
  double worst = 0;
  for (int64_t i = (stride > 1 ? stride / 2 : 0); i < n; i += stride) {
    const double x0 = get_as_double(x, i);
    set_from_double(x, i, x0 + h);
    const double lp = loss();
    set_from_double(x, i, x0 - h);
    const double lm = loss();
    set_from_double(x, i, x0);
    const double fd = (lp - lm) / (2 * h);
    const double a = get_as_double(analytic, i);
    const double err = std::abs(a - fd) / std::max(1.0, std::abs(fd));
    worst = std::max(worst, err);
    EXPECT_LE(err, tol) << what << "[" << i << "]: analytic " << a << " vs finite difference "
                        << fd;
  }
  std::ostringstream worst_text;
  worst_text << std::scientific << worst;
  ::testing::Test::RecordProperty(what + "_worst_rel_err", worst_text.str());
}

// Random weights with non-unit norm scales, router scales and layer scalars (checks must not
// pass by an accident of unit scales).
inline Tensor random_weights(const ParamTable& table, uint64_t seed, DType dtype = DType::F64) {
  Tensor w = Tensor::empty({table.total()}, dtype, MemKind::Params);
  Rng rng(seed);
  for (const ParamSpec& s : table.specs())
    for (int64_t i = 0; i < s.numel(); ++i)
      set_from_double(w, s.offset + i,
                      s.init == ParamInit::Ones ? 1.0 + 0.3 * rng.normal() : 0.4 * rng.normal());
  return w;
}

// Weights like a briefly trained model's: normal(0, 0.1) matrices, norm and router scales
// around 1, each multiplied by (1 + noise * normal) (noise = 2^-9: one bf16 rounding).
inline Tensor trained_like_weights(const ParamTable& table, double noise, uint64_t noise_seed) {
  Tensor w = Tensor::empty({table.total()}, DType::F32, MemKind::Params);
  Rng rng(3), perturb(noise_seed);
  for (const ParamSpec& s : table.specs())
    for (int64_t i = 0; i < s.numel(); ++i) {
      const double v = s.init == ParamInit::Ones ? 1.0 + 0.1 * rng.normal() : 0.1 * rng.normal();
      set_from_double(w, s.offset + i, v * (1.0 + noise * perturb.normal()));
    }
  return w;
}

// The weights a bf16 step computes with: the matrices (and the embedding) rounded to bf16; norm
// scales, router scales and layer_scalar stay fp32 (model/weights.h compute_weights).
inline Tensor bf16_rounded_matrices(const ParamTable& table, const Tensor& w) {
  Tensor r = Tensor::empty(w.shape(), DType::F32, MemKind::Params);
  for (const ParamSpec& s : table.specs())
    for (int64_t i = s.offset; i < s.offset + s.numel(); ++i) {
      const double v = get_as_double(w, i);
      set_from_double(r, i, s.init == ParamInit::Ones ? v : double(bf16(v)));
    }
  return r;
}

// The index of the largest logit, the first of equal maxima.
inline int32_t argmax(const std::vector<double>& l) {
  return int32_t(std::max_element(l.begin(), l.end()) - l.begin());
}

// ||x - ref|| / ||ref|| over all elements.
inline double relative_l2(const Tensor& ref, const Tensor& x) {
  double d = 0, n = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    d += std::pow(get_as_double(ref, i) - get_as_double(x, i), 2);
    n += std::pow(get_as_double(ref, i), 2);
  }
  return std::sqrt(d / n);
}

// A small Gemma-4 configuration (sliding + global layers, K = V, partial RoPE) for checks.
inline ModelConfig small_test_config(int64_t layers = 2) {
  ModelConfig c;
  c.name = "test";
  c.vocab_size = 37;
  c.d_model = 16;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.global_num_kv_heads = 1;
  c.global_head_dim = 12;
  c.mlp_dim = 20;
  c.moe_mlp_dim = 6;
  c.num_experts = 5;
  c.num_experts_per_tok = 2;
  c.sliding_window = 3;
  c.sliding_window_pattern = 2;  // layer 1, 3, ... global
  c.global_rope_proportion = 0.5;
  return c;
}

// The small block (gemma4-e2b/e4b): 4 layers (1 and 3 global) with per-layer inputs; layers 2
// and 3 read the K/V of layers 0 and 1 and have double-wide MLPs.
inline ModelConfig small_block_config() {
  ModelConfig c = small_test_config(4);
  c.num_experts = 1;
  c.share_kv_projections = false;
  c.global_num_kv_heads = c.num_kv_heads;  // as transformers has it without K = V
  c.per_layer_input_dim = 6;
  c.per_layer_vocab = c.vocab_size;
  c.num_kv_shared_layers = 2;
  c.double_wide_mlp = true;
  return c;
}

// A ChatML chat template, for the chat tests.
inline constexpr const char* kChatMlTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// A byte-level model: small_test_config with the byte tokenizer's vocabulary.
inline ModelConfig byte_config() {
  ModelConfig c = small_test_config(2);
  c.vocab_size = kByteVocabSize;
  return c;
}

// B rows of S tokens; row b holds two documents split at `split` (0: one document).
inline Batch make_batch(int64_t B, int64_t S, int64_t vocab, uint64_t seed, int64_t split = 0) {
  Rng rng(seed);
  Batch b;
  b.batch = B;
  b.seq = S;
  for (int64_t r = 0; r < B; ++r)
    for (int64_t s = 0; s < S; ++s) {
      const bool second = split > 0 && s >= split;
      b.inputs.push_back(int32_t(rng.uniform_int(vocab)));
      b.targets.push_back(int32_t(rng.uniform_int(vocab)));
      b.positions.push_back(int32_t(second ? s - split : s));
      b.segment_ids.push_back(second ? 2 : 1);
      b.target_segment_ids.push_back(second ? 2 : 1);
    }
  return b;
}

// ---- threads ---------------------------------------------------------------------------------

// A test run once per OpenMP thread count (its parameter). ctest gives every test one thread
// (tests/CMakeLists.txt); results claimed bit-exact (resume, remat) or tiling-invariant must
// also hold with several threads, where each parallel reduction combines per-thread partials.
class WithThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    saved_ = omp_get_max_threads();
    omp_set_num_threads(GetParam());
  }
  void TearDown() override { omp_set_num_threads(saved_); }

 private:
  int saved_ = 1;
};

inline std::string threads_name(const ::testing::TestParamInfo<int>& info) {
  return std::to_string(info.param) + "threads";
}

}  // namespace gemmax::testing
