#include "server/observability/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace verity::server {
namespace {

// Registration and arity errors are bugs in the server, found by its first test run.
[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metrics: %s\n", message.c_str());
  std::abort();
}

bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void AtomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

// Label values: backslash, double quote and newline escaped.
void AppendEscapedLabelValue(std::string& out, const std::string& value) {
  for (char c : value) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '"') {
      out.append("\\\"");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
}

// HELP text: backslash and newline escaped.
void AppendEscapedHelp(std::string& out, const std::string& help) {
  for (char c : help) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
}

const char* TypeName(metrics_internal::Kind kind) {
  switch (kind) {
    case metrics_internal::Kind::kCounter:
      return "counter";
    case metrics_internal::Kind::kGauge:
    case metrics_internal::Kind::kCallbackGauge:
      return "gauge";
    case metrics_internal::Kind::kHistogram:
      return "histogram";
  }
  return "untyped";
}

class CallbackGaugeFamily final : public metrics_internal::FamilyBase {
 public:
  CallbackGaugeFamily(std::string name, std::string help, std::vector<std::string> label_names,
                      std::function<std::vector<GaugeSample>()> collect)
      : FamilyBase(metrics_internal::Kind::kCallbackGauge, std::move(name), std::move(help),
                   std::move(label_names)),
        collect_(std::move(collect)) {}

 protected:
  void RenderSamples(std::string& out) const override {
    std::vector<GaugeSample> samples = collect_();
    std::sort(samples.begin(), samples.end(),
              [](const GaugeSample& a, const GaugeSample& b) { return a.labels < b.labels; });
    for (const GaugeSample& sample : samples) {
      CheckArity(sample.labels);
      metrics_internal::AppendSample(out, name(), label_names(), sample.labels, sample.value);
    }
  }

 private:
  const std::function<std::vector<GaugeSample>()> collect_;
};

}  // namespace

void Counter::Increment(double amount) {
  if (!(amount >= 0)) return;
  AtomicAdd(value_, amount);
}

void Gauge::Add(double amount) { AtomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), bucket_counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // The first bucket whose bound is >= value; NaN counts in +Inf only.
  const size_t bucket =
      std::isnan(value) ? bounds_.size()
                        : std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  snapshot.cumulative.reserve(bucket_counts_.size());
  uint64_t running = 0;
  for (uint64_t n : bucket_counts_) {
    running += n;
    snapshot.cumulative.push_back(running);
  }
  snapshot.sum = sum_;
  snapshot.count = count_;
  return snapshot;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> TrainingDurationBuckets() {
  return {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800};
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buffer[64];
  std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

const char* StatusCodeName(int code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  if (code < 0 || code >= static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return "UNKNOWN";
  return kNames[code];
}

namespace metrics_internal {

void FamilyBase::Render(std::string& out) const {
  absl::StrAppend(&out, "# HELP ", name_, " ");
  AppendEscapedHelp(out, help_);
  absl::StrAppend(&out, "\n# TYPE ", name_, " ", TypeName(kind_), "\n");
  RenderSamples(out);
}

void FamilyBase::CheckArity(const LabelValues& values) const {
  if (values.size() != label_names_.size()) {
    Die(absl::StrCat(name_, ": ", values.size(), " label values for ", label_names_.size(),
                     " label names"));
  }
}

void AppendLabels(std::string& out, const std::vector<std::string>& names,
                  const LabelValues& values, const char* extra_name,
                  const std::string& extra_value) {
  if (names.empty() && extra_name == nullptr) return;
  out.push_back('{');
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, names[i], "=\"");
    AppendEscapedLabelValue(out, values[i]);
    out.push_back('"');
  }
  if (extra_name != nullptr) {
    if (!names.empty()) out.push_back(',');
    absl::StrAppend(&out, extra_name, "=\"");
    AppendEscapedLabelValue(out, extra_value);
    out.push_back('"');
  }
  out.push_back('}');
}

void AppendSample(std::string& out, const std::string& name, const std::vector<std::string>& names,
                  const LabelValues& values, double value) {
  out.append(name);
  AppendLabels(out, names, values);
  absl::StrAppend(&out, " ", FormatMetricValue(value), "\n");
}

void AppendHistogram(std::string& out, const std::string& name,
                     const std::vector<std::string>& names, const LabelValues& values,
                     const Histogram::Snapshot& snapshot) {
  const std::string bucket_name = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i < snapshot.cumulative.size(); ++i) {
    const std::string le =
        i < snapshot.bounds.size() ? FormatMetricValue(snapshot.bounds[i]) : "+Inf";
    out.append(bucket_name);
    AppendLabels(out, names, values, "le", le);
    absl::StrAppend(&out, " ", snapshot.cumulative[i], "\n");
  }
  absl::StrAppend(&out, name, "_sum");
  AppendLabels(out, names, values);
  absl::StrAppend(&out, " ", FormatMetricValue(snapshot.sum), "\n", name, "_count");
  AppendLabels(out, names, values);
  absl::StrAppend(&out, " ", snapshot.count, "\n");
}

}  // namespace metrics_internal

metrics_internal::FamilyBase& MetricsRegistry::Register(
    std::unique_ptr<metrics_internal::FamilyBase> family) {
  const std::string& name = family->name();
  if (!IsValidName(name, /*allow_colon=*/true))
    Die(absl::StrCat("invalid metric name \"", name, "\""));
  for (const std::string& label : family->label_names()) {
    const bool reserved = label.rfind("__", 0) == 0 ||
                          (family->kind() == metrics_internal::Kind::kHistogram && label == "le");
    if (!IsValidName(label, /*allow_colon=*/false) || reserved) {
      Die(absl::StrCat(name, ": invalid label name \"", label, "\""));
    }
  }
  if (const std::vector<double>* bounds = family->bounds()) {
    for (size_t i = 0; i < bounds->size(); ++i) {
      if (!std::isfinite((*bounds)[i]) || (i > 0 && (*bounds)[i] <= (*bounds)[i - 1])) {
        Die(absl::StrCat(name, ": bucket bounds must be finite and strictly increasing"));
      }
    }
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = families_.emplace(name, nullptr);
  if (inserted) {
    it->second = std::move(family);
    return *it->second;
  }
  const metrics_internal::FamilyBase& existing = *it->second;
  const bool same_bounds =
      (existing.bounds() == nullptr) == (family->bounds() == nullptr) &&
      (existing.bounds() == nullptr || *existing.bounds() == *family->bounds());
  if (existing.kind() != family->kind() ||
      existing.kind() == metrics_internal::Kind::kCallbackGauge ||
      existing.label_names() != family->label_names() || !same_bounds) {
    Die(absl::StrCat("metric \"", name, "\" registered twice differently"));
  }
  return *it->second;
}

MetricFamily<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                                   std::vector<std::string> label_names) {
  const bool unlabelled = label_names.empty();
  auto& family = static_cast<MetricFamily<Counter>&>(Register(
      std::make_unique<MetricFamily<Counter>>(metrics_internal::Kind::kCounter, name, help,
                                              std::move(label_names), std::vector<double>())));
  if (unlabelled) family.Get();
  return family;
}

MetricFamily<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                               std::vector<std::string> label_names) {
  const bool unlabelled = label_names.empty();
  auto& family = static_cast<MetricFamily<Gauge>&>(Register(std::make_unique<MetricFamily<Gauge>>(
      metrics_internal::Kind::kGauge, name, help, std::move(label_names), std::vector<double>())));
  if (unlabelled) family.Get();
  return family;
}

MetricFamily<Histogram>& MetricsRegistry::AddHistogram(const std::string& name,
                                                       const std::string& help,
                                                       std::vector<std::string> label_names,
                                                       std::vector<double> bounds) {
  const bool unlabelled = label_names.empty();
  auto& family = static_cast<MetricFamily<Histogram>&>(Register(
      std::make_unique<MetricFamily<Histogram>>(metrics_internal::Kind::kHistogram, name, help,
                                                std::move(label_names), std::move(bounds))));
  if (unlabelled) family.Get();
  return family;
}

void MetricsRegistry::AddCallbackGauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names,
                                       std::function<std::vector<GaugeSample>()> collect) {
  Register(std::make_unique<CallbackGaugeFamily>(name, help, std::move(label_names),
                                                 std::move(collect)));
}

std::string MetricsRegistry::RenderText() const {
  // Families are never removed, so rendering outside mu_ (callbacks may be slow) is safe.
  std::vector<const metrics_internal::FamilyBase*> families;
  {
    absl::MutexLock lock(&mu_);
    families.reserve(families_.size());
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  std::string out;
  for (const metrics_internal::FamilyBase* family : families) family->Render(out);
  return out;
}

}  // namespace verity::server
