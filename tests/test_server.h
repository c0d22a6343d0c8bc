// What the in-process server tests share: the options a test server starts with, and the
// submission of (item, annotator, label) triples that a test expects to be accepted.
#ifndef VERITY_TESTS_TEST_SERVER_H_
#define VERITY_TESTS_TEST_SERVER_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "client/verity_client.h"
#include "server/verity_server.h"
#include "verity/v1/ingest.pb.h"

namespace verity::tests {

// A server over `postgres_url` on an ephemeral port of 127.0.0.1 (not "localhost": gRPC
// binds each address localhost resolves to and succeeds if any one binds, so a server could
// hold [::1]:P while another test's process holds 127.0.0.1:P, and a client of localhost:P
// reach the wrong one; clients must dial 127.0.0.1 too) with `pool_size` connections and
// no background refit: a test's model versions are the fits it asks for, and its posteriors
// change only by its own labels and fits.
server::VerityServer::Options TestServerOptions(const std::string& postgres_url, int pool_size);

// (item, annotator, label).
using LabelTriple = std::tuple<std::string, std::string, int32_t>;

// One annotation per triple, in order.
std::vector<v1::Annotation> Annotations(const std::vector<LabelTriple>& labels);

// Submits `labels` to `project` on one stream; a test failure unless every one is accepted
// (call it in ASSERT_NO_FATAL_FAILURE to stop the test there).
void SubmitAllAccepted(client::VerityClient& client, const std::string& project,
                       const std::vector<LabelTriple>& labels);

}  // namespace verity::tests

#endif  // VERITY_TESTS_TEST_SERVER_H_
