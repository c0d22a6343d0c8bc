// Start-up with a project whose stored state cannot be loaded: the server starts anyway, that
// project's calls answer UNAVAILABLE naming the reason, and the other projects serve. The
// server runs in-process on a real PostgreSQL; the corruption is made with SQL between two
// starts on the same database.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/verity_client.h"
#include "pqxx/connection"
#include "pqxx/nontransaction"
#include "server/verity_server.h"
#include "tests/test_postgres.h"
#include "tests/test_server.h"
#include "verity/v1/projects.pb.h"

namespace verity::tests {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<server::VerityServer> StartServer(const std::string& url) {
  server::VerityServer::Options options = TestServerOptions(url, 2);
  auto server = server::VerityServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

client::VerityClient ClientOf(const server::VerityServer& server) {
  return client::VerityClient(
      client::CreateInsecureChannel("127.0.0.1:" + std::to_string(server.port())), {});
}

v1::Project NewProject(const std::string& name) {
  v1::Project project;
  project.set_name(name);
  for (const char* c : {"a", "b"}) project.add_classes(c);
  return project;
}

TEST(StartupTest, AProjectThatCannotLoadAnswersUnavailableAndTheOthersServe) {
  std::unique_ptr<TestPostgres> pg = TestPostgres::Start("verity-startup");
  ASSERT_NE(pg, nullptr);
  {
    std::unique_ptr<server::VerityServer> first = StartServer(pg->url());
    ASSERT_NE(first, nullptr);
    client::VerityClient client = ClientOf(*first);
    ASSERT_TRUE(client.CreateProject(NewProject("broken")).ok());
    ASSERT_TRUE(client.CreateProject(NewProject("healthy")).ok());
    v1::Item item;
    item.set_id("item-1");
    ASSERT_TRUE(client.AddItems("healthy", {item}).ok());
    // A project whose settings parse but whose items do not load (below).
    ASSERT_TRUE(client.CreateProject(NewProject("unrestorable")).ok());
    v1::Item second;
    second.set_id("item-2");
    ASSERT_TRUE(client.AddItems("unrestorable", {item, second}).ok());
    first->Shutdown();
  }
  {
    // Settings bytes that are no ProjectSettings message (a truncated varint).
    pqxx::connection connection(pg->url());
    pqxx::nontransaction txn(connection);
    txn.exec("UPDATE projects SET settings = '\\xff'::bytea WHERE name = 'broken'");
    // Its item indices are no longer dense: the load refuses them.
    txn.exec("DELETE FROM items WHERE item_index = 0 AND project_id = "
             "(SELECT project_id FROM projects WHERE name = 'unrestorable')");
  }

  std::unique_ptr<server::VerityServer> server = StartServer(pg->url());
  ASSERT_NE(server, nullptr) << "one project that cannot load stopped the server's start";
  client::VerityClient client = ClientOf(*server);

  const auto reason = AllOf(HasSubstr("project \"broken\" cannot be loaded"),
                            HasSubstr("stored settings do not parse"));
  absl::StatusOr<v1::Project> broken = client.GetProject("broken");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnavailable) << broken.status();
  EXPECT_THAT(std::string(broken.status().message()), reason);
  absl::StatusOr<std::vector<v1::Posterior>> posteriors =
      client.GetPosteriors("broken", {"item-1"});
  EXPECT_EQ(posteriors.status().code(), absl::StatusCode::kUnavailable) << posteriors.status();
  EXPECT_THAT(std::string(posteriors.status().message()), reason);

  absl::StatusOr<v1::Project> healthy = client.GetProject("healthy");
  ASSERT_TRUE(healthy.ok()) << healthy.status();
  EXPECT_EQ(healthy->num_items(), 1);
  v1::Item item;
  item.set_id("item-2");
  EXPECT_TRUE(client.AddItems("healthy", {item}).ok());
  absl::StatusOr<v1::Project> unrestorable = client.GetProject("unrestorable");
  EXPECT_EQ(unrestorable.status().code(), absl::StatusCode::kUnavailable) << unrestorable.status();
  // The listing leaves out the projects that cannot be loaded (GetProject says why), the one
  // whose stored settings parse too: listing does not load, so it must not list from the
  // stored record a project whose load failed.
  absl::StatusOr<std::vector<v1::Project>> listed = client.ListProjects();
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> names;
  for (const v1::Project& p : *listed) names.push_back(p.name());
  EXPECT_THAT(names, ElementsAre("healthy"));
  server->Shutdown();
}

// gRPC binds with SO_REUSEPORT by default, so a second server on a port in use started and
// the kernel split new connections between the two; with port 0 it could even be handed a
// port another process of the same user held, and a client then reached a server that was not
// its own (seen as "Method not found" in tests running side by side). A port in use must make
// the second start fail.
TEST(StartupTest, ASecondServerCannotShareAListeningPort) {
  std::unique_ptr<TestPostgres> pg = TestPostgres::Start("verity-port");
  ASSERT_NE(pg, nullptr);
  std::unique_ptr<server::VerityServer> first = StartServer(pg->url());
  ASSERT_NE(first, nullptr);
  server::VerityServer::Options options;
  options.listen = "127.0.0.1:" + std::to_string(first->port());
  options.postgres_url = pg->url();
  options.pool_size = 2;
  options.training.run_in_background = false;
  absl::StatusOr<std::unique_ptr<server::VerityServer>> second = server::VerityServer::Start(options);
  EXPECT_FALSE(second.ok()) << "a second server started on port " << first->port();
  if (second.ok()) (*second)->Shutdown();
  first->Shutdown();
}

}  // namespace
}  // namespace verity::tests
