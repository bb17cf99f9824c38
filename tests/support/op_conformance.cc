// The op conformance suite's harness (op_conformance.h): the backends under test, the runs on
// them and on the fp64 reference, the comparisons, and the table of cases.
#include "op_conformance.h"

#include <cmath>
#include <cstring>

#include "gemmax/backend/backend_factory.h"
#include "gemmax/base/convert.h"
#include "test_util.h"

namespace gemmax::conformance {

void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

// Every backend and every kernel family a run can choose. The ones this machine cannot run (a
// cpu family the CPU lacks, a GPU where there is none) skip, saying why.
std::vector<Target> all_targets() {
  auto make = [](std::string name, const char* backend, const char* cpu_kernels,
                 const char* cuda_kernels) {
    BackendOptions o;
    o.name = backend;
    o.num_threads = 2;
    o.isa = cpu_kernels;
    o.cuda_kernels = parse_named<CudaKernels>("cuda_kernels", cuda_kernels);
    // bench/gpu_check.sh runs the GPU tests with every launch checked, naming a faulting kernel.
    o.cuda_sync_check = std::getenv("GEMMAX_TEST_CUDA_SYNC_CHECK") != nullptr;
    return Target{std::move(name), o};
  };
  std::vector<Target> v = {make("reference", "reference", "auto", "fast")};
  for (const char* family : {"avx2", "amx_emulated", "avx512_fp32", "avx512_bf16", "amx"})
    v.push_back(make(std::string("cpu_") + family, "cpu", family, "fast"));
  v.push_back(make("cuda_emulated", "cuda_emulated", "auto", "fast"));
  v.push_back(make("cuda_emulated_simple", "cuda_emulated", "auto", "simple"));
  v.push_back(make("cuda_gpu", "cuda", "auto", "fast"));
  v.push_back(make("cuda_gpu_simple", "cuda", "auto", "simple"));
  return v;
}

Harness::Harness(std::unique_ptr<Backend> under_test, std::string target)
    : be_(std::move(under_test)),
      target_(target.empty() ? be_.name() : std::move(target)),
      truth_(make_backend("reference")) {}

Tensor Harness::rand(const Shape& shape, DType dt, double scale) {
  return testing::random_bf16_grid(shape, rng_, scale, dt);
}

Tensor Harness::ints(const std::vector<int32_t>& values) { return testing::int32_tensor(values); }

Tensor Harness::zeros(const Shape& shape, DType dt) { return Tensor::zeros(shape, dt); }

namespace {
Tensor host_copy(const Tensor& t) { return t.defined() ? convert_dtype(t, t.dtype()) : t; }
}  // namespace

Harness::Outputs Harness::run(const Tensors& tensors, const OpCalls& calls) {
  Tensors device, wide;
  for (const Tensor& t : tensors) {
    device.push_back(t.defined() ? be_.to_device(t, MemKind::Workspace) : t);
    wide.push_back(t.defined() && is_float(t.dtype()) ? convert_dtype(t, DType::F64)
                                                      : host_copy(t));
  }
  calls(be_, device);
  calls(*truth_, wide);
  Outputs out;
  for (const Tensor& t : device) out.got.push_back(t.defined() ? host_copy(be_.to_host(t)) : t);
  out.truth = std::move(wide);
  return out;
}

void Harness::expect_near(const std::string& what, const Tensor& got, const Tensor& truth,
                          double rtol, double atol, double elem_rtol) {
  ASSERT_EQ(got.numel(), truth.numel()) << what;
  double scale = 0;
  for (int64_t i = 0; i < truth.numel(); ++i)
    scale = std::max(scale, std::abs(get_as_double(truth, i)));
  int failures = 0;
  for (int64_t i = 0; i < truth.numel() && failures < 5; ++i) {
    const double g = get_as_double(got, i), w = get_as_double(truth, i);
    if (!(std::abs(g - w) <= rtol * scale + atol + elem_rtol * std::abs(w))) {
      ++failures;
      ADD_FAILURE() << what << " (" << dtype_name(got.dtype()) << ")[" << i << "]: got " << g
                    << ", fp64 reference " << w << " (of max " << scale << ", criterion " << rtol
                    << " of it + " << atol << " + " << elem_rtol << " of |reference|)";
    }
  }
}

void Harness::expect_exact(const std::string& what, const Tensor& got, const Tensor& truth) {
  ASSERT_EQ(got.numel(), truth.numel()) << what;
  const Tensor want = convert_dtype(truth, got.dtype());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(get_as_double(got, i), get_as_double(want, i))
        << what << " (" << dtype_name(got.dtype()) << ")[" << i << "]";
}

std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

bool add_case(const char* name, CaseFn run) {
  cases().push_back({name, run});
  return true;
}

void run_case(const char* name, Harness& h) {
  for (const Case& c : cases())
    if (std::string(c.name) == name) return c.run(h);
  FAIL() << "no conformance case " << name;
}

}  // namespace gemmax::conformance
