// FSDP: the shard layout, sharded initialisation, the derived per-rank plan and the bytes it
// counts, the vocabulary-parallel cross-entropy, the data split, and (under mpirun) whole runs:
// N ranks against one with the whole batch, every rank's plan against its measured peaks, the
// seed switches, resume on other rank counts, export, and faults.
#include "gemmax/parallel/fsdp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gemmax/backend/cuda_module.h"
#include "gemmax/backend/reference/reference_backend.h"
#include "gemmax/checkpoint/model_dir.h"
#include "gemmax/checkpoint/train_checkpoint.h"
#include "gemmax/config/config.h"
#include "gemmax/data/loader.h"
#include "gemmax/io/run_lock.h"
#include "gemmax/parallel/comm.h"
#include "gemmax/parallel/planning_comm.h"
#include "gemmax/parallel/shard_layout.h"
#include "gemmax/train/memory_budget.h"
#include "gemmax/train/memory_plan.h"
#include "gemmax/train/trainer.h"
#include "test_util.h"

namespace gemmax {
namespace {
namespace fs = std::filesystem;
using testing::mpiexec;
using testing::TempDir;

// ---- the layout ------------------------------------------------------------------------------

// The elements a rank holds of the parameters (its buffers' size without the padding).
int64_t held(const ShardLayout& l) {
  int64_t n = 0;
  for (const ParamPiece& p : l.pieces) n += p.count;
  return n;
}

// Every element of every parameter lives on exactly one rank (or, replicated, whole on every
// rank); every rank's buffers have the same size; the embedding's pieces are whole vocabulary
// rows; the pieces of one rank do not overlap.
TEST(ShardLayout, EveryElementHasOneHome) {
  const ParamTable table(testing::small_test_config(3));
  const int64_t D = table.config().d_model, V = table.config().vocab_size;
  for (int N : {1, 2, 3, 5})
    for (bool replicate : {true, false}) {
      std::vector<ShardLayout> ranks;
      for (int r = 0; r < N; ++r) ranks.push_back(ShardLayout::fsdp(table, N, r, replicate));
      for (size_t i = 0; i < table.specs().size(); ++i) {
        const ParamSpec& s = table.specs()[i];
        std::vector<int> holders(size_t(s.numel()), 0);
        for (const ShardLayout& l : ranks) {
          const ParamPiece& p = l.pieces[i];
          EXPECT_EQ(p.replicated, replicate && s.fsdp == FsdpRole::SmallVector) << s.name;
          if (p.replicated) EXPECT_EQ(p.count, s.numel()) << s.name;
          for (int64_t j = p.begin; j < p.begin + p.count; ++j) holders[size_t(j)] += 1;
          if (s.fsdp == FsdpRole::VocabRows) {
            EXPECT_EQ(p.begin % D, 0) << "rank " << l.rank;
            EXPECT_EQ(l.groups[size_t(l.embedding)].piece, (V + N - 1) / N * D);
          }
        }
        const int want = ranks[0].pieces[i].replicated ? N : 1;
        for (int64_t j = 0; j < s.numel(); ++j)
          ASSERT_EQ(holders[size_t(j)], want) << s.name << "[" << j << "] on " << N << " ranks";
      }
      for (const ShardLayout& l : ranks) {
        EXPECT_EQ(l.local_total, ranks[0].local_total);
        std::vector<int> used(size_t(l.local_total), 0);
        for (const ParamPiece& p : l.pieces)
          for (int64_t j = p.local; j < p.local + p.count; ++j) ASSERT_EQ(used[size_t(j)]++, 0);
      }
      // 1/N of the sharded elements, plus the replicated ones, plus at most a row of padding
      // per group.
      int64_t sharded = 0, padding = 0;
      for (const ShardGroup& g : ranks[0].groups)
        sharded += g.full, padding += g.piece * N - g.full;
      EXPECT_EQ(ranks[0].local_total * N, sharded + padding + ranks[0].replicated * N);
      EXPECT_EQ(sharded + ranks[0].replicated, table.total());
    }
}

// A rank generates only its pieces, and they hold the values the whole initialisation gives.
TEST(ShardLayout, ShardedInitialisationEqualsTheWholeOne) {
  const ParamTable table(testing::small_test_config(2));
  Tensor whole = Tensor::empty({table.total()}, DType::F32);
  init_params(table, whole, 42);
  for (int r = 0; r < 3; ++r) {
    const ShardLayout l = ShardLayout::fsdp(table, 3, r, true);
    for (size_t i = 0; i < table.specs().size(); ++i) {
      const ParamSpec& s = table.specs()[i];
      const ParamPiece& p = l.pieces[i];
      if (p.count == 0) continue;
      Tensor mine = Tensor::empty({p.count}, DType::F32);
      init_param_range(table, s, p.begin, mine, 42);
      EXPECT_EQ(0, std::memcmp(mine.raw(), whole.flat_slice(s.offset + p.begin, {p.count}).raw(),
                               mine.nbytes()))
          << s.name << " on rank " << r;
    }
  }
}

// ---- the plan ---------------------------------------------------------------------------------

MemoryPlan plan_of(const std::vector<std::string>& keys, int ranks) {
  ReferenceBackend be;
  return plan_memory(memory_plan_input(Config::defaults(keys), ranks), be);
}

// The per-rank plan comes from the sharded step itself: parameters, gradients and moments are the
// rank's buffers, and the bytes its collectives move follow from the layout (every layer gathered
// twice in the compute dtype and its gradient reduce-scattered once in fp32).
TEST(FsdpPlan, ShardsTheStateAndCountsTheBytes) {
  const std::vector<std::string> keys = {"base_emb_dim=64", "max_target_length=64",
                                         "per_device_batch_size=2", "fsdp_embedding=gather"};
  const MemoryPlan one = plan_of(keys, 1);
  for (int N : {2, 3}) {
    const MemoryPlan p = plan_of(keys, N);
    const ParamTable table(p.input.model);
    const ShardLayout l = ShardLayout::fsdp(table, N, 0, true);
    EXPECT_EQ(p.peak[size_t(MemKind::Params)], l.local_total * 4);
    EXPECT_EQ(p.peak[size_t(MemKind::Grads)], l.local_total * 4);
    EXPECT_EQ(p.peak[size_t(MemKind::OptState)], 2 * held(l) * 4) << "moments of the pieces";
    const int64_t whole = one.peak[size_t(MemKind::Params)], replicated = l.replicated * 4;
    EXPECT_GE(p.peak[size_t(MemKind::Params)] - replicated, (whole - replicated) / N);
    EXPECT_LE(p.peak[size_t(MemKind::Params)] - replicated,
              (whole - replicated) / N + 4 * int64_t(l.groups.size()) * p.input.model.d_model);
    int64_t gathered = 0, scattered = 0;
    for (const ShardGroup& g : l.groups) {
      const int64_t full = g.piece * N;
      if (g.layer >= 0) gathered += 2 * full * 2, scattered += full * 4;  // bf16 twice; fp32
    }
    const int64_t table_full = l.groups[size_t(l.embedding)].piece * N;
    gathered += table_full * (4 + 2);  // lookup in fp32, head in bf16
    scattered += 2 * table_full * 4;   // the head's and the lookup's gradients
    EXPECT_EQ(p.comm.all_gather_bytes, gathered + N * 8) << "with the batches' target counts";
    EXPECT_EQ(p.comm.reduce_scatter_bytes, scattered);
    EXPECT_EQ(p.comm.all_reduce_bytes, l.replicated * 4 + 3 * 8)
        << "replicated gradients; losses and gradient norm";
  }
}

// fsdp_embedding=auto picks the mode with fewer bytes, and EmbeddingBytes is exactly the
// difference the two plans count.
TEST(FsdpPlan, EmbeddingModesMoveTheBytesTheirFormulaSays) {
  for (int N : {2, 3})
    for (const char* tiles : {"1", "4"}) {
      const std::vector<std::string> keys = {"base_emb_dim=64", "max_target_length=64",
                                             "per_device_batch_size=2",
                                             std::string("num_vocab_tiling=") + tiles};
      auto with = [&](const char* mode) {
        std::vector<std::string> k = keys;
        k.push_back(std::string("fsdp_embedding=") + mode);
        return plan_of(k, N);
      };
      const MemoryPlan g = with("gather"), v = with("vocab_parallel"), a = with("auto");
      auto total = [](const CommStats& c) {
        return c.all_gather_bytes + c.reduce_scatter_bytes + c.all_reduce_bytes;
      };
      const EmbeddingBytes b = embedding_bytes(g.input.model, N, 2, 64, DType::BF16, DType::F32);
      EXPECT_EQ(total(g.comm) - total(v.comm), b.gather - b.vocab_parallel) << N << " " << tiles;
      EXPECT_EQ(a.input.fsdp_options.embedding,
                b.vocab_parallel < b.gather ? EmbeddingMode::VocabParallel : EmbeddingMode::Gather);
    }
}

// vocab_tiling_axis=batch adds exactly the all-to-alls of the head's input and of its gradient to
// what a step moves. With tiles of one row (num_vocab_tiling = global rows), a rank sends the
// other ranks their chunks, (N-1)/N, of each of its rows, and sends back the gradients of its
// chunks of the other ranks' rows: 2 (N-1)/N T D bytes of bf16 per step for T tokens per rank.
// With the table gathered it also gathers every rank's tokens, targets and masks (3 N T int32),
// which the vocabulary-parallel mode gathers on either axis.
TEST(FsdpPlan, BatchTilingMovesTheHeadsInputAndGradientByAllToAll) {
  for (int N : {2, 3})
    for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel"}) {
      const std::vector<std::string> keys = {"base_emb_dim=64", "max_target_length=96",
                                             "per_device_batch_size=2", mode,
                                             "num_vocab_tiling=" + std::to_string(2 * N)};
      std::vector<std::string> batch = keys;
      batch.push_back("vocab_tiling_axis=batch");
      const MemoryPlan s = plan_of(keys, N), b = plan_of(batch, N);
      EXPECT_EQ(s.comm.all_to_all_bytes, 0) << N << " " << mode;
      EXPECT_EQ(b.comm.all_to_all_bytes, 2 * (N - 1) * (2 * 96) * 64 * 2 / N) << N << " " << mode;
      const bool gather = std::string(mode) == "fsdp_embedding=gather";
      EXPECT_EQ(b.comm.collectives, s.comm.collectives + 2 * 2 * N + (gather ? 3 : 0))
          << "two per tile";
      EXPECT_EQ(b.comm.all_gather_bytes,
                s.comm.all_gather_bytes + (gather ? 3 * N * (2 * 96) * 4 : 0))
          << N << " " << mode;
      for (auto bytes : {&CommStats::reduce_scatter_bytes, &CommStats::all_reduce_bytes})
        EXPECT_EQ(b.comm.*bytes, s.comm.*bytes) << N << " " << mode;
    }
  const MemoryPlan one = plan_of({"vocab_tiling_axis=batch", "num_vocab_tiling=1"}, 1);
  EXPECT_EQ(one.comm.all_to_all_bytes, 0) << "one rank: nothing to move";
}

// vocab_tiling_axis=batch: every token of the global batch is in one chunk of one tile; what rank q
// sends rank r is what r receives from q; a rank's tokens of a tile are contiguous and go out in
// chunk order, and a chunk's tokens arrive in rank order, so the chunk is the tile's tokens
// [r C, (r+1) C) in order (head_chunk_token).
TEST(HeadChunks, EveryTokenHasOneChunkAndTheCountsPairUp) {
  struct Case {
    int64_t ranks, batch, seq, tiles;
  };
  for (const Case& c : {Case{2, 1, 8, 2}, Case{3, 2, 6, 2}, Case{3, 2, 6, 6}, Case{4, 3, 4, 3},
                        Case{2, 2, 4, 1}, Case{5, 2, 10, 2}}) {
    const int64_t N = c.ranks, T = c.batch * c.seq;
    std::vector<HeadChunks> h;
    for (int64_t r = 0; r < N; ++r) h.push_back(head_chunks(N, r, c.batch, c.seq, c.tiles));
    std::vector<int> seen(size_t(N * T), 0);
    for (int64_t t = 0; t < c.tiles; ++t)
      for (int64_t r = 0; r < N; ++r) {
        const auto& recv = h[size_t(r)].recv[size_t(t)];
        int64_t got = 0;
        for (int64_t q = 0; q < N; ++q) {
          EXPECT_EQ(h[size_t(q)].send[size_t(t)][size_t(r)], recv[size_t(q)])
              << N << " ranks, tile " << t << ", " << q << " -> " << r;
          // The tokens r gets from q, in order: q's tokens of the tile from `first` on, after
          // what q sent to lower ranks.
          int64_t before = 0;
          for (int64_t p = 0; p < r; ++p) before += h[size_t(q)].send[size_t(t)][size_t(p)];
          for (int64_t i = 0; i < recv[size_t(q)]; ++i, ++got) {
            const int64_t g = head_chunk_token(h[size_t(r)], N, t, r, got);
            EXPECT_EQ(g, q * T + h[size_t(q)].first[size_t(t)] + before + i)
                << N << " ranks, tile " << t << ", chunk " << r << ", token " << got;
            seen[size_t(g)] += 1;
          }
        }
        EXPECT_EQ(got, h[size_t(r)].C);
      }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), N * T) << N << " ranks";
  }
}

// One rank's all-to-all is a copy; the planning comm counts what rank 0 would send.
TEST(Comm, AllToAllOnOneRankAndOnThePlanningComm) {
  SingleComm one;
  Tensor a = Tensor::empty({5}, DType::F32), b = Tensor::zeros({5}, DType::F32);
  for (int64_t i = 0; i < 5; ++i) a.data<float>()[i] = float(i + 1);
  one.all_to_all(a, {5}, b, {5}, "a test").wait();
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  EXPECT_EQ(one.stats().all_to_all_bytes, 0) << "nothing left the rank";
  testing::expect_error([&] { one.all_to_all(a, {5}, b, {4}, "a bad one"); },
                        {"all-to-all of a bad one", "sends itself 5 elements but receives 4"});
  PlanningComm three(3);
  three
      .all_to_all(Tensor::empty({9}, DType::BF16), {2, 3, 4}, Tensor::empty({6}, DType::BF16),
                  {2, 0, 4}, "a planned one")
      .wait();
  EXPECT_EQ(three.stats().all_to_all_bytes, (3 + 4) * 2);
  EXPECT_EQ(three.stats().collectives, 1);
}

TEST(FsdpPlan, BadSwitchesAreRefused) {
  testing::expect_error([] { plan_of({"fsdp_embedding=both"}, 2); },
                        {"fsdp_embedding='both'", "gather", "vocab_parallel", "auto"});
  testing::expect_error([] { plan_of({"fsdp_prefetch_layers=9"}, 2); }, {"fsdp_prefetch_layers=9"});
  testing::expect_error([] { plan_of({"vocab_tiling_axis=rows"}, 2); },
                        {"vocab_tiling_axis='rows'", "sequence", "batch"});
  testing::expect_error(
      [] {
        plan_of({"vocab_tiling_axis=batch", "per_device_batch_size=2", "num_vocab_tiling=8"}, 2);
      },
      {"vocab_tiling_axis=batch needs num_vocab_tiling=8", "global batch's 4 rows"});
  testing::expect_error([] { plan_of({"ici_fsdp_parallelism=0"}, 2); },
                        {"ici_fsdp_parallelism=0", "-1"});
}

// ---- the vocabulary-parallel cross-entropy -----------------------------------------------------

// The three passes over column slices, with the stats combined between them as the ranks'
// all-reduces combine them, give softcap_cross_entropy's loss and gradient.
TEST(VocabParallel, CrossEntropyOverSlicesEqualsTheWholeRow) {
  ReferenceBackend be;
  const int64_t R = 7, V = 23;
  const std::vector<int64_t> cuts = {0, 8, 16, V};  // three ranks' columns
  for (DType dt : {DType::F64, DType::F32}) {
    Rng rng(3);
    const Tensor z = testing::random_tensor({R, V}, rng, 20.0, dt);
    Tensor targets = Tensor::empty({R}, DType::I32), mask = Tensor::empty({R}, DType::I32);
    for (int64_t r = 0; r < R; ++r)
      targets.data<int32_t>()[r] = int32_t(rng.uniform_int(V)), mask.data<int32_t>()[r] = r != 3;
    // The whole row.
    Tensor whole = Tensor::empty({R, V}, dt);
    std::memcpy(whole.raw(), z.raw(), z.nbytes());
    Tensor loss = Tensor::zeros({1}, DType::F64);
    be.softcap_cross_entropy({.logits = whole,
                              .loss = loss,
                              .targets = targets,
                              .mask = mask,
                              .cap = 30.0,
                              .grad_scale = 0.25,
                              .write_grad = true});
    // Slices.
    std::vector<Tensor> parts, stats, local;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t w = cuts[k + 1] - cuts[k];
      Tensor p = Tensor::empty({R, w}, dt);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < w; ++c)
          set_from_double(p, r * w + c, get_as_double(z, r * V + cuts[k] + c));
      Tensor t = Tensor::empty({R}, DType::I32);
      for (int64_t r = 0; r < R; ++r) {
        const int32_t g = targets.data<int32_t>()[r];
        t.data<int32_t>()[r] = g >= cuts[k] && g < cuts[k + 1] ? int32_t(g - cuts[k]) : -1;
      }
      parts.push_back(p), local.push_back(t), stats.push_back(Tensor::zeros({3, R}, DType::F64));
    }
    auto combine = [&](int row, bool max) {
      for (int64_t r = 0; r < R; ++r) {
        double acc = max ? -HUGE_VAL : 0;
        for (const Tensor& s : stats) {
          const double x = s.data<double>()[row * R + r];
          acc = max ? std::max(acc, x) : acc + x;
        }
        for (const Tensor& s : stats) s.data<double>()[row * R + r] = acc;
      }
    };
    for (size_t k = 0; k < parts.size(); ++k)
      be.vocab_ce_max({.logits = parts[k], .stats = stats[k], .cap = 30.0});
    combine(0, true);
    for (size_t k = 0; k < parts.size(); ++k)
      be.vocab_ce_sums({.logits = parts[k], .stats = stats[k], .targets = local[k]});
    combine(1, false), combine(2, false);
    Tensor split_loss = Tensor::zeros({1}, DType::F64);
    for (size_t k = 0; k < parts.size(); ++k)  // each slice counts some rows of the loss
      be.vocab_ce_finish({.logits = parts[k],
                          .loss = split_loss,
                          .stats = stats[k],
                          .targets = local[k],
                          .mask = mask,
                          .cap = 30.0,
                          .grad_scale = 0.25,
                          .loss_begin = int64_t(k) * 3,
                          .loss_end = std::min<int64_t>(R, int64_t(k + 1) * 3),
                          .write_grad = true});
    const double tol = dt == DType::F64 ? 1e-13 : 1e-6;
    EXPECT_NEAR(get_as_double(split_loss, 0), get_as_double(loss, 0),
                tol * std::abs(get_as_double(loss, 0)))
        << dtype_name(dt);
    for (size_t k = 0; k < parts.size(); ++k) {
      const int64_t w = cuts[k + 1] - cuts[k];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < w; ++c)
          ASSERT_NEAR(get_as_double(parts[k], r * w + c), get_as_double(whole, r * V + cuts[k] + c),
                      dt == DType::F64 ? 1e-15 : 1e-7)
              << dtype_name(dt) << " row " << r << " column " << cuts[k] + c;
    }
  }
}

// ---- the data split ----------------------------------------------------------------------------

// Rank r of N reads rows [r B, (r+1) B) of the global batch one rank with N B rows reads, and the
// stream stands at the same place after each batch.
TEST(DataSplit, RanksReadTheirRowsOfTheGlobalBatch) {
  for (const char* type : {"builtin", "synthetic"})
    for (bool packing : {true, false}) {
      DataOptions o;
      o.dataset_type = type;
      o.packing = packing;
      o.seq = 48;
      o.vocab_size = 259;
      o.batch = 6;
      const auto whole = make_data_loader(o);
      std::vector<std::unique_ptr<DataLoader>> ranks;
      for (int r = 0; r < 3; ++r) {
        DataOptions p = o;
        p.batch = 2, p.rank = r, p.ranks = 3;
        ranks.push_back(make_data_loader(p));
      }
      for (int step = 0; step < 3; ++step) {
        const Batch w = whole->next();
        for (int r = 0; r < 3; ++r) {
          const Batch b = ranks[size_t(r)]->next();
          const size_t n = size_t(2 * 48), at = size_t(r) * n;
          for (const auto& [mine, all] :
               {std::pair{&b.inputs, &w.inputs}, std::pair{&b.targets, &w.targets},
                std::pair{&b.positions, &w.positions}, std::pair{&b.segment_ids, &w.segment_ids},
                std::pair{&b.target_segment_ids, &w.target_segment_ids}})
            ASSERT_TRUE(std::equal(mine->begin(), mine->end(), all->begin() + long(at)))
                << type << " packing " << packing << " step " << step << " rank " << r;
          EXPECT_EQ(ranks[size_t(r)]->state(), whole->state());
        }
      }
    }
}

// A sharded checkpoint's state.json is validated like a whole one's, with its own keys: "ranks",
// and one file entry per rank; a NaN in a piece is refused before anything is written.
TEST(FsdpCheckpoint, ShardedStateJsonIsValidatedAndNamed) {
  TempDir dir;
  SingleComm comm;
  const std::string ckpts = dir / "checkpoints";
  Tensor piece = Tensor::zeros({4}, DType::F32);
  const nlohmann::json state = {{"config", nlohmann::json::object()},
                                {"data", nlohmann::json::object()}};
  const std::string ckpt =
      save_sharded_checkpoint(comm, ckpts, 3, {{"w", piece, 2, {2, 3}}}, {}, state, 0);
  const std::string state_path = ckpt + "/state.json";
  const TrainCheckpoint c = open_train_checkpoint(ckpt);
  EXPECT_EQ(c.ranks, 1);
  ASSERT_EQ(c.params.names(), std::vector<std::string>{"w"});
  EXPECT_EQ(c.params.shape("w"), (Shape{2, 3}));
  const nlohmann::json good = nlohmann::json::parse(testing::read_file(state_path));
  const std::string params = "params.rank00000-of-00001.safetensors";
  const std::vector<std::pair<std::string, nlohmann::json>> cases = {
      {"/ranks", "1"},
      {"/ranks", 0},
      {"/ranks", 2},  // names a second rank's files, which do not exist
      {"/files/" + params, nullptr},
      {"/files/" + params + "/crc32", int64_t(1) << 33},
  };
  const std::vector<std::string> named = {
      "'ranks' must be a non-negative integer", "ranks=0 is out of range",
      "'files.params.rank00000-of-00002.safetensors'", "'files." + params + "'",
      "'files." + params + ".crc32' is 8589934592, not a CRC-32"};
  for (size_t i = 0; i < cases.size(); ++i) {
    nlohmann::json bad = good;
    const nlohmann::json::json_pointer p(cases[i].first);
    if (cases[i].second.is_null())
      bad[p.parent_pointer()].erase(p.back());
    else
      bad[p] = cases[i].second;
    testing::write_file(state_path, bad.dump());
    SCOPED_TRACE(cases[i].first);
    testing::expect_error([&] { open_train_checkpoint(ckpt); }, {state_path, named[i]});
  }
  piece.data<float>()[1] = NAN;
  testing::expect_error(
      [&] {
        save_sharded_checkpoint(comm, ckpts, 4, {{"w", piece, 2, {2, 3}}}, {}, state, 0);
      },
      {"refusing to save checkpoint step 4", "parameter 'w' holds nan at element 3"});
  EXPECT_FALSE(fs::exists(ckpts + "/step_00000004.tmp"));
}

// ---- whole runs under mpirun ----------------------------------------------------------------

// `mpirun -np N gemmax train ARGS` (or, for N = 0, gemmax alone); the exit status, with the output.
int launch(int ranks, const std::vector<std::string>& args, std::string* out) {
  std::string cmd =
      ranks > 0 ? mpiexec() + " -np " + std::to_string(ranks) + " " + GEMMAX_BINARY + " train"
                : std::string(GEMMAX_BINARY) + " train";
  for (const std::string& a : args) cmd += " " + a;
  return testing::run_command(cmd, out);
}

// launch() of the fault tests' driver: rank RANK does KIND at step STEP (FAULT = RANK:STEP:KIND).
int launch_fault(int ranks, const std::string& fault, const std::vector<std::string>& args,
                 std::string* out) {
  std::string cmd =
      mpiexec() + " -np " + std::to_string(ranks) + " " + GEMMAX_FAULT_TRAIN + " " + fault;
  for (const std::string& a : args) cmd += " " + a;
  return testing::run_command(cmd, out);
}

#define REQUIRE_MPI() \
  if (std::string(GEMMAX_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI"

// The tiny structure at width 32, fp32, five steps of 32 tokens per row, on the reference backend:
// these tests check that N ranks compute what one rank computes, which the cpu backend's
// approximate exponentials would blur (its head differs between the whole-table and the
// vocabulary-parallel paths); FsdpRun.TheCpuBackendTrainsOnSeveralRanks covers the cpu backend.
std::vector<std::string> tiny(const std::string& dir, int64_t rows, std::vector<std::string> more) {
  std::vector<std::string> v = {"base_output_directory=" + dir,
                                "run_name=r",
                                "backend=reference",
                                "base_emb_dim=32",
                                "max_target_length=32",
                                "dtype=float32",
                                "weight_dtype=float32",
                                "steps=5",
                                "log_period=1000",
                                "sample_max_new_tokens=0",
                                "comm_timeout_seconds=120",
                                // The data in order, as these figures were taken.
                                "grain_packing_type=sequential",
                                "enable_data_shuffling=false",
                                "per_device_batch_size=" + std::to_string(rows)};
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

std::vector<nlohmann::json> metrics(const std::string& dir) {
  std::ifstream in(dir + "/r/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::vector<double> losses(const std::string& dir) {
  std::vector<double> v;
  for (const auto& m : metrics(dir)) v.push_back(m["learning/loss"].get<double>());
  return v;
}

// The losses of every step, or of the first `steps`.
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double rel,
                  const std::string& what, size_t steps = SIZE_MAX) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < std::min(a.size(), steps); ++i)
    EXPECT_NEAR(a[i], b[i], rel * std::abs(a[i])) << what << ", step " << i;
}

// How many of a 5-step fp32 run's losses N ranks match one rank's to 1e-5. The runs sum in
// different orders, and AdamW's first steps move a weight by about lr whatever the size of its
// gradient, so a gradient at rounding level steps either way: the fp32 runs part after a few
// steps (by step 4, 1e-3 in the gradient norm with either embedding_table). The fp64 weights
// after all five steps, to 1e-10, are the exact check.
constexpr size_t kFp32Steps = 4;

// The final weights of a run, whole, in registry order (any checkpoint form).
Tensor final_weights(const std::string& dir, DType dt) {
  return load_model_dir(dir + "/r", dt).weights;
}

void run_ok(int ranks, const std::vector<std::string>& args) {
  std::string out;
  ASSERT_EQ(launch(ranks, args, &out), 0) << out;
}

// Every rank of the run in `dir` measured the peaks its plan gave, in every category.
void expect_plan_measured_by_every_rank(const std::string& dir, size_t ranks,
                                        const std::string& what) {
  std::ifstream in(dir + "/r/memory.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["measured_per_rank"].size(), ranks) << what << ": " << j.dump();
  for (const auto& rank : j["measured_per_rank"])
    for (const auto& [k, v] : j["planned"].items()) EXPECT_EQ(rank[k], v) << what << " " << k;
}

// The newest checkpoints of two runs hold the same tensors, element for element to `tol`.
void expect_same_checkpoint_params(const std::string& a_dir, const std::string& b_dir, double tol,
                                   const std::string& what) {
  const TrainCheckpoint a = open_newest_train_checkpoint(a_dir + "/r");
  const TrainCheckpoint b = open_newest_train_checkpoint(b_dir + "/r");
  ASSERT_EQ(a.params.names(), b.params.names()) << what;
  for (const std::string& name : a.params.names()) {
    const Tensor x = a.params.read_as(name, DType::F64), y = b.params.read_as(name, DType::F64);
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_NEAR(x.data<double>()[i], y.data<double>()[i], tol)
          << what << ": " << name << "[" << i << "]";
  }
}

// N ranks at per_device_batch_size=1 train the model one rank trains with the N rows: the same
// losses (the cross-entropy normalised by the global batch's targets, the load-balance loss
// averaged over its sequences) and the same weights. In fp64 the weights agree to 1e-10 after five
// steps. In fp32 the losses agree to 1e-5 relative, and the first update to fp32 rounding; later
// updates spread further, since Adam (eps 1e-8) turns rounding-sized differences of a near-zero
// gradient into steps of order lr, and a router near a tie may pick another expert.
TEST(FsdpRun, NRanksTrainWhatOneRankTrainsWithTheWholeBatch) {
  REQUIRE_MPI();
  for (int N : {2, 3}) {
    TempDir one, many;
    run_ok(0, tiny(one.str(), N, {}));
    run_ok(N, tiny(many.str(), 1, {}));
    expect_close(losses(one.str()), losses(many.str()), 1e-5, str_cat(N, " ranks"), kFp32Steps);
    const auto m1 = metrics(one.str()), mn = metrics(many.str());
    EXPECT_NEAR(mn[0]["learning/raw_grad_norm"].get<double>(),
                m1[0]["learning/raw_grad_norm"].get<double>(),
                1e-6 * m1[0]["learning/raw_grad_norm"].get<double>())
        << "the global gradient norm";
    EXPECT_TRUE(mn[0].contains("perf/comm_all_gather_bytes"));
    EXPECT_GT(mn[0]["perf/comm_reduce_scatter_bytes"].get<int64_t>(), 0);
  }
  for (int N : {2, 3}) {  // the weights, in fp64 after 5 steps and in fp32 after 1
    TempDir one, many, one32, many32;
    const std::vector<std::string> f64 = {"dtype=float64", "weight_dtype=float64"};
    run_ok(0, tiny(one.str(), N, f64));
    run_ok(N, tiny(many.str(), 1, f64));
    const Tensor a = final_weights(one.str(), DType::F64),
                 b = final_weights(many.str(), DType::F64);
    EXPECT_LE(testing::max_abs_diff(a, b), 1e-10) << N << " ranks, fp64";
    run_ok(0, tiny(one32.str(), N, {"steps=1", "adam_eps=1"}));
    run_ok(N, tiny(many32.str(), 1, {"steps=1", "adam_eps=1"}));
    const Tensor c = final_weights(one32.str(), DType::F32);
    const Tensor d = final_weights(many32.str(), DType::F32);
    for (int64_t i = 0; i < c.numel(); ++i) {
      const float x = c.data<float>()[i], y = d.data<float>()[i];
      // Two ulps of the weight, or of 1e-3 for weights near zero (whose update is a difference of
      // sums far larger than itself).
      const float m = std::max(std::abs(x), 1e-3f);
      ASSERT_LE(std::abs(x - y), 2 * (std::nextafter(m, INFINITY) - m))
          << N << " ranks, fp32, element " << i << ": " << x << " vs " << y;
    }
  }
}

// A LoRA run on N ranks trains what one rank trains with the whole batch: the frozen base sharded
// as a full run's weights and never reduce-scattered, the adapters whole on every rank with their
// gradients all-reduced. fp64: the losses to 1e-10, the adapters after five steps to 1e-10; every
// rank's memory equals its plan; the N-rank checkpoint resumes on one rank.
TEST(FsdpRun, LoraOnSeveralRanksTrainsWhatOneRankTrains) {
  REQUIRE_MPI();
  const std::vector<std::string> lora = {"enable_lora=true", "lora_rank=4", "lora_alpha=8",
                                         "dtype=float64", "weight_dtype=float64"};
  // The third run: dropout (on the dense matrices: PEFT has none on the experts'), whose masks
  // follow each token's place in the global batch.
  for (const char* embedding :
       {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel", "lora_dropout=0.2"}) {
    std::vector<std::string> keys = lora;
    keys.push_back(embedding);
    if (std::string(embedding).starts_with("lora_dropout"))
      keys.insert(keys.end(),
                  {"lora_target_modules=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                   "fsdp_embedding=gather"});
    TempDir one, many;
    run_ok(0, tiny(one.str(), 2, keys));
    run_ok(2, tiny(many.str(), 1, keys));
    expect_close(losses(one.str()), losses(many.str()), 1e-10, embedding);
    const auto m = metrics(many.str());
    // No weight gradient is reduce-scattered (vocab_parallel's head reduce-scatters its input's).
    if (!std::string(embedding).ends_with("vocab_parallel"))
      EXPECT_EQ(m[0]["perf/comm_reduce_scatter_bytes"].get<int64_t>(), 0) << "the base is frozen";
    EXPECT_GT(m[0]["perf/comm_all_reduce_bytes"].get<int64_t>(), 0) << "the adapters' gradients";
    expect_same_checkpoint_params(one.str(), many.str(), 1e-10, embedding);
    expect_plan_measured_by_every_rank(many.str(), 2, embedding);
    // The two ranks' checkpoint continues on one rank.
    std::vector<std::string> more = tiny(many.str(), 2, keys);
    more.push_back("steps=6");
    run_ok(0, more);
    EXPECT_EQ(losses(many.str()).size(), 6u);
  }
}

// QLoRA under FSDP: each rank holds 1/2 of every layer's NF4 codes and absmax and gathers them as
// the layer runs. 2 ranks train what one rank trains (fp64: the dequantised base is the same
// numbers, the adapters' gradients summed), the base is gathered and never reduce-scattered, each
// rank measures its plan, the checkpoint continues on one rank, and a vocabulary-parallel head
// (nothing to split: the table is whole on every rank) is refused naming the keys.
TEST(FsdpRun, QloraOnSeveralRanksTrainsWhatOneRankTrains) {
  REQUIRE_MPI();
  const std::vector<std::string> keys = {"enable_lora=true", "lora_rank=4", "lora_alpha=8",
                                         "lora_weight_qtype=nf4", "lora_tile_size=16",
                                         "dtype=float64", "weight_dtype=float64"};
  TempDir one, many;
  auto with_eval = [&](int64_t rows) {
    std::vector<std::string> k = keys;
    k.insert(k.end(), {"eval_interval=5", "eval_steps=1",
                       "eval_per_device_batch_size=" + std::to_string(rows)});
    return k;
  };
  run_ok(0, tiny(one.str(), 2, with_eval(2)));
  run_ok(2, tiny(many.str(), 1, with_eval(1)));
  expect_close(losses(one.str()), losses(many.str()), 1e-10, "qlora");
  const auto m = metrics(many.str());
  auto eval_loss = [](const std::vector<nlohmann::json>& ms) {
    for (const auto& j : ms)
      if (j.contains("eval/avg_loss")) return j["eval/avg_loss"].get<double>();
    return -1.0;
  };
  ASSERT_GT(eval_loss(m), 0.0) << "no evaluation in metrics.jsonl";
  EXPECT_NEAR(eval_loss(m), eval_loss(metrics(one.str())), 1e-10) << "the evaluation on 2 ranks";
  EXPECT_EQ(m[0]["perf/comm_reduce_scatter_bytes"].get<int64_t>(), 0) << "the base is frozen";
  EXPECT_GT(m[0]["perf/comm_all_gather_bytes"].get<int64_t>(), 0) << "the NF4 layers";
  EXPECT_GT(m[0]["perf/comm_all_reduce_bytes"].get<int64_t>(), 0) << "the adapters' gradients";
  expect_same_checkpoint_params(one.str(), many.str(), 1e-10, "qlora");
  expect_plan_measured_by_every_rank(many.str(), 2, "qlora");
  std::vector<std::string> more = tiny(many.str(), 2, with_eval(2));
  more.push_back("steps=6");
  run_ok(0, more);
  EXPECT_EQ(losses(many.str()).size(), 6u);

  TempDir refused;
  std::vector<std::string> vp = keys;
  vp.push_back("fsdp_embedding=vocab_parallel");
  std::string out;
  EXPECT_NE(launch(2, tiny(refused.str(), 1, vp), &out), 0);
  EXPECT_NE(out.find("lora_weight_qtype=nf4 under FSDP keeps the embedding table whole"),
            std::string::npos)
      << out;
}

// The dense member (gemma4-31b's layer, num_experts=1) under FSDP, with the MoE's tolerances: 2
// ranks train what one rank trains with both rows (the first four losses to 1e-5, the first
// gradient norm to 1e-6, fp64 weights after five steps to 1e-10), with the embedding gathered or
// vocabulary-parallel and the small vectors replicated or sharded; and every rank measures its
// plan.
TEST(FsdpRun, TheDenseMemberTrainsOnTwoRanks) {
  REQUIRE_MPI();
  const std::vector<std::string> dense = {"num_experts=1"};
  TempDir one;
  run_ok(0, tiny(one.str(), 2, dense));
  const std::vector<double> want = losses(one.str());
  const auto m1 = metrics(one.str());
  for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel",
                           "fsdp_replicate_small_params=false"}) {
    TempDir dir;
    run_ok(2, tiny(dir.str(), 1, {"num_experts=1", mode}));
    expect_close(losses(dir.str()), want, 1e-5, mode, kFp32Steps);
    EXPECT_NEAR(metrics(dir.str())[0]["learning/raw_grad_norm"].get<double>(),
                m1[0]["learning/raw_grad_norm"].get<double>(),
                1e-6 * m1[0]["learning/raw_grad_norm"].get<double>())
        << mode << ": the global gradient norm";
    expect_plan_measured_by_every_rank(dir.str(), 2, mode);
  }
  TempDir one64, many64;
  const std::vector<std::string> f64 = {"num_experts=1", "dtype=float64", "weight_dtype=float64"};
  run_ok(0, tiny(one64.str(), 2, f64));
  run_ok(2, tiny(many64.str(), 1, f64));
  ASSERT_FALSE(load_model_dir(many64.str() + "/r", DType::F64).config.has_moe());
  const Tensor a = final_weights(one64.str(), DType::F64),
               b = final_weights(many64.str(), DType::F64);
  EXPECT_LE(testing::max_abs_diff(a, b), 1e-10) << "2 ranks, fp64";
}

// The small block is not sharded yet: 2 ranks are refused before any step, naming why.
TEST(FsdpRun, TheSmallBlockIsRefusedOnSeveralRanks) {
  REQUIRE_MPI();
  TempDir dir;
  std::string out;
  EXPECT_NE(launch(2, tiny(dir.str(), 1,
                           {"decoder_block=gemma4_small", "num_experts=1", "sliding_window_pattern=3",
                            "hidden_size_per_layer_input=4", "vocab_size_per_layer_input=259"}),
                   &out),
            0);
  EXPECT_NE(out.find("per-layer inputs are not sharded under FSDP yet"), std::string::npos) << out;
}

// The default backend under FSDP, on the default (MaxText's) initialisation. In fp64, 2 ranks
// compute one rank's losses to 1e-12 in both embedding modes: the paths are the same
// arithmetic. In fp32 they sum in other orders (partial sums per rank; vocabulary-parallel, the
// head's log-sum-exp is the exact one where one rank's uses approximate exponentials), so the
// first loss agrees to rounding and Adam turns the last bits into different updates of
// near-zero gradients. Measured on this configuration (docs/FSDP.md, N ranks against one): by
// steps 3-4 the losses part by 1.3e-4 (gather) and 1.0e-3 (vocab_parallel) of the loss, while
// one fp32 rank is itself 1.1e-3 (step 1) to 1.2e-2 (step 4) away from its fp64 run. The
// tolerances, 1e-3 and 4e-3, stay well inside that distance.
TEST(FsdpRun, TheCpuBackendTrainsOnSeveralRanks) {
  REQUIRE_MPI();
  const std::vector<std::string> f64 = {"backend=cpu", "dtype=float64", "weight_dtype=float64"};
  for (const bool exact : {true, false}) {
    TempDir one;
    run_ok(0, tiny(one.str(), 2, exact ? f64 : std::vector<std::string>{"backend=cpu"}));
    const std::vector<double> want = losses(one.str());
    for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel"}) {
      const bool gather = std::string(mode) == "fsdp_embedding=gather";
      const std::string what = std::string(mode) + (exact ? ", fp64" : ", fp32");
      TempDir dir;
      std::vector<std::string> args = exact ? f64 : std::vector<std::string>{"backend=cpu"};
      args.push_back(mode);
      run_ok(2, tiny(dir.str(), 1, args));
      const std::vector<double> got = losses(dir.str());
      ASSERT_EQ(got.size(), want.size()) << what;
      EXPECT_NEAR(got[0], want[0], (exact ? 1e-12 : 1e-6) * want[0]) << what;
      expect_close(got, want, exact ? 1e-12 : gather ? 1e-3 : 4e-3, what);
    }
  }
}

// logits_dot_in_fp32 under FSDP: the head gathers the fp32 master table (gather) or widens its
// own rows (vocab_parallel). 2 ranks' first bf16 loss is one rank's to rounding, and differs
// from the loss with bf16 logits by far more than that.
TEST(FsdpRun, LogitsDotInFp32OnSeveralRanks) {
  REQUIRE_MPI();
  const std::vector<std::string> bf16 = {"backend=cpu", "dtype=bfloat16", "steps=1"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> v = bf16;
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  TempDir one, plain;
  run_ok(0, tiny(one.str(), 2, with({"logits_dot_in_fp32=true"})));
  run_ok(0, tiny(plain.str(), 2, bf16));
  const double want = losses(one.str()).at(0), bf16_logits = losses(plain.str()).at(0);
  EXPECT_GT(std::abs(bf16_logits - want), 1e-5 * want) << "the switch changed nothing";
  for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel"}) {
    TempDir dir;
    run_ok(2, tiny(dir.str(), 1, with({"logits_dot_in_fp32=true", mode})));
    EXPECT_NEAR(losses(dir.str()).at(0), want, 1e-6 * want) << mode;
  }
}

// Seed change 5 (vocabulary tiling along the sequence, docs/SEED.md#each-change) turned off
// (vocab_tiling_axis=batch) moves the head's input and its gradient by all-to-alls and gives the
// same losses as tiling along the sequence, in both embedding modes; the bytes are what the plan
// says (2 ranks, one-row tiles: each rank sends half its row and the gradient of its half of the
// other row, 2 x 16 x 32 fp32 values a step).
TEST(FsdpRun, VocabTilingAxesGiveTheSameLosses) {
  REQUIRE_MPI();
  {  // 3 ranks of 2 rows in 2 tiles: a tile spans two ranks' rows, chunks cross row boundaries
    TempDir seq, batch;
    run_ok(3, tiny(seq.str(), 2, {"num_vocab_tiling=2"}));
    run_ok(3, tiny(batch.str(), 2, {"num_vocab_tiling=2", "vocab_tiling_axis=batch"}));
    expect_close(losses(batch.str()), losses(seq.str()), 1e-5, "3 ranks");
    EXPECT_GT(metrics(batch.str())[0]["perf/comm_all_to_all_bytes"].get<int64_t>(), 0);
  }
  for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel"}) {
    TempDir seq, batch;
    run_ok(2, tiny(seq.str(), 1, {"num_vocab_tiling=2", mode}));
    run_ok(2, tiny(batch.str(), 1, {"num_vocab_tiling=2", mode, "vocab_tiling_axis=batch"}));
    expect_close(losses(batch.str()), losses(seq.str()), 1e-5, mode);
    for (const auto& m : metrics(seq.str()))
      EXPECT_EQ(m["perf/comm_all_to_all_bytes"].get<int64_t>(), 0) << mode;
    for (const auto& m : metrics(batch.str()))
      EXPECT_EQ(m["perf/comm_all_to_all_bytes"].get<int64_t>(), 2 * 16 * 32 * 4) << mode;
    std::ifstream in(batch / "r/memory.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["planned_comm_per_step"]["all_to_all_bytes"].get<int64_t>(), 2 * 16 * 32 * 4);
  }
}

// What a step's collectives move, counted by the comm, is what the plan says, byte for byte, in
// every embedding mode on both tiling axes (the plan counts the same collectives as the step,
// the batch's own gathers included).
TEST(FsdpRun, EveryModeMovesThePlannedBytes) {
  REQUIRE_MPI();
  for (const char* mode : {"fsdp_embedding=gather", "fsdp_embedding=vocab_parallel"})
    for (const char* axis : {"vocab_tiling_axis=sequence", "vocab_tiling_axis=batch"}) {
      const std::string what = std::string(mode) + " " + axis;
      TempDir dir;
      run_ok(2, tiny(dir.str(), 1, {"steps=2", "num_vocab_tiling=2", mode, axis}));
      std::ifstream in(dir / "r/memory.json");
      const nlohmann::json planned = nlohmann::json::parse(in)["planned_comm_per_step"];
      ASSERT_EQ(planned.size(), 4u) << what;
      const auto steps = metrics(dir.str());
      ASSERT_EQ(steps.size(), 2u) << what;
      for (const auto& m : steps)
        for (const char* k :
             {"all_gather_bytes", "reduce_scatter_bytes", "all_reduce_bytes", "all_to_all_bytes"})
          EXPECT_EQ(m["perf/comm_" + std::string(k)].get<int64_t>(), planned[k].get<int64_t>())
              << what << ": " << k;
    }
}

// Each rank's measured peaks equal the plan, byte for byte; its parameters, gradients and moments
// are 1/N of one rank's plus the replicated vectors.
TEST(FsdpRun, EveryRankMeasuresItsPlan) {
  REQUIRE_MPI();
  const std::vector<std::vector<std::string>> modes = {
      {"fsdp_embedding=gather"},
      {"fsdp_embedding=vocab_parallel"},
      {"fsdp_embedding=vocab_parallel", "vocab_tiling_axis=batch", "num_vocab_tiling=3",
       "max_target_length=48"}};
  for (const std::vector<std::string>& keys : modes) {
    TempDir dir;
    std::vector<std::string> more = {"steps=2", "dtype=bfloat16", "num_vocab_tiling=4"};
    more.insert(more.end(), keys.begin(), keys.end());
    const std::string mode = keys.back();
    run_ok(3, tiny(dir.str(), 1, more));
    expect_plan_measured_by_every_rank(dir.str(), 3, mode);
    std::ifstream in(dir / "r/memory.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const MemoryPlan one = plan_of(tiny(dir.str(), 1, {"dtype=bfloat16"}), 1);
    const ParamTable table(one.input.model);
    const ShardLayout l = ShardLayout::fsdp(table, 3, 0, true);
    for (const char* k : {"parameters", "gradients"})
      EXPECT_EQ(j["planned"][k].get<int64_t>(), l.local_total * 4) << k;
    EXPECT_LE(j["planned"]["parameters"].get<int64_t>(),
              (one.peak[size_t(MemKind::Params)] - l.replicated * 4) / 3 + l.replicated * 4 +
                  int64_t(l.groups.size()) * 4 * table.config().d_model);
    EXPECT_EQ(j["planned"]["optimizer"].get<int64_t>(), 2 * held(l) * 4);
  }
}

// Each switch changes what moves, never the result: the losses agree with the default's (the
// order of fp32 sums aside); overlap (prefetch) changes only timing: bit for bit.
TEST(FsdpRun, SeedSwitchesGiveTheSameLosses) {
  REQUIRE_MPI();
  TempDir base;
  run_ok(2, tiny(base.str(), 2, {"num_vocab_tiling=2", "fsdp_embedding=vocab_parallel"}));
  const std::vector<double> want = losses(base.str());
  for (const char* sw : {"fsdp_replicate_small_params=false", "fsdp_embedding=gather"}) {
    TempDir dir;
    run_ok(2, tiny(dir.str(), 2, {"num_vocab_tiling=2", "fsdp_embedding=vocab_parallel", sw}));
    expect_close(losses(dir.str()), want, 1e-5, sw);
  }
  TempDir none;
  run_ok(2,
         tiny(none.str(), 2,
              {"num_vocab_tiling=2", "fsdp_embedding=vocab_parallel", "fsdp_prefetch_layers=0"}));
  EXPECT_EQ(losses(none.str()), want) << "prefetch changes the timing, not a bit";
}

void copy_run(const TempDir& from, const TempDir& to) {
  fs::copy(from.path / "r", to.path / "r", fs::copy_options::recursive);
}

// A checkpoint written by 2 ranks resumes on 2 (bit for bit against the run that never stopped),
// on 1 and on 3 ranks (the same global batch: the losses of the uninterrupted run to 1e-5).
TEST(FsdpRun, ResumesOnTheSameOrAnotherNumberOfRanks) {
  REQUIRE_MPI();
  TempDir whole, half;
  const std::string schedule = "learning_rate_schedule_steps=4";  // the same on every leg
  run_ok(2, tiny(whole.str(), 3, {"steps=4", schedule}));
  const std::vector<double> want = losses(whole.str());
  run_ok(2, tiny(half.str(), 3, {"steps=2", schedule}));
  const Tensor uninterrupted = final_weights(whole.str(), DType::F32);
  struct Case {
    int ranks;
    int64_t rows;
  };
  for (const Case c : {Case{2, 3}, Case{1, 6}, Case{3, 2}}) {
    TempDir dir;
    copy_run(half, dir);
    std::string out;
    ASSERT_EQ(
        launch(c.ranks == 1 ? 0 : c.ranks, tiny(dir.str(), c.rows, {"steps=4", schedule}), &out), 0)
        << out;
    EXPECT_NE(out.find("resumed from"), std::string::npos) << out;
    const std::vector<double> got = losses(dir.str());
    if (c.ranks == 2) {
      EXPECT_EQ(got, want) << "same ranks: bit for bit";
      const Tensor w = final_weights(dir.str(), DType::F32);
      EXPECT_EQ(0, std::memcmp(w.raw(), uninterrupted.raw(), w.nbytes()));
    } else {
      expect_close(got, want, 1e-5, str_cat(c.ranks, " ranks"));
    }
  }
  // The global batch must stay.
  TempDir other;
  copy_run(half, other);
  std::string out;
  EXPECT_NE(launch(3, tiny(other.str(), 3, {"steps=4", schedule}), &out), 0);
  EXPECT_NE(out.find("per_device_batch_size=3 x 2 ranks = 6 rows"), std::string::npos) << out;
}

// gemmax export turns a sharded checkpoint into a Hugging Face folder holding the same weights.
TEST(FsdpRun, ExportOfAShardedCheckpointIsAnHfFolder) {
  REQUIRE_MPI();
  TempDir dir;
  run_ok(3, tiny(dir.str(), 1, {"steps=1"}));
  const TrainCheckpoint ckpt = open_train_checkpoint(dir / "r/checkpoints/step_00000001");
  EXPECT_EQ(ckpt.ranks, 3);
  std::string out;
  ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " export --checkpoint " + dir.str() +
                                     "/r --out " + dir.str() + "/hf --dtype float32",
                                 &out),
            0)
      << out;
  const LoadedModel hf = load_model_dir(dir / "hf", DType::F32);
  const ParamTable table(hf.config);
  for (const ParamSpec& s : table.specs()) {
    const Tensor saved = ckpt.params.read_as(s.name, DType::F32);
    ASSERT_EQ(0, std::memcmp(saved.raw(), table.view(hf.weights, s.name).raw(), saved.nbytes()))
        << s.name;
  }
}

// ---- faults --------------------------------------------------------------------------------

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A rank that hangs makes every rank exit non-zero once the timeout passes, naming it.
TEST(FsdpFaults, AHungRankEndsTheJobNamingIt) {
  REQUIRE_MPI();
  TempDir dir;
  std::string out;
  int rc = 0;
  const double s = seconds_of([&] {
    rc = launch_fault(3, "1:2:hang", tiny(dir.str(), 1, {"comm_timeout_seconds=3"}), &out);
  });
  EXPECT_NE(rc, 0) << out;
  EXPECT_LT(s, 60) << out;
  EXPECT_NE(out.find("rank 1 hangs before it"), std::string::npos) << out;
  EXPECT_NE(out.find("comm_timeout_seconds=3"), std::string::npos) << out;
}

// Under FSDP rank 0 owns the run folder: a job started on a folder another run holds is
// refused (rank 0 names the holder) and changes nothing.
TEST(FsdpRun, RankZeroOwnsTheRunFolder) {
  REQUIRE_MPI();
  TempDir dir;
  std::string out;
  ASSERT_EQ(launch(2, tiny(dir.str(), 1, {}), &out), 0) << out;
  EXPECT_EQ(testing::read_file(dir / "r/gemmax.lock"), "") << "taken, then released";
  const std::string before = testing::read_file(dir / "r/metrics.jsonl");
  RunDirLock held(dir / "r");
  out.clear();
  EXPECT_NE(launch(2, tiny(dir.str(), 1, {"steps=7"}), &out), 0) << out;
  EXPECT_NE(out.find("rank 0 of 2"), std::string::npos) << out;
  EXPECT_NE(out.find("in use by another gemmax run (pid " + std::to_string(::getpid())),
            std::string::npos)
      << out;
  EXPECT_EQ(testing::read_file(dir / "r/metrics.jsonl"), before);
  EXPECT_EQ(list_train_checkpoints(dir / "r/checkpoints").size(), 1u);
}

// A rank that dies ends the job (mpirun names it), and a death while saving leaves the last
// complete checkpoint, from which the run resumes; no half-written folder is taken for one.
TEST(FsdpFaults, ADeadRankEndsTheJobAndCheckpointsSurvive) {
  REQUIRE_MPI();
  TempDir dir;
  std::string out;
  EXPECT_NE(launch_fault(2, "1:2:exit", tiny(dir.str(), 1, {}), &out), 0) << out;
  EXPECT_NE(out.find(",1]"), std::string::npos) << "mpirun names rank 1:\n" << out;
  out.clear();
  EXPECT_NE(launch_fault(2, "1:4:save", tiny(dir.str(), 1, {"checkpoint_period=2"}), &out), 0)
      << out;
  EXPECT_NE(out.find("process rank 1"), std::string::npos) << out;
  const auto complete = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(complete.size(), 1u);
  EXPECT_EQ(complete[0].step, 2);
  EXPECT_TRUE(fs::exists(dir / "r/checkpoints/step_00000004.tmp")) << "the interrupted save";
  out.clear();
  ASSERT_EQ(launch(2, tiny(dir.str(), 1, {}), &out), 0) << out;
  EXPECT_NE(out.find("resumed from " + complete[0].dir), std::string::npos) << out;
  EXPECT_EQ(metrics(dir.str()).size(), 5u);
}

// A NaN in one rank's gradient piece makes every rank skip the same step (the gradient norm is
// global), or, with no skips allowed, stop naming the step and the parameter.
TEST(FsdpFaults, ANonFiniteGradientOnOneRankIsSkippedOrStopsEveryRank) {
  REQUIRE_MPI();
  TempDir dir, stopped;
  std::string out;
  ASSERT_EQ(launch_fault(2, "1:1:nan", tiny(dir.str(), 1, {"skip_nonfinite_steps=1"}), &out), 0)
      << out;
  EXPECT_NE(out.find("step 1: the gradient norm is nan"), std::string::npos) << out;
  std::vector<int64_t> skipped;
  for (const auto& m : metrics(dir.str()))
    skipped.push_back(m.value("learning/skipped_steps", int64_t(0)));
  EXPECT_EQ(skipped, (std::vector<int64_t>{0, 1, 1, 1, 1}));
  const Tensor w = final_weights(dir.str(), DType::F32);  // every rank's shard, finite
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_TRUE(std::isfinite(w.data<float>()[i])) << i;
  out.clear();
  EXPECT_NE(launch_fault(2, "1:1:nan", tiny(stopped.str(), 1, {}), &out), 0) << out;
  EXPECT_NE(out.find("step 1: the gradient norm is nan"), std::string::npos) << out;
  EXPECT_NE(out.find("the first parameter with a non-finite gradient is "), std::string::npos)
      << out;
  EXPECT_NE(out.find("(element 0: nan)"), std::string::npos) << out;
  EXPECT_EQ(metrics(stopped.str()).size(), 1u) << "step 0 only";
}

// SIGTERM that reaches one rank stops every rank after the same step, with a complete sharded
// checkpoint of it; the run then resumes to the end.
TEST(FsdpFaults, AStopSignalOnOneRankStopsEveryRankAfterTheSameStep) {
  REQUIRE_MPI();
  TempDir dir;
  std::string out;
  ASSERT_EQ(launch_fault(2, "1:2:sigterm", tiny(dir.str(), 1, {}), &out), 0) << out;
  EXPECT_NE(out.find("stopped by SIGTERM after step 3"), std::string::npos) << out;
  const auto saved = list_train_checkpoints(dir / "r/checkpoints");
  ASSERT_EQ(saved.size(), 1u) << out;
  EXPECT_EQ(saved[0].step, 3);
  EXPECT_EQ(open_train_checkpoint(saved[0].dir).ranks, 2);
  EXPECT_EQ(metrics(dir.str()).size(), 3u);
  out.clear();
  ASSERT_EQ(launch(2, tiny(dir.str(), 1, {}), &out), 0) << out;
  EXPECT_NE(out.find("resumed from " + saved[0].dir), std::string::npos) << out;
  EXPECT_EQ(metrics(dir.str()).size(), 5u);
}

TEST(FsdpFaults, RanksWithDifferentConfigsOrCountsAreRefused) {
  REQUIRE_MPI();
  TempDir dir;
  // One job of two programs (mpirun's A : B form) that differ in one key.
  auto program = [&](const char* lr) {
    std::string p = std::string(" -np 1 ") + GEMMAX_BINARY + " train";
    for (const std::string& a : tiny(dir.str(), 1, {lr})) p += " " + a;
    return p;
  };
  const std::string cmd =
      mpiexec() + program("learning_rate=0.01") + " :" + program("learning_rate=0.02");
  std::string out;
  EXPECT_NE(testing::run_command(cmd, &out), 0) << out;
  EXPECT_NE(out.find("learning_rate=0.02 there vs 0.01 on rank 0"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "r")) << "nothing written";
  out.clear();
  EXPECT_NE(launch(2, tiny(dir.str(), 1, {"ici_fsdp_parallelism=3"}), &out), 0);
  EXPECT_NE(out.find("ici_fsdp_parallelism=3 but the run was started with 2 ranks"),
            std::string::npos)
      << out;
  out.clear();
  std::string why;
  if (!cuda::cuda_device_available(&why)) {  // with GPUs the ranks train over NCCL
    EXPECT_NE(launch(2, tiny(dir.str(), 1, {"backend=cuda"}), &out), 0);
    EXPECT_NE(out.find("backend=cuda"), std::string::npos) << out;
    EXPECT_NE(out.find(why), std::string::npos) << out;
  }
  // One process asked for several ranks is told how to start them.
  testing::expect_error(
      [&] { Trainer t(Config::defaults(tiny(dir.str(), 1, {"ici_fsdp_parallelism=4"}))); },
      {"ici_fsdp_parallelism=4 needs 4 ranks", "mpirun -np 4", "dry_run=true"});
}

}  // namespace
}  // namespace gemmax
