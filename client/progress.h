// Progress display of long CLI operations: a one-line meter redrawn in place
// on a terminal, with count, rate and estimated time left (`verity submit`,
// `verity export`), and an elapsed-time line for a blocking call whose length
// is unknown (`verity model train`).
//
// The formatting functions are pure. A ProgressMeter writes to one stream and
// is not thread-safe: call it from one thread (the submitter's progress
// callback runs on the submitting thread). An ElapsedTicker draws from its own
// thread; nothing else may write to its stream until Finish returns.

#ifndef VERITY_CLIENT_PROGRESS_H_
#define VERITY_CLIENT_PROGRESS_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace verity::client {

// 1234567 → "1,234,567"; negative numbers keep their sign.
std::string FormatCount(int64_t n);

// A short duration for an ETA: "0s", "42s", "3m05s", "2h07m" (rounded down to
// the unit shown).
std::string FormatEta(absl::Duration d);

// The meter line, e.g.
//   "45,000/96,883 labels (46%)  52,310 labels/s  ETA 1s"
// The rate is done / elapsed; before anything is done, or within the first
// millisecond, rate and ETA are shown as "--". `total` 0 shows 100%; a
// `done` beyond `total` (the total was an estimate) counts as the total.
std::string FormatProgress(int64_t done, int64_t total, absl::Duration elapsed,
                           const std::string& unit);

// Redraws FormatProgress on `out` with "\r" and an erase-to-end-of-line
// escape, at most once per `min_interval` (the last update before Finish may
// be skipped; Finish erases the line so later output starts clean).
class ProgressMeter {
 public:
  struct Options {
    std::string unit = "labels";
    absl::Duration min_interval = absl::Milliseconds(100);
    // The clock; tests inject a fake one.
    std::function<absl::Time()> now = [] { return absl::Now(); };
  };

  ProgressMeter(std::ostream& out, int64_t total, Options options);
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  void Update(int64_t done);
  // Erases the meter line (if one was drawn).
  void Finish();

 private:
  std::ostream& out_;
  const int64_t total_;
  const Options options_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  bool drawn_ = false;
};

// While a blocking call runs, shows "<label> 1m05s" on `out`, redrawn in
// place every `interval` from a background thread: the first line is drawn
// by the constructor, so a call that returns at once still shows it. Finish
// (or the destructor) stops the thread and erases the line.
class ElapsedTicker {
 public:
  ElapsedTicker(std::ostream& out, std::string label,
                absl::Duration interval = absl::Seconds(1));
  ~ElapsedTicker();
  ElapsedTicker(const ElapsedTicker&) = delete;
  ElapsedTicker& operator=(const ElapsedTicker&) = delete;

  // Idempotent.
  void Finish();

 private:
  void Draw() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Run();

  std::ostream& out_;
  const std::string label_;
  const absl::Duration interval_;
  const absl::Time start_;
  absl::Mutex mutex_;
  bool done_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace verity::client

#endif  // VERITY_CLIENT_PROGRESS_H_
