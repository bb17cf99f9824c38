// bench/cutlass/gmm_cutlass: CUTLASS 3's sm90 grouped GEMM against the own grouped-matmul kernels
// (cuda_gmm=mma and cuda_gmm=sm90) and cuBLASLt's dense rate, in one process on one GPU, at a
// model's expert shapes (T*K rows routed uniformly at random over E experts, as `gemmax bench`):
//
//   gmm_cutlass model_name=gemma4-26b-a4b per_device_batch_size=2 max_target_length=16384
//   gmm_cutlass --test       (its GPU tests, tests/backend/cuda/cutlass/gmm_cutlass_test.cc;
//   skipped without one)
//
// The products are the MoE layer's six: gate_up and down, forward, dlhs and drhs (float32
// gradients). Before anything is timed, each CUTLASS product is checked against the mma kernel's
// output (max |cutlass - mma| / max |mma|); a product over 2e-2 fails the run. CUTLASS cannot
// gather rows, so its path needs the tokens' rows copied into expert order first: that permute
// is timed too (the model's `permute` op, moe_fuse_permute_combine=false), with the bytes it moves.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "cutlass_gmm.h"
#ifdef GEMMAX_CUTLASS_TESTS
#include <gtest/gtest.h>
#endif
#include "gemmax/backend/backend_factory.h"
#include "gemmax/backend/cuda_module.h"
#include "gemmax/base/rng.h"
#include "gemmax/base/timer.h"
#include "gemmax/config/config.h"
#include "gemmax/config/train_config.h"
#include "gemmax/train/memory_budget.h"

namespace gemmax {
namespace {

using kern::GroupedProduct;

// Rows of a shared pool of normal values at random offsets: the 26b-a4b's operands hold
// billions of values, too many to draw one by one.
Tensor random_bf16(Backend& be, const Shape& s, Rng& rng, double scale) {
  constexpr int64_t kPool = int64_t(1) << 22;
  const int64_t cols = s.back(), rows = shape_numel(s) / cols;
  std::vector<bf16> pool(size_t(kPool + cols));
  for (bf16& v : pool) v = bf16(float(scale * rng.normal()));
  Tensor host = Tensor::empty(s, DType::BF16);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(pool.begin() + int64_t(rng.uniform_int(uint64_t(kPool))), cols,
                host.data<bf16>() + r * cols);
  return be.to_device(host, MemKind::Workspace);
}

// max |a - b| / max |b| over two tensors of the same shape (bfloat16 or float32).
double relative_error(Backend& be, const Tensor& a, const Tensor& b) {
  const Tensor ha = be.to_host(a), hb = be.to_host(b);
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == DType::F32 ? double(t.data<float>()[i]) : double(float(t.data<bf16>()[i]));
  };
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < ha.numel(); ++i) {
    diff = std::max(diff, std::abs(at(ha, i) - at(hb, i)));
    scale = std::max(scale, std::abs(at(hb, i)));
  }
  return scale > 0 ? diff / scale : diff;
}

// One product of the layer, run four ways.
struct Product {
  std::string what;
  double flops;
  std::function<void(Backend&)> own;    // be.gmm / gmm_dlhs / gmm_drhs into `own_out`
  cutlass_gmm::Problem cutlass;         // into `cutlass_out`
  std::function<void(Backend&)> dense;  // be.matmul of the same shapes, rows not split
  Tensor own_out, cutlass_out;
};

int run(int argc, char** argv) {
  std::vector<std::string> overrides(argv + 1, argv + argc);
  for (const std::string& a : overrides)
    if (a.find('=') == std::string::npos)
      fail("unexpected argument '", a, "': expected key=value overrides (",
           "model_name=, per_device_batch_size=, max_target_length=)");
  const TrainConfig config = train_config_from(Config::load("", overrides));
  const MemoryPlanInput plan = memory_plan_input(config);
  const ModelConfig& mc = plan.model;
  GEMMAX_CHECK(mc.has_moe(), mc.name,
               " has no experts: name an MoE model (model_name=gemma4-26b-a4b)");
  const int64_t T = plan.batch * plan.seq, E = mc.num_experts, K = mc.num_experts_per_tok,
                D = mc.d_model, F = mc.moe_mlp_dim, m = T * K;

  BackendOptions o;
  o.name = "cuda";
  o.cuda_gmm = CudaGmm::Mma;
  const auto mma = make_backend(o);
  o.cuda_gmm = CudaGmm::Sm90;
  const auto sm90 = make_backend(o);
  Backend& be = *mma;  // owns the tensors; CUTLASS runs on its stream
  cutlass_gmm::GroupedGemm cutlass(cuda::compute_stream(be));

  Rng rng(1);
  std::vector<int32_t> sizes(size_t(E), 0);
  for (int64_t r = 0; r < m; ++r) ++sizes[size_t(rng.uniform_int(uint64_t(E)))];
  Tensor host_sizes = Tensor::empty({E}, DType::I32);
  std::copy(sizes.begin(), sizes.end(), host_sizes.data<int32_t>());
  const Tensor group_sizes = be.to_device(host_sizes, MemKind::Workspace);
  const Tensor x = random_bf16(be, {m, D}, rng, 1.0),
               wi = random_bf16(be, {E, 2 * F, D}, rng, 0.05);
  const Tensor h = random_bf16(be, {m, 2 * F}, rng, 1.0),
               wd = random_bf16(be, {E, D, F}, rng, 0.05);
  const Tensor a = random_bf16(be, {m, F}, rng, 1.0), dy = random_bf16(be, {m, D}, rng, 1.0);
  const Tensor dense_wi = random_bf16(be, {2 * F, D}, rng, 0.05);
  const Tensor dense_wd = random_bf16(be, {D, F}, rng, 0.05);
  auto bf = [&](const Shape& s) { return be.alloc(s, DType::BF16, MemKind::Workspace); };
  auto f32 = [&](const Shape& s) { return be.zeros(s, DType::F32, MemKind::Workspace); };
  const double up = 2.0 * double(m) * double(2 * F) * double(D);
  const double down = 2.0 * double(m) * double(D) * double(F);
  const auto* gs = static_cast<const int32_t*>(group_sizes.raw());

  auto problem = [&](GroupedProduct p, const Tensor& xx, const Tensor& yy, const Tensor& out,
                     int64_t k, int64_t N) {
    return cutlass_gmm::Problem{.product = p,
                                .group_sizes = gs,
                                .G = E,
                                .m = m,
                                .k = k,
                                .N = N,
                                .n = N,
                                .x = xx.raw(),
                                .y = yy.raw(),
                                .out = out.raw()};
  };
  std::vector<Product> products;
  {
    Tensor o1 = bf({m, 2 * F}), c1 = bf({m, 2 * F}), d1 = bf({m, 2 * F});
    products.push_back(
        {"gate_up forward", up,
         [=](Backend& b) { b.gmm({.out = o1, .lhs = x, .rhs = wi, .group_sizes = group_sizes}); },
         problem(GroupedProduct::kForward, x, wi, c1, D, 2 * F),
         [=](Backend& b) {
           b.matmul({.c = d1,
                     .a = x,
                     .trans_a = false,
                     .b = dense_wi,
                     .trans_b = true,
                     .accumulate = false});
         },
         o1, c1});
  }
  {
    Tensor o1 = bf({m, D}), c1 = bf({m, D}), d1 = bf({m, D});
    products.push_back(
        {"down forward", down,
         [=](Backend& b) { b.gmm({.out = o1, .lhs = a, .rhs = wd, .group_sizes = group_sizes}); },
         problem(GroupedProduct::kForward, a, wd, c1, F, D),
         [=](Backend& b) {
           b.matmul({.c = d1,
                     .a = a,
                     .trans_a = false,
                     .b = dense_wd,
                     .trans_b = true,
                     .accumulate = false});
         },
         o1, c1});
  }
  {
    Tensor o1 = bf({m, F}), c1 = bf({m, F}), d1 = bf({m, F});
    products.push_back({"down dlhs", down,
                        [=](Backend& b) {
                          b.gmm_dlhs(
                              {.dlhs = o1, .dout = dy, .rhs = wd, .group_sizes = group_sizes});
                        },
                        problem(GroupedProduct::kDlhs, dy, wd, c1, F, D),
                        [=](Backend& b) {
                          b.matmul({.c = d1,
                                    .a = dy,
                                    .trans_a = false,
                                    .b = dense_wd,
                                    .trans_b = false,
                                    .accumulate = false});
                        },
                        o1, c1});
  }
  {
    Tensor o1 = f32({E, D, F}), c1 = f32({E, D, F}), d1 = f32({D, F});
    products.push_back(
        {"down drhs", down,
         [=](Backend& b) {
           b.gmm_drhs({.drhs = o1, .lhs = a, .dout = dy, .group_sizes = group_sizes});
         },
         problem(GroupedProduct::kDrhs, dy, a, c1, F, D),
         [=](Backend& b) {
           b.matmul(
               {.c = d1, .a = dy, .trans_a = true, .b = a, .trans_b = false, .accumulate = true});
         },
         o1, c1});
  }
  {
    Tensor o1 = bf({m, D}), c1 = bf({m, D}), d1 = bf({m, D});
    products.push_back({"gate_up dlhs", up,
                        [=](Backend& b) {
                          b.gmm_dlhs(
                              {.dlhs = o1, .dout = h, .rhs = wi, .group_sizes = group_sizes});
                        },
                        problem(GroupedProduct::kDlhs, h, wi, c1, D, 2 * F),
                        [=](Backend& b) {
                          b.matmul({.c = d1,
                                    .a = h,
                                    .trans_a = false,
                                    .b = dense_wi,
                                    .trans_b = false,
                                    .accumulate = false});
                        },
                        o1, c1});
  }
  {
    Tensor o1 = f32({E, 2 * F, D}), c1 = f32({E, 2 * F, D}), d1 = f32({2 * F, D});
    products.push_back(
        {"gate_up drhs", up,
         [=](Backend& b) {
           b.gmm_drhs({.drhs = o1, .lhs = x, .dout = h, .group_sizes = group_sizes});
         },
         problem(GroupedProduct::kDrhs, h, x, c1, D, 2 * F),
         [=](Backend& b) {
           b.matmul(
               {.c = d1, .a = h, .trans_a = true, .b = x, .trans_b = false, .accumulate = true});
         },
         o1, c1});
  }

  std::cout << "gmm_cutlass: " << mc.name << " | " << m << " rows (" << T << " tokens x top-" << K
            << ") over " << E << " experts | d_model " << D << ", moe_mlp_dim " << F << " | "
            << be.describe() << std::endl;
  // Correctness first: CUTLASS against the mma kernel, before anything is timed.
  bool ok = true;
  std::printf("check: max |cutlass - mma| / max |mma| (limit 2e-2)\n");
  for (Product& p : products) {
    p.own(be);
    cutlass.run(p.cutlass);
    cutlass.check();
    be.synchronize();
    const double err = relative_error(be, p.cutlass_out, p.own_out);
    ok = ok && err <= 2e-2;
    std::printf("  %-16s %.2e%s\n", p.what.c_str(), err, err <= 2e-2 ? "" : "  FAILED");
  }
  if (!ok) {
    std::printf("gmm_cutlass: CUTLASS disagrees with the mma kernel: nothing timed\n");
    return 1;
  }
  std::fflush(stdout);

  std::printf("TFLOP/s, best of three runs of >= 0.1 s each (dense: cuBLASLt, the same shapes):\n");
  std::printf("  %-16s %9s %9s %9s %9s   %-14s %-11s %s\n", "product", "cutlass", "sm90", "mma",
              "dense", "cutlass/dense", "sm90/dense", "mma/dense");
  for (Product& p : products) {
    auto timed = [&](Backend& b, const std::function<void()>& f) {
      return best_rate(p.flops,
                       [&] {
                         f();
                         b.synchronize();
                       }) /
             1e12;
    };
    const double c = timed(be, [&] { cutlass.run(p.cutlass); });
    const double s = timed(*sm90, [&] { p.own(*sm90); });
    const double mm = timed(be, [&] { p.own(be); });
    const double d = timed(be, [&] { p.dense(be); });
    std::printf("  %-16s %9.1f %9.1f %9.1f %9.1f   %-14.3f %-11.3f %.3f\n", p.what.c_str(), c, s,
                mm, d, c / d, s / d, mm / d);
    std::fflush(stdout);
  }
  cutlass.check();

  // The permute CUTLASS's path needs before gate_up (x's rows in expert order): a gathered read
  // and a contiguous write of m rows of d_model bfloat16.
  Tensor tokens = random_bf16(be, {T, D}, rng, 1.0), xs = bf({m, D});
  Tensor host_order = Tensor::empty({m}, DType::I32);
  std::iota(host_order.data<int32_t>(), host_order.data<int32_t>() + m, 0);
  for (int64_t i = m - 1; i > 0; --i)
    std::swap(host_order.data<int32_t>()[i],
              host_order.data<int32_t>()[rng.uniform_int(uint64_t(i + 1))]);
  const Tensor order = be.to_device(host_order, MemKind::Workspace);
  const double bytes = 2.0 * double(m) * double(D) * 2.0;
  const double per_s = best_rate(bytes, [&] {
    be.permute({.xs = xs, .x = tokens, .order = order, .k = K});
    be.synchronize();
  });
  std::printf(
      "permute into expert order (the copy CUTLASS's path adds): %.3f GB moved, %.3f ms, "
      "%.0f GB/s\n",
      bytes / 1e9, 1e3 * bytes / per_s, per_s / 1e9);
  return 0;
}

}  // namespace
}  // namespace gemmax

int main(int argc, char** argv) {
#ifdef GEMMAX_CUTLASS_TESTS
  // `gmm_cutlass --test [--gtest_...]`: the GmmCutlass tests
  // (tests/backend/cuda/cutlass/gmm_cutlass_test.cc).
  if (argc > 1 && std::string(argv[1]) == "--test") {
    int n = argc - 1;
    argv[1] = argv[0];
    testing::InitGoogleTest(&n, argv + 1);
    return RUN_ALL_TESTS();
  }
#endif
  try {
    return gemmax::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gmm_cutlass: %s\n", e.what());
    return 2;
  }
}
