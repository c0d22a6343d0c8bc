// Accuracy of the truth models on real crowdsourcing datasets with gold
// labels (shared/datasets, found by FindDatasetsDirectory). Fits are
// unsupervised; gold is used only for scoring, over gold items with at least
// one label, taking the most probable class (lowest index on ties), as the
// datasets' README computes its majority-vote accuracy.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/csv_dataset.h"
#include "models/testing/dataset_path.h"
#include "common/status_matchers.h"
#include "models/truth_model.h"
#include "models/truth_model_factory.h"

namespace verity::models {
namespace {

using ::verity::testing::IsOk;

struct Scored {
  double accuracy = 0;
  int64_t items = 0;
};

class RealDatasetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::FindDatasetsDirectory();
    ASSERT_TRUE(dir.ok()) << dir.status();
    datasets_ = *dir;
  }

  // Reads `name`, fits `method` without gold, scores against gold. With
  // `second_label_every` > 0, keeps only each item's first label (in file
  // order), and its second on every second_label_every-th item.
  Scored Evaluate(const std::string& name, const std::string& method,
                  int second_label_every = 0) {
    absl::StatusOr<CsvDataset> ds = ReadCsvDataset(datasets_ + "/" + name);
    EXPECT_THAT(ds, IsOk());
    if (!ds.ok()) return {};
    if (second_label_every > 0) {
      std::vector<int32_t> kept(ds->num_items(), 0);
      std::vector<Annotation> partly_redundant;
      for (const Annotation& a : ds->annotations) {
        const int32_t allowed = a.item % second_label_every == 0 ? 2 : 1;
        if (kept[a.item] < allowed) {
          ++kept[a.item];
          partly_redundant.push_back(a);
        }
      }
      ds->annotations = std::move(partly_redundant);
    }
    absl::StatusOr<AnnotationMatrix> m = ds->ToMatrix();
    EXPECT_THAT(m, IsOk());
    absl::StatusOr<std::unique_ptr<TruthModel>> model =
        CreateTruthModel(method, ds->num_classes(), {});
    EXPECT_THAT(model, IsOk());
    if (!m.ok() || !model.ok()) return {};
    EXPECT_THAT((*model)->Fit(*m, {}, /*warm_start=*/false), IsOk());
    const std::vector<double> posteriors = AllPosteriors(**model, *m, {});
    const int32_t k = ds->num_classes();
    Scored s;
    int64_t correct = 0;
    for (int32_t i = 0; i < m->num_items(); ++i) {
      if (ds->gold[i] < 0 || m->LabelsOfItem(i).empty()) continue;
      const double* p = posteriors.data() + static_cast<size_t>(i) * k;
      correct += std::max_element(p, p + k) - p == ds->gold[i];
      ++s.items;
    }
    s.accuracy = s.items == 0 ? 0 : static_cast<double>(correct) / s.items;
    RecordProperty(name + "_" + method + "_" + std::to_string(second_label_every) + "_accuracy",
                   std::to_string(s.accuracy));
    return s;
  }

  std::string datasets_;
};

TEST_F(RealDatasetsTest, MajorityVoteMatchesTheReadmeOnBluebirds) {
  const Scored mv = Evaluate("bluebirds", "mv");
  EXPECT_EQ(mv.items, 108);
  EXPECT_NEAR(mv.accuracy, 0.7593, 5e-5);
}

TEST_F(RealDatasetsTest, DawidSkeneBeatsMajorityVoteOnBluebirds) {
  // README: majority vote 0.7593; published Dawid-Skene results are ~0.89.
  const Scored ds = Evaluate("bluebirds", "ds");
  EXPECT_EQ(ds.items, 108);
  EXPECT_GE(ds.accuracy, 0.7593 + 0.05);
  EXPECT_GE(ds.accuracy, 0.88);
}

TEST_F(RealDatasetsTest, DawidSkeneAtLeastMatchesMajorityVoteOnRte) {
  const Scored mv = Evaluate("rte", "mv");
  const Scored ds = Evaluate("rte", "ds");
  EXPECT_EQ(mv.items, 800);
  EXPECT_NEAR(mv.accuracy, 0.9187, 5e-5);
  EXPECT_GE(ds.accuracy, mv.accuracy);
}

TEST_F(RealDatasetsTest, DawidSkeneBeatsMajorityVoteOnProduct) {
  // Crowd-Kit reports DS 0.940 on this data; majority vote is 0.8966.
  const Scored mv = Evaluate("product", "mv");
  const Scored ds = Evaluate("product", "ds");
  EXPECT_NEAR(mv.accuracy, 0.8966, 5e-5);
  EXPECT_GE(ds.accuracy, mv.accuracy + 0.03);
}

// Partly redundant labels, as a project has early on or under dynamic
// overlap: one label per item and a second on every 10th or 50th. The class
// prior learnt from the few two-label items alone used to overrule the
// single labels: ds predicted one class for nearly every item at every 50th
// (rte 0.5825, medical_treat 0.5604, against majority vote's 0.8025 and
// 0.7230) and trailed it by 2.1 points on medical_treat at every 10th.
TEST_F(RealDatasetsTest, DawidSkeneOnPartlyRedundantLabelsIsNotBelowMajorityVote) {
  for (const char* name : {"rte", "possent", "medical_treat"}) {
    for (int every : {10, 50}) {
      const Scored mv = Evaluate(name, "mv", every);
      const Scored ds = Evaluate(name, "ds", every);
      EXPECT_GT(mv.items, 0) << name;
      EXPECT_GE(ds.accuracy, mv.accuracy - 0.015) << name << ", every " << every;
    }
  }
}

// one_coin and glad force every annotator's errors to be symmetric, so on
// crowds whose errors depend on the true class they trail ds; their floors
// are the measured accuracy minus about one item (bluebirds, rte) or
// 0.003 (product).

TEST_F(RealDatasetsTest, OneCoinAndGladOnBluebirds) {
  // Measured 0.7222 (78 of 108) for both. Labels are right 73% of the time
  // on "false" birds but 52% on "true" ones: a bias a single accuracy per
  // annotator cannot express, so both stay below majority vote (0.7593)
  // and far below ds (~0.90).
  const Scored one_coin = Evaluate("bluebirds", "one_coin");
  const Scored glad = Evaluate("bluebirds", "glad");
  EXPECT_EQ(one_coin.items, 108);
  EXPECT_GE(one_coin.accuracy, 0.71);
  EXPECT_GE(glad.accuracy, 0.71);
}

TEST_F(RealDatasetsTest, OneCoinAndGladBeatMajorityVoteOnRte) {
  // Measured: one_coin 0.9250, glad 0.9275; majority vote 0.9187.
  const Scored one_coin = Evaluate("rte", "one_coin");
  const Scored glad = Evaluate("rte", "glad");
  EXPECT_EQ(glad.items, 800);
  EXPECT_GE(one_coin.accuracy, 0.92);
  EXPECT_GE(glad.accuracy, 0.92);
}

TEST_F(RealDatasetsTest, OneCoinAndGladMatchPublishedResultsOnProduct) {
  // Published GLAD: 0.922 (Zheng et al. 2017), 0.928 (Crowd-Kit); ZenCrowd
  // (one-coin) 0.928. Measured: one_coin 0.9280, glad 0.9275.
  const Scored one_coin = Evaluate("product", "one_coin");
  const Scored glad = Evaluate("product", "glad");
  EXPECT_GE(one_coin.accuracy, 0.925);
  EXPECT_GE(glad.accuracy, 0.925);
}

}  // namespace
}  // namespace verity::models
