#include "server/observability/log.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace verity::server {
namespace {

void AppendValue(std::string& line, absl::string_view value) {
  const bool quote = value.empty() || value.find_first_of(" \"=\t\n") != absl::string_view::npos;
  if (!quote) {
    line.append(value.data(), value.size());
    return;
  }
  line.push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') line.push_back('\\');
    if (c == '\n') {
      line.append("\\n");
      continue;
    }
    line.push_back(c);
  }
  line.push_back('"');
}

}  // namespace

void LogEvent(absl::string_view event,
              std::initializer_list<std::pair<absl::string_view, std::string>> fields) {
  std::string line = absl::StrCat(
      "ts=", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
      " event=", event);
  for (const auto& [key, value] : fields) {
    absl::StrAppend(&line, " ", key, "=");
    AppendValue(line, value);
  }
  line.push_back('\n');
  ssize_t unused = write(STDERR_FILENO, line.data(), line.size());
  (void)unused;
}

}  // namespace verity::server
