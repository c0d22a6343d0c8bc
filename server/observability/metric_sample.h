// Test support: one sample's value read back from a MetricsRegistry's text exposition, so that
// tests check what a scrape would see rather than the registry's internals.
#ifndef VERITY_SERVER_OBSERVABILITY_METRIC_SAMPLE_H_
#define VERITY_SERVER_OBSERVABILITY_METRIC_SAMPLE_H_

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/observability/metrics.h"

namespace verity::server {

// The value of `series` (a metric's name and labels as rendered, e.g.
// `verity_model_versions_total{method="ds",source="worker"}`) in `metrics.RenderText()`;
// nullopt when that series is not rendered.
inline std::optional<double> MetricSample(const MetricsRegistry& metrics,
                                          absl::string_view series) {
  const std::string text = "\n" + metrics.RenderText();
  const std::string key = absl::StrCat("\n", series, " ");
  const size_t at = text.find(key);
  if (at == std::string::npos) return std::nullopt;
  return std::stod(text.substr(at + key.size()));
}

}  // namespace verity::server

#endif  // VERITY_SERVER_OBSERVABILITY_METRIC_SAMPLE_H_
