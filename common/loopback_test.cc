#include "common/loopback.h"

#include <gtest/gtest.h>

namespace verity {
namespace {

TEST(LoopbackTest, LoopbackLiteralsAndLocalhost) {
  EXPECT_TRUE(IsLoopbackAddress("localhost:50051"));
  EXPECT_TRUE(IsLoopbackAddress("LOCALHOST:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:9"));
  EXPECT_TRUE(IsLoopbackAddress("127.255.255.255"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:50051"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
}

TEST(LoopbackTest, NamesThatOnlyLookLikeLoopbackAreNot) {
  EXPECT_FALSE(IsLoopbackAddress("127.evil.example:50051"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.evil.example:50051"));
  EXPECT_FALSE(IsLoopbackAddress("127.example"));
  EXPECT_FALSE(IsLoopbackAddress("localhost.evil.example:1"));
  EXPECT_FALSE(IsLoopbackAddress("[::1.evil]:1"));
  EXPECT_FALSE(IsLoopbackAddress("[::1:1"));
}

TEST(LoopbackTest, EveryInterfaceAndOtherHostsAreNot) {
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:50051"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:50051"));
  EXPECT_FALSE(IsLoopbackAddress(":50051"));
  EXPECT_FALSE(IsLoopbackAddress(""));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.7:50051"));
  EXPECT_FALSE(IsLoopbackAddress("128.0.0.1:50051"));
  EXPECT_FALSE(IsLoopbackAddress("example.org:443"));
  EXPECT_FALSE(IsLoopbackAddress("[::2]:443"));
}

}  // namespace
}  // namespace verity
