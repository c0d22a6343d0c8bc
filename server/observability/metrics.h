// MetricsRegistry: the server's Prometheus metrics — counters, gauges and histograms with
// fixed buckets, each a family of children keyed by label values — rendered in the text
// exposition format 0.0.4 (what a Prometheus server scrapes from /metrics; see
// server/observability/metrics_http.h).
//
// Components get a family once (at construction) and keep the child references: a child lives
// as long as its registry, so the hot path is an atomic add (counters, gauges) or a short
// uncontended lock (histograms), never a map lookup. Label sets are never removed, so label
// values must come from a small set (method names, status codes, project names), never from
// requests' free text.
//
// Registering a name twice with the same kind, label names (and buckets) returns the family
// already registered; registering it as something else, an invalid metric or label name, or
// asking a family for the wrong number of label values is a programming error and aborts.
//
// Thread-safety: everything is thread-safe. Callback gauges run on the thread that renders,
// under no lock of the registry's (they may take their own).
#ifndef VERITY_SERVER_OBSERVABILITY_METRICS_H_
#define VERITY_SERVER_OBSERVABILITY_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace verity::server {

// The values of one child's labels, in the order of its family's label names.
using LabelValues = std::vector<std::string>;

// A value that only goes up (events, seconds spent). Thread-safe.
class Counter {
 public:
  // `amount` must be >= 0; a negative amount is ignored (counters never go down).
  void Increment(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, connections open). Thread-safe.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (cumulative `le` upper bounds, plus +Inf), with
// their sum and count. Thread-safe.
class Histogram {
 public:
  // `bounds`: strictly increasing finite upper bounds (checked by the registry).
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value) ABSL_LOCKS_EXCLUDED(mu_);

  struct Snapshot {
    std::vector<double> bounds;
    // cumulative[i]: observations <= bounds[i]; the last entry (+Inf) equals count.
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };
  // A consistent view: count and the +Inf bucket always agree.
  Snapshot snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> bucket_counts_ ABSL_GUARDED_BY(mu_);  // Not cumulative; +Inf last.
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bucket bounds in seconds for request and commit latencies: 1 ms to 10 s.
std::vector<double> LatencyBuckets();
// Bucket bounds in seconds for model fits: 10 ms to 30 min.
std::vector<double> TrainingDurationBuckets();

namespace metrics_internal {

enum class Kind { kCounter, kGauge, kHistogram, kCallbackGauge };

class FamilyBase {
 public:
  FamilyBase(Kind kind, std::string name, std::string help, std::vector<std::string> label_names)
      : kind_(kind),
        name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;

  Kind kind() const { return kind_; }
  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  virtual const std::vector<double>* bounds() const { return nullptr; }

  // Appends the family's HELP, TYPE and sample lines.
  void Render(std::string& out) const;

 protected:
  virtual void RenderSamples(std::string& out) const = 0;
  void CheckArity(const LabelValues& values) const;

 private:
  const Kind kind_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

}  // namespace metrics_internal

// The children of one metric name, one per distinct set of label values.
template <typename Metric>
class MetricFamily final : public metrics_internal::FamilyBase {
 public:
  // The child for `values` (one value per label name), created at zero on first use. The
  // reference is valid for the registry's lifetime.
  Metric& WithLabels(const LabelValues& values) ABSL_LOCKS_EXCLUDED(mu_);
  // The only child of a family without labels.
  Metric& Get() { return WithLabels({}); }

  MetricFamily(metrics_internal::Kind kind, std::string name, std::string help,
               std::vector<std::string> label_names, std::vector<double> bounds)
      : FamilyBase(kind, std::move(name), std::move(help), std::move(label_names)),
        bounds_(std::move(bounds)) {}

  const std::vector<double>* bounds() const override {
    return std::is_same_v<Metric, Histogram> ? &bounds_ : nullptr;
  }

 protected:
  void RenderSamples(std::string& out) const override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::vector<double> bounds_;  // Histograms only.
  mutable absl::Mutex mu_;
  std::map<LabelValues, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mu_);
};

// One sample of a callback gauge.
struct GaugeSample {
  LabelValues labels;
  double value = 0;
};

class MetricsRegistry {
 public:
  // The Content-Type of RenderText()'s output.
  static constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (not "le" for
  // histograms). A family without labels shows its one child (at 0) from registration on.
  MetricFamily<Counter>& AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names = {});
  MetricFamily<Gauge>& AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names = {});
  MetricFamily<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds);

  // A gauge whose samples `collect` returns at every render: for values another object
  // already keeps (connections open, projects' model versions), so nothing goes stale when a
  // label set disappears. `collect` must stay callable for the registry's lifetime, or at
  // least for as long as anything renders it.
  void AddCallbackGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names,
                        std::function<std::vector<GaugeSample>()> collect);

  // Every family sorted by name, in the text exposition format 0.0.4.
  std::string RenderText() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  metrics_internal::FamilyBase& Register(std::unique_ptr<metrics_internal::FamilyBase> family)
      ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<metrics_internal::FamilyBase>> families_
      ABSL_GUARDED_BY(mu_);
};

// The canonical name of a gRPC status code ("OK", "NOT_FOUND", ...), as a metric label.
const char* StatusCodeName(int code);

// Formats a sample value the way Prometheus reads it: integers without a fraction,
// "+Inf"/"-Inf"/"NaN", otherwise the shortest text that reads back as the same double.
std::string FormatMetricValue(double value);

// --- Implementation details. ---

namespace metrics_internal {
void AppendLabels(std::string& out, const std::vector<std::string>& names,
                  const LabelValues& values, const char* extra_name = nullptr,
                  const std::string& extra_value = "");
void AppendSample(std::string& out, const std::string& name, const std::vector<std::string>& names,
                  const LabelValues& values, double value);
void AppendHistogram(std::string& out, const std::string& name,
                     const std::vector<std::string>& names, const LabelValues& values,
                     const Histogram::Snapshot& snapshot);
}  // namespace metrics_internal

template <typename Metric>
Metric& MetricFamily<Metric>::WithLabels(const LabelValues& values) {
  CheckArity(values);
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Metric>& child = children_[values];
  if (child == nullptr) {
    if constexpr (std::is_same_v<Metric, Histogram>) {
      child = std::make_unique<Histogram>(bounds_);
    } else {
      child = std::make_unique<Metric>();
    }
  }
  return *child;
}

template <typename Metric>
void MetricFamily<Metric>::RenderSamples(std::string& out) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [values, child] : children_) {
    if constexpr (std::is_same_v<Metric, Histogram>) {
      metrics_internal::AppendHistogram(out, name(), label_names(), values, child->snapshot());
    } else {
      metrics_internal::AppendSample(out, name(), label_names(), values, child->value());
    }
  }
}

}  // namespace verity::server

#endif  // VERITY_SERVER_OBSERVABILITY_METRICS_H_
