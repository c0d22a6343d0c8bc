#include "common/status_macros.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::verity::testing::IsOk;
using ::verity::testing::IsOkAndHolds;
using ::verity::testing::StatusIs;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status CheckEven(int x) { return Half(x).status(); }

absl::StatusOr<int> Quarter(int x) {
  VERITY_ASSIGN_OR_RETURN(int half, Half(x));
  VERITY_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status BothEven(int a, int b) {
  VERITY_RETURN_IF_ERROR(CheckEven(a));
  VERITY_RETURN_IF_ERROR(CheckEven(b));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeBox(int x) {
  if (x < 0) return absl::OutOfRangeError("negative");
  return std::make_unique<int>(x);
}

absl::StatusOr<int> Unbox(int x) {
  std::unique_ptr<int> box;
  VERITY_ASSIGN_OR_RETURN(box, MakeBox(x));  // Assigns an existing lvalue.
  return *box;
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesValueAndError) {
  EXPECT_THAT(Quarter(8), IsOk());
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, "odd"));
}

TEST(StatusMacrosTest, AssignOrReturnMovesIntoExistingVariable) {
  EXPECT_EQ(*Unbox(7), 7);
  EXPECT_THAT(Unbox(-1), StatusIs(absl::StatusCode::kOutOfRange));
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstError) {
  EXPECT_THAT(BothEven(2, 4), IsOk());
  EXPECT_THAT(BothEven(2, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("od")));
}

TEST(StatusMatchersTest, IsOkAndHoldsMatchesTheValue) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(8), IsOkAndHolds(::testing::Gt(1)));
  EXPECT_THAT(Quarter(8), Not(IsOkAndHolds(3)));
  EXPECT_THAT(Quarter(6), Not(IsOkAndHolds(::testing::_)));
}

TEST(StatusMatchersTest, MatchersRejectOtherCodesAndMessages) {
  EXPECT_THAT(absl::NotFoundError("x"), Not(IsOk()));
  EXPECT_THAT(absl::NotFoundError("x"),
              Not(StatusIs(absl::StatusCode::kAlreadyExists)));
  EXPECT_THAT(absl::NotFoundError("x"),
              Not(StatusIs(absl::StatusCode::kNotFound, "y")));
  EXPECT_THAT(absl::StatusOr<int>(3), Not(StatusIs(absl::StatusCode::kOk, "y")));
  EXPECT_THAT(absl::StatusOr<int>(3), StatusIs(absl::StatusCode::kOk));
}

}  // namespace
}  // namespace verity
