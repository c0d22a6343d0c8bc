// Structured logging: one line per event on stderr, `ts=... event=NAME key=value ...`.
// Values with spaces or quotes are quoted. Thread-safe (each line is one write).
#ifndef VERITY_SERVER_OBSERVABILITY_LOG_H_
#define VERITY_SERVER_OBSERVABILITY_LOG_H_

#include <initializer_list>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>

namespace verity::server {

void LogEvent(absl::string_view event,
              std::initializer_list<std::pair<absl::string_view, std::string>> fields);

}  // namespace verity::server

#endif  // VERITY_SERVER_OBSERVABILITY_LOG_H_
