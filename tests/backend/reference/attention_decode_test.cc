// attention_decode, the attention of new tokens over a KV cache (reference/attention_decode.cc):
// against attention_forward whatever the order of the cache's slots, and its refusal of a query
// that sees no slot.
#include <gtest/gtest.h>

#include <vector>

#include "gemmax/backend/reference/reference_backend.h"
#include "test_util.h"

namespace gemmax {
namespace {
using testing::expect_error;
using testing::max_abs_diff;
using testing::random_tensor;

constexpr auto& ints = testing::int32_tensor;

// Slots in a scrambled order with empty ones between them, as a ring buffer leaves them.
TEST(AttentionDecode, MatchesAttentionForwardWhateverTheSlotOrder) {
  ReferenceBackend be;
  const int64_t S = 11, H = 4, KV = 2, hd = 8, C = S + 3;
  for (DType dt : {DType::F64, DType::F32})
    for (int64_t window : {int64_t(0), int64_t(3)}) {
      Rng rng(17);
      const Tensor q = random_tensor({S, H, hd}, rng, 1.0, dt);
      const Tensor k = random_tensor({S, KV, hd}, rng, 1.0, dt);
      const Tensor v = random_tensor({S, KV, hd}, rng, 1.0, dt);
      Tensor o = Tensor::empty({S, H, hd}, dt), lse = Tensor::empty({1, H, S}, stat_dtype(dt));
      be.attention_forward({.o = o,
                            .lse = lse,
                            .q = q,
                            .k = k,
                            .v = v,
                            .segment_ids = ints(std::vector<int32_t>(S, 1)),
                            .shape = {1, S, H, KV, hd, window}});

      // Position p goes to slot (5 p + 2) mod C; the other slots stay empty (-1).
      Tensor kc = Tensor::zeros({C, KV, hd}, dt), vc = Tensor::zeros({C, KV, hd}, dt);
      std::vector<int32_t> slot_pos(C, -1), q_pos(S);
      for (int64_t p = 0; p < S; ++p) {
        const int64_t slot = (5 * p + 2) % C;
        slot_pos[slot] = int32_t(p);
        be.copy({.dst = kc.rows(slot, slot + 1), .src = k.rows(p, p + 1)});
        be.copy({.dst = vc.rows(slot, slot + 1), .src = v.rows(p, p + 1)});
        q_pos[p] = int32_t(p);
      }
      Tensor od = Tensor::empty({S, H, hd}, dt);
      be.attention_decode({.o = od,
                           .q = q,
                           .q_pos = ints(q_pos),
                           .k = kc,
                           .v = vc,
                           .kv_pos = ints(slot_pos),
                           .window = window});
      const double tol = dt == DType::F64 ? 1e-14 : 1e-6;
      EXPECT_LE(max_abs_diff(od, o), tol) << dtype_name(dt) << " window " << window;

      // The last query alone, as a decoding step asks it.
      Tensor o1 = Tensor::empty({1, H, hd}, dt);
      be.attention_decode({.o = o1,
                           .q = q.rows(S - 1, S),
                           .q_pos = ints({int32_t(S - 1)}),
                           .k = kc,
                           .v = vc,
                           .kv_pos = ints(slot_pos),
                           .window = window});
      EXPECT_LE(max_abs_diff(o1, o.rows(S - 1, S)), tol) << dtype_name(dt);
    }
}

TEST(AttentionDecode, AQueryWithNoVisibleSlotIsAnError) {
  ReferenceBackend be;
  Rng rng(1);
  const Tensor q = random_tensor({1, 2, 4}, rng), k = random_tensor({2, 1, 4}, rng);
  Tensor o = Tensor::empty({1, 2, 4}, DType::F64);
  // Slots hold positions 0 and 1; a query at position 5 with window 3 sees neither.
  expect_error(
      [&] {
        be.attention_decode({.o = o,
                             .q = q,
                             .q_pos = ints({5}),
                             .k = k,
                             .v = k,
                             .kv_pos = ints({0, 1}),
                             .window = 3});
      },
      {"position 5", "sees no cache slot"});
}

}  // namespace
}  // namespace gemmax
