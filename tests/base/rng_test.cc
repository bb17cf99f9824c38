// The generator's skip-ahead (base/rng.h): discard(n) leaves the state n calls of next_u64()
// would, which lets a rank draw its shard of a parameter without the values before it.
#include "gemmax/base/rng.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace gemmax {
namespace {

TEST(Rng, DiscardEqualsStepping) {
  for (uint64_t n : {0ull, 1ull, 63ull, 64ull, 65ull, 1000ull, 123457ull}) {
    Rng a(5, 17), b(5, 17);
    a.discard(n);
    for (uint64_t i = 0; i < n; ++i) b.next_u64();
    for (int k = 0; k < 4; ++k) ASSERT_EQ(a.next_u64(), b.next_u64()) << "n " << n;
  }
}

}  // namespace
}  // namespace gemmax
