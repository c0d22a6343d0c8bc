// Tests every neural truth model through the TruthModel interface, on small synthetic crowds
// (fixed seeds, few optimiser steps, so the whole file runs in seconds on the CPU).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/status_matchers.h"
#include "models/neural/cmm.h"
#include "models/neural/conal.h"
#include "models/neural/crowd_net.h"
#include "models/neural/crowdlayer.h"
#include "models/neural/neural_truth_model.h"
#include "models/neural/trace_reg.h"
#include "models/neural/training_step.h"
#include "models/testing/synthetic_crowd.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// A crowd of 300 items x 5 labels from 12 annotators: 8 good (accuracy 0.8) and 4 spammers.
testing::SyntheticCrowd MakeCrowd(int32_t num_classes, uint64_t seed) {
  testing::SyntheticCrowdSpec spec;
  spec.num_items = 300;
  spec.num_classes = num_classes;
  spec.labels_per_item = 5;
  spec.seed = seed;
  for (int a = 0; a < 8; ++a) spec.confusions.push_back(testing::SymmetricConfusion(num_classes, 0.8));
  for (int a = 0; a < 4; ++a) spec.confusions.push_back(testing::SymmetricConfusion(num_classes, 1.0 / num_classes));
  return testing::GenerateSyntheticCrowd(spec);
}

// Few, large steps so that each fit takes well under a second; lia's deeper networks and
// item-dependent confusions need a smaller learning rate than the others.
TruthModelOptions FastOptions(const std::string& method = "") {
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.steps = 400;
  options.neural.batch_size = 256;
  // Per step 0.005 (lia) and 0.02: the square-root rule halves the rate at batch 256.
  options.neural.learning_rate = method == "lia" ? 0.01 : 0.04;
  options.neural.featureless_learning_rate = options.neural.learning_rate;  // the same either way
  options.neural.em_iterations = 4;
  return options;
}

// The bare neural model (no calibration wrapper): these tests check its own posteriors and
// reach its class through dynamic_cast.
std::unique_ptr<TruthModel> Make(const std::string& method, int32_t k, TruthModelOptions options) {
  auto model = CreateUncalibratedTruthModel(method, k, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

std::unique_ptr<TruthModel> Make(const std::string& method, int32_t k) {
  return Make(method, k, FastOptions(method));
}

class NeuralModelTest : public ::testing::TestWithParam<std::string> {};

// On a GPU: the same fit with training steps replayed from CUDA graphs and run eagerly takes
// the same steps and recovers the truth as well (the arithmetic differs in the last bits).
TEST_P(NeuralModelTest, TrainsOnCudaWithAndWithoutCudaGraphs) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  double accuracy[2];
  int64_t steps[2];
  const int64_t replays_before = neural::TrainingStep::GraphReplays();
  for (bool graphs : {false, true}) {
    TruthModelOptions options = FastOptions(GetParam());
    options.neural.device = "cuda";
    options.neural.cuda_graphs = graphs;
    auto model = Make(GetParam(), 3, options);
    absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
    ASSERT_THAT(report.status(), IsOk());
    steps[graphs] = report->training_steps;
    accuracy[graphs] = testing::Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
    EXPECT_GE(accuracy[graphs], 0.80) << GetParam() << (graphs ? " with" : " without") << " graphs";
  }
  EXPECT_GT(steps[0], 0);
  EXPECT_EQ(steps[0], steps[1]);
  // In a build with CUDA graphs, the second fit's steps were replayed from one.
  if (neural::CudaGraphsCompiledIn()) {
    EXPECT_GT(neural::TrainingStep::GraphReplays(), replays_before) << GetParam();
  }
  EXPECT_NEAR(accuracy[0], accuracy[1], 0.03) << GetParam();
}

TEST_P(NeuralModelTest, RecoversTheTruthOfASyntheticCrowdAtLeastAsWellAsMajorityVote) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  auto mv = Make("mv", 3);
  ASSERT_THAT(mv->Fit(crowd.matrix, {}, false).status(), IsOk());
  const double mv_accuracy = testing::Accuracy(AllPosteriors(*mv, crowd.matrix, {}), crowd.matrix, crowd.truth);

  auto model = Make(GetParam(), 3);
  absl::StatusOr<FitReport> report = model->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_GE(report->iterations, 1);
  EXPECT_TRUE(std::isfinite(report->log_likelihood));
  EXPECT_LT(report->log_likelihood, 0.0);
  std::vector<double> posteriors = AllPosteriors(*model, crowd.matrix, {});
  for (double p : posteriors) ASSERT_TRUE(std::isfinite(p) && p >= 0 && p <= 1);
  const double accuracy = testing::Accuracy(posteriors, crowd.matrix, crowd.truth);
  EXPECT_GE(accuracy, mv_accuracy - 0.02) << GetParam() << " " << accuracy << " vs mv " << mv_accuracy;
  EXPECT_GE(accuracy, 0.80);
  // A spammer's confusion is flatter (lower diagonal mass) than a good annotator's.
  auto diagonal = [&](int32_t a) {
    std::vector<double> c = model->AnnotatorConfusion(a);
    return (c[0] + c[4] + c[8]) / 3;
  };
  EXPECT_GT(diagonal(0), diagonal(11)) << GetParam();
}

TEST_P(NeuralModelTest, SerializeRestoreAndCloneAnswerExactlyAlike) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 5);
  auto model = Make(GetParam(), 2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  auto restored = Make(GetParam(), 2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  std::unique_ptr<TruthModel> clone = model->Clone();
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
  EXPECT_EQ(AllPosteriors(*clone, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
  EXPECT_EQ(restored->ItemAnnotatorConfusion(3, 2), model->ItemAnnotatorConfusion(3, 2));
  // Another method's or another class count's blob is refused.
  auto other = Make(GetParam() == "lia" ? "conal" : "lia", 2);
  EXPECT_THAT(other->Restore(model->Serialize()), StatusIs(absl::StatusCode::kInvalidArgument));
  auto three = Make(GetParam(), 3);
  EXPECT_THAT(three->Restore(model->Serialize()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(three->Restore("garbage"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(NeuralModelTest, WarmStartsOntoNewItemsAndAnnotatorsAndHandlesUnseenIds) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 7);
  auto model = Make(GetParam(), 2);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  // Grow: one new annotator labels two new items once each (and an old item).
  std::vector<Annotation> grown = crowd.annotations;
  grown.push_back({300, 12, 1});
  grown.push_back({301, 12, 0});
  grown.push_back({0, 12, crowd.truth[0]});
  auto data = AnnotationMatrix::Build(303, 13, 2, grown);  // item 302 has no labels
  ASSERT_THAT(data.status(), IsOk());
  std::vector<int32_t> gold(303, -1);
  gold[5] = 1;
  std::unique_ptr<TruthModel> warm = model->Clone();
  ASSERT_THAT(warm->Fit(*data, gold, true).status(), IsOk());
  std::vector<double> posteriors = AllPosteriors(*warm, *data, gold);
  for (double p : posteriors) ASSERT_TRUE(std::isfinite(p));
  EXPECT_DOUBLE_EQ(posteriors[5 * 2 + 1], 1.0);  // gold clamped
  EXPECT_NEAR(posteriors[302 * 2] + posteriors[302 * 2 + 1], 1.0, 1e-9);
  // Ids beyond the fit get the class prior and the population confusion.
  std::vector<double> out(2);
  warm->ItemPosteriorForItem(1000, {}, -1, absl::MakeSpan(out));
  EXPECT_NEAR(out[0] + out[1], 1.0, 1e-6);
  std::vector<double> population = warm->AnnotatorConfusion(99);
  EXPECT_NEAR(population[0] + population[1], 1.0, 1e-6);  // float32 networks
  EXPECT_GT(population[0], 0.5);  // the crowd is better than chance
}

// conal's confusion for an annotator outside the fit is the mean of the fitted annotators'
// confusions on the mean item (conal.h), not its common confusion W_g alone.
TEST(ConalTest, AnAnnotatorNeverSeenGetsTheFittedAnnotatorsMeanConfusion) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 7);
  auto model = Make("conal", 3);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  std::vector<double> mean(9, 0.0);
  const int32_t annotators = crowd.matrix.num_annotators();
  for (int32_t a = 0; a < annotators; ++a) {
    const std::vector<double> confusion = model->AnnotatorConfusion(a);
    ASSERT_EQ(confusion.size(), 9u);
    for (int c = 0; c < 9; ++c) mean[c] += confusion[c] / annotators;
  }
  for (int32_t unseen : {annotators, 99}) {
    const std::vector<double> population = model->AnnotatorConfusion(unseen);
    ASSERT_EQ(population.size(), 9u);
    for (int c = 0; c < 9; ++c) EXPECT_NEAR(population[c], mean[c], 1e-9) << unseen << " " << c;
  }
  // Restored from its parameters, the same.
  auto restored = Make("conal", 3);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  const std::vector<double> again = restored->AnnotatorConfusion(99);
  for (int c = 0; c < 9; ++c) EXPECT_NEAR(again[c], mean[c], 1e-9) << c;
}

// With no annotator in the fit there is no fitted confusion to average: an annotator never
// seen gets softmax(W_g), the common confusion (conal.h: MixedLogConfusion), which without a
// label to train on keeps its start, 0.8 on the diagonal and 0.1 off it (K = 3).
TEST(ConalTest, WithoutFittedAnnotatorsANewAnnotatorGetsTheCommonConfusion) {
  auto model = Make("conal", 3);
  ASSERT_THAT(model->Fit(*AnnotationMatrix::Build(4, 0, 3, {}), {}, false).status(), IsOk());
  const std::vector<double> confusion = model->AnnotatorConfusion(0);
  ASSERT_EQ(confusion.size(), 9u);
  for (int c = 0; c < 9; ++c) EXPECT_NEAR(confusion[c], c % 4 == 0 ? 0.8 : 0.1, 1e-6) << c;
}

TEST_P(NeuralModelTest, FitIsDeterministicGivenTheSeed) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 3);
  auto a = Make(GetParam(), 2);
  auto b = Make(GetParam(), 2);
  ASSERT_THAT(a->Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_THAT(b->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(AllPosteriors(*a, crowd.matrix, {}), AllPosteriors(*b, crowd.matrix, {}));
}

// Items with features and no labels get h(x): here the first feature is the true class (plus
// noise), labelled items teach h that, and the unlabelled half is predicted from it alone. A
// serialized model carries the features it was fitted with.
TEST_P(NeuralModelTest, ItemFeaturesGiveATruthEstimateForUnlabelledItems) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 21);
  std::vector<Annotation> half;
  for (const Annotation& a : crowd.annotations) {
    if (a.item < 150) half.push_back(a);
  }
  auto data = AnnotationMatrix::Build(300, 12, 2, half);
  ASSERT_THAT(data.status(), IsOk());
  std::vector<float> features;
  for (int32_t i = 0; i < 300; ++i) {
    features.push_back(static_cast<float>(crowd.truth[i]) + 0.1f * static_cast<float>((i * 37) % 7 - 3));
    features.push_back(static_cast<float>((i * 13) % 5));  // noise
  }
  auto model = Make(GetParam(), 2);
  EXPECT_THAT(model->SetItemFeatures(3, {1, 2}), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(model->SetItemFeatures(2, features), IsOk());
  ASSERT_THAT(model->Fit(*data, {}, false).status(), IsOk());
  int correct = 0;
  std::vector<double> p(2);
  for (int32_t i = 150; i < 300; ++i) {
    model->ItemPosteriorForItem(i, {}, -1, absl::MakeSpan(p));
    correct += (p[1] > p[0]) == (crowd.truth[i] == 1);
  }
  EXPECT_GE(correct, 120) << GetParam();  // 80 % of the unlabelled items (chance: 50 %)
  auto restored = Make(GetParam(), 2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  std::vector<double> q(2);
  model->ItemPosteriorForItem(200, {}, -1, absl::MakeSpan(p));
  restored->ItemPosteriorForItem(200, {}, -1, absl::MakeSpan(q));
  EXPECT_EQ(p, q);
  // A clone keeps the features for its next (warm) fit.
  std::unique_ptr<TruthModel> clone = model->Clone();
  ASSERT_THAT(clone->Fit(*data, {}, true).status(), IsOk());
  clone->ItemPosteriorForItem(200, {}, -1, absl::MakeSpan(q));
  EXPECT_EQ(q[1] > q[0], crowd.truth[200] == 1);
}

// Annotator features: lia and conal embed annotators from them (the others ignore them); a
// serialized model carries them and answers alike, and a bad matrix is refused.
TEST_P(NeuralModelTest, AnnotatorFeaturesAreUsedAndSerialized) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 23);
  std::vector<float> features;
  for (int32_t a = 0; a < 12; ++a) {
    features.push_back(a < 8 ? 1.0f : 0.0f);  // good annotator or spammer
    features.push_back(static_cast<float>(a % 3));
  }
  auto model = Make(GetParam(), 2);
  EXPECT_THAT(model->SetAnnotatorFeatures(2, {1, 2, 3}), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(model->SetAnnotatorFeatures(2, features), IsOk());
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  const double accuracy =
      testing::Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
  // Above chance; with these quick test options lia learns less from 2 coarse features than
  // from free embeddings (0.67 against 0.85+), which is why features are optional.
  EXPECT_GE(accuracy, 0.6) << GetParam();
  if (GetParam() == "lia") {
    // lia's competence is a function of the annotator's representation only: annotators 0 and
    // 3 have the same features, hence the same confusion on every item; 0 and 1 do not.
    EXPECT_EQ(model->ItemAnnotatorConfusion(5, 0), model->ItemAnnotatorConfusion(5, 3));
    EXPECT_NE(model->ItemAnnotatorConfusion(5, 0), model->ItemAnnotatorConfusion(5, 1));
  }
  auto restored = Make(GetParam(), 2);
  ASSERT_THAT(restored->Restore(model->Serialize()), IsOk());
  EXPECT_EQ(AllPosteriors(*restored, crowd.matrix, {}), AllPosteriors(*model, crowd.matrix, {}));
}

// Without item features, an item's posterior starts from the class prior π, the mean of the
// items' priors h_i, not from its own h_i (neural_truth_model.h): an item's posterior with no
// labels is π whichever item it is, and the h_i themselves differ between items.
TEST_P(NeuralModelTest, PosteriorsOfItemsWithoutFeaturesStartFromTheClassPrior) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  const int32_t k = 3, items = crowd.matrix.num_items();
  auto fitted = Make(GetParam(), k);
  ASSERT_THAT(fitted->Fit(crowd.matrix, {}, false).status(), IsOk());
  const auto* model = dynamic_cast<const neural::NeuralTruthModel*>(fitted.get());
  ASSERT_NE(model, nullptr);
  std::vector<double> mean(k, 0.0);
  double spread = 0;
  for (int32_t i = 0; i < items; ++i) {
    const std::vector<double> prior = model->ItemPrior(i);
    for (int32_t c = 0; c < k; ++c) mean[c] += prior[c] / items;
    spread = std::max(spread, std::abs(prior[0] - model->ItemPrior(0)[0]));
  }
  EXPECT_GT(spread, 0.01) << "the items' priors should differ";
  for (int32_t i : {0, 7, items - 1}) {
    std::vector<double> served(k);
    model->ItemPosteriorForItem(i, {}, -1, absl::MakeSpan(served));
    for (int32_t c = 0; c < k; ++c) EXPECT_NEAR(served[c], mean[c], 1e-6) << "item " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllNeuralMethods, NeuralModelTest,
                         ::testing::Values("lia", "crowdlayer", "trace_reg", "conal", "cmm"),
                         [](const auto& info) { return info.param; });

TEST(NeuralOptionsTest, DeviceAndOptionErrors) {
  TruthModelOptions options = FastOptions();
  options.neural.device = "tpu";
  auto model = Make("conal", 2, options);
  testing::SyntheticCrowd crowd = MakeCrowd(2, 1);
  EXPECT_THAT(model->Fit(crowd.matrix, {}, false).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  // CUDA asked for on a machine without it falls back to the CPU (and still fits).
  options.neural.device = "cuda:0";
  options.neural.steps = 50;
  EXPECT_THAT(Make("trace_reg", 2, options)->Fit(crowd.matrix, {}, false).status(), IsOk());
  options = FastOptions();
  options.neural.lia_max_steps = -1;
  EXPECT_THAT(CreateTruthModel("lia", 2, options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  options = FastOptions();
  options.neural.lia_tolerance = -1;
  EXPECT_THAT(CreateTruthModel("lia", 2, options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  for (double fraction : {-0.1, 1.5, std::nan("")}) {
    options = FastOptions();
    options.neural.ds_start_fraction = fraction;
    EXPECT_THAT(CreateTruthModel("crowdlayer", 2, options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << fraction;
  }
  options = FastOptions();
  options.neural.crowdlayer_variant = "xx";
  EXPECT_THAT(CreateTruthModel("crowdlayer", 2, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (const char* variant : {"vw", "vb", "vw+b"}) {
    options.neural.crowdlayer_variant = variant;
    auto cl = Make("crowdlayer", 2, options);
    EXPECT_THAT(cl->Fit(crowd.matrix, {}, false).status(), IsOk()) << variant;
  }
}

// Chu et al.'s reward for the common confusion W_g differing from each individual W_r, taken
// here as λ times the mean over annotators of ||W_g − W_r||₂ between row-centred logits (the
// paper sums; conal.h says why): its value entry by entry, and a crowd of the same annotators
// twice over gets the same reward, not twice it.
TEST(ConalTest, TheRewardIsTheMeanDistanceSoItDoesNotGrowWithTheCrowd) {
  TruthModelOptions::Neural options;
  options.featureless_conal_lambda = 0.5;  // these nets read no features
  const int32_t k = 3, annotators = 4;
  neural::ConalNet net(10, annotators, k, 0, 0, options);
  neural::ConalNet twice(10, 2 * annotators, k, 0, 0, options);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(7);
    net.individual().add_(torch::randn({annotators, k, k}));
    twice.individual().copy_(torch::cat({net.individual(), net.individual()}, 0));
    twice.common().copy_(net.common());
  }
  auto common = net.common().accessor<float, 2>();
  auto individual = net.individual().accessor<float, 3>();
  double expected = 0;
  for (int32_t r = 0; r < annotators; ++r) {
    double squares = 0;
    for (int32_t row = 0; row < k; ++row) {
      double mean = 0;
      for (int32_t y = 0; y < k; ++y) mean += (individual[r][row][y] - common[row][y]) / k;
      for (int32_t y = 0; y < k; ++y) {
        const double d = individual[r][row][y] - common[row][y] - mean;
        squares += d * d;
      }
    }
    expected -= 0.5 * std::sqrt(squares) / annotators;
  }
  EXPECT_NEAR(net.Regularizer().item<double>(), expected, 1e-5);
  EXPECT_NEAR(twice.Regularizer().item<double>(), expected, 1e-5);
}

// Both confusions start at the same near-identity matrix, 0.8 on the diagonal after a row
// softmax (conal.h): for K = 3 and 5 the off-diagonal entries share the rest, 0.2 / (K − 1).
TEST(ConalTest, BothConfusionsStartAtEightyPercentOnTheDiagonal) {
  TruthModelOptions::Neural options;
  for (int32_t k : {3, 5}) {
    const int32_t annotators = 4;
    neural::ConalNet net(10, annotators, k, 0, 0, options);
    const torch::Tensor common = torch::softmax(net.common(), 1);
    const torch::Tensor individual = torch::softmax(net.individual(), 2);
    for (int32_t row = 0; row < k; ++row) {
      for (int32_t y = 0; y < k; ++y) {
        const double expected = row == y ? 0.8 : 0.2 / (k - 1);
        EXPECT_NEAR(common[row][y].item<double>(), expected, 1e-6) << k << " " << row << y;
        for (int32_t r = 0; r < annotators; ++r) {
          EXPECT_NEAR(individual[r][row][y].item<double>(), expected, 1e-6) << k << " " << r;
        }
      }
    }
  }
}

// λ follows the rule that chooses the learning rate: conal_lambda for a network over item or
// annotator features, featureless_conal_lambda where every input is a learned embedding
// (truth_model.h). Nets with the same confusions, so the rewards differ by λ alone.
TEST(ConalTest, FeaturelessNetsWeighTheRewardByTheFeaturelessLambda) {
  TruthModelOptions::Neural options;
  options.conal_lambda = 0.3;
  options.featureless_conal_lambda = 0.02;
  const int32_t k = 3, annotators = 4;
  neural::ConalNet featureless(10, annotators, k, 0, 0, options);
  neural::ConalNet item_features(10, annotators, k, 5, 0, options);
  neural::ConalNet annotator_features(10, annotators, k, 0, 2, options);
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    featureless.individual().add_(torch::randn({annotators, k, k}));
    for (neural::ConalNet* net : {&item_features, &annotator_features}) {
      net->individual().copy_(featureless.individual());
      net->common().copy_(featureless.common());
    }
  }
  const double distance = -featureless.Regularizer().item<double>() / 0.02;
  ASSERT_GT(distance, 0.1);
  EXPECT_NEAR(item_features.Regularizer().item<double>(), -0.3 * distance, 1e-5);
  EXPECT_NEAR(annotator_features.Regularizer().item<double>(), -0.3 * distance, 1e-5);
  // The default is a tenth of conal_lambda's, as the ten-times rate asks (conal.h).
  const TruthModelOptions::Neural defaults;
  EXPECT_DOUBLE_EQ(defaults.featureless_conal_lambda, defaults.conal_lambda / 10);
}

// Tanno et al.: every confusion starts at the identity, and the penalty is λ times the trace
// summed over the annotators, so that it grows with the crowd (a mean would not).
TEST(TraceRegTest, ConfusionsStartAtTheIdentityAndThePenaltySumsTheirTraces) {
  TruthModelOptions::Neural options;
  options.trace_lambda = 0.5;
  for (int32_t annotators : {2, 8}) {
    neural::TraceRegNet net(10, annotators, 3, 0, options);
    EXPECT_TRUE(torch::equal(net.Confusions(), torch::eye(3).unsqueeze(0).repeat({annotators, 1, 1})))
        << net.Confusions();
    EXPECT_NEAR(net.Regularizer().item<double>(), 0.5 * 3 * annotators, 1e-5) << annotators;
    // Per-annotator weights: annotator r's trace (3 at the identity) counts weight_r times.
    net.set_trace_weights(torch::arange(annotators, torch::kFloat) * 0.25);
    EXPECT_NEAR(net.Regularizer().item<double>(),
                0.25 * 3 * (annotators * (annotators - 1) / 2), 1e-5) << annotators;
  }
}

// Fits by generalised EM hold the confusions as logits, started at 0.9 on the diagonal
// (trace_reg.h): the rows are softmaxes, so no projection touches them after a step, and the
// trace penalty is the same function of the probabilities.
TEST(TraceRegTest, LogitConfusionsStartAtNinetyPercentAndNeedNoProjection) {
  TruthModelOptions::Neural options;
  options.trace_lambda = 0.5;
  const int32_t k = 3, annotators = 4;
  neural::TraceRegNet net(10, annotators, k, 0, options, neural::TraceRegNet::Parameterisation::kLogits);
  torch::Tensor start = net.Confusions();
  for (int32_t r = 0; r < annotators; ++r) {
    for (int32_t row = 0; row < k; ++row) {
      for (int32_t y = 0; y < k; ++y) {
        EXPECT_NEAR(start[r][row][y].item<double>(), row == y ? 0.9 : 0.05, 1e-6) << r << row << y;
      }
    }
  }
  EXPECT_NEAR(net.Regularizer().item<double>(), 0.5 * 0.9 * k * annotators, 1e-5);
  // A parameter named for its kind, so that a stored net of the other kind does not load.
  std::vector<std::string> names;
  for (const auto& p : net.named_parameters()) names.push_back(p.key());
  EXPECT_THAT(names, ::testing::Contains("confusion_logits"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("confusion")));
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : net.named_parameters()) {
      if (p.key() == "confusion_logits") p.value().add_(torch::randn(p.value().sizes()) * 3);
    }
  }
  torch::Tensor before = net.Confusions().clone();
  net.AfterOptimizerStep();
  EXPECT_TRUE(torch::equal(net.Confusions(), before));
  EXPECT_TRUE(torch::allclose(before.sum(2), torch::ones({annotators, k})));
}

// The paper's probabilities (trace_reg.h): a label's likelihood is (A^(r)ᵀ p_θ(x))[y] = Σ_k
// p_θ(x)[k] A^(r)[k, y], row = true class, and the projection after a step puts each row
// A^(r)[k, ·] back on the simplex (entries floored at kMinConfusion, then each row divided by
// its sum). Checked on a hand-set confusion that is far from symmetric.
TEST(TraceRegTest, ALabelsLikelihoodReadsTheConfusionByTrueClassRowAndRowsAreProjected) {
  TruthModelOptions::Neural options;
  neural::TraceRegNet net(4, 2, 3, 0, options);
  torch::Tensor confusion;
  for (const auto& p : net.named_parameters()) {
    if (p.key() == "confusion") confusion = p.value();
  }
  ASSERT_TRUE(confusion.defined());
  const float a[3][3] = {{0.7f, 0.2f, 0.1f}, {0.1f, 0.6f, 0.3f}, {0.5f, 0.25f, 0.25f}};
  {
    torch::NoGradGuard no_grad;
    for (int32_t k = 0; k < 3; ++k) {
      for (int32_t y = 0; y < 3; ++y) confusion[1][k][y].fill_(a[k][y]);
    }
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor p = net.LogPrior(torch::tensor({2}, torch::kLong)).exp()[0];
  const torch::Tensor log_noisy =
      net.LogNoisyLabel(torch::tensor({2}, torch::kLong), torch::tensor({1}, torch::kLong))[0];
  for (int32_t y = 0; y < 3; ++y) {
    double expected = 0;
    for (int32_t k = 0; k < 3; ++k) expected += p[k].item<double>() * a[k][y];
    EXPECT_NEAR(log_noisy[y].item<double>(), std::log(expected), 1e-5) << y;
  }
  // Rows of positive weights with one negative entry, as a step can leave them.
  const float raw[3][3] = {{2.0f, 1.0f, 1.0f}, {1.0f, 1.0f, -0.5f}, {0.5f, 0.5f, 3.0f}};
  for (int32_t k = 0; k < 3; ++k) {
    for (int32_t y = 0; y < 3; ++y) confusion[0][k][y].fill_(raw[k][y]);
  }
  net.AfterOptimizerStep();
  const double floor = neural::TraceRegNet::kMinConfusion;
  const double expected[3][3] = {{0.5, 0.25, 0.25},
                                 {1 / (2 + floor), 1 / (2 + floor), floor / (2 + floor)},
                                 {0.125, 0.125, 0.75}};
  for (int32_t k = 0; k < 3; ++k) {
    for (int32_t y = 0; y < 3; ++y) {
      EXPECT_NEAR(confusion[0][k][y].item<double>(), expected[k][y], 1e-6) << k << " " << y;
      EXPECT_NEAR(confusion[1][k][y].item<double>(), a[k][y], 1e-6) << k << " " << y;
    }
  }
}

// Logit confusions take no floor in training: a label on an entry far below kMinConfusion
// still raises it (a floor would pass no gradient, and the entry could never come back).
TEST(TraceRegTest, ALabelOnALogitEntryBelowTheFloorStillRaisesIt) {
  TruthModelOptions::Neural options;
  neural::TraceRegNet net(4, 2, 3, 0, options, neural::TraceRegNet::Parameterisation::kLogits);
  torch::Tensor logits;
  for (const auto& p : net.named_parameters()) {
    if (p.key() == "confusion_logits") logits = p.value();
  }
  ASSERT_TRUE(logits.defined());
  {
    torch::NoGradGuard no_grad;
    logits[1][0][2].fill_(-40.0);  // p(label 2 | class 0) for annotator 1: about 1e-18
  }
  ASSERT_LT(net.Confusions()[1][0][2].item<double>(), neural::TraceRegNet::kMinConfusion);
  torch::Tensor log_q = net.LogConfusion(torch::tensor({0}, torch::kLong), torch::tensor({1}, torch::kLong));
  (-log_q[0][0][2]).backward();
  EXPECT_LT(logits.grad()[1][0][2].item<double>(), -0.5);  // a step against it raises the entry
}

// A fit weights each annotator's trace by its share of the labels, λ n_r / L (trace_reg.h): in
// a crowd of one annotator with many labels and others with few, the few-label annotators'
// penalty is small, so the fit does not flip the classes to lower their traces. A crowd where
// most annotators give 2 labels: the summed, unweighted penalty (λ N / L per annotator) made
// trace_reg fall below chance on product and labelme.
TEST(TraceRegTest, EachAnnotatorsTraceIsWeightedByItsShareOfTheLabels) {
  testing::SyntheticCrowdSpec spec;
  spec.num_items = 600;
  spec.num_classes = 2;
  spec.labels_per_item = 3;
  spec.seed = 5;
  for (int a = 0; a < 300; ++a) {
    spec.confusions.push_back(testing::SymmetricConfusion(2, 0.8));
  }
  testing::SyntheticCrowd crowd = testing::GenerateSyntheticCrowd(spec);
  for (bool em : {false, true}) {  // the paper's loss and generalised EM share the penalty
    TruthModelOptions options = FastOptions("trace_reg");
    options.neural.trace_lambda = 0.01;
    options.neural.steps = 600;
    options.neural.featureless_em = em;
    auto model = Make("trace_reg", 2, options);
    ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    const double accuracy =
        testing::Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth);
    std::printf("trace_reg (featureless_em %d), 300 annotators with about 6 labels each: "
                "accuracy %.4f\n", em, accuracy);
    EXPECT_GT(accuracy, 0.85) << em;
  }
}

// After a fit the confusions stay on the simplex (on the paper's loss, the projection after
// every step; by EM, softmaxes of logits) and the diagonal of a spammer's (annotators 8-11 of
// MakeCrowd answer at random) is lower than a good annotator's (0-7, 0.8 right).
TEST(TraceRegTest, FittedConfusionsAreRowStochastic) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  for (bool em : {false, true}) {
    TruthModelOptions options = FastOptions("trace_reg");
    options.neural.featureless_em = em;
    auto model = Make("trace_reg", 3, options);
    ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    double diagonal[2] = {0, 0};
    for (int32_t a : {0, 11}) {
      std::vector<double> c = model->AnnotatorConfusion(a);
      for (int row = 0; row < 3; ++row) {
        EXPECT_NEAR(c[row * 3] + c[row * 3 + 1] + c[row * 3 + 2], 1.0, 1e-5) << em;
        for (int y = 0; y < 3; ++y) EXPECT_GE(c[row * 3 + y], 0.5 * neural::TraceRegNet::kMinConfusion);
        diagonal[a == 0 ? 0 : 1] += c[row * 3 + row] / 3;
      }
    }
    std::printf("featureless_em %d: mean diagonal, good annotator %.3f, spammer %.3f\n", em,
                diagonal[0], diagonal[1]);
    EXPECT_GT(diagonal[0], diagonal[1] + 0.1) << em;
  }
}

// crowdlayer serves p(k | labels) ∝ π[k] Π Q_r[k, y] with Q_r[k, ·] the trained crowd layer
// applied to σ̄_k, the mean classifier output of the fitted items weighted by their mass on k
// (crowdlayer.h), not to a one-hot class, and π the class prior (items without features start
// from it, neural_truth_model.h). Everything is recomputed here from the items' priors σ_i,
// the served class prior and the layers.
TEST(CrowdLayerTest, PosteriorsUseTheTrainedLayerAtTypicalClassifierOutputs) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  const int32_t k = 3, items = crowd.matrix.num_items();
  auto fitted = Make("crowdlayer", k);
  ASSERT_THAT(fitted->Fit(crowd.matrix, {}, false).status(), IsOk());
  const auto* model = dynamic_cast<const neural::CrowdLayerModel*>(fitted.get());
  ASSERT_NE(model, nullptr);
  std::vector<std::vector<double>> sigma(items, std::vector<double>(k));
  for (int32_t i = 0; i < items; ++i) sigma[i] = model->ItemPrior(i);
  std::vector<double> class_prior(k);
  model->ItemPosteriorForItem(0, {}, -1, absl::MakeSpan(class_prior));
  double mean_sigma0 = 0;
  for (int32_t i = 0; i < items; ++i) mean_sigma0 += sigma[i][0] / items;
  EXPECT_NEAR(class_prior[0], mean_sigma0, 1e-6);  // π is the mean of the σ_i
  std::vector<std::vector<double>> typical(k, std::vector<double>(k, 0.0));
  for (int32_t c = 0; c < k; ++c) {
    double mass = 0;
    for (int32_t i = 0; i < items; ++i) {
      mass += sigma[i][c];
      for (int32_t d = 0; d < k; ++d) typical[c][d] += sigma[i][c] * sigma[i][d];
    }
    for (double& v : typical[c]) v /= mass;
  }
  // The classifier is not one-hot, so the test tells σ̄_k from e_k.
  EXPECT_LT(typical[0][0], 0.999);
  auto likelihood = [&](int32_t annotator, int32_t c, int32_t y) {
    return model->TrainedLabelDistribution(annotator, typical[c])[y];
  };
  for (int32_t a : {0, 11}) {
    std::vector<double> confusion = model->AnnotatorConfusion(a);
    for (int32_t c = 0; c < k; ++c) {
      for (int32_t y = 0; y < k; ++y) EXPECT_NEAR(confusion[c * k + y], likelihood(a, c, y), 1e-6);
    }
  }
  for (int32_t i : {0, 1, 2, 150, 299}) {
    absl::Span<const AnnotationMatrix::Entry> labels = crowd.matrix.LabelsOfItem(i);
    std::vector<double> expected(k);
    double sum = 0;
    for (int32_t c = 0; c < k; ++c) {
      expected[c] = class_prior[c];
      for (const AnnotationMatrix::Entry& e : labels) expected[c] *= likelihood(e.other, c, e.label);
      sum += expected[c];
    }
    std::vector<double> served(k);
    model->ItemPosteriorForItem(i, labels, -1, absl::MakeSpan(served));
    for (int32_t c = 0; c < k; ++c) EXPECT_NEAR(served[c], expected[c] / sum, 1e-6) << "item " << i;
  }
}

// With many classes, the crowd layers' identity start is scaled by 1 + ln(K - 1) (crowdlayer.h):
// unscaled, a one-hot classifier output gives every annotator an accuracy of e / (e + K - 1)
// (0.23 at K = 10), the layers explain the labels as noise, and the classifier learns little.
// 10 classes, 5 labels per item from 10 annotators of accuracy 0.5: crowdlayer must come within
// 3 points of ds. Measured: ds 0.7075; crowdlayer 0.7025 scaled, 0.6525 unscaled.
TEST(CrowdLayerTest, ManyClassesComeCloseToDawidSkene) {
  const int32_t k = 10;
  testing::SyntheticCrowdSpec spec;
  spec.num_items = 400;
  spec.num_classes = k;
  spec.labels_per_item = 5;
  spec.seed = 31;
  for (int a = 0; a < 10; ++a) spec.confusions.push_back(testing::SymmetricConfusion(k, 0.5));
  testing::SyntheticCrowd crowd = testing::GenerateSyntheticCrowd(spec);
  auto accuracy = [&](TruthModel& model) {
    EXPECT_THAT(model.Fit(crowd.matrix, {}, false).status(), IsOk());
    return testing::Accuracy(AllPosteriors(model, crowd.matrix, {}), crowd.matrix, crowd.truth);
  };
  auto ds = Make("ds", k, TruthModelOptions());
  auto crowdlayer = Make("crowdlayer", k);
  const double ds_accuracy = accuracy(*ds), crowdlayer_accuracy = accuracy(*crowdlayer);
  EXPECT_GT(ds_accuracy, 0.65);
  EXPECT_GE(crowdlayer_accuracy, ds_accuracy - 0.03) << "ds " << ds_accuracy;
}

// lia's M-steps and fine-tuning stop on the convergence rule (lia.h): with a tolerance no
// window can meet, each of the em_iterations + 1 phases stops after its second window of 50
// steps; with the default, they stop between that and lia_max_steps.
TEST(LiaTest, PhasesStopOnTheConvergenceRule) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 3);
  TruthModelOptions options = FastOptions("lia");
  options.neural.steps = 0;
  options.neural.lia_max_steps = 1000;
  options.neural.lia_tolerance = 0.5;
  absl::StatusOr<FitReport> loose = Make("lia", 2, options)->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(loose.status(), IsOk());
  EXPECT_EQ(loose->training_steps, (options.neural.em_iterations + 1) * 100);
  options.neural.lia_tolerance = TruthModelOptions().neural.lia_tolerance;
  absl::StatusOr<FitReport> report = Make("lia", 2, options)->Fit(crowd.matrix, {}, false);
  ASSERT_THAT(report.status(), IsOk());
  std::printf("lia, tolerance %g: %lld steps over %d phases (at most %d)\n", options.neural.lia_tolerance,
              static_cast<long long>(report->training_steps), options.neural.em_iterations + 1,
              (options.neural.em_iterations + 1) * options.neural.lia_max_steps);
  EXPECT_GT(report->training_steps, loose->training_steps);
  EXPECT_LT(report->training_steps, (options.neural.em_iterations + 1) * options.neural.lia_max_steps);
}

// lia's latent size L (truth_model.h): featureless_lia_latent_dim where nothing carries features,
// lia_latent_dim where items do. L sizes the competence and difficulty networks' outputs
// (K² L each), so a stored net's size tells which L the fit used: the same L gives the same
// size, another L another.
TEST(LiaTest, TheLatentSizeFollowsTheFeatures) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 3);
  auto stored_size = [&](int featureless_latent, int latent, bool features) {
    TruthModelOptions options = FastOptions("lia");
    options.neural.steps = 20;
    options.neural.featureless_lia_latent_dim = featureless_latent;
    options.neural.lia_latent_dim = latent;
    auto model = Make("lia", 2, options);
    if (features) {
      std::vector<float> column(crowd.matrix.num_items());
      for (size_t i = 0; i < column.size(); ++i) column[i] = static_cast<float>(i % 7);
      EXPECT_THAT(model->SetItemFeatures(1, column), IsOk());
    }
    EXPECT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    return model->Serialize().size();
  };
  // Without features: the featureless L decides, lia_latent_dim does not.
  EXPECT_EQ(stored_size(1, 4, false), stored_size(1, 1, false));
  EXPECT_LT(stored_size(1, 4, false), stored_size(4, 4, false));
  // With item features: lia_latent_dim decides.
  EXPECT_EQ(stored_size(1, 4, true), stored_size(4, 4, true));
  EXPECT_LT(stored_size(1, 1, true), stored_size(1, 4, true));
}

// A version stored at another L (every featureless lia version before the featureless L
// existed was fitted at L = 4) restores as stored: the same served posteriors and confusions.
// A warm refit under the new L cannot reuse it (its parameters pair other entries), so it is
// the cold fit, to the last digit.
TEST(LiaTest, AVersionOfAnotherLatentSizeRestoresAsStoredAndRefitsCold) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 3);
  TruthModelOptions old_options = FastOptions("lia");
  old_options.neural.steps = 40;
  old_options.neural.featureless_lia_latent_dim = 4;
  auto stored = Make("lia", 2, old_options);
  ASSERT_THAT(stored->Fit(crowd.matrix, {}, false).status(), IsOk());
  TruthModelOptions options = old_options;
  options.neural.featureless_lia_latent_dim = 1;
  auto restored = Make("lia", 2, options);
  ASSERT_THAT(restored->Restore(stored->Serialize()), IsOk());
  EXPECT_TRUE(restored->Serialize() == stored->Serialize()) << "the restored net differs";
  std::vector<double> want(2), got(2);
  double largest_difference = 0;
  for (int32_t i = 0; i < crowd.matrix.num_items(); i += 7) {
    stored->ItemPosteriorForItem(i, crowd.matrix.LabelsOfItem(i), -1, absl::MakeSpan(want));
    restored->ItemPosteriorForItem(i, crowd.matrix.LabelsOfItem(i), -1, absl::MakeSpan(got));
    for (int c = 0; c < 2; ++c) largest_difference = std::max(largest_difference, std::abs(got[c] - want[c]));
  }
  for (int32_t a = 0; a < crowd.matrix.num_annotators(); ++a) {
    const std::vector<double> stored_confusion = stored->AnnotatorConfusion(a);
    const std::vector<double> restored_confusion = restored->AnnotatorConfusion(a);
    ASSERT_EQ(restored_confusion.size(), stored_confusion.size());
    for (size_t x = 0; x < stored_confusion.size(); ++x) {
      largest_difference = std::max(largest_difference, std::abs(restored_confusion[x] - stored_confusion[x]));
    }
  }
  EXPECT_LT(largest_difference, 1e-12);

  ASSERT_THAT(restored->Fit(crowd.matrix, {}, /*warm_start=*/true).status(), IsOk());
  auto cold = Make("lia", 2, options);
  ASSERT_THAT(cold->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_TRUE(restored->Serialize() == cold->Serialize()) << "the refit is not the cold fit";
}

// An item not in lia's fit gets the mean item's confusion (lia.h): for every annotator, the
// fitted items' confusions averaged as probabilities (all of them: 200 items, under the sample
// size), so its difficulty is the mean of theirs and one label from a noisy crowd leaves it far
// from certain. (Averaging the difficulty tables instead served 1 - 1e-13 from one label.)
TEST(LiaTest, AnItemNotInTheFitGetsTheMeanItemsConfusion) {
  testing::SyntheticCrowdSpec spec;
  spec.num_items = 200;
  spec.num_classes = 3;
  spec.labels_per_item = 5;
  spec.seed = 3;
  for (int a = 0; a < 8; ++a) spec.confusions.push_back(testing::SymmetricConfusion(3, 0.7));
  for (int a = 0; a < 4; ++a) spec.confusions.push_back(testing::SymmetricConfusion(3, 1.0 / 3));
  const testing::SyntheticCrowd crowd = testing::GenerateSyntheticCrowd(spec);
  TruthModelOptions options;
  options.neural.device = "cpu";
  auto model = Make("lia", 3, options);
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  const int32_t items = crowd.matrix.num_items(), unseen = items + 5;
  double largest_gap = 0;
  for (int32_t a = 0; a < crowd.matrix.num_annotators(); ++a) {
    std::vector<double> mean(9, 0.0);
    for (int32_t i = 0; i < items; ++i) {
      const std::vector<double> q = model->ItemAnnotatorConfusion(i, a);
      ASSERT_EQ(q.size(), 9u);
      for (int x = 0; x < 9; ++x) mean[x] += q[x] / items;
    }
    const std::vector<double> served = model->ItemAnnotatorConfusion(unseen, a);
    ASSERT_EQ(served.size(), 9u);
    for (int x = 0; x < 9; ++x) largest_gap = std::max(largest_gap, std::abs(served[x] - mean[x]));
  }
  EXPECT_LT(largest_gap, 1e-9);
  double mean_difficulty = 0;
  for (int32_t i = 0; i < items; ++i) mean_difficulty += *model->ItemDifficulty(i) / items;
  ASSERT_TRUE(model->ItemDifficulty(unseen).has_value());
  EXPECT_NEAR(*model->ItemDifficulty(unseen), mean_difficulty, 1e-9);
  EXPECT_GT(mean_difficulty, 0.05);
  std::vector<double> p(3);
  const AnnotationMatrix::Entry one = crowd.matrix.LabelsOfItem(0)[0];
  model->ItemPosteriorForItem(unseen, absl::MakeConstSpan(&one, 1), -1, absl::MakeSpan(p));
  EXPECT_LT(*std::max_element(p.begin(), p.end()), 0.99) << p[0] << " " << p[1] << " " << p[2];
}

// cmm (Global setting): every label picks its own group, so an item's posterior is
// h_i[k] Π_l Σ_m α_m β^(m)[k, y_l], recomputed here from the exported α, β and the priors h_i
// served for items without labels. (One group per item, Σ_m α_m Π_l β^(m)[k, y_l], differs:
// checked below, so the test tells the two apart.)
TEST(CmmTest, GlobalPosteriorMixesTheGroupsPerLabel) {
  testing::SyntheticCrowd crowd = MakeCrowd(3, 11);
  const int32_t k = 3;
  TruthModelOptions options = FastOptions("cmm");
  options.neural.cmm_setting = "global";
  auto fitted = Make("cmm", k, options);
  ASSERT_THAT(fitted->Fit(crowd.matrix, {}, false).status(), IsOk());
  const auto* model = dynamic_cast<const neural::CmmModel*>(fitted.get());
  ASSERT_NE(model, nullptr);
  const int32_t groups = model->groups();
  ASSERT_EQ(groups, 3);
  auto beta = [&](int32_t m, int32_t c, int32_t y) { return std::exp(model->log_beta()[(m * k + c) * k + y]); };
  auto alpha = [&](int32_t m) { return std::exp(model->log_alpha()[m]); };
  double largest_gap = 0;  // between the per-label and the per-item group posteriors
  for (int32_t i : {0, 1, 2, 150, 299}) {
    absl::Span<const AnnotationMatrix::Entry> labels = crowd.matrix.LabelsOfItem(i);
    std::vector<double> h(k), served(k), per_label(k), per_item(k, 0.0);
    model->ItemPosteriorForItem(i, {}, -1, absl::MakeSpan(h));
    model->ItemPosteriorForItem(i, labels, -1, absl::MakeSpan(served));
    double sum = 0, item_sum = 0;
    for (int32_t c = 0; c < k; ++c) {
      per_label[c] = h[c];
      for (const AnnotationMatrix::Entry& e : labels) {
        double mix = 0;
        for (int32_t m = 0; m < groups; ++m) mix += alpha(m) * beta(m, c, e.label);
        per_label[c] *= mix;
      }
      for (int32_t m = 0; m < groups; ++m) {
        double product = alpha(m);
        for (const AnnotationMatrix::Entry& e : labels) product *= beta(m, c, e.label);
        per_item[c] += h[c] * product;
      }
      sum += per_label[c];
      item_sum += per_item[c];
    }
    // In logs: with 5 labels the posteriors are near 0 or 1, where probabilities differ little.
    for (int32_t c = 0; c < k; ++c) {
      EXPECT_NEAR(std::log(served[c]), std::log(per_label[c] / sum), 1e-4) << "item " << i << " class " << c;
      largest_gap = std::max(largest_gap, std::abs(std::log(per_label[c] / sum) - std::log(per_item[c] / item_sum)));
    }
  }
  EXPECT_GT(largest_gap, 0.01);
}

// cmm (Individual setting): two populations, one accurate and one that reads class c as c + 1
// most of the time, get different group memberships, each shared within its population.
TEST(CmmTest, IndividualSettingGivesTwoPopulationsDifferentGroups) {
  const int32_t k = 3;
  testing::SyntheticCrowdSpec spec;
  spec.num_items = 600;
  spec.num_classes = k;
  spec.labels_per_item = 6;
  spec.seed = 4;
  std::vector<double> shifted(k * k, 0.1);
  for (int32_t c = 0; c < k; ++c) {
    shifted[c * k + c] = 0.2;
    shifted[c * k + (c + 1) % k] = 0.7;
  }
  for (int a = 0; a < 10; ++a) spec.confusions.push_back(testing::SymmetricConfusion(k, 0.85));
  for (int a = 0; a < 5; ++a) spec.confusions.push_back(shifted);
  testing::SyntheticCrowd crowd = testing::GenerateSyntheticCrowd(spec);
  TruthModelOptions options = FastOptions("cmm");
  options.neural.cmm_setting = "individual";
  options.neural.cmm_groups = 2;
  auto fitted = Make("cmm", k, options);
  ASSERT_THAT(fitted->Fit(crowd.matrix, {}, false).status(), IsOk());
  const auto* model = dynamic_cast<const neural::CmmModel*>(fitted.get());
  ASSERT_NE(model, nullptr);
  const std::vector<double>& p = model->memberships();
  ASSERT_EQ(p.size(), 15u * 2);
  const int32_t accurate_group = p[0] > p[1] ? 0 : 1;
  for (int32_t a = 0; a < 15; ++a) {
    const int32_t expected = a < 10 ? accurate_group : 1 - accurate_group;
    EXPECT_GT(p[a * 2 + expected], 0.8) << "annotator " << a;
  }
  EXPECT_GE(testing::Accuracy(AllPosteriors(*model, crowd.matrix, {}), crowd.matrix, crowd.truth), 0.9);
}

// CmmKMeans: the same seed gives the same clusters; well-separated blobs are recovered.
TEST(CmmTest, KMeansIsDeterministicForASeedAndFindsSeparatedBlobs) {
  std::vector<float> values;
  for (int32_t blob = 0; blob < 3; ++blob) {
    for (int32_t j = 0; j < 30; ++j) {
      values.push_back(10.0f * blob + 0.1f * static_cast<float>(j % 7));
      values.push_back(-5.0f * blob + 0.1f * static_cast<float>(j % 5));
    }
  }
  torch::Tensor points = torch::tensor(values).view({90, 2});
  torch::Tensor a = neural::CmmKMeans(points, 3, 7);
  torch::Tensor b = neural::CmmKMeans(points, 3, 7);
  EXPECT_TRUE(torch::equal(a, b));
  for (int32_t blob = 0; blob < 3; ++blob) {
    const int64_t cluster = a[blob * 30].item<int64_t>();
    for (int32_t j = 1; j < 30; ++j) EXPECT_EQ(a[blob * 30 + j].item<int64_t>(), cluster) << blob << " " << j;
  }
  EXPECT_NE(a[0].item<int64_t>(), a[30].item<int64_t>());
  EXPECT_NE(a[0].item<int64_t>(), a[60].item<int64_t>());
  EXPECT_NE(a[30].item<int64_t>(), a[60].item<int64_t>());
  // Fits are deterministic too, K-means restarts included: the same tables twice.
  testing::SyntheticCrowd crowd = MakeCrowd(3, 5);
  std::vector<double> tables[2];
  for (int run = 0; run < 2; ++run) {
    auto fitted = Make("cmm", 3);
    ASSERT_THAT(fitted->Fit(crowd.matrix, {}, false).status(), IsOk());
    tables[run] = dynamic_cast<const neural::CmmModel&>(*fitted).log_beta();
  }
  EXPECT_EQ(tables[0], tables[1]);
}

TEST(CmmTest, RejectsAnUnknownSetting) {
  TruthModelOptions options = FastOptions("cmm");
  options.neural.cmm_setting = "both";
  EXPECT_THAT(CreateTruthModel("cmm", 2, options).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Truth-network capacity (TruthModelOptions::Neural feature_* and weight_decay). The crowd of
// MakeCrowd(2, ·) with two item features: 1,500 labels, 6 steps per epoch at batch 256.
std::vector<float> TwoFeatures(const testing::SyntheticCrowd& crowd) {
  std::vector<float> features;
  for (int32_t i = 0; i < 300; ++i) {
    features.push_back(static_cast<float>(crowd.truth[i]) + 0.1f * static_cast<float>((i * 37) % 7 - 3));
    features.push_back(static_cast<float>((i * 13) % 5));
  }
  return features;
}

int64_t Numel(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const torch::Tensor& t : tensors) n += t.numel();
  return n;
}

std::unique_ptr<neural::NeuralTruthModel> MakeNeural(const std::string& method, TruthModelOptions options) {
  std::unique_ptr<TruthModel> model = Make(method, 2, options);
  return std::unique_ptr<neural::NeuralTruthModel>(dynamic_cast<neural::NeuralTruthModel*>(model.release()));
}

TEST(TruthNetworkCapacityTest, WidthLayersAndBatchNormSetTheParameterCount) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 31);
  TruthModelOptions options = FastOptions();
  options.neural.steps = 6;
  options.neural.feature_width = 24;
  options.neural.feature_layers = 2;
  options.neural.feature_batch_norm = true;
  auto model = MakeNeural("crowdlayer", options);
  ASSERT_THAT(model->SetItemFeatures(2, TwoFeatures(crowd)), IsOk());
  int64_t encoder = -1, total = -1;
  model->SetCheckpointObserver(6, [&](int64_t, neural::CrowdNet& net) {
    encoder = Numel(net.items()->parameters());
    total = Numel(net.parameters());
  });
  ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
  // Two Linear layers (2 -> 24, 24 -> 24) with a BatchNorm (scale and shift) after each.
  EXPECT_EQ(encoder, (2 * 24 + 24) + (24 * 24 + 24) + 2 * (2 * 24));
  // The head, sized by the width too (24 -> 24 -> 2), and the 12 annotators' 2 x 2 matrices.
  EXPECT_EQ(total, encoder + (24 * 24 + 24) + (24 * 2 + 2) + 12 * 2 * 2);
}

TEST(TruthNetworkCapacityTest, DropoutActsInTrainingOnlyAndTheExportIsInEvalMode) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 32);
  for (double dropout : {0.0, 0.5}) {
    TruthModelOptions options = FastOptions();
    options.neural.steps = 60;
    // The observer's last call (step 60) must be the fit's last step: no Dawid-Skene start.
    options.neural.ds_start_fraction = 0;
    options.neural.feature_dropout = dropout;
    auto model = MakeNeural("crowdlayer", options);
    ASSERT_THAT(model->SetItemFeatures(2, TwoFeatures(crowd)), IsOk());
    std::vector<double> eval_prior;
    double max_train_eval_gap = 0;  // between the encoder's outputs in training and eval mode
    model->SetCheckpointObserver(60, [&](int64_t, neural::CrowdNet& net) {
      torch::Tensor items = torch::arange(300, torch::kLong);
      eval_prior = neural::TensorToVector(torch::exp(net.LogPrior(items)));
      const std::vector<double> eval_encoded = neural::TensorToVector(net.items()->forward(items));
      net.train();
      torch::manual_seed(5);
      const std::vector<double> train_encoded = neural::TensorToVector(net.items()->forward(items));
      net.eval();
      for (size_t v = 0; v < eval_encoded.size(); ++v) {
        max_train_eval_gap = std::max(max_train_eval_gap, std::abs(train_encoded[v] - eval_encoded[v]));
      }
    });
    ASSERT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    ASSERT_EQ(eval_prior.size(), 600u);
    double max_export_gap = 0;
    std::vector<double> p(2);
    for (int32_t i = 0; i < 300; ++i) {
      model->ItemPosteriorForItem(i, {}, -1, absl::MakeSpan(p));
      for (int c = 0; c < 2; ++c) {
        max_export_gap = std::max(max_export_gap, std::abs(p[c] - eval_prior[2 * i + c]));
      }
    }
    // The served prior is the eval-mode network's.
    EXPECT_LT(max_export_gap, 1e-5) << dropout;
    if (dropout > 0) {
      EXPECT_GT(max_train_eval_gap, 0.1);
    } else {
      EXPECT_LT(max_train_eval_gap, 1e-6);
    }
  }
}

TEST(TruthNetworkCapacityTest, WeightDecayShrinksTheTruthNetworkOnly) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 33);
  auto norms = [&](double weight_decay) {
    TruthModelOptions options = FastOptions();
    options.neural.steps = 60;
    options.neural.weight_decay = weight_decay;
    auto model = MakeNeural("crowdlayer", options);
    EXPECT_THAT(model->SetItemFeatures(2, TwoFeatures(crowd)), IsOk());
    std::pair<double, double> truth_and_crowd;
    model->SetCheckpointObserver(60, [&](int64_t, neural::CrowdNet& net) {
      double truth = 0, crowd_layer = 0;
      for (const auto& p : net.named_parameters()) {
        const double square = p.value().pow(2).sum().item<double>();
        if (p.key() == "weights") {
          crowd_layer += square;
        } else if (p.value().dim() >= 2) {
          truth += square;
        }
      }
      truth_and_crowd = {std::sqrt(truth), std::sqrt(crowd_layer)};
    });
    EXPECT_THAT(model->Fit(crowd.matrix, {}, false).status(), IsOk());
    return truth_and_crowd;
  };
  const auto plain = norms(0.0);
  // × (1 − 0.02 · 22.5) = 0.55 per step (0.02: the step's rate at batch 256, FastOptions):
  // AMSGrad's steps of about 0.02 cannot keep a weight above about 0.02 / 0.45, while the plain
  // network keeps its initial scale or more. (22.5 · 0.04, the options' rate, is below 1.)
  const auto decayed = norms(22.5);
  EXPECT_LT(decayed.first, 0.5 * plain.first);
  // The crowd layer (initialised at the identity) is not decayed towards zero.
  EXPECT_GT(decayed.second, 0.5 * std::sqrt(12.0 * 2));
}

TEST(TruthNetworkCapacityTest, ProjectsWithoutFeaturesIgnoreTheFeatureOptions) {
  testing::SyntheticCrowd crowd = MakeCrowd(2, 34);
  TruthModelOptions options = FastOptions();
  options.neural.steps = 60;
  auto plain = Make("conal", 2, options);
  options.neural.feature_width = 64;
  options.neural.feature_layers = 3;
  options.neural.feature_dropout = 0.3;
  options.neural.feature_batch_norm = true;
  auto configured = Make("conal", 2, options);
  ASSERT_THAT(plain->Fit(crowd.matrix, {}, false).status(), IsOk());
  ASSERT_THAT(configured->Fit(crowd.matrix, {}, false).status(), IsOk());
  EXPECT_EQ(AllPosteriors(*plain, crowd.matrix, {}), AllPosteriors(*configured, crowd.matrix, {}));
}

TEST(TruthNetworkCapacityTest, OptionsOutOfRangeAreRefused) {
  const std::vector<std::function<void(TruthModelOptions::Neural&)>> breaks = {
      [](auto& n) { n.feature_width = 0; },      [](auto& n) { n.feature_width = 1025; },
      [](auto& n) { n.feature_layers = 0; },     [](auto& n) { n.feature_layers = 9; },
      [](auto& n) { n.feature_dropout = -0.1; }, [](auto& n) { n.feature_dropout = 1.0; },
      [](auto& n) { n.weight_decay = -1; },      [](auto& n) { n.weight_decay = 1000; },
  };
  for (size_t b = 0; b < breaks.size(); ++b) {
    TruthModelOptions options;
    breaks[b](options.neural);
    EXPECT_THAT(ValidateTruthModelOptions(options), StatusIs(absl::StatusCode::kInvalidArgument)) << b;
  }
  EXPECT_THAT(ValidateTruthModelOptions(TruthModelOptions()), IsOk());
}

// Three annotators right 90% of the time and four who answer class 0 95% of the time label
// every one of 400 binary items: the majority vote follows the four (right on about 60% of the
// items), while Dawid-Skene learns that their answers carry no information and follows the
// three (a NumPy rebuild of the same EM: 98.5%).
struct BiasedCrowd {
  static constexpr int32_t kItems = 400, kSkilled = 3, kBiased = 4, kAnnotators = kSkilled + kBiased;
  std::vector<int64_t> items, annotators, labels;  // one entry per label
  std::vector<int32_t> truth;

  AnnotationMatrix Matrix() const {
    std::vector<Annotation> all;
    for (size_t l = 0; l < labels.size(); ++l) {
      all.push_back({static_cast<int32_t>(items[l]), static_cast<int32_t>(annotators[l]),
                     static_cast<int32_t>(labels[l])});
    }
    return *AnnotationMatrix::Build(kItems, kAnnotators, 2, all);
  }
  // Items whose posterior under `model` puts its larger probability on the true class.
  int RightUnder(const TruthModel& model, const AnnotationMatrix& data) const {
    int right = 0;
    std::vector<double> p(2);
    for (int32_t i = 0; i < kItems; ++i) {
      model.ItemPosteriorForItem(i, data.LabelsOfItem(i), -1, absl::MakeSpan(p));
      right += (p[1] > p[0] ? 1 : 0) == truth[i];
    }
    return right;
  }
};

BiasedCrowd SkilledOutvotedByBiased() {
  BiasedCrowd crowd;
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int32_t i = 0; i < BiasedCrowd::kItems; ++i) {
    crowd.truth.push_back(static_cast<int32_t>(rng() % 2));
    for (int32_t a = 0; a < BiasedCrowd::kAnnotators; ++a) {
      crowd.items.push_back(i);
      crowd.annotators.push_back(a);
      if (a < BiasedCrowd::kSkilled) {
        crowd.labels.push_back(unit(rng) < 0.9 ? crowd.truth[i] : 1 - crowd.truth[i]);
      } else {
        crowd.labels.push_back(unit(rng) < 0.95 ? 0 : 1);
      }
    }
  }
  return crowd;
}

// The Dawid-Skene start (lia's first E-step; the truth network's target before crowdlayer,
// trace_reg and conal train): on the crowd above it follows the skilled annotators. A gold item
// is clamped to its class, and every row is a distribution.
TEST(DawidSkeneStartTest, LearnsToIgnoreAnnotatorsWhoOutvoteTheSkilledOnes) {
  const BiasedCrowd crowd = SkilledOutvotedByBiased();
  constexpr int32_t kItems = BiasedCrowd::kItems, kAnnotators = BiasedCrowd::kAnnotators;
  const std::vector<int64_t>& labels = crowd.labels;
  const std::vector<int32_t>& truth = crowd.truth;
  neural::LabelTensors data;
  data.num_items = kItems;
  data.num_annotators = kAnnotators;
  data.num_labels = static_cast<int64_t>(labels.size());
  data.items = torch::tensor(crowd.items, torch::kLong);
  data.annotators = torch::tensor(crowd.annotators, torch::kLong);
  data.labels = torch::tensor(labels, torch::kLong);
  data.labels_per_item = torch::full({kItems}, static_cast<float>(kAnnotators));
  const int32_t gold_class = 1 - truth[0];  // a gold label the crowd contradicts
  data.gold_items = torch::tensor(std::vector<int64_t>{0}, torch::kLong);
  data.gold_labels = torch::tensor(std::vector<int64_t>{gold_class}, torch::kLong);

  const torch::Tensor q = neural::DawidSkenePosteriors(data, 2, 0.01, 20);
  ASSERT_EQ(q.size(0), kItems);
  ASSERT_EQ(q.size(1), 2);
  EXPECT_TRUE(torch::allclose(q.sum(1), torch::ones({kItems}), 1e-5, 1e-5));
  EXPECT_FLOAT_EQ(q[0][gold_class].item<float>(), 1.0f);
  const torch::Tensor map = q.argmax(1);
  int ds_right = 0, mv_right = 0;
  for (int32_t i = 1; i < kItems; ++i) {
    ds_right += map[i].item<int64_t>() == truth[i];
    int votes = 0;
    for (int32_t a = 0; a < kAnnotators; ++a) votes += labels[i * kAnnotators + a] == truth[i];
    mv_right += votes * 2 > kAnnotators;
  }
  std::printf("right of %d: Dawid-Skene start %d, majority vote %d\n", kItems - 1, ds_right, mv_right);
  EXPECT_GE(ds_right, (kItems - 1) * 95 / 100);
  EXPECT_LE(mv_right, (kItems - 1) * 70 / 100);
}

// crowdlayer and conal start with their truth network anchored to the Dawid-Skene start
// (TruthModelOptions::Neural::ds_start_fraction); trace_reg does not (trace_reg.h says why). On
// the crowd above, where the majority vote is right on about 60% of the items, crowdlayer ends
// above 80% (from a random start, the paper's: 52.5% at seed 5) and conal above its random
// start (59.5% against 53%), and the start's steps are counted in the fit's training steps (a
// quarter of the fit's). trace_reg's fits are the same with or without the option.
TEST(DawidSkeneStartTest, CrowdLayerAndConalStartFromIt) {
  const BiasedCrowd crowd = SkilledOutvotedByBiased();
  const AnnotationMatrix data = crowd.Matrix();
  for (const char* method : {"crowdlayer", "conal", "trace_reg"}) {
    int64_t steps[2] = {0, 0};
    double accuracy[2] = {0, 0};
    for (int with_start = 0; with_start < 2; ++with_start) {
      TruthModelOptions options;
      options.neural.device = "cpu";
      options.neural.seed = 5;
      // The papers' loss at the rate the start was measured at: at the featureless default
      // (1e-2) crowdlayer reaches 0.973 from either start on this crowd.
      options.neural.featureless_em = false;
      options.neural.featureless_learning_rate = 1e-3;
      if (with_start == 0) options.neural.ds_start_fraction = 0;
      auto model = CreateTruthModel(method, 2, options);
      ASSERT_THAT(model, IsOk());
      absl::StatusOr<FitReport> report = (*model)->Fit(data, {}, false);
      ASSERT_THAT(report, IsOk()) << method;
      steps[with_start] = report->training_steps;
      accuracy[with_start] = static_cast<double>(crowd.RightUnder(**model, data)) / BiasedCrowd::kItems;
    }
    std::printf("%s: accuracy %.3f from the Dawid-Skene start, %.3f from a random one; steps %lld, %lld\n",
                method, accuracy[1], accuracy[0], static_cast<long long>(steps[1]),
                static_cast<long long>(steps[0]));
    if (std::string(method) == "trace_reg") {
      EXPECT_EQ(steps[1], steps[0]) << method;
      EXPECT_EQ(accuracy[1], accuracy[0]) << method;
      continue;
    }
    EXPECT_GE(accuracy[1], std::string(method) == "crowdlayer" ? 0.8 : 0.57) << method;
    EXPECT_GT(accuracy[1], accuracy[0]) << method;
    EXPECT_GT(steps[1], steps[0]) << method;
    EXPECT_LE(steps[1] - steps[0], steps[0] / 4 + 1) << method;
  }
}

// The Dawid-Skene start (neural_truth_model.h, StartsFromDawidSkene) anchors the truth network
// to Dawid-Skene's posteriors for its share of the steps: on the crowd above, where the
// majority vote is right on about 60% of the items and Dawid-Skene on about 98%, crowdlayer's
// truth network h follows Dawid-Skene a quarter into the start (argmax h_i right on 90% of the
// items; measured 389 of 400), where the labels' likelihood alone has not yet moved it from its
// random start (210).
TEST(DawidSkeneStartTest, TheStartAnchorsTheTruthNetworkToTheDawidSkenePosteriors) {
  const BiasedCrowd crowd = SkilledOutvotedByBiased();
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 5;
  options.neural.featureless_em = false;
  options.neural.featureless_learning_rate = 0.05;
  options.neural.steps = 400;  // the start: a quarter, 100 steps
  auto model = CreateUncalibratedTruthModel("crowdlayer", 2, options);
  ASSERT_THAT(model, IsOk());
  auto* neural = dynamic_cast<neural::NeuralTruthModel*>(model->get());
  ASSERT_NE(neural, nullptr);
  int right = -1;
  neural->SetCheckpointObserver(25, [&](int64_t step, neural::CrowdNet& net) {
    if (step != 25) return;
    const torch::Tensor map = net.LogPrior(torch::arange(BiasedCrowd::kItems)).argmax(1);
    right = 0;
    for (int32_t i = 0; i < BiasedCrowd::kItems; ++i) {
      right += map[i].item<int64_t>() == crowd.truth[i];
    }
  });
  ASSERT_THAT(neural->Fit(crowd.Matrix(), {}, false).status(), IsOk());
  EXPECT_GE(right, BiasedCrowd::kItems * 90 / 100);
}

// lia's EM starts from the Dawid-Skene start (lia.h): on the crowd above, where the majority
// vote is right on about 60% of the items, lia follows the skilled annotators.
TEST(DawidSkeneStartTest, LiaStartsItsEmFromIt) {
  const BiasedCrowd crowd = SkilledOutvotedByBiased();
  const AnnotationMatrix data = crowd.Matrix();
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 5;
  auto model = CreateTruthModel("lia", 2, options);
  ASSERT_THAT(model, IsOk());
  ASSERT_THAT((*model)->Fit(data, {}, false).status(), IsOk());
  const int right = crowd.RightUnder(**model, data);
  std::printf("lia: %d of %d right\n", right, BiasedCrowd::kItems);
  EXPECT_GE(right, BiasedCrowd::kItems * 9 / 10);
}

// Binary items, 15% of class 1, with three labels each from a pool of 40 annotators: 25 right
// 85% of the time, 15 right 60% of the time. With so few labels per item, the per-label loss
// can fit each item's free h_i to its own labels (0.732 at seed 5), while Dawid-Skene weighs
// the annotators and the class prior (0.893).
BiasedCrowd FewLabelsPerItem(int32_t items) {
  BiasedCrowd crowd;
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int32_t i = 0; i < items; ++i) {
    crowd.truth.push_back(unit(rng) < 0.15 ? 1 : 0);
    std::vector<int64_t> pool;
    while (pool.size() < 3) {
      const int64_t a = static_cast<int64_t>(rng() % 40);
      if (std::find(pool.begin(), pool.end(), a) == pool.end()) pool.push_back(a);
    }
    for (int64_t a : pool) {
      crowd.items.push_back(i);
      crowd.annotators.push_back(a);
      const double right = a < 25 ? 0.85 : 0.6;
      crowd.labels.push_back(unit(rng) < right ? crowd.truth[i] : 1 - crowd.truth[i]);
    }
  }
  return crowd;
}

// FewLabelsPerItem's crowd as a matrix, and the accuracy of a model's posteriors on it.
struct FewLabelsCase {
  static constexpr int32_t kItems = 1500;
  BiasedCrowd crowd = FewLabelsPerItem(kItems);
  AnnotationMatrix data = Build(crowd);

  static AnnotationMatrix Build(const BiasedCrowd& crowd) {
    std::vector<Annotation> all;
    for (size_t l = 0; l < crowd.labels.size(); ++l) {
      all.push_back({static_cast<int32_t>(crowd.items[l]), static_cast<int32_t>(crowd.annotators[l]),
                     static_cast<int32_t>(crowd.labels[l])});
    }
    return *AnnotationMatrix::Build(kItems, 40, 2, all);
  }
  double AccuracyOf(const TruthModel& model) const {
    int right = 0;
    std::vector<double> p(2);
    for (int32_t i = 0; i < kItems; ++i) {
      model.ItemPosteriorForItem(i, data.LabelsOfItem(i), -1, absl::MakeSpan(p));
      right += (p[1] > p[0] ? 1 : 0) == crowd.truth[i];
    }
    return static_cast<double>(right) / kItems;
  }
  // Dawid-Skene's accuracy on the crowd (0.893).
  double DawidSkeneAccuracy() const {
    auto ds = CreateUncalibratedTruthModel("ds", 2, TruthModelOptions());
    EXPECT_THAT(ds, IsOk());
    EXPECT_THAT((*ds)->Fit(data, {}, false).status(), IsOk());
    return AccuracyOf(**ds);
  }
};

// Without item features, crowdlayer and trace_reg train by generalised EM (truth_model.h,
// neural.featureless_em) and end within a point of Dawid-Skene's accuracy, where the papers'
// per-label losses stay near the majority vote.
TEST(FeaturelessEmTest, CrowdLayerAndTraceRegComeWithinAPointOfDawidSkene) {
  const FewLabelsCase few;
  const AnnotationMatrix& data = few.data;
  auto accuracy_of = [&](const TruthModel& model) { return few.AccuracyOf(model); };
  const double ds_accuracy = few.DawidSkeneAccuracy();
  for (const char* method : {"crowdlayer", "trace_reg"}) {
    TruthModelOptions options;
    options.neural.device = "cpu";
    options.neural.seed = 5;
    double accuracy[2] = {0, 0};
    for (int em = 0; em < 2; ++em) {
      options.neural.featureless_em = em == 1;
      auto model = CreateUncalibratedTruthModel(method, 2, options);
      ASSERT_THAT(model, IsOk());
      ASSERT_THAT((*model)->Fit(data, {}, false).status(), IsOk());
      accuracy[em] = accuracy_of(**model);
    }
    std::printf("ds %.4f, %s by EM %.4f, by the per-label loss %.4f\n", ds_accuracy, method,
                accuracy[1], accuracy[0]);
    EXPECT_GE(accuracy[1], ds_accuracy - 0.01) << method;
    EXPECT_GT(accuracy[1], accuracy[0] + 0.02) << method;
  }
}

// cmm without item features starts each E-step from the class prior (neural_truth_model.h,
// EStepClassLogPrior): its truth network h_i is fitted to the item's own posterior, so starting
// from it counted the item's labels once more at every iteration (0.773 on this crowd at
// seed 5, against Dawid-Skene's 0.893).
TEST(CmmTest, WithoutFeaturesTheEStepStartsFromTheClassPrior) {
  const FewLabelsCase few;
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 5;
  auto model = CreateUncalibratedTruthModel("cmm", 2, options);
  ASSERT_THAT(model, IsOk());
  ASSERT_THAT((*model)->Fit(few.data, {}, false).status(), IsOk());
  const double accuracy = few.AccuracyOf(**model), ds_accuracy = few.DawidSkeneAccuracy();
  std::printf("cmm %.4f, ds %.4f\n", accuracy, ds_accuracy);
  EXPECT_GE(accuracy, ds_accuracy - 0.01);
}

// cmm's network carries the groups of the current EM iteration while h trains (cmm.cc), so a
// checkpoint — early stopping on held-out labels, or an observer — scores the model being fitted,
// not the uniform tables a cold fit starts from.
TEST(CmmTest, CheckpointsSeeTheCurrentGroups) {
  const FewLabelsCase few;
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 5;
  options.neural.steps = 60;
  auto created = CreateUncalibratedTruthModel("cmm", 2, options);
  ASSERT_THAT(created, IsOk());
  auto* model = dynamic_cast<neural::NeuralTruthModel*>(created->get());
  ASSERT_NE(model, nullptr);
  double largest_move = 0;  // of log β from its uniform start, over the checkpoints
  int checkpoints = 0;
  model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    for (const auto& b : net.named_buffers()) {
      if (b.key() != "log_beta") continue;
      largest_move = std::max(largest_move, (b.value() + std::log(2.0)).abs().max().item<double>());
      ++checkpoints;
    }
  });
  ASSERT_THAT(model->Fit(few.data, {}, false).status(), IsOk());
  ASSERT_GT(checkpoints, 0);
  EXPECT_GT(largest_move, 0.1);
}

// The parameterisation follows the loss, and a version stored under the other one restores
// converted (trace_reg.h, TraceRegNet::load): before trace_reg trained by EM every stored net
// held probabilities. A model that trains by EM restores one stored by the paper's loss, and
// the reverse, with the same served confusions; each can then warm-start from it.
TEST(TraceRegTest, AVersionOfTheOtherParameterisationRestoresConverted) {
  const FewLabelsCase few;
  for (bool stored_by_em : {false, true}) {
    TruthModelOptions options;
    options.neural.device = "cpu";
    options.neural.steps = 20;
    options.neural.featureless_em = stored_by_em;
    auto stored = CreateUncalibratedTruthModel("trace_reg", 2, options);
    ASSERT_THAT(stored, IsOk());
    ASSERT_THAT((*stored)->Fit(few.data, {}, false).status(), IsOk());
    options.neural.featureless_em = !stored_by_em;
    auto other = CreateUncalibratedTruthModel("trace_reg", 2, options);
    ASSERT_THAT(other, IsOk());
    ASSERT_THAT((*other)->Restore((*stored)->Serialize()), IsOk()) << stored_by_em;
    double largest_difference = 0;
    for (int32_t a = 0; a < 40; ++a) {
      const std::vector<double> want = (*stored)->AnnotatorConfusion(a);
      const std::vector<double> got = (*other)->AnnotatorConfusion(a);
      ASSERT_EQ(got.size(), want.size());
      for (size_t x = 0; x < want.size(); ++x) {
        largest_difference = std::max(largest_difference, std::abs(got[x] - want[x]));
      }
    }
    EXPECT_LT(largest_difference, 1e-5) << stored_by_em;
    EXPECT_THAT((*other)->Fit(few.data, {}, true).status(), IsOk()) << stored_by_em;
  }
}

// conal keeps the paper's loss (neural_truth_model.h, TrainsByEmWithoutFeatures): featureless_em
// changes nothing for it.
TEST(FeaturelessEmTest, ConalKeepsThePapersLoss) {
  const BiasedCrowd crowd = SkilledOutvotedByBiased();
  const AnnotationMatrix data = crowd.Matrix();
  for (const char* method : {"conal"}) {
    std::vector<double> posterior[2];
    for (int em = 0; em < 2; ++em) {
      TruthModelOptions options;
      options.neural.device = "cpu";
      options.neural.seed = 5;
      options.neural.steps = 50;
      options.neural.featureless_em = em == 1;
      auto model = CreateUncalibratedTruthModel(method, 2, options);
      ASSERT_THAT(model, IsOk());
      ASSERT_THAT((*model)->Fit(data, {}, false).status(), IsOk());
      posterior[em].resize(2 * 20);
      for (int32_t i = 0; i < 20; ++i) {
        (*model)->ItemPosteriorForItem(i, data.LabelsOfItem(i), -1,
                                       absl::MakeSpan(posterior[em]).subspan(2 * i, 2));
      }
    }
    EXPECT_EQ(posterior[0], posterior[1]) << method;
  }
}

// cmm's Individual M-step (cmm.h): p(m | a) ∝ Σ_{l of a} Σ_k r_l(k, m) + α_m, one pseudo-label
// of the crowd's mix, so that an annotator with n labels keeps at least α_m / (n + 1) of every
// group m (its responsibilities sum to n over the groups). Read from the network after the
// last step, where the memberships and α are the last M-step's.
TEST(CmmTest, MembershipsOfAnAnnotatorWithFewLabelsStayNearTheCrowdsMix) {
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < 40; ++i) {
    for (int32_t a = 0; a < 4; ++a) labels.push_back({i, a, a == 3 ? 1 - i % 2 : i % 2});
  }
  labels.push_back({0, 4, 1});  // annotator 4: one label
  const AnnotationMatrix data = *AnnotationMatrix::Build(40, 5, 2, labels);
  TruthModelOptions options = FastOptions();
  options.neural.cmm_groups = 3;
  auto model = Make("cmm", 2, options);
  auto* cmm = dynamic_cast<neural::NeuralTruthModel*>(model.get());
  ASSERT_NE(cmm, nullptr);
  torch::Tensor membership, log_alpha;
  cmm->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    for (const auto& b : net.named_buffers()) {
      if (b.key() == "membership") membership = b.value().clone();
      if (b.key() == "log_alpha") log_alpha = b.value().clone();
    }
  });
  ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
  ASSERT_TRUE(membership.defined() && log_alpha.defined());
  for (int32_t m = 0; m < 3; ++m) {
    const double alpha = std::exp(log_alpha[m].item<double>());
    EXPECT_GE(membership[4][m].item<double>(), alpha / 2 - 1e-6) << m;
    EXPECT_GE(membership[0][m].item<double>(), alpha / 41 - 1e-6) << m;
  }
}

}  // namespace
}  // namespace verity::models
