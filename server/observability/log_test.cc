// LogEvent (log.h): one line per event on stderr, `ts=... event=NAME key=value ...`, values
// with spaces or quotes quoted.
#include "server/observability/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace verity::server
