#include "models/auto_truth_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "models/binary_codec.h"
#include "models/ebcc.h"

namespace verity::models {
namespace {

constexpr uint32_t kFormatVersion = 1;
constexpr double kMinProbability = 1e-12;

// The data selection runs on: all of it, or every n-th item above kMaxSelectionLabels labels
// (annotators keep their ids; items are renumbered).
struct SelectionData {
  AnnotationMatrix data;
  std::vector<int32_t> gold;  // empty or data.num_items()
};

absl::StatusOr<SelectionData> Subsample(const AnnotationMatrix& data,
                                        absl::Span<const int32_t> gold) {
  const int64_t stride =
      (data.num_labels() + AutoTruthModel::kMaxSelectionLabels - 1) /
      AutoTruthModel::kMaxSelectionLabels;
  SelectionData out;
  if (stride <= 1) {
    out.data = data;
    out.gold.assign(gold.begin(), gold.end());
    return out;
  }
  std::vector<Annotation> annotations;
  int32_t items = 0;
  for (int32_t i = 0; i < data.num_items(); i += static_cast<int32_t>(stride), ++items) {
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      annotations.push_back({items, e.other, e.label});
    }
    if (!gold.empty()) out.gold.push_back(gold[i]);
  }
  absl::StatusOr<AnnotationMatrix> sub =
      AnnotationMatrix::Build(items, data.num_annotators(), data.num_classes(), annotations);
  if (!sub.ok()) return sub.status();
  out.data = *std::move(sub);
  return out;
}

int32_t ArgMax(absl::Span<const double> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Fills scores[c].accuracy / log_loss by gold cross-validation. Returns the gold items scored.
int64_t ScoreByGold(const AnnotationMatrix& data, absl::Span<const int32_t> gold,
                    const TruthModelOptions& options,
                    const AutoTruthModel::CandidateFactory& factory,
                    std::vector<AutoCandidateScore>& scores) {
  std::vector<int32_t> gold_items;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    if (gold[i] >= 0 && !data.LabelsOfItem(i).empty()) gold_items.push_back(i);
  }
  std::mt19937_64 rng(AutoTruthModel::kSeed);
  std::shuffle(gold_items.begin(), gold_items.end(), rng);
  const int32_t k = data.num_classes();
  std::vector<double> row(k);
  // Per candidate, 1 for each gold item (in gold_items order) it gets right.
  std::vector<std::vector<int>> right(scores.size(), std::vector<int>(gold_items.size(), 0));
  for (size_t s = 0; s < scores.size(); ++s) {
    AutoCandidateScore& score = scores[s];
    int64_t correct = 0;
    double log_loss = 0.0;
    bool ok = true;
    for (int fold = 0; fold < AutoTruthModel::kGoldFolds && ok; ++fold) {
      std::vector<int32_t> fit_gold(gold.begin(), gold.end());
      for (size_t g = fold; g < gold_items.size(); g += AutoTruthModel::kGoldFolds) {
        fit_gold[gold_items[g]] = -1;  // the held-out fold's gold never reaches the fit
      }
      absl::StatusOr<std::unique_ptr<TruthModel>> model = factory(score.method, k, options);
      if (!model.ok() || !(*model)->Fit(data, fit_gold, /*warm_start=*/false).ok()) {
        ok = false;
        break;
      }
      for (size_t g = fold; g < gold_items.size(); g += AutoTruthModel::kGoldFolds) {
        const int32_t item = gold_items[g];
        (*model)->ItemPosteriorForItem(item, data.LabelsOfItem(item), /*gold_label=*/-1,
                                       absl::MakeSpan(row));
        if (ArgMax(row) == gold[item]) {
          ++correct;
          right[s][g] = 1;
        }
        log_loss -= std::log(std::max(row[gold[item]], kMinProbability));
      }
    }
    score.fitted = ok;
    if (ok) {
      score.accuracy = static_cast<double>(correct) / gold_items.size();
      score.log_loss = log_loss / gold_items.size();
    }
  }
  size_t base = scores.size();
  for (size_t s = 0; s < scores.size(); ++s) {
    if (scores[s].fitted && scores[s].method == AutoTruthModel::kFallbackMethod) base = s;
  }
  const double n = static_cast<double>(gold_items.size());
  if (base < scores.size() && n > 1) {
    for (size_t s = 0; s < scores.size(); ++s) {
      if (!scores[s].fitted || s == base) continue;
      const double mean = scores[s].accuracy - scores[base].accuracy;
      double squares = 0.0;
      for (size_t g = 0; g < gold_items.size(); ++g) {
        const double d = right[s][g] - right[base][g] - mean;
        squares += d * d;
      }
      scores[s].accuracy_standard_error = std::sqrt(squares / (n - 1) / n);
    }
  }
  return static_cast<int64_t>(gold_items.size());
}

// Fills scores[c].held_out_log_likelihood. Returns the labels held out (0: no signal).
absl::StatusOr<int64_t> ScoreByHeldOutLabels(const AnnotationMatrix& data,
                                             absl::Span<const int32_t> gold,
                                             const TruthModelOptions& options,
                                             const AutoTruthModel::CandidateFactory& factory,
                                             std::vector<AutoCandidateScore>& scores) {
  std::mt19937_64 rng(AutoTruthModel::kSeed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<Annotation> kept;
  // Held-out (item, annotator, label), item-major.
  std::vector<Annotation> held;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    absl::Span<const AnnotationMatrix::Entry> labels = data.LabelsOfItem(i);
    int32_t kept_here = 0;
    for (size_t e = 0; e < labels.size(); ++e) {
      const bool last = e + 1 == labels.size();
      const bool hold = uniform(rng) < AutoTruthModel::kHeldOutFraction && labels.size() >= 2 &&
                        !(last && kept_here == 0);
      if (hold) {
        held.push_back({i, labels[e].other, labels[e].label});
      } else {
        kept.push_back({i, labels[e].other, labels[e].label});
        ++kept_here;
      }
    }
  }
  if (held.empty()) return 0;
  absl::StatusOr<AnnotationMatrix> train =
      AnnotationMatrix::Build(data.num_items(), data.num_annotators(), data.num_classes(), kept);
  if (!train.ok()) return train.status();
  const int32_t k = data.num_classes();
  std::vector<std::vector<double>> terms(scores.size());
  for (size_t s = 0; s < scores.size(); ++s) {
    AutoCandidateScore& score = scores[s];
    absl::StatusOr<std::unique_ptr<TruthModel>> model = factory(score.method, k, options);
    if (!model.ok() || !(*model)->Fit(*train, gold, /*warm_start=*/false).ok()) continue;
    double sum = 0.0;
    for (const Annotation& h : held) {
      const double p =
          (*model)->PredictLabel(h.item, train->LabelsOfItem(h.item), h.annotator)[h.label];
      terms[s].push_back(std::log(std::max(p, kMinProbability)));
      sum += terms[s].back();
    }
    score.fitted = true;
    score.held_out_log_likelihood = sum / held.size();
  }
  // Standard errors of the paired differences from the fallback.
  size_t base = scores.size();
  for (size_t s = 0; s < scores.size(); ++s) {
    if (scores[s].fitted && scores[s].method == AutoTruthModel::kFallbackMethod) base = s;
  }
  if (base < scores.size()) {
    const double n = static_cast<double>(held.size());
    for (size_t s = 0; s < scores.size(); ++s) {
      if (!scores[s].fitted || s == base) continue;
      const double mean = scores[s].held_out_log_likelihood - scores[base].held_out_log_likelihood;
      double squares = 0.0;
      for (size_t h = 0; h < held.size(); ++h) {
        const double d = terms[s][h] - terms[base][h] - mean;
        squares += d * d;
      }
      scores[s].held_out_standard_error = n > 1 ? std::sqrt(squares / (n - 1) / n) : 0.0;
    }
  }
  return static_cast<int64_t>(held.size());
}

const AutoCandidateScore* Find(const std::vector<AutoCandidateScore>& scores,
                               std::string_view method) {
  for (const AutoCandidateScore& s : scores) {
    if (s.method == method && s.fitted) return &s;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<AutoChoice> ChooseTruthMethod(const AnnotationMatrix& data,
                                             absl::Span<const int32_t> gold,
                                             const TruthModelOptions& options,
                                             const AutoTruthModel::CandidateFactory& factory) {
  absl::Status valid = ValidateFitInputs(data.num_classes(), data, gold);
  if (!valid.ok()) return valid;
  absl::StatusOr<SelectionData> selection = Subsample(data, gold);
  if (!selection.ok()) return selection.status();
  const AnnotationMatrix& sel = selection->data;
  const std::vector<int32_t>& sel_gold = selection->gold;

  std::vector<AutoCandidateScore> scores;
  for (std::string_view method : AutoTruthModel::kCandidateMethods) {
    // Skips candidates that cannot serve this project (e.g. too many classes).
    if (!factory(method, data.num_classes(), options).ok()) continue;
    if (method == EbccModel::kMethod) {
      const int64_t k = data.num_classes();
      const int64_t cells = (int64_t{data.num_annotators()} + 1) * EbccModel::kSubtypes * k * k;
      if (cells > AutoTruthModel::kMaxEbccCells) continue;
    }
    scores.push_back({std::string(method)});
  }
  const std::string sampled =
      sel.num_items() < data.num_items()
          ? absl::StrCat(" (selection on ", sel.num_items(), " of ", data.num_items(), " items)")
          : "";

  int64_t gold_with_labels = 0;
  for (int32_t i = 0; i < sel.num_items() && !sel_gold.empty(); ++i) {
    if (sel_gold[i] >= 0 && !sel.LabelsOfItem(i).empty()) ++gold_with_labels;
  }

  AutoChoice choice;
  choice.method = std::string(AutoTruthModel::kFallbackMethod);
  if (gold_with_labels >= AutoTruthModel::kMinGoldItems) {
    const int64_t n = ScoreByGold(sel, sel_gold, options, factory, scores);
    choice.criterion = "gold_cv";
    std::string values;
    for (const AutoCandidateScore& s : scores) {
      if (!s.fitted) continue;
      absl::StrAppendFormat(&values, "%s%s acc %.4f logloss %.4f", values.empty() ? "" : "; ",
                            s.method, s.accuracy, s.log_loss);
      if (s.method != AutoTruthModel::kFallbackMethod) {
        absl::StrAppendFormat(&values, " (se vs ds %.4f)", s.accuracy_standard_error);
      }
    }
    const AutoCandidateScore* base = Find(scores, AutoTruthModel::kFallbackMethod);
    const AutoCandidateScore* best = nullptr;
    for (const AutoCandidateScore& s : scores) {
      if (!s.fitted || s.method == AutoTruthModel::kFallbackMethod) continue;
      const double wins = (s.accuracy - (base ? base->accuracy : 0.0)) * n;
      if (base != nullptr &&
          (wins < AutoTruthModel::kGoldMarginItems - 1e-9 ||
           s.accuracy - base->accuracy <
               AutoTruthModel::kGoldStandardErrors * s.accuracy_standard_error)) {
        continue;
      }
      if (best == nullptr || s.accuracy > best->accuracy ||
          (s.accuracy == best->accuracy && s.log_loss < best->log_loss)) {
        best = &s;
      }
    }
    if (best != nullptr) choice.method = best->method;
    choice.reason = absl::StrCat(
        "gold_cv over ", n, " gold items in ", AutoTruthModel::kGoldFolds, " folds", sampled, ": ",
        values, "; chose ", choice.method,
        best != nullptr ? absl::StrCat(" (>= ", AutoTruthModel::kGoldMarginItems,
                                       " more gold items right than ds and 2 standard errors, "
                                       "then highest accuracy, then lowest log-loss)")
                        : absl::StrCat(" (no candidate got ", AutoTruthModel::kGoldMarginItems,
                                       " more gold items right than ds by 2 standard errors)"));
  } else {
    absl::StatusOr<int64_t> held = ScoreByHeldOutLabels(sel, sel_gold, options, factory, scores);
    if (!held.ok()) return held.status();
    if (*held == 0) {
      int64_t items_with_two = 0;
      for (int32_t i = 0; i < sel.num_items(); ++i) {
        if (sel.LabelsOfItem(i).size() >= 2) ++items_with_two;
      }
      choice.criterion = "fallback";
      choice.reason = absl::StrFormat(
          "fallback: no crowd label was held out (each label of an item with 2 or more is, "
          "with probability %.2f; %d such items%s) and fewer than %d gold items with labels: "
          "chose %s",
          AutoTruthModel::kHeldOutFraction, items_with_two, sampled, AutoTruthModel::kMinGoldItems,
          choice.method);
    } else {
      choice.criterion = "held_out_labels";
      std::string values;
      for (const AutoCandidateScore& s : scores) {
        if (!s.fitted) continue;
        absl::StrAppendFormat(&values, "%s%s %.4f", values.empty() ? "" : "; ", s.method,
                              s.held_out_log_likelihood);
        if (s.method != AutoTruthModel::kFallbackMethod) {
          absl::StrAppendFormat(&values, " (se vs ds %.4f)", s.held_out_standard_error);
        }
      }
      const AutoCandidateScore* base = Find(scores, AutoTruthModel::kFallbackMethod);
      const AutoCandidateScore* best = nullptr;
      for (const AutoCandidateScore& s : scores) {
        if (!s.fitted || s.method == AutoTruthModel::kFallbackMethod) continue;
        if (base != nullptr) {
          const double gain = s.held_out_log_likelihood - base->held_out_log_likelihood;
          if (gain < AutoTruthModel::kHeldOutMarginNats ||
              gain < AutoTruthModel::kHeldOutStandardErrors * s.held_out_standard_error) {
            continue;
          }
        }
        if (best == nullptr || s.held_out_log_likelihood > best->held_out_log_likelihood) {
          best = &s;
        }
      }
      if (best != nullptr) choice.method = best->method;
      choice.reason = absl::StrFormat(
          "held_out_labels: mean log-likelihood of %d held-out labels%s: %s; chose %s (%s)",
          *held, sampled, values, choice.method,
          best != nullptr
              ? absl::StrFormat("beats ds by >= %.2f nats per label and %.0f standard errors",
                                AutoTruthModel::kHeldOutMarginNats,
                                AutoTruthModel::kHeldOutStandardErrors)
              : absl::StrFormat("no candidate beats ds by %.2f nats per label and %.0f standard "
                                "errors",
                                AutoTruthModel::kHeldOutMarginNats,
                                AutoTruthModel::kHeldOutStandardErrors));
    }
  }
  choice.scores = std::move(scores);
  return choice;
}

absl::StatusOr<std::unique_ptr<AutoTruthModel>> AutoTruthModel::Create(
    int32_t num_classes, const TruthModelOptions& options, CandidateFactory factory) {
  if (num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", num_classes));
  }
  absl::Status valid = ValidateTruthModelOptions(options);
  if (!valid.ok()) return valid;
  absl::StatusOr<std::unique_ptr<TruthModel>> inner =
      factory(kFallbackMethod, num_classes, options);
  if (!inner.ok()) return inner.status();
  return std::unique_ptr<AutoTruthModel>(
      new AutoTruthModel(num_classes, options, std::move(factory), *std::move(inner)));
}

AutoTruthModel::AutoTruthModel(int32_t num_classes, TruthModelOptions options,
                               CandidateFactory factory, std::unique_ptr<TruthModel> inner)
    : num_classes_(num_classes),
      options_(std::move(options)),
      factory_(std::move(factory)),
      inner_(std::move(inner)) {}

std::unique_ptr<TruthModel> AutoTruthModel::Clone() const {
  auto copy = std::unique_ptr<AutoTruthModel>(
      new AutoTruthModel(num_classes_, options_, factory_, inner_->Clone()));
  copy->choice_ = choice_;
  return copy;
}

absl::StatusOr<FitReport> AutoTruthModel::Fit(const AnnotationMatrix& data,
                                              absl::Span<const int32_t> gold, bool warm_start) {
  const absl::Time start = absl::Now();
  absl::Status valid = ValidateFitInputs(num_classes_, data, gold);
  if (!valid.ok()) return valid;
  absl::StatusOr<AutoChoice> choice = ChooseTruthMethod(data, gold, options_, factory_);
  if (!choice.ok()) return choice.status();
  std::unique_ptr<TruthModel> next;
  bool warm = false;
  if (choice->method == inner_->method() && warm_start && inner_->has_parameters()) {
    next = inner_->Clone();
    warm = true;
  } else {
    absl::StatusOr<std::unique_ptr<TruthModel>> created =
        factory_(choice->method, num_classes_, options_);
    if (!created.ok()) return created.status();
    next = *std::move(created);
  }
  absl::StatusOr<FitReport> report = next->Fit(data, gold, warm);
  if (!report.ok()) return report.status();
  inner_ = std::move(next);
  choice_ = *std::move(choice);
  report->seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return report;
}

std::string AutoTruthModel::Serialize() const {
  ByteWriter writer;
  writer.WriteU32(kFormatVersion);
  writer.WriteU32(static_cast<uint32_t>(num_classes_));
  writer.WriteString(inner_->method());
  writer.WriteString(choice_.criterion);
  writer.WriteString(choice_.reason);
  writer.WriteString(inner_->Serialize());
  return absl::StrCat(std::string(kMagic), writer.Finish());
}

absl::Status AutoTruthModel::Restore(std::string_view serialized) {
  if (serialized.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("not a serialized auto model (no VAUT header)");
  }
  absl::StatusOr<ByteReader> reader = ByteReader::Open(serialized.substr(kMagic.size()));
  if (!reader.ok()) return reader.status();
  absl::StatusOr<uint32_t> version = reader->ReadU32();
  if (!version.ok()) return version.status();
  if (*version != kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("auto model format version ", *version, " is not ", kFormatVersion));
  }
  absl::Status classes = ReadClassCount(*reader, num_classes_);
  if (!classes.ok()) return classes;
  absl::StatusOr<std::string_view> method = reader->ReadString();
  if (!method.ok()) return method.status();
  if (std::find(kCandidateMethods.begin(), kCandidateMethods.end(), *method) ==
      kCandidateMethods.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auto model serves unknown method \"", std::string(*method), "\""));
  }
  absl::StatusOr<std::string_view> criterion = reader->ReadString();
  if (!criterion.ok()) return criterion.status();
  absl::StatusOr<std::string_view> reason = reader->ReadString();
  if (!reason.ok()) return reason.status();
  absl::StatusOr<std::string_view> blob = reader->ReadString();
  if (!blob.ok()) return blob.status();
  absl::Status end = reader->ExpectEnd();
  if (!end.ok()) return end;
  absl::StatusOr<std::unique_ptr<TruthModel>> inner = factory_(*method, num_classes_, options_);
  if (!inner.ok()) return inner.status();
  absl::Status restored = (*inner)->Restore(*blob);
  if (!restored.ok()) return restored;
  inner_ = *std::move(inner);
  choice_ = AutoChoice{std::string(*method), std::string(*criterion), std::string(*reason), {}};
  return absl::OkStatus();
}

}  // namespace verity::models
