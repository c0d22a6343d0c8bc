// gMock matchers for absl::Status and absl::StatusOr<T>.
//
// Debian's Abseil (20220623) has no status matchers, so tests use these:
//
//   EXPECT_THAT(status_or_statusor, IsOk());
//   EXPECT_THAT(result, StatusIs(absl::StatusCode::kNotFound));
//   EXPECT_THAT(result, StatusIs(absl::StatusCode::kInvalidArgument,
//                                testing::HasSubstr("label")));
//   EXPECT_THAT(status_or, IsOkAndHolds(testing::ElementsAre(1, 2)));
//
// IsOk and StatusIs accept both absl::Status and absl::StatusOr<T> (for any
// T); IsOkAndHolds accepts absl::StatusOr<T>.
// Matchers are immutable values and safe to use from any thread.
#ifndef VERITY_COMMON_STATUS_MATCHERS_H_
#define VERITY_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace verity {
namespace testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

class IsOkMatcher {
 public:
  using is_gtest_matcher = void;

  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    if (!status.ok()) *listener << "which is " << status;
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  using is_gtest_matcher = void;

  StatusIsMatcher(absl::StatusCode code,
                  ::testing::Matcher<const std::string&> message_matcher)
      : code_(code), message_matcher_(std::move(message_matcher)) {}

  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    *listener << "which is " << status;
    if (status.code() != code_) return false;
    const std::string message(status.message());
    ::testing::StringMatchResultListener message_listener;
    if (!message_matcher_.MatchAndExplain(message, &message_listener)) {
      const std::string explanation = message_listener.str();
      if (!explanation.empty()) *listener << ", message " << explanation;
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << absl::StatusCodeToString(code_)
        << " and a message that ";
    message_matcher_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_matcher_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_matcher_;
};

template <typename StatusOrType>
class IsOkAndHoldsMatcherImpl
    : public ::testing::MatcherInterface<const StatusOrType&> {
 public:
  using value_type = typename StatusOrType::value_type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const value_type&>(
            std::forward<InnerMatcher>(inner))) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK or has a value that ";
    inner_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(
      const StatusOrType& actual,
      ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "which has status " << actual.status();
      return false;
    }
    ::testing::StringMatchResultListener inner_listener;
    const bool matches = inner_.MatchAndExplain(*actual, &inner_listener);
    const std::string explanation = inner_listener.str();
    if (!explanation.empty()) *listener << "which contains a value " << explanation;
    return matches;
  }

 private:
  const ::testing::Matcher<const value_type&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT
    using Decayed = std::decay_t<StatusOrType>;
    return ::testing::Matcher<StatusOrType>(
        new IsOkAndHoldsMatcherImpl<Decayed>(inner_));
  }

 private:
  const InnerMatcher inner_;
};

}  // namespace internal

// Matches an absl::StatusOr<T> that holds a value matching `inner` (a
// matcher or a value compared with ==).
template <typename InnerMatcher>
internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(
    InnerMatcher&& inner) {
  return internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

// Matches an OK absl::Status or an absl::StatusOr<T> holding a value.
inline internal::IsOkMatcher IsOk() { return internal::IsOkMatcher(); }

// Matches a status (or the status of a StatusOr) with exactly `code`.
inline internal::StatusIsMatcher StatusIs(absl::StatusCode code) {
  return internal::StatusIsMatcher(code, ::testing::A<const std::string&>());
}

// Matches a status with exactly `code` whose message matches
// `message_matcher` (a std::string matcher or a plain string for equality).
template <typename MessageMatcher>
internal::StatusIsMatcher StatusIs(absl::StatusCode code,
                                   MessageMatcher&& message_matcher) {
  return internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(
                std::forward<MessageMatcher>(message_matcher)));
}

}  // namespace testing
}  // namespace verity

#endif  // VERITY_COMMON_STATUS_MATCHERS_H_
