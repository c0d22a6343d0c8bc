// LogEvent (log.h): one line per event on stderr, `ts=... event=NAME key=value ...`, values
// with spaces or quotes quoted.
#include "server/observability/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace verity::server {
namespace {

// What `log` writes to stderr.
template <typename F>
std::string CaptureStderr(F log) {
  ::testing::internal::CaptureStderr();
  log();
  return ::testing::internal::GetCapturedStderr();
}

// The line without its "ts=<timestamp> " prefix.
std::string WithoutTimestamp(const std::string& line) {
  EXPECT_EQ(line.rfind("ts=", 0), 0u) << line;
  const size_t space = line.find(' ');
  return space == std::string::npos ? line : line.substr(space + 1);
}

TEST(LogEventTest, OneLineWithATimestampTheEventAndItsFields) {
  const std::string line = CaptureStderr(
      [] { LogEvent("job_claimed", {{"job", "17"}, {"worker", "host:42"}}); });
  // ts=YYYY-MM-DDTHH:MM:SS.mmmZ, UTC with milliseconds.
  ASSERT_GE(line.size(), 28u);
  const std::string ts = line.substr(3, line.find(' ') - 3);
  EXPECT_EQ(ts.size(), 24u) << ts;
  EXPECT_EQ(ts[4], '-');
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts[19], '.');
  EXPECT_EQ(ts.back(), 'Z');
  EXPECT_EQ(WithoutTimestamp(line), "event=job_claimed job=17 worker=host:42\n");
  // Exactly one line.
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(LogEventTest, AnEventWithoutFields) {
  EXPECT_EQ(WithoutTimestamp(CaptureStderr([] { LogEvent("replica_follower_reconnected", {}); })),
            "event=replica_follower_reconnected\n");
}

TEST(LogEventTest, ValuesWithSpacesQuotesOrSeparatorsAreQuotedAndEscaped) {
  const std::string line = CaptureStderr([] {
    LogEvent("e", {{"error", "connection refused"},
                   {"quote", "say \"hi\""},
                   {"eq", "a=b"},
                   {"tab", "a\tb"},
                   {"newline", "a\nb"},
                   {"empty", ""},
                   {"slash", "back\\slash with space"},
                   {"plain", "back\\slash"}});
  });
  EXPECT_EQ(WithoutTimestamp(line),
            "event=e error=\"connection refused\" quote=\"say \\\"hi\\\"\" eq=\"a=b\" "
            "tab=\"a\tb\" newline=\"a\\nb\" empty=\"\" slash=\"back\\\\slash with space\" "
            "plain=back\\slash\n");
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "a value's newline must not end the line";
}

// Promise (log.h: "Values with spaces or quotes are quoted"): a quote alone makes a value
// quoted, and the quote inside is escaped.
TEST(LogEventTest, AQuoteWithoutSpacesStillQuotesTheValue) {
  EXPECT_EQ(WithoutTimestamp(CaptureStderr([] {
              LogEvent("e", {{"name", "a\"b"}});
            })),
            "event=e name=\"a\\\"b\"\n");
}

// Promise (log.h: `ts=...`, and the "Z" the timestamp ends with): the time is UTC, not the
// machine's zone. In New York (UTC-5 or UTC-4) the line still reads the current UTC instant.
TEST(LogEventTest, TheTimestampIsUtcWhateverTheLocalZone) {
  const char* old_tz = std::getenv("TZ");
  const std::string saved = old_tz == nullptr ? "" : old_tz;
  setenv("TZ", "America/New_York", 1);
  const absl::Time before = absl::Now();
  const std::string line = CaptureStderr([] { LogEvent("e", {}); });
  const absl::Time after = absl::Now();
  if (old_tz == nullptr) {
    unsetenv("TZ");
  } else {
    setenv("TZ", saved.c_str(), 1);
  }
  const std::string ts = line.substr(3, line.find(' ') - 3);
  absl::Time logged;
  std::string error;
  ASSERT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E3SZ", ts, absl::UTCTimeZone(), &logged, &error))
      << ts << ": " << error;
  // Milliseconds are kept, so the logged instant is at most 1 ms before `before`.
  EXPECT_GE(logged, before - absl::Milliseconds(1)) << ts;
  EXPECT_LE(logged, after) << ts;
}

}  // namespace
}  // namespace verity::server
