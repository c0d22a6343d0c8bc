#include "client/progress.h"

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace verity::client {
namespace {

// Erase from the cursor to the end of the line (ANSI EL).
constexpr char kEraseLine[] = "\x1b[K";

}  // namespace

std::string FormatCount(int64_t n) {
  // Work on the magnitude as unsigned so INT64_MIN is fine.
  const bool negative = n < 0;
  uint64_t magnitude = negative ? uint64_t{0} - static_cast<uint64_t>(n)
                                : static_cast<uint64_t>(n);
  std::string digits = absl::StrCat(magnitude);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return negative ? absl::StrCat("-", out) : out;
}

std::string FormatEta(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds < 60) return absl::StrCat(seconds, "s");
  if (seconds < 3600) {
    return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  }
  return absl::StrFormat("%dh%02dm", seconds / 3600, (seconds % 3600) / 60);
}

std::string FormatProgress(int64_t done, int64_t total, absl::Duration elapsed,
                           const std::string& unit) {
  if (done > total) total = done;
  const int64_t percent = total > 0 ? done * 100 / total : 100;
  std::string line = absl::StrCat(FormatCount(done), "/", FormatCount(total),
                                  " ", unit, " (", percent, "%)");
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (done <= 0 || elapsed < absl::Milliseconds(1)) {
    absl::StrAppend(&line, "  -- ", unit, "/s  ETA --");
    return line;
  }
  const double rate = done / seconds;
  const double left = total > done ? (total - done) / rate : 0.0;
  absl::StrAppend(&line, "  ", FormatCount(std::llround(rate)), " ", unit,
                  "/s  ETA ", FormatEta(absl::Seconds(left)));
  return line;
}

ProgressMeter::ProgressMeter(std::ostream& out, int64_t total, Options options)
    : out_(out),
      total_(total),
      options_(std::move(options)),
      start_(options_.now()) {}

void ProgressMeter::Update(int64_t done) {
  const absl::Time now = options_.now();
  if (now - last_draw_ < options_.min_interval) return;
  last_draw_ = now;
  out_ << '\r' << FormatProgress(done, total_, now - start_, options_.unit)
       << kEraseLine << std::flush;
  drawn_ = true;
}

void ProgressMeter::Finish() {
  if (!drawn_) return;
  out_ << '\r' << kEraseLine << std::flush;
  drawn_ = false;
}

ElapsedTicker::ElapsedTicker(std::ostream& out, std::string label,
                             absl::Duration interval)
    : out_(out),
      label_(std::move(label)),
      interval_(interval),
      start_(absl::Now()) {
  {
    absl::MutexLock lock(&mutex_);
    Draw();
  }
  thread_ = std::thread([this] { Run(); });
}

ElapsedTicker::~ElapsedTicker() { Finish(); }

void ElapsedTicker::Finish() {
  {
    absl::MutexLock lock(&mutex_);
    if (done_) return;
    done_ = true;
  }
  thread_.join();
  out_ << '\r' << kEraseLine << std::flush;
}

void ElapsedTicker::Draw() {
  out_ << '\r' << label_ << " " << FormatEta(absl::Now() - start_) << kEraseLine
       << std::flush;
}

void ElapsedTicker::Run() {
  absl::MutexLock lock(&mutex_);
  // AwaitWithTimeout returns true once done_ is set, false on a timeout.
  while (!mutex_.AwaitWithTimeout(absl::Condition(&done_), interval_)) {
    Draw();
  }
}

}  // namespace verity::client
