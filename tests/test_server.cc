#include "tests/test_server.h"

#include "absl/status/statusor.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verity::tests {

server::VerityServer::Options TestServerOptions(const std::string& postgres_url, int pool_size) {
  server::VerityServer::Options options;
  options.listen = "127.0.0.1:0";
  options.postgres_url = postgres_url;
  options.pool_size = pool_size;
  options.training.run_in_background = false;
  return options;
}

std::vector<v1::Annotation> Annotations(const std::vector<LabelTriple>& labels) {
  std::vector<v1::Annotation> annotations;
  annotations.reserve(labels.size());
  for (const auto& [item, annotator, label] : labels) {
    v1::Annotation& a = annotations.emplace_back();
    a.set_item(item);
    a.set_annotator(annotator);
    a.set_label(label);
  }
  return annotations;
}

void SubmitAllAccepted(client::VerityClient& client, const std::string& project,
                       const std::vector<LabelTriple>& labels) {
  absl::StatusOr<client::SubmitTotals> totals =
      client.SubmitAnnotations(project, Annotations(labels), client::SubmitOptions{});
  ASSERT_THAT(totals, ::verity::testing::IsOk());
  ASSERT_EQ(totals->accepted, static_cast<int64_t>(labels.size()));
}

}  // namespace verity::tests
