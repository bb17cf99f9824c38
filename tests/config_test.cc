#include <gtest/gtest.h>

#include "gemmax/base/error.h"
#include "gemmax/config/config.h"

namespace gemmax {

TEST(Config, UnknownKeyNamesNearest) {
  try {
    Config::defaults({"learning_rat=0.1"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'learning_rate'"), std::string::npos) << e.what();
  }
}

}  // namespace gemmax
