// The Open MPI comm, run by ctest under mpirun on 3 ranks (tests/CMakeLists.txt): every collective
// and dtype against values each rank can compute alone, bit-identical all-reduces, many
// collectives in flight at once (issued in the same order on every rank), byte counts, and the
// refusal of ranks started with different configs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "gemmax/base/rng.h"
#include "gemmax/parallel/comm_mpi.h"
#include "gemmax/parallel/world.h"

namespace gemmax {
namespace {

Comm* world = nullptr;

// Element i of rank r's buffer: small integers, exact in every dtype used here (bfloat16 holds
// integers up to 256 exactly, and the sums of three of them).
double value(int r, int64_t i) { return double((r % 8) * 10 + i % 10); }

Tensor filled(int64_t n, DType dt, int r) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) set_from_double(t, i, value(r, i));
  return t;
}

TEST(MpiComm, RunsOnThreeRanks) {
  EXPECT_EQ(world->name(), "mpi");
  EXPECT_EQ(world->size(), 3) << "run this test with mpirun -np 3";
}

TEST(MpiComm, AllGatherConcatenatesEveryDtype) {
  const int N = world->size(), me = world->rank();
  for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    const int64_t n = dt == DType::U8 ? 7 : 1001;
    Tensor all = Tensor::empty({N * n}, dt);
    world->all_gather(filled(n, dt, me), all, "a test buffer").wait();
    for (int r = 0; r < N; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(get_as_double(all, r * n + i),
                  dt == DType::U8 ? double(uint8_t(value(r, i))) : value(r, i))
            << dtype_name(dt) << " rank " << r << " element " << i;
  }
}

TEST(MpiComm, ReduceScatterSumsEachRanksBlock) {
  const int N = world->size(), me = world->rank();
  for (DType dt : {DType::F32, DType::F64, DType::BF16}) {
    const int64_t n = 333;
    Tensor mine = Tensor::empty({n}, dt);
    world->reduce_scatter(filled(N * n, dt, me), mine, "a test buffer").wait();
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < N; ++r) want += value(r, me * n + i);
      ASSERT_EQ(get_as_double(mine, i), want) << dtype_name(dt) << " element " << i;
    }
  }
}

// The sum every rank receives is the same to the bit (replicated weights never drift apart), and
// equals the sum to rounding; the max is exact.
TEST(MpiComm, AllReduceGivesEveryRankTheSameBits) {
  const int N = world->size(), me = world->rank();
  for (int64_t n : {1, 5, 1000, 4099}) {
    Rng rng(7 + uint64_t(me));
    Tensor buf = Tensor::empty({n}, DType::F32);
    std::vector<std::vector<double>> each(N, std::vector<double>(size_t(n)));
    for (int64_t i = 0; i < n; ++i) set_from_double(buf, i, rng.normal() * std::pow(10.0, i % 7));
    Tensor copies = Tensor::empty({N * n}, DType::F32);
    world->all_gather(buf, copies, "the inputs").wait();
    world->all_reduce(buf, ReduceOp::Sum, "a test sum").wait();
    Tensor results = Tensor::empty({N * n}, DType::F32);
    world->all_gather(buf, results, "the sums").wait();
    for (int64_t i = 0; i < n; ++i) {
      double want = 0, scale = 0;
      for (int r = 0; r < N; ++r) {
        want += get_as_double(copies, r * n + i);
        scale += std::abs(get_as_double(copies, r * n + i));
      }
      EXPECT_NEAR(get_as_double(buf, i), want, 1e-6 * scale) << "n " << n << " element " << i;
      for (int r = 0; r < N; ++r)
        ASSERT_EQ(results.data<float>()[r * n + i], buf.data<float>()[i])
            << "rank " << r << " got other bits, n " << n << " element " << i;
    }
  }
  Tensor m = filled(9, DType::F64, me);
  world->all_reduce(m, ReduceOp::Max, "a test max").wait();
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(get_as_double(m, i), value(N - 1, i));
}

// Collectives of every kind in flight together, waited for in another order: every rank issues
// them in submission order (a two-phase all-reduce included), so they match up.
TEST(MpiComm, ManyCollectivesInFlight) {
  const int N = world->size(), me = world->rank();
  std::vector<CommRequest> requests;
  std::vector<Tensor> gathered, summed, scattered;
  for (int k = 0; k < 12; ++k) {
    const int64_t n = 100 + 37 * k;
    if (k % 3 == 0) {
      gathered.push_back(Tensor::empty({N * n}, DType::BF16));
      requests.push_back(world->all_gather(filled(n, DType::BF16, me + k), gathered.back()));
    } else if (k % 3 == 1) {
      summed.push_back(filled(n, DType::F64, me + k));
      requests.push_back(world->all_reduce(summed.back(), ReduceOp::Sum));
    } else {
      scattered.push_back(Tensor::empty({n}, DType::F32));
      requests.push_back(
          world->reduce_scatter(filled(N * n, DType::F32, me + k), scattered.back()));
    }
  }
  for (size_t i = requests.size(); i-- > 0;) requests[i].wait();
  for (int k = 0, g = 0, s = 0, c = 0; k < 12; ++k) {
    const int64_t n = 100 + 37 * k;
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0, block = 0;
      for (int r = 0; r < N; ++r) sum += value(r + k, i), block += value(r + k, me * n + i);
      if (k % 3 == 0)
        for (int r = 0; r < N; ++r)
          ASSERT_EQ(get_as_double(gathered[g], r * n + i), value(r + k, i));
      if (k % 3 == 1) ASSERT_EQ(get_as_double(summed[s], i), sum) << k;
      if (k % 3 == 2) ASSERT_EQ(get_as_double(scattered[c], i), block) << k;
    }
    g += k % 3 == 0, s += k % 3 == 1, c += k % 3 == 2;
  }
}

TEST(MpiComm, BroadcastAndStats) {
  const CommStats before = world->stats();
  Tensor b = filled(10, DType::I64, world->rank());
  world->broadcast(b, 2, "a test broadcast").wait();
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(get_as_double(b, i), value(2, i));
  world->barrier("a test barrier");
  Tensor all = Tensor::empty({3 * 4}, DType::F32);
  world->all_gather(filled(4, DType::F32, 0), all).wait();
  Tensor part = Tensor::empty({2}, DType::F64);
  world->reduce_scatter(filled(6, DType::F64, 0), part).wait();
  Tensor s = filled(5, DType::F32, 0);
  world->all_reduce(s, ReduceOp::Sum).wait();
  const CommStats d = world->stats() - before;
  EXPECT_EQ(d.broadcast_bytes, 80);
  EXPECT_EQ(d.all_gather_bytes, 48) << "the gathered buffer";
  EXPECT_EQ(d.reduce_scatter_bytes, 48) << "the reduced buffer";
  EXPECT_EQ(d.all_reduce_bytes, 20);
  EXPECT_EQ(d.collectives, 5);
  EXPECT_GE(d.wait_seconds, 0.0);
}

// All-to-all with uneven counts (none at all between some pairs): rank r sends rank q
// count(r, q) elements, each naming its sender, receiver and place, so every receiver can check
// what came from whom and where it landed. Also run on 2 ranks (mpi.comm_2_ranks).
int64_t count(int from, int to) {
  return from == 1 && to == 0 ? 0 : (3 * from + 5 * to) % 4 * 3 + 1;
}
double a2a_value(int from, int to, int64_t i) { return double(from * 64 + to * 16 + i % 16); }

TEST(MpiComm, AllToAllWithUnevenCounts) {
  const int N = world->size(), me = world->rank();
  for (DType dt : {DType::F32, DType::BF16, DType::I32}) {
    std::vector<int64_t> send(static_cast<size_t>(N)), recv(static_cast<size_t>(N));
    int64_t out = 0, in = 0;
    for (int q = 0; q < N; ++q) {
      send[size_t(q)] = count(me, q), recv[size_t(q)] = count(q, me);
      out += send[size_t(q)], in += recv[size_t(q)];
    }
    Tensor s = Tensor::empty({out}, dt), r = Tensor::empty({in}, dt);
    for (int q = 0, at = 0; q < N; ++q)
      for (int64_t i = 0; i < send[size_t(q)]; ++i, ++at)
        set_from_double(s, at, a2a_value(me, q, i));
    const CommStats before = world->stats();
    world->all_to_all(s, send, r, recv, "a test all-to-all").wait();
    const CommStats d = world->stats() - before;
    for (int q = 0, at = 0; q < N; ++q)
      for (int64_t i = 0; i < recv[size_t(q)]; ++i, ++at)
        ASSERT_EQ(get_as_double(r, at), a2a_value(q, me, i))
            << dtype_name(dt) << " from rank " << q << " element " << i;
    EXPECT_EQ(d.all_to_all_bytes, (out - send[size_t(me)]) * int64_t(dtype_size(dt)))
        << "what this rank sent to the others";
    EXPECT_EQ(d.collectives, 1);
  }
  // Counts that do not add up to the buffers, or a rank that sends itself other than it receives.
  std::vector<int64_t> ones(static_cast<size_t>(N), 1), wrong = ones;
  wrong[size_t(me)] = 2;
  EXPECT_THROW(world->all_to_all(Tensor::empty({N + 1}, DType::F32), ones,
                                 Tensor::empty({N}, DType::F32), ones),
               Error);
  EXPECT_THROW(world->all_to_all(Tensor::empty({N + 1}, DType::F32), wrong,
                                 Tensor::empty({N}, DType::F32), ones),
               Error);
  world->barrier("after the all-to-alls");
}

TEST(MpiComm, MisshapenBuffersAreRefusedBeforeAnyCommunication) {
  Tensor small = Tensor::empty({5}, DType::F32);
  EXPECT_THROW(world->all_gather(Tensor::empty({2}, DType::F32), small), Error);
  EXPECT_THROW(world->reduce_scatter(Tensor::empty({7}, DType::F32), small), Error);
  EXPECT_THROW(world->all_gather(Tensor::empty({2}, DType::F64), Tensor::empty({6}, DType::F32)),
               Error);
  world->barrier("after the refusals");  // every rank is still in step
}

TEST(MpiComm, RanksWithDifferentConfigsAreRefused) {
  nlohmann::json same = {{"learning_rate", 0.001}, {"steps", 10}};
  EXPECT_NO_THROW(check_same_config(*world, same));
  nlohmann::json mine = same;
  if (world->rank() == 2) mine["learning_rate"] = 0.5;
  try {
    check_same_config(*world, mine);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 2 of 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("learning_rate=0.5 there vs 0.001 on rank 0"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace gemmax

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<gemmax::MpiComm> world = gemmax::MpiComm::world(&argc, &argv);
  world->set_timeout(60);
  gemmax::world = world.get();
  if (world->rank() != 0) {  // one rank reports; a failure on any rank fails the run
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  // Every rank's verdict decides the exit status of each.
  gemmax::Tensor f = gemmax::Tensor::empty({1}, gemmax::DType::I32);
  f.data<int32_t>()[0] = failed;
  world->all_reduce(f, gemmax::ReduceOp::Max, "the verdicts").wait();
  return f.data<int32_t>()[0];
}
