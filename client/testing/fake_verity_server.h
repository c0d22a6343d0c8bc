// FakeVerityServer: an in-process gRPC server on an ephemeral localhost port
// serving in-memory stand-ins of the v1 ProjectService, IngestService,
// TruthService, ModelService, AssignmentService and KeyService, for tests of
// the client library and the CLI without PostgreSQL or the real server.
//
// Semantics are the API's, simplified: one live label per (item, annotator)
// with accepted / duplicate / revised counts; rejections for empty ids, item
// ids over 256 bytes and out-of-range labels; posteriors are the normalised label counts (a gold
// item is clamped to its gold class; an item without labels is uniform);
// annotator accuracy is the fraction of an annotator's labels equal to the
// item's MAP class, and the confusion matrix the row-normalised counts of
// (MAP class, label). A model version exists only after Fit() or a
// TrainModel call (FAILED_PRECONDITION without labels); every version has
// log_likelihood -12.5, 7 iterations, 1.25 ms and created_at 1700000100 s.
// SuggestItems ranks the open items (not gold, not labelled by the
// annotator, within the candidates) by 1 - confidence, p_correct 0.75, lease
// until 1700000700 s; SuggestAnnotators ranks the annotators who have not
// labelled the item by the fraction of their labels that agree with the MAP
// classes (0.5 without labels), p_correct the same.
//
// KeyService keeps keys in memory and authorizes nothing: key N (1, 2, ...)
// has key_id N as 16 hex digits, secret_key "vk_<key_id>_" followed by 64
// hex digits, created_at 1700000200 s; RevokeKey sets revoked_at 1700000300 s
// (NOT_FOUND for an unknown id); CreateKey refuses ROLE_UNSPECIFIED
// (INVALID_ARGUMENT). The `authorization` metadata of every KeyService call is
// recorded, to check what a client sends.
//
// Faults for IngestService can be scripted: failing acks, a broken stream,
// and acks held back until a number of batches are outstanding (to observe a
// client's pipelining).
//
// Thread safety: all methods are thread-safe; the services run on gRPC's
// threads and share one mutex-guarded state.

#ifndef VERITY_CLIENT_TESTING_FAKE_VERITY_SERVER_H_
#define VERITY_CLIENT_TESTING_FAKE_VERITY_SERVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace verity::client::testing {

struct FakeState;

class FakeVerityServer {
 public:
  // Starts the server on localhost with a port chosen by the system. Aborts
  // the test binary if the server cannot start.
  static std::unique_ptr<FakeVerityServer> Start();
  ~FakeVerityServer();

  FakeVerityServer(const FakeVerityServer&) = delete;
  FakeVerityServer& operator=(const FakeVerityServer&) = delete;

  // "localhost:PORT".
  std::string address() const;

  // The next `n` batches received, on any stream, are acked with
  // error_code `code` and `message`; nothing of them is written.
  void FailNextBatches(int n, absl::StatusCode code, std::string message);
  // The next stream opened ends with status `code` right after reading its
  // batch number `after_batches` + 1 (that batch is not applied).
  void BreakNextStream(int after_batches, absl::StatusCode code);
  // Acks are written only once `n` batches of a stream await their acks (or
  // the client half-closes). Default 1: ack each batch at once.
  void HoldAcksUntil(int n);

  // batch_id of every batch received, in arrival order, over all streams.
  std::vector<uint64_t> received_batch_ids() const;
  // The most batches of one stream that were read but not yet acked.
  int max_outstanding_batches() const;
  int streams_opened() const;
  // The `authorization` metadata of every KeyService call, in arrival order;
  // "" for a call without it.
  std::vector<std::string> key_call_authorizations() const;

  // Fits `project`: a new model version whose watermark is every label so
  // far, so labels_since_version becomes 0.
  void Fit(const std::string& project);
  // The live label of (item, annotator) in `project`, if any.
  std::optional<int32_t> LiveLabel(const std::string& project,
                                   const std::string& item,
                                   const std::string& annotator) const;

 private:
  FakeVerityServer();

  std::shared_ptr<FakeState> state_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace verity::client::testing

#endif  // VERITY_CLIENT_TESTING_FAKE_VERITY_SERVER_H_
