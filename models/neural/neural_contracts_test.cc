// Contracts of the neural truth models beyond accuracy, each checked against values worked out
// by hand from the documented formulas (models/truth_model.h's TruthModelOptions::Neural,
// neural_truth_model.h, sparse_row_amsgrad.h, flat_amsgrad.h): the square-root learning-rate
// rule, the step budget (StepsForFit) and the Dawid-Skene start's share of it, feature
// standardisation, Restore's bounds and blob checks, the lazy row optimiser's arithmetic, and the
// options' documented ranges. Tiny data and few steps: the whole file runs in seconds.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/status_matchers.h"
#include "models/annotation_matrix.h"
#include "models/binary_codec.h"
#include "models/neural/cmm.h"
#include "models/neural/conal.h"
#include "models/neural/crowd_net.h"
#include "models/neural/crowdlayer.h"
#include "models/neural/flat_amsgrad.h"
#include "models/neural/neural_truth_model.h"
#include "models/neural/sparse_row_amsgrad.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

using ::verity::testing::IsOk;
using ::verity::testing::StatusIs;

// `items` binary items labelled by every one of `annotators` annotators (label = the item's
// parity, except that annotator 1 flips every third label): items x annotators labels.
AnnotationMatrix TinyCrowd(int32_t items, int32_t annotators) {
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < items; ++i) {
    for (int32_t a = 0; a < annotators; ++a) {
      int32_t y = i % 2;
      if (a == 1 && i % 3 == 0) y = 1 - y;
      labels.push_back({i, a, y});
    }
  }
  return *AnnotationMatrix::Build(items, annotators, 2, labels);
}

TruthModelOptions CpuOptions() {
  TruthModelOptions options;
  options.neural.device = "cpu";
  options.neural.seed = 7;
  return options;
}

std::unique_ptr<neural::NeuralTruthModel> MakeNeural(const std::string& method,
                                                     const TruthModelOptions& options,
                                                     int32_t k = 2) {
  auto model = CreateUncalibratedTruthModel(method, k, options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto* neural = dynamic_cast<neural::NeuralTruthModel*>(model->get());
  EXPECT_NE(neural, nullptr) << method;
  model->release();
  return std::unique_ptr<neural::NeuralTruthModel>(neural);
}

torch::Tensor NamedParameter(neural::CrowdNet& net, const std::string& name) {
  for (const auto& p : net.named_parameters()) {
    if (p.key() == name) return p.value().detach().clone();
  }
  ADD_FAILURE() << "no parameter " << name;
  return torch::Tensor();
}

// ---------------------------------------------------------------------------------------------
// The square-root rule (truth_model.h): batches of B labels use learning_rate × sqrt(B / 1,024)
// (featureless_learning_rate × sqrt(B / 1,024) when items carry no features).
// AMSGrad's first step moves every parameter with a gradient by the rate exactly (m̂ = g and
// v̂ = g², so the step is rate · g / |g|): crowdlayer's crowd layers start at the identity
// (1 + ln(K − 1) = 1 at K = 2), so after one step the largest |W − I| is the step's rate.
// `learning_rate` is the rate the fit should use; the other option is set to 10 times it.
double FirstStepOfTheCrowdLayer(int batch_size, double learning_rate, bool features = false,
                                bool annotator_features = false) {
  TruthModelOptions options = CpuOptions();
  options.neural.batch_size = batch_size;
  options.neural.featureless_learning_rate = features ? 10 * learning_rate : learning_rate;
  options.neural.learning_rate = features ? learning_rate : 10 * learning_rate;
  options.neural.steps = 1;
  options.neural.ds_start_fraction = 0;  // the first step is the fit's first
  auto model = MakeNeural("crowdlayer", options);
  if (features) {
    std::vector<float> column;
    for (int i = 0; i < 40; ++i) column.push_back(static_cast<float>(i % 2));
    EXPECT_THAT(model->SetItemFeatures(1, column), IsOk());
  }
  if (annotator_features) {  // which crowdlayer, without an annotator encoder, does not read
    EXPECT_THAT(model->SetAnnotatorFeatures(1, {0.0f, 1.0f, 2.0f}), IsOk());
  }
  double largest = -1;
  model->SetCheckpointObserver(1, [&](int64_t step, neural::CrowdNet& net) {
    if (step != 1) return;
    torch::Tensor w = NamedParameter(net, "weights");
    torch::Tensor identity = torch::eye(2).unsqueeze(0).expand_as(w);
    largest = (w - identity).abs().max().item<double>();
  });
  EXPECT_THAT(model->Fit(TinyCrowd(40, 3), {}, false).status(), IsOk());
  return largest;
}

TEST(LearningRateRuleTest, TheStepRateIsTheOptionsRateTimesTheRootOfTheBatchOver1024) {
  // 0.04 × sqrt(16 / 1024) = 0.04 / 8.
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(16, 0.04), 0.005, 1e-6);
  // 0.04 × sqrt(64 / 1024) = 0.04 / 4.
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(64, 0.04), 0.01, 1e-6);
  // batch_size 0 on the CPU is 1,024 labels: the options' rate itself.
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(0, 0.003), 0.003, 1e-6);
}

TEST(LearningRateRuleTest, ItemsWithFeaturesUseLearningRateAndTheOthersTheFeaturelessRate) {
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(64, 0.004, /*features=*/true), 0.001, 1e-6);
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(64, 0.004, /*features=*/false), 0.001, 1e-6);
  // Annotator features the network does not read (the server sets them on every model) leave
  // the featureless rate.
  EXPECT_NEAR(FirstStepOfTheCrowdLayer(64, 0.004, /*features=*/false, /*annotator_features=*/true),
              0.001, 1e-6);
}

// ---------------------------------------------------------------------------------------------
// The step budget (truth_model.h, neural.steps = 0): enough whole epochs for about 3,000 steps,
// between 2 and 200 epochs; a warm start runs a quarter of them. FitReport::iterations is the
// epochs run, training_steps every optimiser step.
FitReport FitFor(const std::string& method, TruthModelOptions options, const AnnotationMatrix& data,
                 neural::NeuralTruthModel* model = nullptr, bool warm = false) {
  std::unique_ptr<neural::NeuralTruthModel> own;
  if (model == nullptr) {
    own = MakeNeural(method, options);
    model = own.get();
  }
  absl::StatusOr<FitReport> report = model->Fit(data, {}, warm);
  EXPECT_THAT(report.status(), IsOk()) << method;
  return report.ok() ? *report : FitReport();
}

TEST(StepBudgetTest, EpochsForAbout3000StepsCappedAt200) {
  TruthModelOptions options = CpuOptions();
  options.neural.ds_start_fraction = 0;
  // 20 labels in one batch of 1,024: 3,000 epochs wanted, 200 run.
  const AnnotationMatrix tiny = TinyCrowd(10, 2);
  for (const char* method : {"trace_reg", "crowdlayer", "conal"}) {
    const FitReport report = FitFor(method, options, tiny);
    EXPECT_EQ(report.training_steps, 200) << method;
    EXPECT_EQ(report.iterations, 200) << method;
  }
  // 20 labels in batches of 3: 7 steps an epoch, ceil(3000 / 7) = 429 epochs wanted, 200 run.
  options.neural.batch_size = 3;
  FitReport report = FitFor("trace_reg", options, tiny);
  EXPECT_EQ(report.iterations, 200);
  EXPECT_EQ(report.training_steps, 200 * 7);
  // Batches of 8 over 120 labels: 15 steps an epoch, 200 epochs: exactly 3,000 steps, uncapped.
  options.neural.batch_size = 8;
  report = FitFor("trace_reg", options, TinyCrowd(40, 3));
  EXPECT_EQ(report.iterations, 200);
  EXPECT_EQ(report.training_steps, 3000);
  // Batches of 4 over 120 labels: 30 steps an epoch, 100 epochs: 3,000 steps, below the cap.
  options.neural.batch_size = 4;
  report = FitFor("trace_reg", options, TinyCrowd(40, 3));
  EXPECT_EQ(report.iterations, 100);
  EXPECT_EQ(report.training_steps, 3000);
}

TEST(StepBudgetTest, AtLeastTwoEpochs) {
  // 3,200 labels in batches of 2: 1,600 steps an epoch, ceil(3000 / 1600) = 2 epochs; in
  // batches of 4: 800 an epoch, 4 epochs (3,200 steps). In batches of 1 with 3,200 labels,
  // one epoch would already exceed 3,000 steps: still 2 epochs (6,400 steps).
  TruthModelOptions options = CpuOptions();
  options.neural.ds_start_fraction = 0;
  const AnnotationMatrix data = TinyCrowd(1600, 2);
  options.neural.batch_size = 4;
  FitReport report = FitFor("trace_reg", options, data);
  EXPECT_EQ(report.iterations, 4);
  EXPECT_EQ(report.training_steps, 3200);
  options.neural.batch_size = 1;
  report = FitFor("trace_reg", options, data);
  EXPECT_EQ(report.iterations, 2);
  EXPECT_EQ(report.training_steps, 6400);
}

TEST(StepBudgetTest, AWarmStartRunsAQuarterAndNoDawidSkeneStart) {
  TruthModelOptions options = CpuOptions();
  const AnnotationMatrix tiny = TinyCrowd(10, 2);
  for (const char* method : {"trace_reg", "crowdlayer"}) {
    auto model = MakeNeural(method, options);
    FitFor(method, options, tiny, model.get());
    // 200 / 4 = 50 single-batch epochs; a warm fit never runs the Dawid-Skene start.
    const FitReport warm = FitFor(method, options, tiny, model.get(), /*warm=*/true);
    EXPECT_EQ(warm.training_steps, 50) << method;
    EXPECT_EQ(warm.iterations, 50) << method;
  }
  // neural.steps set: a quarter of it, in whole epochs (one batch an epoch here).
  options.neural.steps = 40;
  auto model = MakeNeural("trace_reg", options);
  EXPECT_EQ(FitFor("trace_reg", options, tiny, model.get()).training_steps, 40);
  EXPECT_EQ(FitFor("trace_reg", options, tiny, model.get(), true).training_steps, 10);
}

// lia's EM (lia.h): a warm start runs a third of em_iterations (at least one). With a tolerance
// every window meets, each phase (the M-steps and the fine-tuning) stops after its second
// window of 50 steps: a cold fit of 6 iterations takes (6 + 1) x 100 steps, a warm one
// (6 / 3 + 1) x 100.
TEST(StepBudgetTest, ALiaWarmStartRunsAThirdOfTheEmIterations) {
  TruthModelOptions options = CpuOptions();
  options.neural.em_iterations = 6;
  options.neural.lia_max_steps = 1000;
  options.neural.lia_tolerance = 1e9;
  const AnnotationMatrix tiny = TinyCrowd(10, 2);
  auto model = MakeNeural("lia", options);
  const FitReport cold = FitFor("lia", options, tiny, model.get());
  EXPECT_EQ(cold.iterations, 6);
  EXPECT_EQ(cold.training_steps, 700);
  const FitReport warm = FitFor("lia", options, tiny, model.get(), /*warm=*/true);
  EXPECT_EQ(warm.iterations, 2);
  EXPECT_EQ(warm.training_steps, 300);
}

// cmm's EM (cmm.h): 3 x em_iterations iterations, a third of them when warm-starting.
TEST(StepBudgetTest, ACmmWarmStartRunsAThirdOfTheEmIterations) {
  for (const char* setting : {"individual", "global"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.em_iterations = 4;
    options.neural.cmm_setting = setting;
    const AnnotationMatrix tiny = TinyCrowd(10, 2);
    auto model = MakeNeural("cmm", options);
    EXPECT_EQ(FitFor("cmm", options, tiny, model.get()).iterations, 12) << setting;
    EXPECT_EQ(FitFor("cmm", options, tiny, model.get(), /*warm=*/true).iterations, 4) << setting;
  }
}

// ds_start_fraction (truth_model.h): a cold fit of crowdlayer or conal first trains that share
// of its steps (StepsForFit) anchored to Dawid-Skene, counted in training_steps; trace_reg never.
TEST(StepBudgetTest, TheDawidSkeneStartTakesItsShareOfTheSteps) {
  const AnnotationMatrix tiny = TinyCrowd(10, 2);  // one batch an epoch
  for (const char* method : {"crowdlayer", "conal"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 40;
    options.neural.ds_start_fraction = 0.3;
    FitReport report = FitFor(method, options, tiny);
    EXPECT_EQ(report.training_steps, 40 + 12) << method;
    EXPECT_EQ(report.iterations, 40) << method;
    options.neural.ds_start_fraction = 1.0;
    EXPECT_EQ(FitFor(method, options, tiny).training_steps, 80) << method;
    // With the budget scaled to the data: 200 epochs of one step, and a quarter of that first.
    options.neural.steps = 0;
    options.neural.ds_start_fraction = 0.25;
    EXPECT_EQ(FitFor(method, options, tiny).training_steps, 250) << method;
  }
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 40;
  options.neural.ds_start_fraction = 0.5;
  EXPECT_EQ(FitFor("trace_reg", options, tiny).training_steps, 40);
}

// ---------------------------------------------------------------------------------------------
// SetItemFeatures / SetAnnotatorFeatures standardise each column to zero mean and unit variance
// over the given rows (the population variance); a constant column becomes 0. The network is
// fitted on the standardised values: read here from the encoders' feature buffers.
torch::Tensor FeatureBuffer(neural::RowEncoder& encoder) {
  for (const auto& b : encoder->named_buffers()) {
    if (b.key() == "features") return b.value().detach().clone();
  }
  ADD_FAILURE() << "no feature buffer";
  return torch::Tensor();
}

TEST(FeatureStandardisationTest, ColumnsGetZeroMeanAndUnitPopulationVariance) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 1;
  options.neural.ds_start_fraction = 0;
  auto model = MakeNeural("conal", options);
  // 4 items: column 0 = 1, 2, 3, 4 (mean 2.5, variance 1.25); column 1 constant.
  ASSERT_THAT(model->SetItemFeatures(2, {1, 7, 2, 7, 3, 7, 4, 7}), IsOk());
  // 3 annotators: column 0 = 1, 4, 7 (mean 4, variance 6); column 1 = -2, 0, 2 (variance 8/3).
  ASSERT_THAT(model->SetAnnotatorFeatures(2, {1, -2, 4, 0, 7, 2}), IsOk());
  torch::Tensor items, annotators;
  model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    items = FeatureBuffer(net.items());
    annotators = FeatureBuffer(net.annotators());
  });
  ASSERT_THAT(model->Fit(TinyCrowd(4, 3), {}, false).status(), IsOk());
  ASSERT_TRUE(items.defined());
  ASSERT_TRUE(annotators.defined());
  ASSERT_EQ(items.sizes(), (std::vector<int64_t>{4, 2}));
  ASSERT_EQ(annotators.sizes(), (std::vector<int64_t>{3, 2}));
  const double item_sd = std::sqrt(1.25);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(items[i][0].item<double>(), (i + 1 - 2.5) / item_sd, 1e-6) << i;
    EXPECT_NEAR(items[i][1].item<double>(), 0.0, 1e-7) << i;
  }
  const double raw[3][2] = {{1, -2}, {4, 0}, {7, 2}};
  const double sd0 = std::sqrt(6.0), sd1 = std::sqrt(8.0 / 3);
  for (int a = 0; a < 3; ++a) {
    EXPECT_NEAR(annotators[a][0].item<double>(), (raw[a][0] - 4) / sd0, 1e-6) << a;
    EXPECT_NEAR(annotators[a][1].item<double>(), raw[a][1] / sd1, 1e-6) << a;
  }
  // Non-finite values are refused.
  EXPECT_THAT(model->SetItemFeatures(1, {1, std::nanf(""), 3, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(model->SetAnnotatorFeatures(1, {1, INFINITY, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---------------------------------------------------------------------------------------------
// Restore: the blob's sizes are bounded before anything is sized from them; a refused blob
// leaves the model as it was. A blob is (neural_truth_model.cc) the header, K, items,
// annotators, item and annotator feature dimensions, the LibTorch archive, then the annotator
// features' standardisation (absent from older blobs, which Restore accepts).
struct Blob {
  uint32_t k = 0, items = 0, annotators = 0, feature_dim = 0, annotator_feature_dim = 0;
  std::string archive;
  bool has_standardisation = true;
  uint32_t columns = 0;
  std::vector<double> mean, scale;
  bool extra_byte = false;

  std::string Write(std::string_view method) const {
    ByteWriter w;
    WriteModelHeader(w, method, true);
    w.WriteU32(k);
    w.WriteU32(items);
    w.WriteU32(annotators);
    w.WriteU32(feature_dim);
    w.WriteU32(annotator_feature_dim);
    w.WriteString(archive);
    if (has_standardisation) {
      w.WriteU32(columns);
      for (size_t c = 0; c < mean.size(); ++c) {
        w.WriteF64(mean[c]);
        w.WriteF64(scale[c]);
      }
    }
    if (extra_byte) w.WriteU32(0);
    return w.Finish();
  }
};

Blob ParseBlob(const std::string& blob, std::string_view method) {
  Blob b;
  absl::StatusOr<ByteReader> r = ByteReader::Open(blob);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(*ReadModelHeader(*r, method));
  b.k = *r->ReadU32();
  b.items = *r->ReadU32();
  b.annotators = *r->ReadU32();
  b.feature_dim = *r->ReadU32();
  b.annotator_feature_dim = *r->ReadU32();
  b.archive = std::string(*r->ReadString());
  b.columns = *r->ReadU32();
  for (uint32_t c = 0; c < b.columns; ++c) {
    b.mean.push_back(*r->ReadF64());
    b.scale.push_back(*r->ReadF64());
  }
  EXPECT_THAT(r->ExpectEnd(), IsOk());
  return b;
}

// lia fitted on 6 items with 3 item features and 4 annotators with 2 annotator features.
std::unique_ptr<neural::NeuralTruthModel> FittedLia(const TruthModelOptions& options) {
  auto model = MakeNeural("lia", options);
  EXPECT_THAT(model->SetItemFeatures(3, {1, 0, 2, 2, 1, 0, 3, 0, 1, 4, 1, 1, 5, 0, 0, 6, 1, 2}), IsOk());
  EXPECT_THAT(model->SetAnnotatorFeatures(2, {1, 0, -1, 1, 1, 2, -1, 3}), IsOk());
  EXPECT_THAT(model->Fit(TinyCrowd(6, 4), {}, false).status(), IsOk());
  return model;
}

TruthModelOptions QuickLia() {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 4;
  options.neural.em_iterations = 1;
  return options;
}

TEST(RestoreTest, EverySizeIsBoundedAndARefusedBlobChangesNothing) {
  const TruthModelOptions options = QuickLia();
  auto model = FittedLia(options);
  const std::string blob = model->Serialize();
  const Blob parsed = ParseBlob(blob, "lia");
  ASSERT_EQ(parsed.items, 6u);
  ASSERT_EQ(parsed.annotators, 4u);
  ASSERT_EQ(parsed.feature_dim, 3u);
  ASSERT_EQ(parsed.annotator_feature_dim, 2u);
  ASSERT_EQ(parsed.columns, 2u);

  TruthModel::RestoreBounds exact;
  exact.max_items = 6;
  exact.max_annotators = 4;
  exact.max_item_feature_dim = 3;
  exact.max_annotator_feature_dim = 2;
  auto target = MakeNeural("lia", options);
  ASSERT_THAT(target->Restore(blob, exact), IsOk());
  EXPECT_EQ(target->fitted_items(), 6);
  EXPECT_EQ(target->fitted_annotators(), 4);
  const std::vector<double> confusion = target->ItemAnnotatorConfusion(2, 1);
  EXPECT_EQ(confusion, model->ItemAnnotatorConfusion(2, 1));

  const std::vector<std::function<void(TruthModel::RestoreBounds&)>> tighter = {
      [](auto& b) { b.max_items = 5; },
      [](auto& b) { b.max_annotators = 3; },
      [](auto& b) { b.max_item_feature_dim = 2; },
      [](auto& b) { b.max_annotator_feature_dim = 1; },
  };
  for (size_t t = 0; t < tighter.size(); ++t) {
    TruthModel::RestoreBounds bounds = exact;
    tighter[t](bounds);
    auto empty = MakeNeural("lia", options);
    EXPECT_THAT(empty->Restore(blob, bounds), StatusIs(absl::StatusCode::kInvalidArgument)) << t;
    EXPECT_FALSE(empty->has_parameters()) << t;
    // A fitted model refusing it keeps its parameters and answers.
    EXPECT_THAT(target->Restore(blob, bounds), StatusIs(absl::StatusCode::kInvalidArgument)) << t;
    EXPECT_TRUE(target->has_parameters()) << t;
    EXPECT_EQ(target->ItemAnnotatorConfusion(2, 1), confusion) << t;
  }
}

TEST(RestoreTest, CorruptOrInconsistentBlobsAreRefusedAndOldBlobsAccepted) {
  const TruthModelOptions options = QuickLia();
  auto model = FittedLia(options);
  const std::string blob = model->Serialize();
  const Blob good = ParseBlob(blob, "lia");
  // Rebuilding the blob field by field gives it back byte for byte (the test's view is right).
  ASSERT_EQ(good.Write("lia"), blob);
  const std::vector<double> confusion = model->ItemAnnotatorConfusion(1, 2);
  const std::vector<float> skilled = {1.0f, 1.0f};
  const std::vector<double> predicted = model->AnnotatorConfusionFromFeatures(9, skilled);
  ASSERT_EQ(predicted.size(), 4u);

  auto expect_refused = [&](const Blob& b, const char* what) {
    auto fresh = MakeNeural("lia", options);
    EXPECT_THAT(fresh->Restore(b.Write("lia")), StatusIs(absl::StatusCode::kInvalidArgument)) << what;
    EXPECT_FALSE(fresh->has_parameters()) << what;
    std::unique_ptr<TruthModel> fitted = model->Clone();
    EXPECT_THAT(fitted->Restore(b.Write("lia")), StatusIs(absl::StatusCode::kInvalidArgument)) << what;
    EXPECT_TRUE(fitted->has_parameters()) << what;
    EXPECT_EQ(fitted->ItemAnnotatorConfusion(1, 2), confusion) << what;
    EXPECT_EQ(fitted->AnnotatorConfusionFromFeatures(9, skilled), predicted) << what;
  };
  Blob b = good;
  b.k = 3;
  expect_refused(b, "class count");
  b = good;
  b.columns = 1;  // the standardisation of 1 column for 2 annotator feature dimensions
  b.mean.resize(1);
  b.scale.resize(1);
  expect_refused(b, "standardisation columns");
  b = good;
  b.mean[1] = std::nan("");
  expect_refused(b, "non-finite mean");
  b = good;
  b.scale[0] = INFINITY;
  expect_refused(b, "non-finite scale");
  b = good;
  b.extra_byte = true;
  expect_refused(b, "trailing bytes");
  b = good;
  b.archive = "not a LibTorch archive";
  expect_refused(b, "archive");
  b = good;
  b.items = 7;  // the archive's tables have 6 rows
  expect_refused(b, "items disagreeing with the archive");

  // A blob written before the standardisation was stored restores, answers alike, and predicts
  // no confusion from features (neural_truth_model.h) until its next fit.
  b = good;
  b.has_standardisation = false;
  auto old = MakeNeural("lia", options);
  ASSERT_THAT(old->Restore(b.Write("lia")), IsOk());
  EXPECT_EQ(old->ItemAnnotatorConfusion(1, 2), confusion);
  EXPECT_TRUE(old->AnnotatorConfusionFromFeatures(9, skilled).empty());
  // ... and a current blob restores the prediction exactly.
  auto current = MakeNeural("lia", options);
  ASSERT_THAT(current->Restore(blob), IsOk());
  EXPECT_EQ(current->AnnotatorConfusionFromFeatures(9, skilled), predicted);

  // A blob without parameters empties a fitted model (majority-vote answers, uniform confusions).
  std::unique_ptr<TruthModel> emptied = model->Clone();
  ASSERT_THAT(emptied->Restore(MakeNeural("lia", options)->Serialize()), IsOk());
  EXPECT_FALSE(emptied->has_parameters());
  EXPECT_EQ(emptied->AnnotatorConfusion(0), (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  EXPECT_TRUE(emptied->AnnotatorConfusionFromFeatures(9, skilled).empty());
}

// An item beyond the fit gets the class prior, the mean of the fitted items' priors, also when
// items carry features (where fitted items answer from their own h(x)).
TEST(UnseenIdsTest, AnItemBeyondTheFitGetsTheMeanPriorWithFeatures) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 30;
  options.neural.learning_rate = 0.05;
  auto model = MakeNeural("crowdlayer", options);
  std::vector<float> features;
  for (int i = 0; i < 10; ++i) features.push_back(static_cast<float>(i % 2));
  ASSERT_THAT(model->SetItemFeatures(1, features), IsOk());
  ASSERT_THAT(model->Fit(TinyCrowd(10, 3), {}, false).status(), IsOk());
  std::vector<double> mean(2, 0.0);
  for (int32_t i = 0; i < 10; ++i) {
    const std::vector<double> prior = model->ItemPrior(i);
    for (int c = 0; c < 2; ++c) mean[c] += prior[c] / 10;
  }
  ASSERT_GT(std::abs(model->ItemPrior(0)[0] - model->ItemPrior(1)[0]), 0.01);
  for (int32_t unseen : {10, 11, 1000, -1}) {
    std::vector<double> served(2);
    model->ItemPosteriorForItem(unseen, {}, -1, absl::MakeSpan(served));
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(model->ItemPrior(unseen)[c], mean[c], 1e-9) << unseen;
      EXPECT_NEAR(served[c], mean[c], 1e-9) << unseen;
    }
  }
  // A fitted item with features answers from its own prior.
  std::vector<double> own(2);
  model->ItemPosteriorForItem(1, {}, -1, absl::MakeSpan(own));
  EXPECT_NEAR(own[0], model->ItemPrior(1)[0], 1e-9);
}

// ---------------------------------------------------------------------------------------------
// A warm start (neural_truth_model.h) copies the previous network's parameters, and the rows of
// new items and annotators keep their initialisation. Seen after the warm fit's first step,
// which moves no parameter by more than the step's rate (AMSGrad): the old annotators' crowd
// layers, the classifier and the old items' rows are within the rate of where the cold fit left
// them, and the new annotator's crowd layer within it of its identity start.
TEST(WarmStartTest, CopiesTheFittedParametersAndStartsNewRowsFresh) {
  constexpr double kRate = 0.04;  // batch_size 0 on the CPU: 1,024 labels, the options' rate
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 60;
  options.neural.featureless_learning_rate = kRate;
  options.neural.ds_start_fraction = 0;
  auto model = MakeNeural("crowdlayer", options);
  std::map<std::string, torch::Tensor> cold, warm;
  auto snapshot = [](neural::CrowdNet& net, std::map<std::string, torch::Tensor>& into) {
    into.clear();
    for (const auto& p : net.named_parameters()) into[p.key()] = p.value().detach().clone();
  };
  model->SetCheckpointObserver(60, [&](int64_t, neural::CrowdNet& net) { snapshot(net, cold); });
  ASSERT_THAT(model->Fit(TinyCrowd(10, 3), {}, false).status(), IsOk());
  ASSERT_TRUE(cold.count("weights"));
  // The cold fit moved the crowd layers well away from the identity (the test is not vacuous).
  ASSERT_GT((cold["weights"] - torch::eye(2)).abs().max().item<double>(), 10 * kRate);

  // Grown: annotator 3 (new) labels items 10 (new) and 0; item 11 (new) has no label.
  std::vector<Annotation> labels;
  const AnnotationMatrix old_data = TinyCrowd(10, 3);
  for (int32_t i = 0; i < 10; ++i) {
    for (const AnnotationMatrix::Entry& e : old_data.LabelsOfItem(i)) labels.push_back({i, e.other, e.label});
  }
  labels.push_back({10, 3, 0});
  labels.push_back({0, 3, 0});
  labels.push_back({10, 0, 0});
  const AnnotationMatrix grown = *AnnotationMatrix::Build(12, 4, 2, labels);
  model->SetCheckpointObserver(1, [&](int64_t step, neural::CrowdNet& net) {
    if (step == 1) snapshot(net, warm);
  });
  absl::StatusOr<FitReport> report = model->Fit(grown, {}, true);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_EQ(report->training_steps, 15);  // a quarter of 60, one batch an epoch
  ASSERT_TRUE(warm.count("weights"));
  const double slack = kRate + 1e-5;
  for (const auto& [name, before] : cold) {
    ASSERT_TRUE(warm.count(name)) << name;
    torch::Tensor after = warm[name];
    if (after.sizes() == before.sizes()) {
      EXPECT_LE((after - before).abs().max().item<double>(), slack) << name;
      continue;
    }
    // The tables that grew: the old rows are copied, the new ones are fresh.
    ASSERT_EQ(after.size(0), before.size(0) + (name == "weights" ? 1 : 2)) << name;
    EXPECT_LE((after.narrow(0, 0, before.size(0)) - before).abs().max().item<double>(), slack) << name;
  }
  EXPECT_LE((warm["weights"][3] - torch::eye(2)).abs().max().item<double>(), slack);
  EXPECT_GT(model->fitted_annotators(), 3);
}

// ---------------------------------------------------------------------------------------------
// SparseRowAmsGrad (sparse_row_amsgrad.h): AMSGrad on the rows a step used, the bias corrections
// at the optimiser's global step count, lazy moments for the rows a step skipped. Worked by hand
// with beta1 = 0.9 and beta2 = 0.5 (a small beta2, so that the running maximum of the second
// moment differs from the current one).
struct OneColumnTable {
  neural::RowEncoder encoder{4, 1, 0};
  OneColumnTable() {
    torch::NoGradGuard no_grad;
    encoder->table().copy_(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({4, 1}));
  }
  // A loss whose gradient on row r is grads[r] (summed over repeats).
  void Backward(const std::vector<int64_t>& rows, const std::vector<float>& coefficients) {
    torch::Tensor out = encoder->forward(torch::tensor(rows, torch::kLong));
    (out.view({-1}) * torch::tensor(coefficients)).sum().backward();
  }
  float Row(int64_t r) { return encoder->table()[r][0].item<float>(); }
};

struct Moments {
  double m = 0, v = 0, max_v = 0;
  // Applies gradient g at global step t; returns the change of the weight.
  double Step(double g, int t, double lr, double b1, double b2, double eps) {
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    max_v = std::max(max_v, v);
    const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    return -lr / bc1 * m / (std::sqrt(max_v) / std::sqrt(bc2) + eps);
  }
};

void CheckLazyRows(bool device_step) {
  constexpr double kLr = 0.1, kB1 = 0.9, kB2 = 0.5, kEps = 1e-8;
  OneColumnTable t;
  neural::SparseRowAmsGrad opt(*t.encoder, kLr, kB1, kB2, kEps);
  torch::Tensor count = torch::zeros({});
  auto step = [&](int s) {
    if (device_step) {
      count.add_(1);
      opt.Step(count);
    } else {
      opt.Step(s);
    }
  };
  Moments row0, row1;
  double w0 = 1, w1 = 2;
  // Step 1: row 0 with gradient 1.
  opt.ZeroGrad();
  t.Backward({0}, {1.0f});
  step(1);
  w0 += row0.Step(1.0, 1, kLr, kB1, kB2, kEps);
  EXPECT_NEAR(t.Row(0), w0, 1e-6);
  EXPECT_NEAR(t.Row(0), 0.9, 1e-6);  // the first step moves by the rate
  // Step 2: row 1 used twice (gradients 2 and 1 sum to 3); row 0 skipped and untouched.
  opt.ZeroGrad();
  t.Backward({1, 1}, {2.0f, 1.0f});
  step(2);
  w1 += row1.Step(3.0, 2, kLr, kB1, kB2, kEps);
  EXPECT_NEAR(t.Row(1), w1, 1e-6);
  EXPECT_FLOAT_EQ(t.Row(0), static_cast<float>(w0));
  // Step 3: row 0 again with a small gradient: its moments resume where step 1 left them, the
  // maximum of its second moment (0.5, not the current 0.255) and the bias corrections of
  // global step 3 (not of its own second update).
  opt.ZeroGrad();
  t.Backward({0, 1}, {0.1f, -1.0f});
  step(3);
  w0 += row0.Step(0.1, 3, kLr, kB1, kB2, kEps);
  w1 += row1.Step(-1.0, 3, kLr, kB1, kB2, kEps);
  EXPECT_NEAR(t.Row(0), w0, 1e-6);
  EXPECT_NEAR(t.Row(1), w1, 1e-6);
  // By hand: m = 0.1, max v = 0.5, 1 − 0.9³ = 0.271, 1 − 0.5³ = 0.875.
  EXPECT_NEAR(t.Row(0), 0.9 - 0.1 / 0.271 * 0.1 / std::sqrt(0.5 / 0.875), 1e-6);
  EXPECT_FLOAT_EQ(t.Row(2), 3.0f);
  EXPECT_FLOAT_EQ(t.Row(3), 4.0f);
}

TEST(SparseRowAmsGradMathTest, LazyRowsUseTheGlobalStepAndTheLargestSecondMoment) {
  CheckLazyRows(/*device_step=*/false);
}

TEST(SparseRowAmsGradMathTest, TheSameWithTheStepCountOnTheDevice) {
  CheckLazyRows(/*device_step=*/true);
}

// FlatAmsGrad runs its row tables without a first moment (flat_amsgrad.h / .cc), whatever its
// own beta1: a row's second update is rate · g₂ / sqrt(max v / (1 − beta2²)), not a momentum mix.
TEST(SparseRowAmsGradMathTest, FlatAmsGradGivesItsRowTablesNoFirstMoment) {
  constexpr double kLr = 0.1;
  for (bool device_step : {false, true}) {
    OneColumnTable t;
    neural::FlatAmsGrad opt(t.encoder->parameters(), kLr, device_step, {t.encoder.get()});
    Moments row;  // beta1 = 0, the default beta2 and eps
    double w = 1;
    const float grads[] = {1.0f, 3.0f, 0.5f};
    for (int s = 1; s <= 3; ++s) {
      opt.ZeroGrad();
      t.Backward({0}, {grads[s - 1]});
      opt.Step();
      w += row.Step(grads[s - 1], s, kLr, 0.0, 0.999, 1e-8);
      // On the device the bias corrections are float32 (flat_amsgrad.h: "differs in the last
      // bits"): 1 − 0.999ᵗ carries a relative error of about 3e-5 there.
      EXPECT_NEAR(t.Row(0), w, device_step ? 1e-5 : 1e-6) << "step " << s << (device_step ? " on device" : "");
    }
    EXPECT_EQ(opt.steps(), 3);
  }
}

// FlatAmsGrad's own update, by hand (beta1 0.9, beta2 0.5): the running maximum of the second
// moment and both bias corrections.
TEST(FlatAmsGradMathTest, UpdatesByTheAmsGradFormula) {
  for (bool device_step : {false, true}) {
    torch::Tensor w = torch::tensor({1.0f, -1.0f}).requires_grad_(true);
    neural::FlatAmsGrad opt({w}, 0.1, device_step, {}, 0.9, 0.5, 1e-8);
    Moments m0, m1;
    double expect0 = 1, expect1 = -1;
    const float g0[] = {1.0f, 0.1f, 0.2f}, g1[] = {-2.0f, 0.0f, 4.0f};
    for (int s = 1; s <= 3; ++s) {
      opt.ZeroGrad();
      (w * torch::tensor({g0[s - 1], g1[s - 1]})).sum().backward();
      opt.Step();
      expect0 += m0.Step(g0[s - 1], s, 0.1, 0.9, 0.5, 1e-8);
      expect1 += m1.Step(g1[s - 1], s, 0.1, 0.9, 0.5, 1e-8);
      EXPECT_NEAR(w[0].item<double>(), expect0, 1e-6) << s;
      EXPECT_NEAR(w[1].item<double>(), expect1, 1e-6) << s;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The ranges truth_model.h documents for TruthModelOptions::Neural: the bounds themselves pass,
// one beyond is refused (and so is creating a neural model with it).
TEST(NeuralOptionRangesTest, BoundsPassAndOneBeyondIsRefused) {
  using Set = std::function<void(TruthModelOptions::Neural&)>;
  const std::vector<Set> valid = {
      [](auto& n) { n.embedding_dim = 1; },      [](auto& n) { n.embedding_dim = 1024; },
      [](auto& n) { n.hidden_units = 1; },       [](auto& n) { n.hidden_units = 4096; },
      [](auto& n) { n.feature_width = 1; },      [](auto& n) { n.feature_width = 1024; },
      [](auto& n) { n.feature_layers = 1; },     [](auto& n) { n.feature_layers = 8; },
      [](auto& n) { n.feature_dropout = 0; },    [](auto& n) { n.feature_dropout = 0.99; },
      [](auto& n) { n.batch_size = 0; },         [](auto& n) { n.steps = 0; },
      [](auto& n) { n.cmm_groups = 1; },         [](auto& n) { n.cmm_groups = 64; },
      [](auto& n) { n.lia_latent_dim = 1; },     [](auto& n) { n.lia_latent_dim = 64; },
      [](auto& n) { n.featureless_lia_latent_dim = 4; },
      [](auto& n) { n.featureless_lia_latent_dim = 64; },
      [](auto& n) { n.em_iterations = 1; },      [](auto& n) { n.lia_max_steps = 0; },
      [](auto& n) { n.lia_tolerance = 0; },      [](auto& n) { n.trace_lambda = 0; },
      [](auto& n) { n.conal_lambda = 0; },       [](auto& n) { n.ds_start_fraction = 0; },
      [](auto& n) { n.ds_start_fraction = 1; },  [](auto& n) { n.weight_decay = 0; },
      [](auto& n) { n.learning_rate = 0.01; n.weight_decay = 99; },
      [](auto& n) { n.heldout_label_fraction = 0; }, [](auto& n) { n.heldout_label_fraction = 0.5; },
      [](auto& n) { n.featureless_learning_rate = 1e-6; },
      [](auto& n) { n.featureless_learning_rate = 0.02; n.weight_decay = 49; },
      [](auto& n) { n.featureless_conal_lambda = 0; },
  };
  const std::vector<Set> invalid = {
      [](auto& n) { n.embedding_dim = 0; },       [](auto& n) { n.embedding_dim = 1025; },
      [](auto& n) { n.hidden_units = 0; },        [](auto& n) { n.hidden_units = 4097; },
      [](auto& n) { n.learning_rate = 0; },       [](auto& n) { n.learning_rate = -1e-3; },
      [](auto& n) { n.learning_rate = INFINITY; }, [](auto& n) { n.learning_rate = std::nan(""); },
      [](auto& n) { n.batch_size = -1; },         [](auto& n) { n.steps = -1; },
      [](auto& n) { n.cmm_groups = 0; },          [](auto& n) { n.cmm_groups = 65; },
      [](auto& n) { n.lia_latent_dim = 0; },      [](auto& n) { n.lia_latent_dim = 65; },
      [](auto& n) { n.featureless_lia_latent_dim = 0; },
      [](auto& n) { n.featureless_lia_latent_dim = 65; },
      [](auto& n) { n.em_iterations = 0; },       [](auto& n) { n.trace_lambda = -0.1; },
      [](auto& n) { n.trace_lambda = INFINITY; }, [](auto& n) { n.conal_lambda = -0.1; },
      [](auto& n) { n.conal_lambda = std::nan(""); },
      [](auto& n) { n.weight_decay = INFINITY; }, [](auto& n) { n.weight_decay = std::nan(""); },
      [](auto& n) { n.learning_rate = 0.01; n.weight_decay = 100; },
      [](auto& n) { n.lia_tolerance = INFINITY; },
      [](auto& n) { n.cmm_setting = "Global"; },
      [](auto& n) { n.feature_width = 0; },       [](auto& n) { n.feature_width = 1025; },
      [](auto& n) { n.feature_layers = 0; },      [](auto& n) { n.feature_layers = 9; },
      [](auto& n) { n.feature_dropout = 1; },     [](auto& n) { n.feature_dropout = -0.1; },
      [](auto& n) { n.ds_start_fraction = -0.1; }, [](auto& n) { n.ds_start_fraction = 1.1; },
      [](auto& n) { n.lia_max_steps = -1; },      [](auto& n) { n.lia_tolerance = -0.1; },
      [](auto& n) { n.crowdlayer_variant = "MW"; },
      [](auto& n) { n.heldout_label_fraction = -0.01; },
      [](auto& n) { n.heldout_label_fraction = 0.51; },
      [](auto& n) { n.heldout_label_fraction = std::nan(""); },
      [](auto& n) { n.featureless_learning_rate = 0; },
      [](auto& n) { n.featureless_learning_rate = INFINITY; },
      [](auto& n) { n.featureless_learning_rate = 0.02; n.weight_decay = 50; },
      [](auto& n) { n.featureless_conal_lambda = -1e-9; },
      [](auto& n) { n.featureless_conal_lambda = INFINITY; },
      [](auto& n) { n.featureless_conal_lambda = std::nan(""); },
  };
  for (size_t v = 0; v < valid.size(); ++v) {
    TruthModelOptions options;
    valid[v](options.neural);
    EXPECT_THAT(ValidateTruthModelOptions(options), IsOk()) << "valid " << v;
  }
  for (size_t v = 0; v < invalid.size(); ++v) {
    TruthModelOptions options;
    invalid[v](options.neural);
    EXPECT_THAT(ValidateTruthModelOptions(options), StatusIs(absl::StatusCode::kInvalidArgument))
        << "invalid " << v;
    EXPECT_THAT(CreateUncalibratedTruthModel("conal", 2, options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << "invalid " << v;
  }
  EXPECT_THAT(CreateUncalibratedTruthModel("conal", 1, TruthModelOptions()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Device specs (truth_model.h): cpu, cuda, cuda:N or auto; anything else is refused at Fit.
TEST(DeviceSpecTest, MalformedSpecsAreRefused) {
  const AnnotationMatrix tiny = TinyCrowd(4, 2);
  for (const char* spec : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda0", ""}) {
    TruthModelOptions options = CpuOptions();
    options.neural.device = spec;
    options.neural.steps = 1;
    auto model = MakeNeural("trace_reg", options);
    EXPECT_THAT(model->Fit(tiny, {}, false).status(), StatusIs(absl::StatusCode::kInvalidArgument))
        << "\"" << spec << "\"";
    EXPECT_FALSE(model->has_parameters()) << spec;
  }
  for (const char* spec : {"cpu", "auto", "cuda", "cuda:0", "cuda:7"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.device = spec;
    options.neural.steps = 1;
    auto model = MakeNeural("trace_reg", options);
    EXPECT_THAT(model->Fit(tiny, {}, false).status(), IsOk()) << spec;
  }
}

// ---------------------------------------------------------------------------------------------
// Early stopping on held-out labels (truth_model.h, neural.heldout_label_fraction).

// Items with 1, 2, 5 and 40 labels, many of each.
AnnotationMatrix RaggedCrowd() {
  std::vector<Annotation> labels;
  const int32_t sizes[] = {1, 2, 5, 40};
  int32_t item = 0;
  for (int32_t copy = 0; copy < 2000; ++copy) {
    for (int32_t n : sizes) {
      for (int32_t a = 0; a < n; ++a) labels.push_back({item, a, (item + a) % 3 == 0 ? 1 : 0});
      ++item;
    }
  }
  return *AnnotationMatrix::Build(item, 40, 2, labels);
}

TEST(HeldOutLabelsTest, HoldsTheShareOutOfEachItemAndLeavesOneLabelAtLeast) {
  const AnnotationMatrix data = RaggedCrowd();
  const double fraction = 0.3;
  const std::vector<bool> held = neural::HeldOutLabels(data, fraction, 5);
  ASSERT_EQ(held.size(), static_cast<size_t>(data.num_labels()));
  std::map<size_t, std::vector<int>> held_by_size;  // labels of the item -> held out, per item
  size_t l = 0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const size_t n = data.LabelsOfItem(i).size();
    int h = 0;
    for (size_t j = 0; j < n; ++j) h += held[l++] ? 1 : 0;
    held_by_size[n].push_back(h);
  }
  for (const auto& [n, counts] : held_by_size) {
    double sum = 0;
    for (int h : counts) {
      // floor(0.3 n + u): between floor(0.3 n) and that plus one, never all of the item's labels.
      EXPECT_GE(h, static_cast<int>(std::floor(fraction * n))) << n;
      EXPECT_LE(h, static_cast<int>(std::floor(fraction * n)) + 1) << n;
      EXPECT_LE(h, static_cast<int>(n) - 1) << n;
      sum += h;
    }
    if (n == 1) EXPECT_EQ(sum, 0);
    // The expectation is 0.3 n (2: 0.6, 5: 1.5, 40: 12); 2,000 items, each count a 0/1 draw
    // around it (standard deviation of the mean at most 0.5 / sqrt(2000) = 0.011).
    if (n > 1) EXPECT_NEAR(sum / counts.size(), fraction * n, 0.05) << n;
  }
  EXPECT_EQ(neural::HeldOutLabels(data, fraction, 5), held);
  EXPECT_NE(neural::HeldOutLabels(data, fraction, 6), held);
}

// A small noisy crowd that a high learning rate overfits: the held-out labels' likelihood peaks
// before the last step.
AnnotationMatrix OverfittableCrowd() {
  std::vector<Annotation> labels;
  uint32_t state = 12345;
  auto next = [&state]() {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % 1000;
  };
  for (int32_t i = 0; i < 60; ++i) {
    for (int32_t a = 0; a < 6; ++a) {
      const int32_t truth = i % 3;
      const bool right = next() < (a < 3 ? 700u : 450u);
      labels.push_back({i, a, right ? truth : static_cast<int32_t>((truth + 1 + next() % 2) % 3)});
    }
  }
  return *AnnotationMatrix::Build(60, 6, 3, labels);
}

// The fit keeps the parameters of the checkpoint whose held-out labels' mean log-likelihood is
// the highest: recomputed here at every checkpoint from the network (the observer runs after
// the same step), over the labels HeldOutLabels names.
void ExpectTheBestCheckpointIsKept(const std::string& method) {
  const AnnotationMatrix data = OverfittableCrowd();
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 300;
  options.neural.batch_size = 64;
  options.neural.featureless_learning_rate = 0.05;
  options.neural.heldout_label_fraction = 0.2;
  options.neural.ds_start_fraction = 0;
  const int64_t every = 300 / TruthModelOptions::Neural::kSelectionCheckpoints;
  const std::vector<bool> held = neural::HeldOutLabels(data, 0.2, options.neural.seed);
  std::vector<int64_t> items, annotators, ys;
  size_t l = 0;
  for (int32_t i = 0; i < data.num_items(); ++i) {
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      if (held[l++]) {
        items.push_back(i);
        annotators.push_back(e.other);
        ys.push_back(e.label);
      }
    }
  }
  ASSERT_GT(items.size(), 20u);
  const torch::Tensor ti = torch::tensor(items), ta = torch::tensor(annotators), ty = torch::tensor(ys);
  std::map<int64_t, double> score;                    // step -> held-out mean log-likelihood
  std::map<int64_t, std::vector<double>> prior;      // step -> h(item 0)
  std::map<int64_t, std::vector<double>> confusion;  // step -> Q(item 0, annotator 4)
  auto model = MakeNeural(method, options, 3);
  model->SetCheckpointObserver(1, [&](int64_t step, neural::CrowdNet& net) {
    score[step] = net.LogNoisyLabel(ti, ta).gather(1, ty.unsqueeze(1)).mean().item<double>();
    prior[step] = neural::TensorToVector(net.LogPrior(torch::tensor({int64_t{0}})).exp());
    confusion[step] = neural::TensorToVector(
        net.LogConfusion(torch::tensor({int64_t{0}}), torch::tensor({int64_t{4}})).exp());
  });
  absl::StatusOr<FitReport> report = model->Fit(data, {}, false);
  ASSERT_THAT(report.status(), IsOk());
  const int64_t last = report->training_steps;
  int64_t best = -1;
  for (const auto& [step, s] : score) {
    if ((step % every == 0 || step == last) && (best < 0 || s > score[best])) best = step;
  }
  ASSERT_GT(best, 0);
  EXPECT_LT(best, last) << method << ": the crowd should be overfitted before the last step";
  EXPECT_EQ(model->selected_step(), best) << method;
  // The kept network's prior of item 0 (and, for trace_reg, whose exported confusion is the
  // network's, Q(0, 4)) is the best checkpoint's, which differs from the last step's.
  const std::vector<double> kept_prior = model->ItemPrior(0);
  ASSERT_EQ(kept_prior.size(), prior[best].size());
  double moved = 0;
  for (size_t c = 0; c < kept_prior.size(); ++c) {
    EXPECT_NEAR(kept_prior[c], prior[best][c], 1e-5) << method << " class " << c;
    moved += std::abs(prior[best][c] - prior[last][c]);
  }
  EXPECT_GT(moved, 1e-3) << method << ": the kept and the last parameters should differ";
  if (method == "trace_reg") {
    const std::vector<double> kept = model->ItemAnnotatorConfusion(0, 4);
    ASSERT_EQ(kept.size(), confusion[best].size());
    for (size_t c = 0; c < kept.size(); ++c) {
      EXPECT_NEAR(kept[c], confusion[best][c], 1e-5) << method << " entry " << c;
    }
  }
}

TEST(HeldOutSelectionTest, TraceRegKeepsTheBestCheckpoint) { ExpectTheBestCheckpointIsKept("trace_reg"); }
TEST(HeldOutSelectionTest, CrowdLayerKeepsTheBestCheckpoint) { ExpectTheBestCheckpointIsKept("crowdlayer"); }

// With heldout_label_fraction the network trains on the other labels only (truth_model.h): at
// 0.5, an item with 4 labels holds out exactly min(3, ⌊2 + u⌋) = 2 of them, so 20 of TinyCrowd's
// 40 labels train. One epoch of batches of one label (neural.steps = 1) takes a step per
// trained label.
TEST(HeldOutSelectionTest, TheHeldOutLabelsDoNotTrain) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 1;
  options.neural.batch_size = 1;
  const AnnotationMatrix data = TinyCrowd(10, 4);
  EXPECT_EQ(FitFor("trace_reg", options, data).training_steps, 40);
  options.neural.heldout_label_fraction = 0.5;
  EXPECT_EQ(FitFor("trace_reg", options, data).training_steps, 20);
}

TEST(HeldOutSelectionTest, WithoutAHeldOutShareTheLastStepIsKept) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 20;
  auto model = MakeNeural("trace_reg", options);
  ASSERT_THAT(model->Fit(TinyCrowd(40, 3), {}, false).status(), IsOk());
  EXPECT_EQ(model->selected_step(), -1);
}

// ---------------------------------------------------------------------------------------------
// The served parts compose: without item features, an item's posterior is ∝ π_k Π Q(i, a)[k, y]
// (neural_truth_model.h; π = the class prior, ItemPrior of an id outside the fit, Q(i, a) =
// ItemAnnotatorConfusion, row = true class), and FitReport::log_likelihood (truth_model.h) is
// Σ log Σ_k π_k Π Q(i, a)[k, y] over labelled items without gold plus log π_g Π Q(i, a)[g, y]
// over gold items. cmm's Global setting mixes the groups per label: Q is the population's.

// 3 classes, 30 items labelled by 4 annotators (two right, one right but on every fourth item,
// one always one class up) and an unlabelled item 30.
AnnotationMatrix ShiftedCrowd() {
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < 30; ++i) {
    const int32_t truth = i % 3, up = (truth + 1) % 3;
    labels.push_back({i, 0, truth});
    labels.push_back({i, 1, truth});
    labels.push_back({i, 2, i % 4 == 0 ? up : truth});
    labels.push_back({i, 3, up});
  }
  return *AnnotationMatrix::Build(31, 4, 3, labels);
}

void ExpectPosteriorsAndLikelihoodFromTheServedParts(const std::string& method,
                                                     const std::string& cmm_setting = "") {
  SCOPED_TRACE(method + " " + cmm_setting);
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 120;
  options.neural.em_iterations = 2;
  if (!cmm_setting.empty()) options.neural.cmm_setting = cmm_setting;
  auto model = MakeNeural(method, options, 3);
  const AnnotationMatrix data = ShiftedCrowd();
  std::vector<int32_t> gold(31, -1);
  gold[0] = 0;  // what the crowd says
  gold[1] = 2;  // against the crowd (class 1)
  absl::StatusOr<FitReport> report = model->Fit(data, gold, false);
  ASSERT_THAT(report.status(), IsOk());
  const std::vector<double> prior = model->ItemPrior(-1);
  double expected_log_likelihood = 0;
  for (int32_t i = 0; i < 31; ++i) {
    std::vector<double> joint(prior);
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      const std::vector<double> q = cmm_setting == "global"
                                        ? model->AnnotatorConfusion(-1)
                                        : model->ItemAnnotatorConfusion(i, e.other);
      for (int32_t c = 0; c < 3; ++c) joint[c] *= q[c * 3 + e.label];
    }
    const double total = joint[0] + joint[1] + joint[2];
    if (!data.LabelsOfItem(i).empty()) {
      expected_log_likelihood += std::log(gold[i] >= 0 ? joint[gold[i]] : total);
    }
    std::vector<double> served(3);
    model->ItemPosteriorForItem(i, data.LabelsOfItem(i), -1, absl::MakeSpan(served));
    for (int32_t c = 0; c < 3; ++c) EXPECT_NEAR(served[c], joint[c] / total, 1e-9) << i;
  }
  EXPECT_NEAR(report->log_likelihood, expected_log_likelihood,
              1e-9 * std::abs(expected_log_likelihood));
}

TEST(ServedPartsTest, PosteriorsAndTheLogLikelihoodComposeThePriorAndTheConfusions) {
  for (const char* method : {"crowdlayer", "trace_reg", "conal", "lia"}) {
    ExpectPosteriorsAndLikelihoodFromTheServedParts(method);
  }
  ExpectPosteriorsAndLikelihoodFromTheServedParts("cmm", "individual");
  ExpectPosteriorsAndLikelihoodFromTheServedParts("cmm", "global");
}

// ---------------------------------------------------------------------------------------------
// The tables a fit exports (neural_truth_model.h: ExportTables, the network read in eval mode
// after its last step) are the trained network's: ItemPrior(i) = exp LogPrior(i) and
// ItemAnnotatorConfusion(i, a) = exp LogConfusion(i, a) (row = true class). A checkpoint
// observer at every step reads the network as the export does; the last step's is exported.
// crowdlayer's served confusions are its layers at the typical outputs (its own test), so only
// its prior is compared; cmm's Global setting recomputes the memberships after the last step.
// lia's row k weighs the network's row by h_i[k] and the mean item's row k by 1 - h_i[k], the
// mean item's row k being the fitted items' rows k averaged with weights h_j[k] (lia.h; all 31
// items, under the sample size).
TEST(ExportTest, ServedPriorsAndConfusionsAreTheTrainedNetworks) {
  const AnnotationMatrix data = ShiftedCrowd();
  const std::vector<int64_t> items = {0, 5, 17, 29}, annotators = {0, 3, 2, 1};
  for (const char* method : {"crowdlayer", "trace_reg", "conal", "lia", "cmm"}) {
    SCOPED_TRACE(method);
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 60;
    options.neural.em_iterations = 2;
    auto model = MakeNeural(method, options, 3);
    torch::Tensor prior, confusion;
    model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
      prior = net.LogPrior(torch::tensor(items, torch::kLong)).exp();
      confusion = net.LogConfusion(torch::tensor(items, torch::kLong),
                                   torch::tensor(annotators, torch::kLong)).exp();
      if (std::string(method) != "lia") return;
      const torch::Tensor all = torch::arange(data.num_items(), torch::kLong);
      const torch::Tensor h = net.LogPrior(all).exp();  // items x K
      for (size_t b = 0; b < items.size(); ++b) {
        const torch::Tensor q = net.LogConfusion(all, torch::full_like(all, annotators[b])).exp();
        const torch::Tensor mean_item = (h.unsqueeze(2) * q).sum(0) / h.sum(0).unsqueeze(1);
        const torch::Tensor own = prior[b].unsqueeze(1);
        confusion[b] = own * confusion[b] + (1 - own) * mean_item;
      }
    });
    ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
    ASSERT_TRUE(prior.defined());
    for (size_t b = 0; b < items.size(); ++b) {
      const int32_t i = static_cast<int32_t>(items[b]), a = static_cast<int32_t>(annotators[b]);
      const std::vector<double> served_prior = model->ItemPrior(i);
      for (int32_t c = 0; c < 3; ++c) {
        EXPECT_NEAR(served_prior[c], prior[b][c].item<double>(), 1e-5) << i;
      }
      if (std::string(method) == "crowdlayer") continue;
      const std::vector<double> served = model->ItemAnnotatorConfusion(i, a);
      for (int32_t x = 0; x < 9; ++x) {
        EXPECT_NEAR(served[x], confusion[b][x / 3][x % 3].item<double>(), 1e-5)
            << "item " << i << " annotator " << a << " cell " << x;
      }
    }
  }
}

// lia's item difficulty (lia.h): 1 - (1/K) Σ_k Q[k, k] with Q the served confusion of the mean
// competence: row k of row-softmax(Σ_l D_i[·,·,l] C̄[·,·,l]) weighed by h_i[k], the mean item's
// row k by 1 - h_i[k]. D_i is the difficulty network (4 ReLU layers) and h_i the truth network
// on the item's embedding, C̄ the fitted annotators' mean competence, c_ψ(r) = W r + b of each
// annotator's embedding r.
// Recomputed from the trained network's parameters, read after the last step. ShiftedCrowd's
// annotators differ (annotator 3 always says the next class), so no one annotator's competence
// stands in for the mean.
TEST(LiaDifficultyTest, IsTheMeanCompetencesChanceOfAMislabel) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 60;
  options.neural.em_iterations = 2;
  auto model = MakeNeural("lia", options, 3);
  std::map<std::string, torch::Tensor> trained;
  model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    for (const auto& p : net.named_parameters()) trained[p.key()] = p.value().detach().clone();
  });
  ASSERT_THAT(model->Fit(ShiftedCrowd(), {}, false).status(), IsOk());
  auto linear = [&](const torch::Tensor& x, const std::string& name) {
    return torch::nn::functional::linear(x, trained.at(name + ".weight"),
                                         trained.at(name + ".bias"));
  };
  torch::Tensor competences = linear(trained.at("annotators.embedding.weight"), "competence");
  torch::Tensor mean_competence = competences.mean(0).view({3, 3, -1});
  auto mlp = [&](const std::string& name, int64_t i) {
    torch::Tensor x = trained.at("items.embedding.weight")[i];
    for (int layer = 0; layer < 4; ++layer) {
      x = linear(x, name + "." + std::to_string(2 * layer));
      if (layer < 3) x = torch::relu(x);
    }
    return x;
  };
  // Q of item i under the mean competence, and its truth h_i (the truth network's softmax).
  std::vector<torch::Tensor> q(31), h(31);
  torch::Tensor weighted = torch::zeros({3, 3}, torch::kDouble), weight = weighted.sum(1);
  for (int64_t i = 0; i < 31; ++i) {
    q[i] = torch::softmax((mlp("difficulty", i).view({3, 3, -1}) * mean_competence).sum(2), 1)
               .to(torch::kDouble);
    h[i] = torch::softmax(mlp("truth", i), 0).to(torch::kDouble);
    weighted += h[i].unsqueeze(1) * q[i];
    weight += h[i];
  }
  // The served Q (lia.h): row k is h_i[k] of the item's own and 1 - h_i[k] of the mean item's,
  // whose row k is the items' rows k weighted by h[k].
  const torch::Tensor mean_item = weighted / weight.unsqueeze(1);
  for (int64_t i : {0, 5, 17, 29}) {
    const torch::Tensor own = h[i].unsqueeze(1);
    const torch::Tensor served = own * q[i] + (1 - own) * mean_item;
    const double expected = 1.0 - served.diagonal().sum().item<double>() / 3;
    ASSERT_TRUE(model->ItemDifficulty(static_cast<int32_t>(i)).has_value());
    EXPECT_NEAR(*model->ItemDifficulty(static_cast<int32_t>(i)), expected, 1e-5) << i;
  }
}

// cmm's M-step of the group mix (cmm.h): α_m ∝ Σ_l Σ_k r_l(k, m) + prior_smoothing. Every
// label's responsibilities sum to 1 over (k, m), so α_m ≥ s / (L + M s) for every group, s the
// smoothing, L the labels and M the groups: here 1 / 33. A unanimous crowd gives K-means
// identical points, so the initial grouping leaves a group empty, whose α only the smoothing
// keeps from 0. Read from the network's groups at every checkpoint, in both settings.
TEST(CmmGroupMixTest, EveryGroupKeepsTheSmoothingsShareOfTheMix) {
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < 10; ++i) {
    for (int32_t a = 0; a < 3; ++a) labels.push_back({i, a, i % 2});
  }
  const AnnotationMatrix data = *AnnotationMatrix::Build(10, 3, 2, labels);
  for (const char* setting : {"individual", "global"}) {
    SCOPED_TRACE(setting);
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 60;
    options.neural.em_iterations = 2;
    options.neural.cmm_setting = setting;
    ASSERT_EQ(options.neural.cmm_groups, 3);
    ASSERT_EQ(options.prior_smoothing, 1.0);
    auto model = MakeNeural("cmm", options);
    double smallest = 1;
    int checkpoints = 0;
    model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
      for (const auto& b : net.named_buffers()) {
        if (b.key() != "log_alpha") continue;
        ++checkpoints;
        smallest = std::min(smallest, b.value().exp().min().item<double>());
      }
    });
    ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
    EXPECT_GT(checkpoints, 0);
    EXPECT_GE(smallest, 1.0 / 33 - 1e-6);
  }
}

// cmm's Global setting (cmm.h): an annotator's memberships are the posterior over groups of its
// labels, p(m | a) ∝ α_m Π_{l of a} Σ_k h_i[k] β^(m)[k, y_l], recomputed here from the exported
// α, β and item priors h_i. Compared in logs (floored at 1e-30): with 30 labels an annotator's
// posterior is near 0 or 1 for most groups, where probabilities differ little.
TEST(CmmGlobalTest, MembershipsAreThePosteriorOverGroupsOfTheAnnotatorsLabels) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 60;
  options.neural.em_iterations = 2;
  options.neural.cmm_setting = "global";
  auto model = MakeNeural("cmm", options, 3);
  const AnnotationMatrix data = ShiftedCrowd();
  ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
  const auto* cmm = dynamic_cast<const neural::CmmModel*>(model.get());
  ASSERT_NE(cmm, nullptr);
  const int32_t groups = cmm->groups();
  ASSERT_EQ(cmm->memberships().size(), static_cast<size_t>(4 * groups));
  std::vector<std::vector<double>> log_post(4, cmm->log_alpha());
  for (int32_t i = 0; i < data.num_items(); ++i) {
    const std::vector<double> h = model->ItemPrior(i);
    for (const AnnotationMatrix::Entry& e : data.LabelsOfItem(i)) {
      for (int32_t m = 0; m < groups; ++m) {
        double mix = 0;
        for (int32_t c = 0; c < 3; ++c) {
          mix += h[c] * std::exp(cmm->log_beta()[(m * 3 + c) * 3 + e.label]);
        }
        log_post[e.other][m] += std::log(mix);
      }
    }
  }
  for (int32_t a = 0; a < 4; ++a) {
    const double top = *std::max_element(log_post[a].begin(), log_post[a].end());
    double sum = 0;
    for (double v : log_post[a]) sum += std::exp(v - top);
    for (int32_t m = 0; m < groups; ++m) {
      const double expected = std::max(log_post[a][m] - top - std::log(sum), std::log(1e-30));
      const double served = std::log(std::max(cmm->memberships()[a * groups + m], 1e-30));
      EXPECT_NEAR(served, expected, 1e-2) << "annotator " << a << " group " << m;
    }
  }
}

// The fit adds the cross-entropy of h on the gold items (neural_truth_model.h), the only term
// that trains the prior of a gold item without labels (the E-step's clamp reaches h only
// through the item's labels): ShiftedCrowd's item 30 has none, and gold 2 on it moves h_30 to
// class 2, well above the same fit (the same seed) without gold. (lia's deeper truth network
// already puts item 30 near class 2 without gold.)
TEST(GoldClampTest, TheCrossEntropyOnGoldTrainsTheTruthNetworkOnAnUnlabelledGoldItem) {
  const AnnotationMatrix data = ShiftedCrowd();
  std::vector<int32_t> gold(31, -1);
  gold[30] = 2;
  for (const char* method : {"trace_reg", "cmm"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 120;
    options.neural.em_iterations = 2;
    auto prior_of_30 = [&](const std::vector<int32_t>& g) {
      auto model = MakeNeural(method, options, 3);
      EXPECT_THAT(model->Fit(data, g, false).status(), IsOk());
      return model->ItemPrior(30)[2];
    };
    const double without = prior_of_30({}), with = prior_of_30(gold);
    EXPECT_GT(with - without, 0.2) << method << ": " << without << " without gold, " << with;
  }
}

// Gold items are clamped in every E-step (neural_truth_model.h, cmm.h): a gold item's q is
// one-hot at its gold class, so its labels count as the annotators' answers on that class.
// Item 0 of TinyCrowd(10, 3) is labelled 0 by annotator 0, who labels every other item by its
// parity: with gold 1 on item 0 that label is a mistake on one of the six class-1 items, so
// annotator 0's confusion entry (true 1, label 0) rises well above the fit without gold.
TEST(GoldClampTest, AGoldItemsLabelsCountForItsGoldClass) {
  const AnnotationMatrix data = TinyCrowd(10, 3);
  for (const char* method : {"trace_reg", "cmm"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 200;
    options.neural.em_iterations = 2;
    auto one_to_zero = [&](const std::vector<int32_t>& gold) {
      auto model = MakeNeural(method, options);
      EXPECT_THAT(model->Fit(data, gold, false).status(), IsOk());
      return model->AnnotatorConfusion(0)[1 * 2 + 0];
    };
    std::vector<int32_t> gold(10, -1);
    gold[0] = 1;
    const double without = one_to_zero({}), with = one_to_zero(gold);
    EXPECT_GT(with - without, 0.05) << method;
  }
}

// A gold item's clamp must not decide the truth of other items (neural_truth_model.h: the
// posterior is prior · Π Q, gold clamped on the gold item only). TinyCrowd(10, 3)'s items 2, 4
// and 8 are labelled 0 by all three annotators; with gold 1 on item 0 (labelled 0, 1, 0) the
// labels still favour class 0 for them: by Dawid-Skene's counts annotators 0 and 2 say 0 on
// all 4 class-0 items and on 1 of the 6 class-1 items, annotator 1 on 3 of 4 and on 2 of 6
// (items 3, 9), so three 0s are (1 · 3/4 · 1) / (1/6 · 2/6 · 1/6) = 81 times likelier under
// class 0, and the class prior of these labels (6 to 4) leaves odds of 54 to 1 for class 0.
TEST(GoldClampTest, GoldOnOneItemLeavesTheUnanimousItemsOfTheOtherClass) {
  const AnnotationMatrix data = TinyCrowd(10, 3);
  std::vector<int32_t> gold(10, -1);
  gold[0] = 1;
  for (const char* method : {"trace_reg", "cmm", "crowdlayer", "conal", "lia"}) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 200;
    options.neural.em_iterations = 2;
    auto model = MakeNeural(method, options);
    ASSERT_THAT(model->Fit(data, gold, false).status(), IsOk());
    for (int32_t i : {2, 4, 8}) {
      std::vector<double> posterior(2);
      model->ItemPosteriorForItem(i, data.LabelsOfItem(i), -1, absl::MakeSpan(posterior));
      EXPECT_GT(posterior[0], 0.5) << method << " item " << i << ": " << posterior[1];
    }
  }
}

// conal's label distribution (conal.h): p = softmax(ω f W_g + (1 − ω) f W_r) with f = softmax
// of the classifier, ω = sigmoid(u_r · v_i) of the L2-normalised annotator and instance vectors,
// W_g the common and W_r the annotator's confusion logits; Q(i, r) is the same with a one-hot f.
// Recomputed from the trained network's parts after the last step. A large reward drives W_g
// and W_r apart, so that the weight ω given to each shows.
TEST(ConalMixtureTest, TheCommonConfusionWeighsOmegaAndTheAnnotatorsOneMinusOmega) {
  const AnnotationMatrix data = ShiftedCrowd();
  const torch::Tensor items = torch::tensor({0, 5, 17, 29}, torch::kLong);
  const torch::Tensor annotators = torch::tensor({0, 3, 2, 1}, torch::kLong);
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 60;
  options.neural.featureless_conal_lambda = 0.5;
  auto model = MakeNeural("conal", options, 3);
  torch::Tensor noisy, expected_noisy, confusion, expected_confusion, gap;
  model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    auto& conal = dynamic_cast<neural::ConalNet&>(net);
    torch::Tensor omega =
        torch::sigmoid((conal.InstanceVectors(items) * conal.AnnotatorVectors(annotators)).sum(1));
    torch::Tensor f = conal.LogPrior(items).exp();
    torch::Tensor own = conal.individual().index_select(0, annotators);  // B x K x K
    torch::Tensor w = omega.view({-1, 1, 1}), common = conal.common().unsqueeze(0);
    expected_confusion = torch::log_softmax(w * common + (1 - w) * own, 2);
    torch::Tensor logits = torch::bmm(f.unsqueeze(1), w * common + (1 - w) * own).squeeze(1);
    expected_noisy = torch::log_softmax(logits, 1);
    noisy = conal.LogNoisyLabel(items, annotators);
    confusion = conal.LogConfusion(items, annotators);
    gap = ((1 - 2 * w) * (common - own)).abs().max();
  });
  ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
  ASSERT_TRUE(noisy.defined());
  EXPECT_GT(gap.item<double>(), 1e-2) << "ω and 1 - ω should weigh different confusions";
  EXPECT_TRUE(torch::allclose(noisy, expected_noisy, 1e-5, 1e-5)) << noisy << expected_noisy;
  EXPECT_TRUE(torch::allclose(confusion, expected_confusion, 1e-5, 1e-5))
      << confusion << expected_confusion;
}

// conal's confusion on an item outside the fit (conal.h): the mean instance embedding, the
// fitted items' instance vectors averaged and L2-normalised as every v_i is, so that a fitted
// annotator's Q row k = softmax(ω W_g[k] + (1 − ω) W_r[k]) with ω = sigmoid(u_r · v̄).
// Recomputed from the trained network's parts after the last step; a large reward drives W_g
// and W_r apart, so that ω shows.
TEST(ConalMixtureTest, AnItemOutsideTheFitTakesTheNormalisedMeanInstanceVector) {
  const AnnotationMatrix data = ShiftedCrowd();
  const torch::Tensor annotators = torch::arange(4, torch::kLong);
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 60;
  options.neural.featureless_conal_lambda = 0.5;
  auto model = MakeNeural("conal", options, 3);
  torch::Tensor expected, mean_norm;
  model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
    auto& conal = dynamic_cast<neural::ConalNet&>(net);
    const torch::Tensor mean =
        conal.InstanceVectors(torch::arange(data.num_items(), torch::kLong)).mean(0);
    mean_norm = mean.norm();
    const torch::Tensor v = mean / mean.norm();
    const torch::Tensor omega = torch::sigmoid(conal.AnnotatorVectors(annotators).matmul(v));
    const torch::Tensor w = omega.view({-1, 1, 1});
    expected = torch::softmax(w * conal.common().unsqueeze(0) + (1 - w) * conal.individual(), 2);
  });
  ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
  ASSERT_TRUE(expected.defined());
  // The mean of unit vectors is shorter than one: normalising it changes ω.
  EXPECT_LT(mean_norm.item<double>(), 0.99);
  for (int32_t a = 0; a < 4; ++a) {
    for (int32_t unseen : {data.num_items(), data.num_items() + 9}) {
      const std::vector<double> served = model->ItemAnnotatorConfusion(unseen, a);
      ASSERT_EQ(served.size(), 9u);
      for (int32_t x = 0; x < 9; ++x) {
        EXPECT_NEAR(served[x], expected[a][x / 3][x % 3].item<double>(), 1e-5)
            << "annotator " << a << " item " << unseen << " cell " << x;
      }
    }
  }
}

// The featureless EM's class prior π (neural_truth_model.h) is the mean of q over the labelled
// items. 30 items labelled 0 by annotators 1 and 2 (annotator 0 says 1 on six of them) and item
// 30 labelled 1 by annotator 0 alone, among 300 unlabelled items: π_1 ≤ 1/31, and annotator 0
// says 1 on a fifth of the class-0 items, so q_30[0] ∝ π_0 Q_0[0, 1] is at least
// (30/31 · 0.2) / (30/31 · 0.2 + 1/31) ≈ 0.86, and the prior h_30, trained towards q_30, follows.
// Counting the unlabelled items, whose q is π itself, would hold π near its uniform start and
// leave item 30 near even.
TEST(FeaturelessEmPriorTest, IsTheMeanPosteriorOfTheLabelledItems) {
  std::vector<Annotation> labels;
  for (int32_t i = 0; i < 30; ++i) {
    labels.push_back({i, 0, i < 6 ? 1 : 0});
    labels.push_back({i, 1, 0});
    labels.push_back({i, 2, 0});
  }
  labels.push_back({30, 0, 1});
  const AnnotationMatrix data = *AnnotationMatrix::Build(331, 3, 2, labels);
  auto model = MakeNeural("trace_reg", CpuOptions());
  ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
  const std::vector<double> prior = model->ItemPrior(30);
  EXPECT_GT(prior[0], 0.8) << prior[1];
}

// crowdlayer's mw layers start at the identity scaled by 1 + ln(K - 1) (crowdlayer.h), so that
// every K starts at the K = 2 accuracy e / (1 + e): at K = 3, 1 + ln 2 on the diagonal and 0
// off it. The first AMSGrad step moves each entry by the rate (1e-3) at most.
TEST(CrowdLayerStartTest, MwLayersStartAtTheIdentityScaledByOnePlusLnOfKMinusOne) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 1;
  options.neural.featureless_learning_rate = 1e-3;
  options.neural.ds_start_fraction = 0;
  auto model = MakeNeural("crowdlayer", options, 3);
  torch::Tensor w;
  model->SetCheckpointObserver(1, [&](int64_t step, neural::CrowdNet& net) {
    if (step == 1) w = NamedParameter(net, "weights");
  });
  ASSERT_THAT(model->Fit(ShiftedCrowd(), {}, false).status(), IsOk());
  ASSERT_TRUE(w.defined());
  torch::Tensor start = torch::eye(3).unsqueeze(0).expand_as(w) * (1 + std::log(2.0));
  EXPECT_LT((w - start).abs().max().item<double>(), 2e-3) << w;
}

// ---------------------------------------------------------------------------------------------
// DawidSkenePosteriors (neural_truth_model.h) is Dawid-Skene's EM from the soft majority vote,
// the confusion counts and the class prior smoothed additively, gold clamped: checked against
// the same EM written out in doubles, after 0, 1 and 3 iterations, at a smoothing (0.5) large
// enough that each smoothed count shows.
std::vector<std::vector<double>> DawidSkeneByHand(const std::vector<int64_t>& items,
                                                  const std::vector<int64_t>& annotators,
                                                  const std::vector<int64_t>& labels,
                                                  int32_t num_items, int32_t num_annotators,
                                                  int32_t k, double s, int iterations,
                                                  int32_t gold_item, int32_t gold_class) {
  const size_t n = labels.size();
  std::vector<std::vector<double>> q(num_items, std::vector<double>(k, s));
  for (size_t l = 0; l < n; ++l) q[items[l]][labels[l]] += 1;
  for (auto& row : q) {
    double sum = 0;
    for (double v : row) sum += v;
    for (double& v : row) v /= sum;
  }
  auto clamp = [&] {
    for (int32_t c = 0; c < k; ++c) q[gold_item][c] = c == gold_class ? 1.0 : 0.0;
  };
  clamp();
  for (int it = 0; it < iterations; ++it) {
    // counts[a][c][y] = s + Σ over a's labels y of q_i[c]; the prior (Σ_i q_i[c] + s) / (N + sK).
    std::vector<double> counts(static_cast<size_t>(num_annotators) * k * k, s);
    for (size_t l = 0; l < n; ++l) {
      for (int32_t c = 0; c < k; ++c) {
        counts[(annotators[l] * k + c) * k + labels[l]] += q[items[l]][c];
      }
    }
    std::vector<double> prior(k, s);
    for (int32_t i = 0; i < num_items; ++i) {
      for (int32_t c = 0; c < k; ++c) prior[c] += q[i][c];
    }
    for (double& p : prior) p /= num_items + s * k;
    std::vector<std::vector<double>> log_q(num_items, std::vector<double>(k));
    for (int32_t i = 0; i < num_items; ++i) {
      for (int32_t c = 0; c < k; ++c) log_q[i][c] = std::log(prior[c]);
    }
    for (size_t l = 0; l < n; ++l) {
      for (int32_t c = 0; c < k; ++c) {
        const double* row = counts.data() + (annotators[l] * k + c) * k;
        double total = 0;
        for (int32_t y = 0; y < k; ++y) total += row[y];
        log_q[items[l]][c] += std::log(row[labels[l]] / total);
      }
    }
    for (int32_t i = 0; i < num_items; ++i) {
      const double m = *std::max_element(log_q[i].begin(), log_q[i].end());
      double sum = 0;
      for (int32_t c = 0; c < k; ++c) sum += (q[i][c] = std::exp(log_q[i][c] - m));
      for (int32_t c = 0; c < k; ++c) q[i][c] /= sum;
    }
    clamp();
  }
  return q;
}

TEST(DawidSkeneStartTest, IsDawidSkenesEmWithAdditiveSmoothingAndGoldClamped) {
  // 3 classes, 9 items (item 8 unlabelled), 3 annotators: 0 right, 1 one class up on odd
  // items, 2 always class 0 (on items 0-5 only); item 4 gold, at a class the crowd does not say.
  constexpr int32_t kItems = 9, kAnnotators = 3, kClasses = 3;
  std::vector<int64_t> items, annotators, labels;
  for (int32_t i = 0; i < 8; ++i) {
    const int32_t truth = i % 3;
    for (int32_t a = 0; a < kAnnotators; ++a) {
      if (a == 2 && i > 5) continue;
      items.push_back(i);
      annotators.push_back(a);
      labels.push_back(a == 0 ? truth : a == 1 ? (i % 2 == 1 ? (truth + 1) % 3 : truth) : 0);
    }
  }
  std::vector<float> per_item(kItems, 0.0f);
  for (int64_t i : items) per_item[i] += 1;
  neural::LabelTensors data;
  data.num_items = kItems;
  data.num_annotators = kAnnotators;
  data.num_labels = static_cast<int64_t>(labels.size());
  data.items = torch::tensor(items, torch::kLong);
  data.annotators = torch::tensor(annotators, torch::kLong);
  data.labels = torch::tensor(labels, torch::kLong);
  data.labels_per_item = torch::tensor(per_item, torch::kFloat);
  data.gold_items = torch::tensor(std::vector<int64_t>{4}, torch::kLong);
  data.gold_labels = torch::tensor(std::vector<int64_t>{2}, torch::kLong);
  for (int iterations : {0, 1, 3}) {
    const torch::Tensor q = neural::DawidSkenePosteriors(data, kClasses, 0.5, iterations);
    const std::vector<std::vector<double>> expected = DawidSkeneByHand(
        items, annotators, labels, kItems, kAnnotators, kClasses, 0.5, iterations, 4, 2);
    ASSERT_EQ(q.size(0), kItems);
    ASSERT_EQ(q.size(1), kClasses);
    for (int32_t i = 0; i < kItems; ++i) {
      for (int32_t c = 0; c < kClasses; ++c) {
        EXPECT_NEAR(q[i][c].item<double>(), expected[i][c], 1e-5)
            << "item " << i << " class " << c << " after " << iterations << " iterations";
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// crowdlayer's variants (crowdlayer.h): mw trains a K x K matrix per annotator ("weights"), vw a
// scale vector ("scales"), vb a bias vector ("biases"), vw+b both vectors; and
// TrainedLabelDistribution(r, σ_i), read from the exported layers, is the trained network's
// label distribution softmax(layer_r(σ_i)) at item i's classifier output σ_i = ItemPrior(i);
// for an annotator never seen, the layer of the annotators' mean parameters.
TEST(CrowdLayerVariantsTest, EachVariantTrainsItsOwnLayersAndExportsThem) {
  const AnnotationMatrix data = ShiftedCrowd();
  const std::vector<int64_t> items = {0, 5, 17, 29}, annotators = {0, 3, 2, 1};
  const std::map<std::string, std::vector<std::string>> layers = {
      {"mw", {"weights"}}, {"vw", {"scales"}}, {"vb", {"biases"}}, {"vw+b", {"scales", "biases"}}};
  for (const auto& [variant, expected_layers] : layers) {
    SCOPED_TRACE(variant);
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 40;
    options.neural.crowdlayer_variant = variant;
    auto model = MakeNeural("crowdlayer", options, 3);
    std::vector<std::string> trained;
    std::map<std::string, torch::Tensor> mean_layer;  // each layer averaged over the annotators
    torch::Tensor noisy;
    model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
      trained.clear();
      for (const auto& p : net.named_parameters(/*recurse=*/false)) {
        trained.push_back(p.key());
        mean_layer[p.key()] = p.value().detach().mean(0).to(torch::kDouble);
      }
      noisy = net.LogNoisyLabel(torch::tensor(items, torch::kLong),
                                torch::tensor(annotators, torch::kLong)).exp();
    });
    ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
    EXPECT_EQ(trained, expected_layers);
    ASSERT_TRUE(noisy.defined());
    const auto* crowdlayer = dynamic_cast<const neural::CrowdLayerModel*>(model.get());
    ASSERT_NE(crowdlayer, nullptr);
    for (size_t b = 0; b < items.size(); ++b) {
      const int32_t i = static_cast<int32_t>(items[b]), a = static_cast<int32_t>(annotators[b]);
      const std::vector<double> served =
          crowdlayer->TrainedLabelDistribution(a, model->ItemPrior(i));
      for (int32_t y = 0; y < 3; ++y) {
        EXPECT_NEAR(served[y], noisy[b][y].item<double>(), 1e-5) << "item " << i << " label " << y;
      }
      // An annotator never seen gets the population's layer, the annotators' mean parameters
      // (crowdlayer.h): logits W̄ σ for mw, σ ⊙ s̄ + b̄ for the vector variants.
      const std::vector<double> sigma = model->ItemPrior(i);
      const torch::Tensor s = torch::tensor(sigma, torch::kDouble);
      torch::Tensor logits = mean_layer.count("weights") ? mean_layer["weights"].matmul(s) : s;
      if (mean_layer.count("scales")) logits = logits * mean_layer["scales"];
      if (mean_layer.count("biases")) logits = logits + mean_layer["biases"];
      const torch::Tensor expected = torch::softmax(logits, 0);
      for (int32_t unseen : {4, 99}) {
        const std::vector<double> population = crowdlayer->TrainedLabelDistribution(unseen, sigma);
        ASSERT_EQ(population.size(), 3u);
        for (int32_t y = 0; y < 3; ++y) {
          EXPECT_NEAR(population[y], expected[y].item<double>(), 1e-5)
              << "annotator " << unseen << " item " << i << " label " << y;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Clone (truth_model.h: a deep copy, parameters and options included) carries the features set
// for the next fit and their standardisation: a clone of an unfitted model with item and
// annotator features fits exactly as the original does, and predicts a new annotator's
// confusion from its features alike.
TEST(CloneTest, AClonesFitIsTheOriginalsWithTheSameFeatures) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 40;
  options.neural.em_iterations = 2;
  auto original = MakeNeural("lia", options);
  std::vector<float> item_features;
  for (int i = 0; i < 20; ++i) item_features.push_back(static_cast<float>(i % 2) + 0.1f * i);
  ASSERT_THAT(original->SetItemFeatures(1, item_features), IsOk());
  ASSERT_THAT(original->SetAnnotatorFeatures(2, {0.0f, 3.0f, 1.0f, 5.0f, 2.0f, 4.0f}), IsOk());
  std::unique_ptr<TruthModel> clone = original->Clone();
  const AnnotationMatrix data = TinyCrowd(20, 3);
  ASSERT_THAT(original->Fit(data, {}, false).status(), IsOk());
  ASSERT_THAT(clone->Fit(data, {}, false).status(), IsOk());
  EXPECT_EQ(AllPosteriors(*clone, data, {}), AllPosteriors(*original, data, {}));
  const std::vector<double> predicted = original->AnnotatorConfusionFromFeatures(3, {1.5f, 4.0f});
  EXPECT_EQ(predicted.size(), 4u);
  EXPECT_EQ(clone->AnnotatorConfusionFromFeatures(3, {1.5f, 4.0f}), predicted);
}

// The seed (TruthModelOptions::Neural::seed) sets the initialisation and the minibatch order:
// two fits with one seed are equal, and a fit with another seed differs.
TEST(SeedTest, TheSeedChoosesTheFit) {
  const AnnotationMatrix data = TinyCrowd(20, 3);
  auto fit = [&](uint64_t seed) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 10;
    options.neural.seed = seed;
    auto model = MakeNeural("trace_reg", options);
    EXPECT_THAT(model->Fit(data, {}, false).status(), IsOk());
    return model->ItemPrior(0);
  };
  EXPECT_EQ(fit(2), fit(2));
  EXPECT_NE(fit(1), fit(2));
}

// ---------------------------------------------------------------------------------------------
// Ids outside the fit (neural_truth_model.h: [0, fitted_items()) and [0, fitted_annotators())
// are the fitted ones) start right past the last fitted id: item N gets the class prior and an
// unknown item's confusions, annotator R the population confusion and no embedding, exactly as
// ids far beyond the fit do.
TEST(UnseenIdsTest, TheFirstIdPastTheFitIsUnseen) {
  const AnnotationMatrix data = ShiftedCrowd();  // items 0-30, annotators 0-3
  constexpr int32_t kItems = 31, kAnnotators = 4, kFar = 1000;
  for (const char* method : {"crowdlayer", "trace_reg", "conal", "lia", "cmm"}) {
    SCOPED_TRACE(method);
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 20;
    options.neural.em_iterations = 1;
    auto model = MakeNeural(method, options, 3);
    ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
    EXPECT_EQ(model->ItemPrior(kItems), model->ItemPrior(kFar));
    EXPECT_EQ(model->AnnotatorConfusion(kAnnotators), model->AnnotatorConfusion(kFar));
    EXPECT_EQ(model->ItemAnnotatorConfusion(kItems, 1), model->ItemAnnotatorConfusion(kFar, 1));
    EXPECT_EQ(model->ItemAnnotatorConfusion(2, kAnnotators),
              model->ItemAnnotatorConfusion(2, kFar));
    EXPECT_EQ(model->ItemAnnotatorConfusion(kItems, kAnnotators),
              model->ItemAnnotatorConfusion(kFar, kFar));
    EXPECT_TRUE(model->AnnotatorEmbedding(kAnnotators).empty());
    std::vector<double> at_boundary(3), far(3);
    const std::vector<AnnotationMatrix::Entry> labels = {{kAnnotators, 2}, {1, 0}};
    model->ItemPosteriorForItem(kItems, labels, -1, absl::MakeSpan(at_boundary));
    const std::vector<AnnotationMatrix::Entry> far_labels = {{kFar, 2}, {1, 0}};
    model->ItemPosteriorForItem(kFar, far_labels, -1, absl::MakeSpan(far));
    EXPECT_EQ(at_boundary, far);
  }
}

// ---------------------------------------------------------------------------------------------
// The label likelihood the networks train on is the marginal over the true class (neural_truth_
// model.h): log p(y | i, a) = log Σ_k h_i[k] Q(i, a)[k, y], for the models whose label
// distribution is that mixture (lia, cmm, trace_reg; crowdlayer's and conal's layers act on h
// itself). Read at the end of a fit through a checkpoint observer.
TEST(MarginalLikelihoodTest, TheNoisyLabelIsTheMixtureOfTheConfusionRowsByTheTruePrior) {
  const AnnotationMatrix data = ShiftedCrowd();
  const torch::Tensor items = torch::tensor({0, 5, 17, 29}, torch::kLong);
  const torch::Tensor annotators = torch::tensor({0, 3, 2, 1}, torch::kLong);
  for (const char* method : {"lia", "cmm", "trace_reg"}) {
    SCOPED_TRACE(method);
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 60;
    options.neural.em_iterations = 2;
    options.neural.featureless_em = false;  // trace_reg: the paper's probabilities
    auto model = MakeNeural(method, options, 3);
    torch::Tensor noisy, mixture;
    model->SetCheckpointObserver(1, [&](int64_t, neural::CrowdNet& net) {
      noisy = net.LogNoisyLabel(items, annotators);
      mixture = torch::logsumexp(
          net.LogPrior(items).unsqueeze(2) + net.LogConfusion(items, annotators), 1);
    });
    ASSERT_THAT(model->Fit(data, {}, false).status(), IsOk());
    ASSERT_TRUE(noisy.defined());
    EXPECT_TRUE(torch::allclose(noisy, mixture, 1e-4, 1e-4)) << noisy << mixture;
  }
}

// A warm start copies the previous network's parameters (neural_truth_model.h), not its inputs:
// item features set since the last fit (SetItemFeatures keeps them for the next Fit) are what
// the warm fit's network reads, as a cold fit with them would.
TEST(WarmStartTest, ReadsTheItemFeaturesSetSinceNotThePreviousFits) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 8;
  const AnnotationMatrix data = TinyCrowd(10, 3);
  auto features_read = [](neural::NeuralTruthModel& model) {
    auto read = std::make_shared<torch::Tensor>();
    model.SetCheckpointObserver(1, [read](int64_t, neural::CrowdNet& net) {
      for (const auto& b : net.named_buffers()) {
        if (b.key() == "items.features") *read = b.value().clone();
      }
    });
    return read;
  };
  std::vector<float> before, after;
  for (int i = 0; i < 10; ++i) {
    before.push_back(static_cast<float>(i % 2));
    after.push_back(static_cast<float>(i % 3) + 0.5f * static_cast<float>(i));
  }
  auto warm = MakeNeural("crowdlayer", options);
  ASSERT_THAT(warm->SetItemFeatures(1, before), IsOk());
  ASSERT_THAT(warm->Fit(data, {}, false).status(), IsOk());
  ASSERT_THAT(warm->SetItemFeatures(1, after), IsOk());
  std::shared_ptr<torch::Tensor> warm_read = features_read(*warm);
  ASSERT_THAT(warm->Fit(data, {}, true).status(), IsOk());
  auto cold = MakeNeural("crowdlayer", options);
  ASSERT_THAT(cold->SetItemFeatures(1, after), IsOk());
  std::shared_ptr<torch::Tensor> cold_read = features_read(*cold);
  ASSERT_THAT(cold->Fit(data, {}, false).status(), IsOk());
  ASSERT_TRUE(warm_read->defined() && cold_read->defined());
  EXPECT_TRUE(torch::equal(*warm_read, *cold_read)) << *warm_read << *cold_read;
}

// SetCheckpointObserver (neural_truth_model.h): the observer runs every `every` optimiser steps,
// after the step and with its count, on the network in eval mode; every <= 0 removes it. Ten
// steps with every = 3 are observed after steps 3, 6 and 9.
TEST(CheckpointObserverTest, RunsAfterEveryEveryThStepWithItsCountInEvalMode) {
  TruthModelOptions options = CpuOptions();
  options.neural.steps = 10;  // TinyCrowd(10, 3): 30 labels, one batch a step
  options.neural.ds_start_fraction = 0;
  auto model = MakeNeural("crowdlayer", options);
  std::vector<int64_t> seen;
  bool any_training = false;
  model->SetCheckpointObserver(3, [&](int64_t step, neural::CrowdNet& net) {
    seen.push_back(step);
    any_training = any_training || net.is_training();
  });
  absl::StatusOr<FitReport> report = model->Fit(TinyCrowd(10, 3), {}, false);
  ASSERT_THAT(report.status(), IsOk());
  EXPECT_EQ(report->training_steps, 10);
  EXPECT_EQ(seen, (std::vector<int64_t>{3, 6, 9}));
  EXPECT_FALSE(any_training);
  // every = 0 removes the observer.
  seen.clear();
  model->SetCheckpointObserver(0, [&](int64_t step, neural::CrowdNet&) { seen.push_back(step); });
  ASSERT_THAT(model->Fit(TinyCrowd(10, 3), {}, false).status(), IsOk());
  EXPECT_TRUE(seen.empty());
}

// Decoupled weight decay (truth_model.h, weight_decay): after each optimiser step the truth
// network's weight matrices are multiplied by 1 - r * weight_decay, r the step's rate. Without
// features and with batch_size 0 on the CPU, r is featureless_learning_rate (0.01), so a decay
// of 20 keeps 0.8 of them; the crowd layers and biases are not decayed. The first step's update
// is the same with and without decay, so after it the decayed weights are 0.8 of the plain ones.
TEST(WeightDecayTest, EachStepKeepsOneMinusTheStepRateTimesTheDecay) {
  auto after_first_step = [](double weight_decay) {
    TruthModelOptions options = CpuOptions();
    options.neural.steps = 4;
    options.neural.featureless_learning_rate = 0.01;
    options.neural.weight_decay = weight_decay;
    auto model = MakeNeural("crowdlayer", options);
    std::map<std::string, torch::Tensor> after;
    model->SetCheckpointObserver(1, [&](int64_t step, neural::CrowdNet& net) {
      if (step != 1) return;
      for (const auto& p : net.named_parameters()) after[p.key()] = p.value().detach().clone();
    });
    EXPECT_THAT(model->Fit(TinyCrowd(10, 3), {}, false).status(), IsOk());
    return after;
  };
  std::map<std::string, torch::Tensor> plain = after_first_step(0);
  std::map<std::string, torch::Tensor> decayed = after_first_step(20);
  int checked = 0;
  for (const auto& [name, w] : plain) {
    ASSERT_TRUE(decayed.count(name)) << name;
    const bool truth = name.rfind("items.", 0) == 0 || name.rfind("classifier.", 0) == 0 ||
                       name.rfind("truth.", 0) == 0;
    if (truth && w.dim() >= 2) {
      ++checked;
      EXPECT_TRUE(torch::allclose(decayed[name], w * 0.8, 1e-5, 1e-7)) << name;
    } else {
      EXPECT_TRUE(torch::allclose(decayed[name], w, 1e-6, 1e-8)) << name;
    }
  }
  EXPECT_GT(checked, 0);
  ASSERT_TRUE(plain.count("weights"));  // the crowd layers are there and were compared
}

}  // namespace
}  // namespace verity::models
