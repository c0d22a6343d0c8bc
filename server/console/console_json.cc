#include "server/console/console_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace verity::server {

std::string JsonQuote(absl::string_view value) {
  std::string out = "\"";
  for (const char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!has_element_.empty()) {
    if (has_element_.back()) out_ += ',';
    has_element_.back() = true;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  Separate();
  out_ += '{';
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  out_ += '}';
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  Separate();
  out_ += '[';
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  out_ += ']';
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(absl::string_view key) {
  Separate();
  out_ += JsonQuote(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(absl::string_view value) {
  Separate();
  out_ += JsonQuote(value);
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  Separate();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  Separate();
  if (!std::isfinite(value)) {
    out_ += "null";
    return *this;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  out_ += text;
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::Null() {
  Separate();
  out_ += "null";
  return *this;
}

void WriteHistory(absl::Span<const ProjectSample> samples, JsonWriter& json) {
  json.BeginObject();
  json.Key("time_ms").BeginArray();
  for (const ProjectSample& s : samples) json.Int(absl::ToUnixMillis(s.time));
  json.EndArray();
  json.Key("labels").BeginArray();
  for (const ProjectSample& s : samples) json.Int(s.labels);
  json.EndArray();
  json.Key("labels_per_second").BeginArray();
  for (size_t i = 0; i < samples.size(); ++i) {
    const double seconds = i == 0 ? 0 : absl::ToDoubleSeconds(samples[i].time - samples[i - 1].time);
    if (seconds <= 0) {
      json.Null();
    } else {
      json.Double(std::max<int64_t>(0, samples[i].labels - samples[i - 1].labels) / seconds);
    }
  }
  json.EndArray();
  json.Key("resolved_share").BeginArray();
  for (const ProjectSample& s : samples) {
    if (s.resolved_share.has_value()) {
      json.Double(*s.resolved_share);
    } else {
      json.Null();
    }
  }
  json.EndArray();
  json.EndObject();
}

Reliability ComputeReliability(absl::Span<const double> confidence,
                               absl::Span<const bool> correct, int32_t num_bins) {
  Reliability out;
  out.bins.resize(num_bins);
  int64_t right = 0;
  for (size_t i = 0; i < confidence.size(); ++i) {
    const double c = std::clamp(confidence[i], 0.0, 1.0);
    const int32_t b = std::min(num_bins - 1, static_cast<int32_t>(c * num_bins));
    ReliabilityBin& bin = out.bins[b];
    ++bin.count;
    bin.mean_confidence += c;  // Sums until the division below.
    if (correct[i]) {
      bin.accuracy += 1;
      ++right;
    }
  }
  out.count = static_cast<int64_t>(confidence.size());
  if (out.count == 0) return out;
  out.accuracy = static_cast<double>(right) / out.count;
  for (ReliabilityBin& bin : out.bins) {
    if (bin.count == 0) continue;
    bin.mean_confidence /= bin.count;
    bin.accuracy /= bin.count;
    out.expected_calibration_error += static_cast<double>(bin.count) / out.count *
                                      std::abs(bin.accuracy - bin.mean_confidence);
  }
  return out;
}

void WriteReliability(const Reliability& reliability, JsonWriter& json) {
  const int32_t n = static_cast<int32_t>(reliability.bins.size());
  json.BeginObject();
  json.Key("count").Int(reliability.count);
  json.Key("accuracy").Double(reliability.accuracy);
  json.Key("expected_calibration_error").Double(reliability.expected_calibration_error);
  json.Key("bins").BeginArray();
  for (int32_t b = 0; b < n; ++b) {
    const ReliabilityBin& bin = reliability.bins[b];
    json.BeginObject();
    json.Key("low").Double(static_cast<double>(b) / n);
    json.Key("high").Double(static_cast<double>(b + 1) / n);
    json.Key("count").Int(bin.count);
    json.Key("mean_confidence");
    bin.count > 0 ? json.Double(bin.mean_confidence) : json.Null();
    json.Key("accuracy");
    bin.count > 0 ? json.Double(bin.accuracy) : json.Null();
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
}

namespace {

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0;
  for (size_t j = 0; j < a.size(); ++j) sum += a[j] * b[j];
  return sum;
}

// `v` minus its projection on each (unit) vector of `basis`.
void RemoveComponents(const std::vector<std::vector<double>>& basis, std::vector<double>& v) {
  for (const std::vector<double>& u : basis) {
    const double along = Dot(u, v);
    for (size_t j = 0; j < v.size(); ++j) v[j] -= along * u[j];
  }
}

}  // namespace

std::vector<std::array<double, 2>> PrincipalComponents2D(
    const std::vector<std::vector<float>>& rows) {
  if (rows.empty() || rows[0].empty()) return {};
  const size_t d = rows[0].size();
  const size_t n = rows.size();
  for (const std::vector<float>& row : rows) {
    if (row.size() != d) return {};
  }
  std::vector<double> mean(d, 0);
  for (const std::vector<float>& row : rows) {
    for (size_t j = 0; j < d; ++j) mean[j] += row[j];
  }
  for (double& m : mean) m /= n;
  std::vector<std::vector<double>> x(n, std::vector<double>(d));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < d; ++j) x[i][j] = rows[i][j] - mean[j];
  }

  std::vector<std::vector<double>> components;
  for (size_t c = 0; c < std::min<size_t>(2, d); ++c) {
    // Start from the row farthest from the span of the components found: it has a part along
    // the next component unless the rows have no variance left at all.
    std::vector<double> v;
    double best_norm = 0;
    for (const std::vector<double>& row : x) {
      std::vector<double> residual = row;
      RemoveComponents(components, residual);
      const double norm = std::sqrt(Dot(residual, residual));
      if (norm > best_norm) {
        best_norm = norm;
        v = std::move(residual);
      }
    }
    if (best_norm < 1e-12) break;
    for (double& value : v) value /= best_norm;
    for (int32_t step = 0; step < kMaxPowerIterations; ++step) {
      // w = X^T X v, kept orthogonal to the components found.
      std::vector<double> w(d, 0);
      for (const std::vector<double>& row : x) {
        const double along = Dot(row, v);
        for (size_t j = 0; j < d; ++j) w[j] += along * row[j];
      }
      RemoveComponents(components, w);
      const double norm = std::sqrt(Dot(w, w));
      if (norm < 1e-300) break;
      double change = 0;
      for (size_t j = 0; j < d; ++j) {
        w[j] /= norm;
        change += (w[j] - v[j]) * (w[j] - v[j]);
      }
      v = std::move(w);
      if (change < 1e-24) break;
    }
    size_t largest = 0;
    for (size_t j = 1; j < d; ++j) {
      if (std::abs(v[j]) > std::abs(v[largest]) + 1e-9) largest = j;
    }
    if (v[largest] < 0) {
      for (double& value : v) value = -value;
    }
    components.push_back(std::move(v));
  }
  std::vector<std::array<double, 2>> out(n, {0.0, 0.0});
  for (size_t i = 0; i < n; ++i) {
    for (size_t c = 0; c < components.size(); ++c) out[i][c] = Dot(x[i], components[c]);
  }
  return out;
}

}  // namespace verity::server
