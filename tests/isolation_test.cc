// Tenant isolation: what one ordinary reader or writer key can make the server do. An
// in-process VerityServer on a real gRPC channel over a real PostgreSQL; each test builds the
// project it needs and checks that a request's cost is bounded by what it asks for, not by
// how it is repeated or by the project's size.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/verity_client.h"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::tests {
namespace {

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

class IsolationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = TestPostgres::Start("verity-isolation").release(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(pg_, nullptr);
    StartServer();
  }
  // Starts the test's server (default limits, no background training) over the suite's
  // database, and a channel to it.
  void StartServer(int64_t max_leases_per_project = server::VerityServer::Options()
                                                       .max_leases_per_project) {
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    options.max_leases_per_project = max_leases_per_project;
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    // Receives up to the server's 16 MiB message limit (gRPC's client default is 4 MiB).
    grpc::ChannelArguments arguments;
    arguments.SetMaxReceiveMessageSize(16 << 20);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                         grpc::InsecureChannelCredentials(), arguments);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Creates a 2-class project `name` whose limits `limit` sets.
  void CreateLimitedProject(const std::string& name,
                            const std::function<void(v1::ProjectLimits&)>& limit) {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name(name);
    create.mutable_project()->add_classes("a");
    create.mutable_project()->add_classes("b");
    limit(*create.mutable_project()->mutable_settings()->mutable_limits());
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
  }

  // Runs call(0) ... call(n - 1) on n threads at once; returns their codes, in call order.
  std::vector<grpc::StatusCode> AtOnce(int n, const std::function<grpc::Status(int)>& call) {
    std::vector<grpc::StatusCode> codes(n);
    std::vector<std::thread> threads;
    for (int c = 0; c < n; ++c) threads.emplace_back([&, c] { codes[c] = call(c).error_code(); });
    for (std::thread& t : threads) t.join();
    return codes;
  }

  // Streams one batch of (item, annotator, label) to `project` and returns its ack.
  v1::BatchAck SubmitLabels(const std::string& project, uint64_t batch_id,
                            const std::vector<std::tuple<std::string, std::string, int>>& labels) {
    return SubmitLabelsAt(project, batch_id, labels, {});
  }

  // As SubmitLabels; label i carries client_time client_seconds[i] when there is one.
  v1::BatchAck SubmitLabelsAt(const std::string& project, uint64_t batch_id,
                              const std::vector<std::tuple<std::string, std::string, int>>& labels,
                              const std::vector<int64_t>& client_seconds) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
    v1::AnnotationBatch batch;
    batch.set_batch_id(batch_id);
    batch.set_project(project);
    for (const auto& [item, annotator, label] : labels) {
      v1::Annotation* a = batch.add_annotations();
      a->set_item(item);
      a->set_annotator(annotator);
      a->set_label(label);
      const size_t i = batch.annotations_size() - 1;
      if (i < client_seconds.size()) a->mutable_client_time()->set_seconds(client_seconds[i]);
    }
    stream->Write(batch);
    stream->WritesDone();
    v1::BatchAck ack;
    EXPECT_TRUE(stream->Read(&ack));
    EXPECT_TRUE(stream->Finish().ok());
    return ack;
  }

  v1::Project GetProjectOf(const std::string& name) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::GetProjectRequest request;
    request.set_project(name);
    v1::GetProjectResponse response;
    EXPECT_TRUE(
        v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response).ok());
    return response.project();
  }

  // A project with `num_classes` classes and one label from each of `num_annotators`
  // annotators ("a0", "a1", ...), `annotators_per_item` of them on each item ("i0", "i1",
  // ...), and the truth model `method`.
  void CreateProjectWithAnnotators(const std::string& name, int num_classes, int num_annotators,
                                   int annotators_per_item = 1,
                                   v1::TruthMethod method = v1::TRUTH_METHOD_UNSPECIFIED) {
    v1::CreateProjectRequest create;
    create.mutable_project()->set_name(name);
    create.mutable_project()->mutable_settings()->mutable_model()->set_method(method);
    for (int c = 0; c < num_classes; ++c) create.mutable_project()->add_classes(absl::StrCat("c", c));
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
    grpc::ClientContext stream_context;
    stream_context.set_deadline(Deadline());
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&stream_context);
    constexpr int kPerBatch = 1000;
    int batches = 0;
    for (int first = 0; first < num_annotators; first += kPerBatch) {
      v1::AnnotationBatch batch;
      batch.set_batch_id(++batches);
      batch.set_project(name);
      for (int a = first; a < std::min(num_annotators, first + kPerBatch); ++a) {
        v1::Annotation* label = batch.add_annotations();
        const int item = a / annotators_per_item;
        label->set_item(absl::StrCat("i", item));
        label->set_annotator(absl::StrCat("a", a));
        // Mostly the item's class (item mod K); the last annotator of each item is off by one.
        const bool off = annotators_per_item > 1 && a % annotators_per_item == annotators_per_item - 1;
        label->set_label((item + (off ? 1 : 0)) % num_classes);
      }
      ASSERT_TRUE(stream->Write(batch));
    }
    stream->WritesDone();
    v1::BatchAck ack;
    int accepted = 0;
    while (stream->Read(&ack)) accepted += ack.accepted();
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(accepted, num_annotators);
  }

  grpc::Status SuggestAnnotators(const std::string& project, const std::string& item, int k,
                                 const std::vector<std::string>& candidates,
                                 v1::SuggestAnnotatorsResponse* response) {
    v1::SuggestAnnotatorsRequest request;
    request.set_project(project);
    request.set_item(item);
    request.set_k(k);
    for (const std::string& c : candidates) request.add_candidates(c);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::AssignmentService::NewStub(channel_)->SuggestAnnotators(&context, request,
                                                                        response);
  }

  grpc::Status Profiles(const v1::GetAnnotatorProfilesRequest& request,
                        v1::GetAnnotatorProfilesResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    return v1::TruthService::NewStub(channel_)->GetAnnotatorProfiles(&context, request, response);
  }

  static TestPostgres* pg_;
  std::unique_ptr<server::VerityServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TestPostgres* IsolationTest::pg_ = nullptr;

TEST_F(IsolationTest, RepeatedAnnotatorIdsAreAnsweredOnce) {
  CreateProjectWithAnnotators("repeats", 4, 3);
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("repeats");
  for (int i = 0; i < 10000; ++i) request.add_annotators(i % 2 == 0 ? "a1" : "a0");
  v1::GetAnnotatorProfilesResponse response;
  ASSERT_TRUE(Profiles(request, &response).ok());
  ASSERT_EQ(response.profiles_size(), 2);
  EXPECT_EQ(response.profiles(0).annotator(), "a1");  // First occurrences, in order.
  EXPECT_EQ(response.profiles(1).annotator(), "a0");
  EXPECT_EQ(response.profiles(0).confusion().probabilities_size(), 16);
}

TEST_F(IsolationTest, EveryAnnotatorComesAPageAtATime) {
  CreateProjectWithAnnotators("pages", 2, 2500);
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("pages");
  request.set_page_size(1000);
  std::vector<std::string> seen;
  int pages = 0;
  do {
    v1::GetAnnotatorProfilesResponse response;
    ASSERT_TRUE(Profiles(request, &response).ok());
    ASSERT_LE(response.profiles_size(), 1000);
    for (const v1::AnnotatorProfile& p : response.profiles()) seen.push_back(p.annotator());
    request.set_page_token(response.next_page_token());
    ASSERT_LT(++pages, 10);
  } while (!request.page_token().empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 2500u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 2500u);
  EXPECT_EQ(seen.front(), "a0");
  EXPECT_EQ(seen.back(), "a2499");
  // The client library's GetAnnotatorProfiles without ids follows the pages to the end.
  client::ClientOptions options;
  options.deadline = absl::Seconds(60);
  const client::VerityClient verity(channel_, options);
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> all = verity.GetAnnotatorProfiles("pages", {});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2500u);
  EXPECT_EQ(all->back().annotator(), "a2499");
  // A token with ids, or one the server never issued, is refused and names the field.
  request.set_page_token("garbage");
  v1::GetAnnotatorProfilesResponse refused;
  grpc::Status status = Profiles(request, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "page_token")) << status.error_message();
}

// truth.proto: GetAnnotatorProfiles without ids pages through the annotators; each profile on
// every page is that annotator's own. Annotator a<i> gave i + 1 labels, so its num_labels names
// it: pages of 2 over six annotators must carry 1..6 in order.
TEST_F(IsolationTest, EveryPageOfAnnotatorProfilesCarriesEachAnnotatorsOwnProfile) {
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("profile-pages");
  create.mutable_project()->add_classes("no");
  create.mutable_project()->add_classes("yes");
  {
    v1::CreateProjectResponse created;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
  }
  constexpr int kAnnotators = 6;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
    v1::AnnotationBatch batch;
    batch.set_batch_id(1);
    batch.set_project("profile-pages");
    for (int a = 0; a < kAnnotators; ++a) {
      for (int i = 0; i <= a; ++i) {
        v1::Annotation* label = batch.add_annotations();
        label->set_item(absl::StrCat("i", i));
        label->set_annotator(absl::StrCat("a", a));
        label->set_label(i % 2);
      }
    }
    ASSERT_TRUE(stream->Write(batch));
    stream->WritesDone();
    v1::BatchAck ack;
    ASSERT_TRUE(stream->Read(&ack));
    ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
    ASSERT_TRUE(stream->Finish().ok());
  }
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("profile-pages");
  request.set_page_size(2);
  request.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  std::vector<std::pair<std::string, int>> seen;
  int pages = 0;
  do {
    v1::GetAnnotatorProfilesResponse page;
    ASSERT_TRUE(Profiles(request, &page).ok());
    for (const v1::AnnotatorProfile& p : page.profiles()) {
      seen.emplace_back(p.annotator(), p.num_labels());
    }
    request.set_page_token(page.next_page_token());
    ASSERT_LT(++pages, 10);
  } while (!request.page_token().empty());
  std::vector<std::pair<std::string, int>> expected;
  for (int a = 0; a < kAnnotators; ++a) expected.emplace_back(absl::StrCat("a", a), a + 1);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(pages, 3);
}

// truth.proto: a page_size of 0 means 1,000 for ListPosteriors (items in creation order) and
// for GetAnnotatorProfiles without ids. 2,500 items and annotators: pages of 1,000, 1,000, 500.
TEST_F(IsolationTest, APageSizeOfZeroMeansAThousand) {
  CreateProjectWithAnnotators("default-pages", 2, 2500);
  std::vector<int> posterior_pages;
  std::vector<std::string> items;
  v1::ListPosteriorsRequest list;
  list.set_project("default-pages");
  do {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ListPosteriorsResponse page;
    ASSERT_TRUE(v1::TruthService::NewStub(channel_)->ListPosteriors(&context, list, &page).ok());
    posterior_pages.push_back(page.posteriors_size());
    for (const v1::Posterior& p : page.posteriors()) items.push_back(p.item());
    list.set_page_token(page.next_page_token());
    ASSERT_LT(posterior_pages.size(), 10u);
  } while (!list.page_token().empty());
  EXPECT_EQ(posterior_pages, (std::vector<int>{1000, 1000, 500}));
  ASSERT_EQ(items.size(), 2500u);
  for (int i = 0; i < 2500; ++i) ASSERT_EQ(items[i], absl::StrCat("i", i)) << i;

  std::vector<int> profile_pages;
  v1::GetAnnotatorProfilesRequest profiles;
  profiles.set_project("default-pages");
  profiles.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  do {
    v1::GetAnnotatorProfilesResponse page;
    ASSERT_TRUE(Profiles(profiles, &page).ok());
    profile_pages.push_back(page.profiles_size());
    profiles.set_page_token(page.next_page_token());
    ASSERT_LT(profile_pages.size(), 10u);
  } while (!profiles.page_token().empty());
  EXPECT_EQ(profile_pages, (std::vector<int>{1000, 1000, 500}));
}

// truth.proto: next_page_token is "Empty on the last page". When the items (annotators) are an
// exact multiple of the page size, the page that ends them is the last one: 2,000 of each in
// pages of 1,000 give two pages, the second without a token (not a third, empty page).
TEST_F(IsolationTest, APageThatEndsTheItemsExactlyHasNoToken) {
  CreateProjectWithAnnotators("exact-pages", 2, 2000);
  v1::ListPosteriorsRequest list;
  list.set_project("exact-pages");
  list.set_page_size(1000);
  std::vector<int> posterior_pages;
  std::vector<std::string> tokens;
  do {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ListPosteriorsResponse page;
    ASSERT_TRUE(v1::TruthService::NewStub(channel_)->ListPosteriors(&context, list, &page).ok());
    posterior_pages.push_back(page.posteriors_size());
    tokens.push_back(page.next_page_token());
    list.set_page_token(page.next_page_token());
    ASSERT_LT(posterior_pages.size(), 10u);
  } while (!list.page_token().empty());
  EXPECT_EQ(posterior_pages, (std::vector<int>{1000, 1000}));
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_FALSE(tokens[0].empty());
  EXPECT_TRUE(tokens[1].empty());

  v1::GetAnnotatorProfilesRequest profiles;
  profiles.set_project("exact-pages");
  profiles.set_page_size(1000);
  profiles.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  std::vector<int> profile_pages;
  do {
    v1::GetAnnotatorProfilesResponse page;
    ASSERT_TRUE(Profiles(profiles, &page).ok());
    profile_pages.push_back(page.profiles_size());
    profiles.set_page_token(page.next_page_token());
    ASSERT_LT(profile_pages.size(), 10u);
  } while (!profiles.page_token().empty());
  EXPECT_EQ(profile_pages, (std::vector<int>{1000, 1000}));
}

TEST_F(IsolationTest, AResponseOverTheSizeLimitIsRefusedBeforeItIsBuilt) {
  // 256 classes: each matrix is 512 KiB, so 200 of them are about 105 MB.
  CreateProjectWithAnnotators("wide", 256, 200);
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("wide");
  for (int a = 0; a < 200; ++a) request.add_annotators(absl::StrCat("a", a));
  v1::GetAnnotatorProfilesResponse response;
  grpc::Status status = Profiles(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "bytes")) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "CONFUSION_DETAIL_NONE"))
      << status.error_message();
  // Without the matrices they fit.
  request.set_confusion_detail(v1::CONFUSION_DETAIL_NONE);
  response.Clear();
  ASSERT_TRUE(Profiles(request, &response).ok());
  ASSERT_EQ(response.profiles_size(), 200);
  EXPECT_FALSE(response.profiles(0).has_confusion());
  EXPECT_EQ(response.profiles(0).num_labels(), 1);
  EXPECT_GT(response.profiles(0).accuracy(), 0.0);
  // Every annotator, with matrices: each page ends inside the limit.
  v1::GetAnnotatorProfilesRequest all;
  all.set_project("wide");
  int total = 0;
  do {
    v1::GetAnnotatorProfilesResponse page;
    status = Profiles(all, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_GT(page.profiles_size(), 0);
    EXPECT_LT(page.ByteSizeLong(), 16u << 20);
    total += page.profiles_size();
    all.set_page_token(page.next_page_token());
  } while (!all.page_token().empty());
  EXPECT_EQ(total, 200);
}

TEST_F(IsolationTest, SuggestAnnotatorsCapsItsCandidatesAndSuggestsEachOnce) {
  CreateProjectWithAnnotators("candidates", 3, 4);
  auto suggest = [&](const std::vector<std::string>& candidates,
                     v1::SuggestAnnotatorsResponse* response) {
    return SuggestAnnotators("candidates", "i0", 10, candidates, response);
  };
  std::vector<std::string> many;
  for (int i = 0; i < 10001; ++i) many.push_back(absl::StrCat("newcomer-", i));
  v1::SuggestAnnotatorsResponse response;
  grpc::Status status = suggest(many, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "candidates: at most 10000"))
      << status.error_message();
  many.pop_back();
  ASSERT_TRUE(suggest(many, &response).ok());
  EXPECT_EQ(response.suggestions_size(), 10);
  // Repeats count once; unknown annotators share the population's score; a0 labelled i0.
  response.Clear();
  ASSERT_TRUE(suggest({"x", "x", "y", "x", "a1", "a0"}, &response).ok());
  std::vector<std::string> suggested;
  for (const auto& s : response.suggestions()) suggested.push_back(s.annotator());
  EXPECT_EQ(std::set<std::string>(suggested.begin(), suggested.end()),
            (std::set<std::string>{"x", "y", "a1"}));
  EXPECT_EQ(suggested.size(), 3u);
  double x_score = -1, y_score = -2;
  for (const auto& s : response.suggestions()) {
    if (s.annotator() == "x") x_score = s.score();
    if (s.annotator() == "y") y_score = s.score();
  }
  EXPECT_EQ(x_score, y_score);
}

// assignment.proto: empty candidates rank the project's annotators only while there are at
// most max(10,000, 655,360,000 / classes^2) of them, the work of the largest explicit list at
// 256 classes; scoring one annotator builds its K x K confusion, so without the bound one
// reader's call cost annotators x K^2 (6.5e9 cells at 100,000 annotators and 256 classes).
// 10,001 annotators at 256 classes: an empty list is refused naming candidates, an explicit
// one is served.
TEST_F(IsolationTest, SuggestAnnotatorsWithoutCandidatesIsBoundedByTheWorkOfAnExplicitList) {
  CreateProjectWithAnnotators("many-annotators", 256, 10'001, 10'001);
  auto suggest = [&](const std::vector<std::string>& candidates,
                     v1::SuggestAnnotatorsResponse* response) {
    return SuggestAnnotators("many-annotators", "i0", 3, candidates, response);
  };
  v1::SuggestAnnotatorsResponse response;
  grpc::Status status = suggest({}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(),
                                "candidates: required when the project has more than 10000 "
                                "annotators at 256 classes (it has 10001)"))
      << status.error_message();
  ASSERT_TRUE(suggest({"newcomer-1", "newcomer-2", "a7"}, &response).ok());
  EXPECT_EQ(response.suggestions_size(), 2);  // a7 labelled i0.
  // At 2 classes the bound is 163,840,000 annotators: 10,001, one item each, are ranked.
  CreateProjectWithAnnotators("many-annotators-two-classes", 2, 10'001);
  response.Clear();
  status = SuggestAnnotators("many-annotators-two-classes", "i0", 3, {}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.suggestions_size(), 3);
}

// assignment.proto: an empty candidates list ranks the project's annotators "when it has at
// most max(10,000, 655,360,000 / classes²) of them": at 256 classes a project with exactly
// 10,000 annotators is still ranked without a list (only one with more is refused).
TEST_F(IsolationTest, SuggestAnnotatorsWithoutCandidatesRanksAProjectAtTheBound) {
  CreateProjectWithAnnotators("annotators-at-the-bound", 256, 10'000);  // a<n> labels i<n>.
  v1::SuggestAnnotatorsResponse response;
  grpc::Status status = SuggestAnnotators("annotators-at-the-bound", "i0", 3, {}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.suggestions_size(), 3);
}

// ProjectLimits.max_feature_values: the server keeps a dense feature row for every item and
// annotator of a project with features, given or not, so one writer key must not be able to
// grow that past the limit with labels on new ids that carry no features at all. Item rows
// of 1,000 values and annotator rows of 100 under a limit of 3,500: 3 items and 5 annotators
// fit (3,500); a fourth item (ingest or AddItems) or a sixth annotator (AddAnnotators) does not.
TEST_F(IsolationTest, FeatureRowsOfNewItemsAndAnnotatorsAreBoundedByTheProjectsLimit) {
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("feature-rows");
  create.mutable_project()->add_classes("a");
  create.mutable_project()->add_classes("b");
  create.mutable_project()->set_item_feature_dim(1000);
  create.mutable_project()->set_annotator_feature_dim(100);
  create.mutable_project()->mutable_settings()->mutable_limits()->set_max_feature_values(3500);
  v1::CreateProjectResponse created;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
  }
  v1::BatchAck ack = SubmitLabels("feature-rows", 1,
                                  {{"i1", "w1", 0}, {"i2", "w2", 1}, {"i3", "w3", 0},
                                   {"i1", "w4", 0}, {"i2", "w5", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 5);
  ack = SubmitLabels("feature-rows", 2, {{"i4", "w1", 0}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_feature_values (3500"))
      << ack.error_message();
  EXPECT_EQ(ack.accepted(), 0);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project("feature-rows");
    request.add_items()->set_id("i5");
    v1::AddItemsResponse response;
    const grpc::Status status =
        v1::ProjectService::NewStub(channel_)->AddItems(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(absl::StrContains(status.error_message(), "max_feature_values"))
        << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddAnnotatorsRequest request;
    request.set_project("feature-rows");
    request.add_annotators()->set_id("w6");
    v1::AddAnnotatorsResponse response;
    const grpc::Status status =
        v1::ProjectService::NewStub(channel_)->AddAnnotators(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(absl::StrContains(status.error_message(), "max_feature_values"))
        << status.error_message();
  }
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetProjectRequest request;
  request.set_project("feature-rows");
  v1::GetProjectResponse response;
  ASSERT_TRUE(v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response).ok());
  EXPECT_EQ(response.project().num_items(), 3);
  EXPECT_EQ(response.project().num_annotators(), 5);
}

// ProjectLimits: a call that would pass a project's limit is refused whole, naming the limit,
// and writes nothing; what adds nothing (a revised label) is still accepted.
// ProjectLimits.max_revisions: a revision adds no live label, so max_labels cannot see a
// writer flipping one label back and forth, but every flip keeps the replaced label in
// annotation_history. Limit 3: three flips (one of them two in one batch) are taken, a
// resend of the live label and a new pair still are, a fourth flip is refused whole, and the
// count survives a restart (it is read from the database, not rebuilt from live labels).
TEST_F(IsolationTest, RevisionsKeptInHistoryAreBoundedByTheProjectsLimit) {
  CreateLimitedProject("flipping", [](v1::ProjectLimits& l) { l.set_max_revisions(3); });
  auto submit = [&](uint64_t id, std::vector<std::tuple<std::string, std::string, int>> labels) {
    return SubmitLabels("flipping", id, labels);
  };
  v1::BatchAck ack = submit(1, {{"i1", "w1", 0}, {"i2", "w1", 0}});
  ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
  ack = submit(2, {{"i1", "w1", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.revised(), 1);
  ack = submit(3, {{"i1", "w1", 0}, {"i1", "w1", 1}});  // Two flips of one pair in one batch.
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.revised(), 2);
  // At the limit: a resend of live labels and a new pair add no revision and are taken.
  ack = submit(4, {{"i1", "w1", 1}, {"i2", "w1", 0}, {"i3", "w1", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.duplicate(), 2);
  EXPECT_EQ(ack.accepted(), 1);
  EXPECT_EQ(GetProjectOf("flipping").num_revisions(), 3);  // What max_revisions counts.
  auto refused_flip = [&](uint64_t id) {
    v1::BatchAck refused = submit(id, {{"i3", "w2", 0}, {"i2", "w1", 1}});
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "max_revisions (3"))
        << refused.error_message();
    // Refused at admission ("this call"), with the exact count, before the commit's own check.
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "has 3 revised or stale labels"))
        << refused.error_message();
    EXPECT_TRUE(absl::StrContains(refused.error_message(), "this call adds 1"))
        << refused.error_message();
    EXPECT_EQ(refused.accepted() + refused.revised(), 0);
  };
  refused_flip(5);
  // Within one batch: a new pair written twice with one label adds no revision; a resent live
  // label followed by a flip of the same pair adds one.
  ack = submit(7, {{"i4", "w1", 0}, {"i4", "w1", 0}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  ack = submit(8, {{"i3", "w1", 1}, {"i3", "w1", 0}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "this call adds 1")) << ack.error_message();
  server_->Shutdown();
  StartServer();
  ASSERT_NE(server_, nullptr);
  refused_flip(6);
  EXPECT_EQ(GetProjectOf("flipping").num_revisions(), 3);
  pqxx::connection connection(pg_->url());
  pqxx::nontransaction txn(connection);
  EXPECT_EQ(txn.exec1("SELECT count(*) FROM annotation_history h JOIN projects p "
                      "USING (project_id) WHERE p.name = 'flipping'")[0]
                .as<int64_t>(),
            3);
}

// max_revisions near its limit with client times: a label older than the live one is kept in
// history (stale) and leaves the live label, so a later write in the same batch of the same
// label revises it and adds another row. Limit 1, nothing in history: [older "b", newer "b"]
// adds two rows and is refused; counting the second write as repeating the first let it in.
TEST_F(IsolationTest, AStaleWriteDoesNotHideTheRevisionAfterIt) {
  CreateLimitedProject("stale-flips", [](v1::ProjectLimits& l) { l.set_max_revisions(1); });
  v1::BatchAck ack = SubmitLabelsAt("stale-flips", 1, {{"i", "w", 0}}, {1'700'000'100});
  ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
  ack = SubmitLabelsAt("stale-flips", 2, {{"i", "w", 1}, {"i", "w", 1}},
                       {1'700'000'050, 1'700'000'200});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << "stale " << ack.stale() << ", revised " << ack.revised();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_revisions (1")) << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "this call adds 2")) << ack.error_message();
  // Each alone fits: the newer label revises once.
  ack = SubmitLabelsAt("stale-flips", 3, {{"i", "w", 1}}, {1'700'000'200});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.revised(), 1);
}

// ingest_pipeline.h Submit: the project's max_revisions is enforced by the commit itself
// against the database's count of every server's history rows (projects.history_rows), since
// this server's own count may lag another replica's revisions. Limit 3: with the stored count
// set to 3 behind the server's back (as three revisions another server committed), a flip this
// server counts as the first revision is still refused whole and adds no history row.
TEST_F(IsolationTest, TheCommitHoldsMaxRevisionsAgainstTheStoredHistoryCount) {
  CreateLimitedProject("flipped-behind", [](v1::ProjectLimits& l) { l.set_max_revisions(3); });
  v1::BatchAck ack = SubmitLabels("flipped-behind", 1, {{"i", "w", 0}});
  ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
  ASSERT_EQ(ack.accepted(), 1);
  pqxx::connection connection(pg_->url());
  pqxx::nontransaction txn(connection);
  txn.exec0("UPDATE projects SET history_rows = 3 WHERE name = 'flipped-behind'");
  ack = SubmitLabels("flipped-behind", 2, {{"i", "w", 1}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << "revised " << ack.revised() << ": " << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_revisions")) << ack.error_message();
  EXPECT_EQ(ack.revised(), 0);
  EXPECT_EQ(txn.exec1("SELECT count(*) FROM annotation_history h JOIN projects p "
                      "USING (project_id) WHERE p.name = 'flipped-behind'")[0]
                .as<int64_t>(),
            0);
}

TEST_F(IsolationTest, AProjectsLimitsRefuseWholeCallsThatWouldPassThem) {
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("limited");
  create.mutable_project()->add_classes("a");
  create.mutable_project()->add_classes("b");
  v1::ProjectLimits* limits = create.mutable_project()->mutable_settings()->mutable_limits();
  limits->set_max_items(4);
  limits->set_max_annotators(2);
  limits->set_max_labels(5);
  v1::CreateProjectResponse created;
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
  }
  auto submit = [&](uint64_t id, std::vector<std::tuple<std::string, std::string, int>> labels) {
    return SubmitLabels("limited", id, labels);
  };
  auto counts = [&] {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::GetProjectRequest request;
    request.set_project("limited");
    v1::GetProjectResponse response;
    EXPECT_TRUE(v1::ProjectService::NewStub(channel_)->GetProject(&context, request, &response).ok());
    return std::vector<int64_t>{response.project().num_items(),
                                response.project().num_annotators(),
                                response.project().num_labels()};
  };
  v1::BatchAck ack = submit(1, {{"i1", "w1", 0}, {"i2", "w1", 1}, {"i3", "w2", 0}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 3);
  // A third annotator passes max_annotators (2): the whole batch is refused, its new item too.
  ack = submit(2, {{"i4", "w1", 0}, {"i4", "w3", 1}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_annotators (2")) << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "has 2 annotators")) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 0);
  EXPECT_EQ(counts(), (std::vector<int64_t>{3, 2, 3}));
  // Items: i4 and i5 would make 5 > 4.
  ack = submit(3, {{"i4", "w2", 0}, {"i5", "w2", 0}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_items")) << ack.error_message();
  // Labels: up to 5, then a revision (same item and annotator) adds none and is accepted.
  ack = submit(4, {{"i1", "w2", 0}, {"i2", "w2", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  ack = submit(5, {{"i3", "w1", 1}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_labels (5")) << ack.error_message();
  ack = submit(6, {{"i1", "w1", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.revised(), 1);
  EXPECT_EQ(counts(), (std::vector<int64_t>{3, 2, 5}));
  // AddItems and AddAnnotators are held to the same limits, whole.
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project("limited");
    request.add_items()->set_id("i1");  // Known: adds nothing.
    request.add_items()->set_id("i9");
    request.add_items()->set_id("i10");
    v1::AddItemsResponse response;
    grpc::Status status =
        v1::ProjectService::NewStub(channel_)->AddItems(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_TRUE(absl::StrContains(status.error_message(), "max_items")) << status.error_message();
  }
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddAnnotatorsRequest request;
    request.set_project("limited");
    request.add_annotators()->set_id("w7");
    v1::AddAnnotatorsResponse response;
    grpc::Status status =
        v1::ProjectService::NewStub(channel_)->AddAnnotators(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // SuggestItems registers an annotator it has not seen (assignment.proto): a new one would
  // pass max_annotators too, and is refused; a known one is still served.
  auto suggest = [&](const std::string& annotator) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::SuggestItemsRequest request;
    request.set_project("limited");
    request.set_annotator(annotator);
    request.set_k(1);
    v1::SuggestItemsResponse response;
    return v1::AssignmentService::NewStub(channel_)->SuggestItems(&context, request, &response);
  };
  grpc::Status suggested = suggest("w8");
  EXPECT_EQ(suggested.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(suggested.error_message(), "max_annotators (2"))
      << suggested.error_message();
  EXPECT_TRUE(suggest("w1").ok());
  EXPECT_EQ(counts(), (std::vector<int64_t>{3, 2, 5}));
}

// ingest.proto: a batch refused whole by a project's limit still reports its invalid annotations
// (rejected, rejections), however the refusal came: at read time (the project as committed)
// or in the commit lane (the batches admitted meanwhile). Either way nothing is written.
TEST_F(IsolationTest, ABatchRefusedByALimitStillListsItsInvalidAnnotations) {
  CreateLimitedProject("refused-with-rejections", [](v1::ProjectLimits& l) { l.set_max_items(1); });
  // Index 1's label is out of range for 2 classes; the two valid labels make 2 items > 1.
  v1::BatchAck ack = SubmitLabels("refused-with-rejections", 1,
                                  {{"i1", "w1", 0}, {"i1", "w2", 7}, {"i2", "w1", 1}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_items")) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 0);
  EXPECT_EQ(ack.rejected(), 1);
  ASSERT_EQ(ack.rejections_size(), 1);
  EXPECT_EQ(ack.rejections(0).index(), 1);
  EXPECT_TRUE(absl::StrContains(ack.rejections(0).reason(), "label")) << ack.rejections(0).reason();
  EXPECT_EQ(GetProjectOf("refused-with-rejections").num_items(), 0);
}

// --max_leases_per_project: SuggestItems leases up to k items for any annotator id, so a
// project's outstanding leases are bounded. At 5, with 10 items: a's 3 leases leave room for 2;
// b asking for 3 is refused RESOURCE_EXHAUSTED naming the flag, and is not registered (the
// refused call changes nothing); b asking for 2 gets them.
TEST_F(IsolationTest, SuggestItemsCannotLeasePastTheProjectsLeaseLimit) {
  server_->Shutdown();
  StartServer(/*max_leases_per_project=*/5);
  CreateLimitedProject("leases", [](v1::ProjectLimits&) {});
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project("leases");
    for (int i = 0; i < 10; ++i) request.add_items()->set_id(absl::StrCat("i", i));
    v1::AddItemsResponse response;
    ASSERT_TRUE(v1::ProjectService::NewStub(channel_)->AddItems(&context, request, &response).ok());
  }
  auto suggest = [&](const std::string& annotator, int k, v1::SuggestItemsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::SuggestItemsRequest request;
    request.set_project("leases");
    request.set_annotator(annotator);
    request.set_k(k);
    return v1::AssignmentService::NewStub(channel_)->SuggestItems(&context, request, response);
  };
  v1::SuggestItemsResponse a;
  ASSERT_TRUE(suggest("a", 3, &a).ok());
  ASSERT_EQ(a.suggestions_size(), 3);
  v1::SuggestItemsResponse refused;
  const grpc::Status status = suggest("b", 3, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--max_leases_per_project"))
      << status.error_message();
  EXPECT_EQ(GetProjectOf("leases").num_annotators(), 1);
  v1::SuggestItemsResponse b;
  ASSERT_TRUE(suggest("b", 2, &b).ok());
  EXPECT_EQ(b.suggestions_size(), 2);
}

// New annotators asking for work at once (SuggestItems registers them) cannot together pass
// max_annotators: with room for one more, of 8 concurrent calls from 8 new annotators exactly
// one is served and the others get RESOURCE_EXHAUSTED; the project ends at its limit.
TEST_F(IsolationTest, NewAnnotatorsAskingAtOnceCannotTogetherPassMaxAnnotators) {
  CreateLimitedProject("one-more", [](v1::ProjectLimits& limits) { limits.set_max_annotators(2); });
  {
    v1::AddAnnotatorsRequest request;
    request.set_project("one-more");
    request.add_annotators()->set_id("first");
    v1::AddAnnotatorsResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->AddAnnotators(&context, request, &response).ok());
  }
  const std::vector<grpc::StatusCode> codes = AtOnce(8, [&](int c) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::SuggestItemsRequest request;
    request.set_project("one-more");
    request.set_annotator(absl::StrCat("new", c));
    request.set_k(1);
    v1::SuggestItemsResponse response;
    return v1::AssignmentService::NewStub(channel_)->SuggestItems(&context, request, &response);
  });
  EXPECT_EQ(std::count(codes.begin(), codes.end(), grpc::StatusCode::OK), 1);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), grpc::StatusCode::RESOURCE_EXHAUSTED), 7);
  EXPECT_EQ(GetProjectOf("one-more").num_annotators(), 2);
}

// The same for items: 8 AddItems calls at once, each with a new item, on a project with room
// for one more: exactly one is served.
TEST_F(IsolationTest, ItemsAddedAtOnceCannotTogetherPassMaxItems) {
  CreateLimitedProject("one-more-item", [](v1::ProjectLimits& limits) { limits.set_max_items(1); });
  const std::vector<grpc::StatusCode> codes = AtOnce(8, [&](int c) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::AddItemsRequest request;
    request.set_project("one-more-item");
    request.add_items()->set_id(absl::StrCat("item", c));
    v1::AddItemsResponse response;
    return v1::ProjectService::NewStub(channel_)->AddItems(&context, request, &response);
  });
  EXPECT_EQ(std::count(codes.begin(), codes.end(), grpc::StatusCode::OK), 1);
  EXPECT_EQ(std::count(codes.begin(), codes.end(), grpc::StatusCode::RESOURCE_EXHAUSTED), 7);
  EXPECT_EQ(GetProjectOf("one-more-item").num_items(), 1);
}

// Batches in flight on several streams are checked against a limit exactly, when they are
// committed: while a table lock holds every commit back, three streams each send 40 new labels
// to a project with max_labels 100. Each batch alone fits, as each stream reads it; together
// they would make 120. Exactly two commit; the third is refused whole, naming the limit.
TEST_F(IsolationTest, BatchesInFlightOnSeveralStreamsCannotTogetherPassALimit) {
  CreateLimitedProject("in-flight", [](v1::ProjectLimits& l) { l.set_max_labels(100); });
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>> rw;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  {
    pqxx::connection connection(pg_->url());
    pqxx::work lock(connection);
    lock.exec0("LOCK TABLE annotations IN EXCLUSIVE MODE");
    for (int s = 0; s < 3; ++s) {
      auto stream = std::make_unique<Stream>();
      stream->context.set_deadline(Deadline());
      stream->rw = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&stream->context);
      v1::AnnotationBatch batch;
      batch.set_batch_id(1);
      batch.set_project("in-flight");
      for (int i = 0; i < 40; ++i) {
        v1::Annotation* a = batch.add_annotations();
        a->set_item(absl::StrCat("s", s, "-i", i));
        a->set_annotator("w");
        a->set_label(i % 2);
      }
      v1::Annotation* invalid = batch.add_annotations();  // Rejected whatever the batch's fate.
      invalid->set_item(absl::StrCat("s", s, "-i0"));
      invalid->set_annotator("w2");
      invalid->set_label(9);
      ASSERT_TRUE(stream->rw->Write(batch));
      stream->rw->WritesDone();
      streams.push_back(std::move(stream));
    }
    // Every stream's batch is read (and passes the read-time check) while commits wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }  // The lock is released: the batches commit.
  int committed = 0, refused = 0;
  for (auto& stream : streams) {
    v1::BatchAck ack;
    ASSERT_TRUE(stream->rw->Read(&ack));
    EXPECT_TRUE(stream->rw->Finish().ok());
    EXPECT_EQ(ack.rejected(), 1);
    ASSERT_EQ(ack.rejections_size(), 1);
    EXPECT_EQ(ack.rejections(0).index(), 40);
    if (ack.error_code() == 0) {
      EXPECT_EQ(ack.accepted(), 40);
      ++committed;
    } else {
      EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_labels (100"))
          << ack.error_message();
      EXPECT_EQ(ack.accepted(), 0);
      ++refused;
    }
  }
  EXPECT_EQ(committed, 2);
  EXPECT_EQ(refused, 1);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::GetProjectRequest get;
  get.set_project("in-flight");
  v1::GetProjectResponse project;
  ASSERT_TRUE(v1::ProjectService::NewStub(channel_)->GetProject(&context, get, &project).ok());
  EXPECT_EQ(project.project().num_labels(), 80);
}

// Acks come in the order the batches were sent, refusals included: while a table lock holds
// every commit back, one stream sends a valid batch, a batch naming an unknown project
// (NOT_FOUND), a batch over 10,000 annotations (INVALID_ARGUMENT) and another valid batch. The
// two refused at read time are not acked ahead of the held first batch: no ack comes while
// the lock is held, and after it is released the four acks come 1, 2, 3, 4.
TEST_F(IsolationTest, RefusedBatchesAreAckedInOrderBehindAHeldCommit) {
  CreateLimitedProject("ack-order", [](v1::ProjectLimits&) {});
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
  auto valid = [](uint64_t id, const std::string& item) {
    v1::AnnotationBatch batch;
    batch.set_batch_id(id);
    batch.set_project("ack-order");
    v1::Annotation* a = batch.add_annotations();
    a->set_item(item);
    a->set_annotator("w");
    a->set_label(1);
    return batch;
  };
  absl::Mutex mu;
  std::vector<v1::BatchAck> acks;
  std::thread reader([&] {
    v1::BatchAck ack;
    while (stream->Read(&ack)) {
      absl::MutexLock lock(&mu);
      acks.push_back(ack);
    }
  });
  {
    pqxx::connection connection(pg_->url());
    pqxx::work lock(connection);
    lock.exec0("LOCK TABLE annotations IN EXCLUSIVE MODE");
    EXPECT_TRUE(stream->Write(valid(101, "first")));
    v1::AnnotationBatch unknown = valid(102, "unknown-project");
    unknown.set_project("no-such-project");
    EXPECT_TRUE(stream->Write(unknown));
    v1::AnnotationBatch oversized;
    oversized.set_batch_id(103);
    oversized.set_project("ack-order");
    for (int i = 0; i < 10001; ++i) {
      v1::Annotation* a = oversized.add_annotations();
      a->set_item(absl::StrCat("big", i));
      a->set_annotator("w");
      a->set_label(0);
    }
    EXPECT_TRUE(stream->Write(oversized));
    EXPECT_TRUE(stream->Write(valid(104, "last")));
    stream->WritesDone();
    // Every batch is read (the refused ones are refused at once) while the first one's commit
    // waits on the lock.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    absl::MutexLock held(&mu);
    std::vector<uint64_t> early;
    for (const v1::BatchAck& ack : acks) early.push_back(ack.batch_id());
    EXPECT_TRUE(early.empty()) << "acked while batch 101's commit was held: "
                               << ::testing::PrintToString(early);
  }  // The lock is released: batches 101 and 104 commit.
  reader.join();
  EXPECT_TRUE(stream->Finish().ok());
  std::vector<uint64_t> order;
  for (const v1::BatchAck& ack : acks) order.push_back(ack.batch_id());
  ASSERT_EQ(order, (std::vector<uint64_t>{101, 102, 103, 104}));
  EXPECT_EQ(acks[0].error_code(), 0) << acks[0].error_message();
  EXPECT_EQ(acks[0].accepted(), 1);
  EXPECT_EQ(acks[1].error_code(), grpc::StatusCode::NOT_FOUND) << acks[1].error_message();
  EXPECT_EQ(acks[1].accepted(), 0);
  EXPECT_EQ(acks[2].error_code(), grpc::StatusCode::INVALID_ARGUMENT) << acks[2].error_message();
  EXPECT_TRUE(absl::StrContains(acks[2].error_message(), "10000")) << acks[2].error_message();
  EXPECT_EQ(acks[2].accepted(), 0);
  EXPECT_EQ(acks[3].error_code(), 0) << acks[3].error_message();
  EXPECT_EQ(acks[3].accepted(), 1);
  EXPECT_EQ(GetProjectOf("ack-order").num_labels(), 2);
}

// max_confusion_cells (annotators × K²): a many-class project whose model keeps a dense K×K
// per annotator (a neural one) cannot take as many annotators as a binary one. At 256 classes
// the default 16,000,000 cells allow 244 annotators.
TEST_F(IsolationTest, AManyClassProjectsAnnotatorsAreBoundedByItsConfusionCells) {
  CreateProjectWithAnnotators("many-classes", 256, 240, 1, v1::TRUTH_METHOD_CROWDLAYER);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = v1::IngestService::NewStub(channel_)->SubmitAnnotations(&context);
  v1::AnnotationBatch batch;
  batch.set_batch_id(1);
  batch.set_project("many-classes");
  for (int a = 240; a < 250; ++a) {
    v1::Annotation* label = batch.add_annotations();
    label->set_item("i0");
    label->set_annotator(absl::StrCat("a", a));
    label->set_label(0);
  }
  stream->Write(batch);
  stream->WritesDone();
  v1::BatchAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_confusion_cells (16000000"))
      << ack.error_message();
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "has 15728640 dense confusion cells"))
      << ack.error_message();
  grpc::ClientContext get_context;
  get_context.set_deadline(Deadline());
  v1::GetProjectRequest get;
  get.set_project("many-classes");
  v1::GetProjectResponse project;
  ASSERT_TRUE(
      v1::ProjectService::NewStub(channel_)->GetProject(&get_context, get, &project).ok());
  EXPECT_EQ(project.project().num_annotators(), 240);
  EXPECT_EQ(project.project().num_labels(), 240);
}

// projects.proto: max_confusion_cells counts annotators × classes² for the dense methods, so
// it is the annotators, not the items or labels, that a dense project may not grow past it.
// Limit 8 at K = 2 (4 cells per annotator): 2 annotators, on 5 items with 6 labels (so that
// items × 4 = 20 and labels × 4 = 24 would both pass it), may switch ds to lia; then more
// items for them are taken, and a third annotator is refused, at ingest and at a switch back.
TEST_F(IsolationTest, ConfusionCellsCountAnnotatorsNotItemsOrLabels) {
  v1::CreateProjectRequest create;
  create.mutable_project()->set_name("cells");
  create.mutable_project()->add_classes("a");
  create.mutable_project()->add_classes("b");
  create.mutable_project()->mutable_settings()->mutable_model()->set_method(v1::TRUTH_METHOD_DAWID_SKENE);
  create.mutable_project()->mutable_settings()->mutable_limits()->set_max_confusion_cells(8);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::CreateProjectResponse created;
    ASSERT_TRUE(
        v1::ProjectService::NewStub(channel_)->CreateProject(&context, create, &created).ok());
  }
  auto submit = [&](uint64_t id, std::vector<std::tuple<std::string, std::string, int>> labels) {
    return SubmitLabels("cells", id, labels);
  };
  auto switch_to = [&](v1::TruthMethod method) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::UpdateProjectSettingsRequest request;
    request.set_project("cells");
    request.mutable_settings()->mutable_model()->set_method(method);
    request.mutable_settings()->mutable_limits()->set_max_confusion_cells(8);
    v1::UpdateProjectSettingsResponse response;
    return v1::ProjectService::NewStub(channel_)->UpdateProjectSettings(&context, request,
                                                                         &response);
  };
  v1::BatchAck ack = submit(1, {{"i0", "w0", 0}, {"i1", "w0", 1}, {"i2", "w0", 0},
                                {"i3", "w0", 1}, {"i4", "w0", 0}, {"i0", "w1", 0}});
  ASSERT_EQ(ack.error_code(), 0) << ack.error_message();
  grpc::Status switched = switch_to(v1::TRUTH_METHOD_LIA);
  ASSERT_TRUE(switched.ok()) << "2 annotators x 4 cells = 8: " << switched.error_message();
  // More items and labels for the same two annotators add no cells.
  ack = submit(2, {{"i5", "w0", 1}, {"i6", "w1", 0}, {"i1", "w1", 1}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  EXPECT_EQ(ack.accepted(), 3);
  // A third annotator would make 12 cells.
  ack = submit(3, {{"i0", "w2", 0}});
  EXPECT_EQ(ack.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(ack.error_message(), "max_confusion_cells (8"))
      << ack.error_message();
  // Under ds the third annotator is taken (ds keeps no dense confusion); lia is then refused.
  ASSERT_TRUE(switch_to(v1::TRUTH_METHOD_DAWID_SKENE).ok());
  ack = submit(4, {{"i0", "w2", 0}});
  EXPECT_EQ(ack.error_code(), 0) << ack.error_message();
  switched = switch_to(v1::TRUTH_METHOD_LIA);
  EXPECT_EQ(switched.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(switched.error_message(), "max_confusion_cells (8"))
      << switched.error_message();
}

// The classical models keep per annotator only the confusion columns of the labels it gave
// (issue 23, point 1): the review's case, many annotators at 256 classes, is served rather than
// refused or exhausting the server. 2,000 annotators with one label each, four on each of 500
// items, under ds: ingest is accepted, TrainModel fits, the stored version grows with labels ×
// K (dense confusions and their counts would take over 2 GB), and a restarted server serves
// the project from it. (Fit time and memory: bench/sparse_confusion_benchmark.)
TEST_F(IsolationTest, AManyClassProjectWithThousandsOfAnnotatorsFitsAndSurvivesARestart) {
  constexpr int kClasses = 256;
  constexpr int kAnnotators = 2000;
  CreateProjectWithAnnotators("many-annotators-ds", kClasses, kAnnotators, 4);
  {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::TrainModelRequest request;
    request.set_project("many-annotators-ds");
    v1::TrainModelResponse response;
    grpc::Status status =
        v1::ModelService::NewStub(channel_)->TrainModel(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  auto live = server_->core().registry->Get("many-annotators-ds");
  ASSERT_TRUE(live.ok()) << live.status();
  const int64_t project_id = (*live)->identity().project_id;
  auto version = server_->core().storage->versions->GetModelVersion(project_id, 1);
  ASSERT_TRUE(version.ok()) << version.status();
  // Per annotator: K row denominators and one column, kept for the parameters and for the
  // refit state's last E-step, plus the counts' column: about 6 K doubles, 25 MB in all.
  // Dense, the parameters alone were 2,001 K² doubles (1 GB).
  EXPECT_LT(version->parameters.size(), 48u << 20) << version->parameters.size();
  auto outputs = server_->core().storage->versions->GetModelVersionOutputs(project_id, 1);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_LT(outputs->annotator_profiles.size(), 4u << 20);

  // What the fitted model says before the restart, to compare with after it.
  auto posterior_of = [this](const std::string& item) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::GetPosteriorsRequest request;
    request.set_project("many-annotators-ds");
    request.add_items(item);
    v1::GetPosteriorsResponse response;
    grpc::Status status =
        v1::TruthService::NewStub(channel_)->GetPosteriors(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  const v1::GetPosteriorsResponse before = posterior_of("i7");
  ASSERT_EQ(before.posteriors_size(), 1);
  ASSERT_EQ(before.posteriors(0).probabilities_size(), kClasses);
  // Item 7's class is 7: three of its four annotators say so.
  EXPECT_EQ(before.posteriors(0).map_label(), 7);

  server_->Shutdown();
  StartServer();
  ASSERT_NE(server_, nullptr);

  const v1::GetPosteriorsResponse after = posterior_of("i7");
  ASSERT_EQ(after.posteriors_size(), 1);
  EXPECT_EQ(after.posteriors(0).model_version(), 1);
  ASSERT_EQ(after.posteriors(0).probabilities_size(), kClasses);
  for (int c = 0; c < kClasses; ++c) {
    EXPECT_EQ(after.posteriors(0).probabilities(c), before.posteriors(0).probabilities(c)) << c;
  }
  v1::GetAnnotatorProfilesRequest request;
  request.set_project("many-annotators-ds");
  request.add_annotators("a29");
  v1::GetAnnotatorProfilesResponse profiles;
  ASSERT_TRUE(Profiles(request, &profiles).ok());
  ASSERT_EQ(profiles.profiles_size(), 1);
  EXPECT_EQ(profiles.profiles(0).num_labels(), 1);
  EXPECT_EQ(profiles.profiles(0).confusion().probabilities_size(), kClasses * kClasses);
}

// The server-wide defaults apply where a project sets no limit.
TEST_F(IsolationTest, TheServersDefaultLimitsApplyToProjectsWithoutTheirOwn) {
  server_->Shutdown();
  server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
  options.project_quota.max_annotators = 10;
  auto server = server::VerityServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  server_ = std::move(*server);
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                 grpc::InsecureChannelCredentials());
  CreateProjectWithAnnotators("defaults", 2, 10);
  v1::AddAnnotatorsRequest request;
  request.set_project("defaults");
  request.add_annotators()->set_id("one-too-many");
  v1::AddAnnotatorsResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  grpc::Status status =
      v1::ProjectService::NewStub(channel_)->AddAnnotators(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--max_annotators_per_project"))
      << status.error_message();
}

// Fits run per project in a bounded pool: while one project's fit runs (held here by a test
// hook), another project's TrainModel completes; with a pool of one it waits.
TEST_F(IsolationTest, OneProjectsLongFitDoesNotHoldUpAnothers) {
  for (int slots : {2, 1}) {
    SCOPED_TRACE(absl::StrCat(slots, " fit slots"));
    server_->Shutdown();
    absl::Mutex mu;
    bool slow_fit_started = false;
    bool release_slow_fit = false;
    server::VerityServer::Options options = TestServerOptions(pg_->url(), 4);
    options.training.max_concurrent_fits = slots;
    options.training.before_fit_for_testing = [&](const server::LiveProject& project) {
      if (project.identity().name.rfind("slow-", 0) != 0) return;
      absl::MutexLock lock(&mu);
      slow_fit_started = true;
      mu.Await(absl::Condition(&release_slow_fit));
    };
    auto server = server::VerityServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    const std::string slow = absl::StrCat("slow-", slots), fast = absl::StrCat("fast-", slots);
    CreateProjectWithAnnotators(slow, 2, 20);
    CreateProjectWithAnnotators(fast, 2, 20);
    auto train = [&](const std::string& project, std::chrono::seconds timeout) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + timeout);
      v1::TrainModelRequest request;
      request.set_project(project);
      v1::TrainModelResponse response;
      return v1::ModelService::NewStub(channel_)->TrainModel(&context, request, &response);
    };
    grpc::Status slow_status;
    std::thread slow_fit([&] { slow_status = train(slow, std::chrono::seconds(60)); });
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(&slow_fit_started));
    }
    const grpc::Status fast_status = train(fast, std::chrono::seconds(slots == 2 ? 30 : 2));
    if (slots == 2) {
      EXPECT_TRUE(fast_status.ok()) << fast_status.error_message();
    } else {
      EXPECT_EQ(fast_status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    }
    {
      absl::MutexLock lock(&mu);
      release_slow_fit = true;
    }
    slow_fit.join();
    EXPECT_TRUE(slow_status.ok()) << slow_status.error_message();
  }
}

}  // namespace
}  // namespace verity::tests
