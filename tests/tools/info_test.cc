// gemmax info's figures.
#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"

namespace gemmax {
namespace {

// gemmax info's per-token figure is the step's FLOPs over its B x S tokens.
TEST(InfoCommand, PerTokenFlopsAreTheStepsOverItsTokens) {
  for (const char* shape : {"model_name=gemma4-small per_device_batch_size=4 max_target_length=1024",
                            "model_name=gemma4-26b-a4b per_device_batch_size=2 max_target_length=512"}) {
    std::string out;
    ASSERT_EQ(testing::run_command(std::string(GEMMAX_BINARY) + " info " + shape, &out), 0) << out;
    const size_t step = out.find("per step ("), tok = out.find("\nper token:") + 1;
    ASSERT_NE(step, std::string::npos) << out;
    ASSERT_NE(tok, 0u) << out;
    long b = 0, s = 0;
    double tflop = 0, per = 0;
    char unit[8] = {};
    ASSERT_EQ(std::sscanf(out.c_str() + step, "per step (%ld x %ld tokens): %lf TFLOP", &b, &s, &tflop), 3);
    ASSERT_EQ(std::sscanf(out.c_str() + tok, "per token: %lf %7s", &per, unit), 2);
    const double scale = std::string(unit) == "MFLOP" ? 1e6 : 1e9;
    const double want = tflop * 1e12 / double(b * s);  // both printed to 3 digits or more
    EXPECT_NEAR(per * scale, want, 0.02 * want) << out;
  }
}

}  // namespace
}  // namespace gemmax
