#include "bench/random_crowd.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace verity::bench {
namespace {

// Uniform in [0, 1) from the top 53 bits.
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

int32_t SampleCategorical(std::mt19937_64& rng, const double* p, int32_t k) {
  double u = Uniform01(rng);
  for (int32_t c = 0; c < k - 1; ++c) {
    if (u < p[c]) return c;
    u -= p[c];
  }
  return k - 1;
}

std::vector<double> RandomConfusion(std::mt19937_64& rng, int32_t k,
                                    double accuracy) {
  std::vector<double> confusion(static_cast<size_t>(k) * k, 0.0);
  std::vector<double> weights(k);
  for (int32_t row = 0; row < k; ++row) {
    // Exp(1) draws normalised: a flat Dirichlet over the other classes.
    double total = 0.0;
    for (int32_t c = 0; c < k; ++c) {
      weights[c] = c == row ? 0.0 : -std::log(1.0 - Uniform01(rng));
      total += weights[c];
    }
    for (int32_t c = 0; c < k; ++c) {
      confusion[row * k + c] =
          c == row ? accuracy
                   : (total > 0 ? (1.0 - accuracy) * weights[c] / total
                                : (1.0 - accuracy) / (k - 1));
    }
  }
  return confusion;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

absl::Status WriteFile(const std::string& path,
                       const std::function<void(std::FILE*)>& write) {
  File file(std::fopen(path.c_str(), "w"));
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  // A large buffer: labels.csv of 5M labels is ~90 MB.
  std::setvbuf(file.get(), nullptr, _IOFBF, 1 << 20);
  write(file.get());
  if (std::ferror(file.get()) != 0 || std::fclose(file.release()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RandomCrowd> GenerateRandomCrowd(const RandomCrowdSpec& spec) {
  if (spec.num_items < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_items must be >= 0, got ", spec.num_items));
  }
  if (spec.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be >= 2, got ", spec.num_classes));
  }
  if (spec.labels_per_item < 1 ||
      spec.labels_per_item > spec.num_annotators) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels_per_item must be in [1, num_annotators = ",
        spec.num_annotators, "], got ", spec.labels_per_item));
  }
  if (!(0.0 <= spec.min_accuracy && spec.min_accuracy <= spec.max_accuracy &&
        spec.max_accuracy <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "need 0 <= min_accuracy <= max_accuracy <= 1, got min_accuracy ",
        spec.min_accuracy, ", max_accuracy ", spec.max_accuracy));
  }
  const int32_t k = spec.num_classes;
  std::vector<double> prior = spec.class_prior;
  if (prior.empty()) prior.assign(k, 1.0 / k);
  if (static_cast<int32_t>(prior.size()) != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("class_prior has ", prior.size(),
                     " entries, expected num_classes = ", k));
  }
  double prior_total = 0.0;
  for (double p : prior) {
    if (!(p >= 0.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("class_prior entries must be >= 0, got ", p));
    }
    prior_total += p;
  }
  if (!(prior_total > 0.0)) {
    return absl::InvalidArgumentError("class_prior must not sum to 0");
  }
  for (double& p : prior) p /= prior_total;

  std::mt19937_64 rng(spec.seed);
  RandomCrowd crowd;
  crowd.num_items = spec.num_items;
  crowd.num_annotators = spec.num_annotators;
  crowd.num_classes = k;
  crowd.confusions.reserve(spec.num_annotators);
  for (int32_t a = 0; a < spec.num_annotators; ++a) {
    const double accuracy =
        spec.min_accuracy +
        (spec.max_accuracy - spec.min_accuracy) * Uniform01(rng);
    crowd.confusions.push_back(RandomConfusion(rng, k, accuracy));
  }

  crowd.truth.resize(spec.num_items);
  crowd.annotations.reserve(static_cast<size_t>(spec.num_items) *
                            spec.labels_per_item);
  std::vector<int32_t> pool(spec.num_annotators);
  for (int32_t a = 0; a < spec.num_annotators; ++a) pool[a] = a;
  std::vector<int32_t> picks(spec.labels_per_item);
  for (int32_t i = 0; i < spec.num_items; ++i) {
    const int32_t truth = SampleCategorical(rng, prior.data(), k);
    crowd.truth[i] = truth;
    // Partial Fisher-Yates over the annotator pool, undone afterwards so the
    // pool is the identity again at O(labels_per_item) cost.
    for (int32_t j = 0; j < spec.labels_per_item; ++j) {
      const int32_t pick =
          j + static_cast<int32_t>(
                  rng() % static_cast<uint64_t>(spec.num_annotators - j));
      picks[j] = pick;
      std::swap(pool[j], pool[pick]);
      const int32_t annotator = pool[j];
      const int32_t label = SampleCategorical(
          rng, crowd.confusions[annotator].data() + truth * k, k);
      crowd.annotations.push_back({i, annotator, label});
    }
    for (int32_t j = spec.labels_per_item - 1; j >= 0; --j) {
      std::swap(pool[j], pool[picks[j]]);
    }
  }
  return crowd;
}

absl::Status WriteCrowdDataset(const RandomCrowd& crowd,
                               const std::string& directory,
                               const std::string& description) {
  if (::mkdir(directory.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", directory, ": ",
                                            std::strerror(errno)));
  }
  absl::Status s = WriteFile(directory + "/classes.txt", [&](std::FILE* f) {
    for (int32_t c = 0; c < crowd.num_classes; ++c) std::fprintf(f, "c%d\n", c);
  });
  if (!s.ok()) return s;
  s = WriteFile(directory + "/labels.csv", [&](std::FILE* f) {
    std::fputs("item,annotator,label\n", f);
    for (const models::Annotation& a : crowd.annotations) {
      std::fprintf(f, "i%d,w%d,c%d\n", a.item, a.annotator, a.label);
    }
  });
  if (!s.ok()) return s;
  s = WriteFile(directory + "/gold.csv", [&](std::FILE* f) {
    std::fputs("item,label\n", f);
    for (int32_t i = 0; i < crowd.num_items; ++i) {
      std::fprintf(f, "i%d,c%d\n", i, crowd.truth[i]);
    }
  });
  if (!s.ok()) return s;
  return WriteFile(directory + "/SOURCE.md", [&](std::FILE* f) {
    std::fputs(description.c_str(), f);
  });
}

std::optional<CrowdSize> ParseCrowdSize(absl::string_view text) {
  if (text == "50k") return CrowdSize{"50k", 10000, 5, 300};
  if (text == "500k") return CrowdSize{"500k", 100000, 5, 300};
  if (text == "5m") return CrowdSize{"5m", 1000000, 5, 3000};
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  CrowdSize size{std::string(text)};
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &size.items) ||
      !absl::SimpleAtoi(parts[1], &size.labels_per_item) ||
      !absl::SimpleAtoi(parts[2], &size.annotators) || size.items <= 0 ||
      size.labels_per_item <= 0 || size.annotators < size.labels_per_item) {
    return std::nullopt;
  }
  return size;
}

}  // namespace verity::bench
