#include <gtest/gtest.h>
#include "absl/status/status.h"
#include <pqxx/pqxx>
TEST(Smoke, Works) { EXPECT_TRUE(absl::OkStatus().ok()); }
