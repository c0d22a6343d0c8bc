#include "models/mmsr.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/binary_codec.h"
#include "models/confusion_parameters.h"

namespace verity::models {
namespace {

using Entry = AnnotationMatrix::Entry;

// Python's slice bounds: a negative bound counts from the end; both clamped
// into [0, n].
int64_t PythonIndex(int64_t index, int64_t n) {
  if (index < 0) index += n;
  return std::clamp<int64_t>(index, 0, n);
}

// The ranks [begin, end) that crowd-kit's _remove_largest_and_smallest_F_value
// keeps of n values sorted ascending, `below` of them < a (the current
// estimate) and `above` of them > a.
struct KeptRanks {
  int64_t begin;
  int64_t end;
};

KeptRanks RanksKept(int64_t n, int64_t below, int64_t above, int64_t f) {
  const int64_t begin = below < f ? below : PythonIndex(f, n);
  const int64_t m = n - begin;
  // The values > a are the last `above` of the sorted ones.
  const int64_t above_kept = std::min(above, m);
  const int64_t end = above_kept < f ? n - above_kept : begin + PythonIndex(m - f, m);
  return {begin, end};
}

// One MSR half-step for one row: the trimmed mean of {|C_jq| / other_q} over
// the observed partners q of annotator j. crowd-kit sorts these values; only
// the kept ranks matter, so they are selected instead (std::nth_element) and
// then sorted and summed in ascending order, which gives the sorting
// implementation's sum bit for bit.
//
// Near convergence the kept values lie close to the current estimate, so each
// row keeps a window [a - width, a + width] around its estimate: the values
// inside it are copied aside as the pass counts the ones below and above, and
// when the kept ranks fall inside the window only those few are selected from.
// Otherwise (the first iterations, or a window that turned out too narrow)
// the selection runs over all the row's values. Either way the kept multiset
// is the same, hence so is the result; the window only saves time.
class TrimmedMeanRows {
 public:
  // Rows are split over up to num_threads threads, one per kPairsPerThread
  // observed pairs at most; each row's result depends on nothing else, so the
  // estimates are the same for any number of threads.
  TrimmedMeanRows(const std::vector<size_t>& first, const std::vector<int32_t>& partner,
                  const std::vector<double>& magnitude, int64_t f, int64_t num_tasks,
                  int num_threads)
      : first_(first), partner_(partner), magnitude_(magnitude), f_(f),
        num_tasks_(num_tasks) {
    size_t longest = 0;
    for (size_t j = 0; j + 1 < first.size(); ++j) {
      longest = std::max(longest, first[j + 1] - first[j]);
    }
    const int64_t useful = std::max<int64_t>(
        1, static_cast<int64_t>(partner.size()) / kPairsPerThread);
    scratch_.resize(static_cast<size_t>(std::min<int64_t>(std::max(num_threads, 1), useful)));
    for (Scratch& s : scratch_) {
      s.values.resize(longest);
      s.window.resize(longest);
    }
  }

  // target[j] := the trimmed mean for row j given `other`, for every row
  // (kept as is where nothing is left). `width` holds the rows' window
  // half-widths for this target vector and is updated.
  void Update(std::vector<double>& target, const std::vector<double>& other,
              std::vector<double>& width) {
    // A partner whose estimate fell to 0 says nothing (numpy would divide by
    // it and carry inf or NaN into every estimate): dividing by NaN instead
    // leaves it out of every count below without a branch.
    divisor_.resize(other.size());
    for (size_t q = 0; q < other.size(); ++q) {
      divisor_[q] = other[q] > 0.0 ? other[q] : std::numeric_limits<double>::quiet_NaN();
    }
    const size_t threads = scratch_.size();
    auto run = [&](size_t t) {
      const size_t end = target.size() * (t + 1) / threads;
      for (size_t j = target.size() * t / threads; j < end; ++j) {
        Row(j, target[j], width[j], scratch_[t]);
      }
    };
    std::vector<std::thread> workers;
    workers.reserve(threads - 1);
    for (size_t t = 1; t < threads; ++t) workers.emplace_back(run, t);
    run(0);
    for (std::thread& w : workers) w.join();
  }

 private:
  static constexpr int64_t kPairsPerThread = 100000;

  struct Scratch {
    std::vector<double> values;
    std::vector<double> window;
  };

  void Row(size_t j, double& target, double& width, Scratch& scratch) const {
    const double a = target;
    const double low = a - width, high = a + width;
    int64_t n = 0, below = 0, above = 0, under = 0, over = 0, inside = 0;
    const double* const divisor = divisor_.data();
    double* const window = scratch.window.data();
    for (size_t p = first_[j]; p < first_[j + 1]; ++p) {
      const double y = magnitude_[p] / divisor[partner_[p]];
      n += y == y;
      below += y < a;
      above += y > a;
      under += y < low;
      over += y > high;
      window[inside] = y;
      inside += (y >= low) & (y <= high);
    }
    const KeptRanks kept = RanksKept(n, below, above, f_);
    if (kept.end <= kept.begin) return;
    const bool in_window = kept.begin >= under && kept.end <= n - over;
    double* sorted;
    if (in_window) {
      SelectRanks(window, inside, kept.begin - under, kept.end - under);
      sorted = window + (kept.begin - under);
    } else {
      double* const values = scratch.values.data();
      int64_t m = 0;
      for (size_t p = first_[j]; p < first_[j + 1]; ++p) {
        const double y = magnitude_[p] / divisor[partner_[p]];
        if (y == y) values[m++] = y;
      }
      SelectRanks(values, n, kept.begin, kept.end);
      sorted = values + kept.begin;
    }
    const int64_t count = kept.end - kept.begin;
    if (count == 1 && sorted[0] == 0.0) {
      target = 1.0 / std::sqrt(static_cast<double>(num_tasks_));
    } else {
      double sum = 0.0;
      for (int64_t i = 0; i < count; ++i) sum += sorted[i];
      target = sum / static_cast<double>(count);
    }
    // Next time, a window holding this time's kept values around the new
    // estimate, with room for the estimates' drift (doubled after a miss).
    const double spread = std::max(target - sorted[0], sorted[count - 1] - target);
    const double fitted = 2 * spread + 4 * std::abs(target - a) + 1e-9 * target;
    width = in_window ? fitted : std::max(fitted, 2 * width);
  }

  // Reorders y[0, n) so that y[begin, end) holds the values of those ranks,
  // ascending.
  static void SelectRanks(double* y, int64_t n, int64_t begin, int64_t end) {
    if (begin > 0) std::nth_element(y, y + begin, y + n);
    if (end < n) std::nth_element(y + begin, y + end, y + n);
    std::sort(y + begin, y + end);
  }

  const std::vector<size_t>& first_;
  const std::vector<int32_t>& partner_;
  const std::vector<double>& magnitude_;
  const int64_t f_;
  const int64_t num_tasks_;
  std::vector<double> divisor_;  // per partner: its estimate, NaN where <= 0
  std::vector<Scratch> scratch_;  // per thread
};

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MmsrModel>> MmsrModel::Create(
    int32_t num_classes, const TruthModelOptions& options) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("method mmsr: num_classes must be >= 2, got ", num_classes));
  }
  absl::Status s = ValidateTruthModelOptions(options);
  if (!s.ok()) return s;
  return std::unique_ptr<MmsrModel>(new MmsrModel(num_classes, options));
}

std::unique_ptr<TruthModel> MmsrModel::Clone() const {
  return std::unique_ptr<TruthModel>(new MmsrModel(*this));
}

size_t MmsrModel::SlotOf(int32_t annotator) const {
  const int64_t rows = static_cast<int64_t>(params_->size());
  return annotator >= 0 && annotator + int64_t{1} < rows
             ? static_cast<size_t>(annotator) + 1
             : 0;
}

void MmsrModel::DeriveWeights() {
  const double k = static_cast<double>(num_classes_);
  weights_.resize(params_->size());
  for (size_t i = 0; i < params_->size(); ++i) {
    const double p = (*params_)[i] * (k - 1) / k + 1 / k;
    weights_[i] = std::log(p * (k - 1) / (1 - p));
  }
}

absl::StatusOr<FitReport> MmsrModel::Fit(const AnnotationMatrix& data,
                                         absl::Span<const int32_t> gold,
                                         bool warm_start) {
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = ValidateFitInputs(num_classes_, data, gold);
  if (!s.ok()) return s;
  const double k = static_cast<double>(num_classes_);
  const int32_t num_annotators = data.num_annotators();

  // Dense ids of the annotators with labels (crowd-kit's workers).
  std::vector<int32_t> dense_of(static_cast<size_t>(num_annotators), -1);
  std::vector<int32_t> annotator_of;
  for (int32_t a = 0; a < num_annotators; ++a) {
    if (data.LabelsOfAnnotator(a).empty()) continue;
    dense_of[a] = static_cast<int32_t>(annotator_of.size());
    annotator_of.push_back(a);
  }
  const size_t na = annotator_of.size();
  if (na > static_cast<size_t>(kMaxAnnotators)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "method mmsr keeps an annotators x annotators matrix: ", na,
        " annotators with labels, at most ", kMaxAnnotators));
  }
  int64_t num_tasks = 0;
  std::vector<int32_t> common(na * na, 0), agree(na * na, 0);
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const absl::Span<const Entry> labels = data.LabelsOfItem(i);
    if (labels.empty()) continue;
    ++num_tasks;
    for (const Entry& e : labels) {
      const size_t row = static_cast<size_t>(dense_of[e.other]) * na;
      for (const Entry& f : labels) {
        if (f.other == e.other) continue;
        const size_t cell = row + static_cast<size_t>(dense_of[f.other]);
        ++common[cell];
        agree[cell] += e.label == f.label;
      }
    }
  }
  // Observed pairs, per annotator: |C| and the partner.
  std::vector<size_t> first(na + 1, 0);
  std::vector<int32_t> partner;
  std::vector<double> magnitude;
  int64_t sparsity = na > 0 ? INT64_MAX : 0;
  for (size_t i = 0; i < na; ++i) {
    for (size_t j = 0; j < na; ++j) {
      const int32_t c = common[i * na + j];
      if (c == 0) continue;
      partner.push_back(static_cast<int32_t>(j));
      const double share = static_cast<double>(agree[i * na + j]) / c;
      magnitude.push_back(std::abs(share * k / (k - 1) - 1 / (k - 1)));
    }
    first[i + 1] = partner.size();
    sparsity = std::min<int64_t>(sparsity, static_cast<int64_t>(first[i + 1] - first[i]));
  }
  common = {};
  agree = {};
  const int64_t f = sparsity / 2 - 1;

  // u = v = numpy's RandomState(0).random_sample(na), or the previous |x|.
  std::vector<double> u(na);
  std::mt19937 generator(0);
  for (size_t i = 0; i < na; ++i) {
    const double a = static_cast<double>(generator() >> 5);
    const double b = static_cast<double>(generator() >> 6);
    u[i] = (a * 67108864.0 + b) / 9007199254740992.0;
    if (warm_start && params_.has_value()) {
      const double previous = std::abs((*params_)[SlotOf(annotator_of[i])]);
      if (previous > 0.0) u[i] = previous;
    }
  }
  std::vector<double> v = u;

  FitReport report;
  TrimmedMeanRows rows(first, partner, magnitude, f, num_tasks, options_.num_threads);
  std::vector<double> u_width(na, 0.0), v_width(na, 0.0);
  std::vector<double> u_previous(na), v_previous(na), du(na), dv(na);
  while (report.iterations < kMaxIterations && na > 0) {
    u_previous = u;
    v_previous = v;
    rows.Update(v, u, v_width);
    rows.Update(u, v, u_width);
    ++report.iterations;
    // ||u v^T - u' v'^T||_F^2 with u v^T - u' v'^T = du v^T + u' dv^T, which
    // keeps its precision when the change is small.
    for (size_t i = 0; i < na; ++i) {
      du[i] = u[i] - u_previous[i];
      dv[i] = v[i] - v_previous[i];
    }
    const double loss2 = Dot(du, du) * Dot(v, v) + Dot(u_previous, u_previous) * Dot(dv, dv) +
                         2 * Dot(du, u_previous) * Dot(v, dv);
    if (std::sqrt(std::max(loss2, 0.0)) < kTolerance) {
      report.converged = true;
      break;
    }
  }

  std::vector<double> params(static_cast<size_t>(num_annotators) + 1, 0.0);
  if (na > 0) {
    const double u_norm = std::sqrt(Dot(u, u)), v_norm = std::sqrt(Dot(v, v));
    // Both 0 only when every agreement is at chance: x = 0 for all.
    const double scale = u_norm > 0.0 && v_norm > 0.0 ? std::sqrt(u_norm / v_norm) : 1.0;
    const double root_n = std::sqrt(static_cast<double>(num_tasks));
    double pooled = 0.0;
    for (size_t i = 0; i < na; ++i) {
      double x = std::abs(u[i] / scale);
      x = std::min(x, 1 - 1 / root_n);
      x = std::max(x, -1 / (k - 1) + 1 / root_n);
      params[static_cast<size_t>(annotator_of[i]) + 1] = x;
      pooled += x * static_cast<double>(data.LabelsOfAnnotator(annotator_of[i]).size()) /
                static_cast<double>(data.num_labels());
    }
    params[0] = pooled;
    for (int32_t a = 0; a < num_annotators; ++a) {
      if (dense_of[a] < 0) params[static_cast<size_t>(a) + 1] = pooled;
    }
  }
  params_ = std::move(params);
  DeriveWeights();
  report.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  return report;
}

void MmsrModel::ItemPosterior(absl::Span<const Entry> labels, int32_t gold_label,
                              absl::Span<double> out) const {
  if (!params_.has_value()) {
    SoftMajorityVote(labels, gold_label, options_.vote_smoothing, out);
    return;
  }
  std::fill(out.begin(), out.end(), 0.0);
  if (gold_label >= 0) {
    out[gold_label] = 1.0;
    return;
  }
  std::vector<Entry> scratch;
  for (const Entry& e : CanonicalLabels(labels, scratch)) {
    out[e.label] += weights_[SlotOf(e.other)];
  }
  const double top = *std::max_element(out.begin(), out.end());
  double sum = 0.0;
  for (double& p : out) {
    p = std::exp(p - top);
    sum += p;
  }
  for (double& p : out) p /= sum;
}

std::optional<double> MmsrModel::AnnotatorWeight(int32_t annotator) const {
  if (!params_.has_value()) return std::nullopt;
  return weights_[SlotOf(annotator)];
}

std::vector<double> MmsrModel::AnnotatorConfusion(int32_t annotator) const {
  const int32_t k = num_classes_;
  std::vector<double> q(static_cast<size_t>(k) * k, 1.0 / k);
  if (!params_.has_value()) return q;
  const double p = (*params_)[SlotOf(annotator)] * (k - 1.0) / k + 1.0 / k;
  for (int32_t t = 0; t < k; ++t) {
    for (int32_t y = 0; y < k; ++y) {
      q[static_cast<size_t>(t) * k + y] = t == y ? p : (1.0 - p) / (k - 1);
    }
  }
  return q;
}

std::string MmsrModel::Serialize() const {
  ByteWriter writer;
  WriteModelHeader(writer, kMethod, params_.has_value());
  if (params_.has_value()) {
    writer.WriteU32(static_cast<uint32_t>(num_classes_));
    writer.WriteU32(static_cast<uint32_t>(params_->size() - 1));
    for (double v : *params_) writer.WriteF64(v);
  }
  return writer.Finish();
}

absl::Status MmsrModel::Restore(std::string_view serialized) {
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<bool> has_params = ReadModelHeader(*reader, kMethod);
  if (!has_params.ok()) return has_params.status();
  std::optional<std::vector<double>> params;
  if (*has_params) {
    absl::Status s = ReadClassCount(*reader, num_classes_);
    if (!s.ok()) return s;
    absl::StatusOr<uint32_t> a32 = reader->ReadU32();
    if (!a32.ok()) return a32.status();
    const uint64_t want_bytes = 8 * (static_cast<uint64_t>(*a32) + 1);
    if (*a32 > static_cast<uint32_t>(INT32_MAX - 1) ||
        reader->remaining() < want_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "serialized model is truncated: ", *a32, " annotators need ",
          want_bytes, " bytes, have ", reader->remaining()));
    }
    params.emplace(static_cast<size_t>(*a32) + 1);
    const double low = -1.0 / (num_classes_ - 1);
    for (double& x : *params) {
      absl::StatusOr<double> v = reader->ReadF64();
      if (!v.ok()) return v.status();
      if (!(*v > low && *v < 1.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("serialized model is corrupt: a skill estimate is ", *v));
      }
      x = *v;
    }
  }
  absl::Status s = reader->ExpectEnd();
  if (!s.ok()) return s;
  params_ = std::move(params);
  if (params_.has_value()) {
    DeriveWeights();
  } else {
    weights_.clear();
  }
  return absl::OkStatus();
}

}  // namespace verity::models
