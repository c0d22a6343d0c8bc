// VerityClient: a small synchronous C++ client of the Verity v1 API over one
// grpc::Channel.
//
// Every unary method is one RPC (or, where noted, one RPC per chunk of a
// bounded size) with a deadline of ClientOptions::deadline per RPC; failures
// come back as absl::Status with the gRPC code and message kept
// (FromGrpcStatus). SubmitAnnotations streams labels over one bidirectional
// SubmitAnnotations stream with pipelining and retries (see SubmitOptions).
//
// Thread safety: a VerityClient is immutable after construction; all methods
// are const and may be called from any number of threads at once (gRPC stubs
// and channels are thread-safe). A SubmitAnnotations call runs on the calling
// thread, which it blocks, and calls its progress callback on that thread.

#ifndef VERITY_CLIENT_VERITY_CLIENT_H_
#define VERITY_CLIENT_VERITY_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "verity/v1/assignment.grpc.pb.h"
#include "verity/v1/ingest.grpc.pb.h"
#include "verity/v1/keys.grpc.pb.h"
#include "verity/v1/models.grpc.pb.h"
#include "verity/v1/projects.grpc.pb.h"
#include "verity/v1/truth.grpc.pb.h"

namespace verity::client {

// grpc::Status → absl::Status with the same code (the numeric values agree)
// and message. An OK status maps to OK.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The largest message the client accepts (a page of posteriors or profiles
// over many classes can exceed gRPC's 4 MiB default).
inline constexpr int kMaxReceiveMessageBytes = 256 << 20;

// The gRPC target of a --server value: one address, or several replicas of one database.
//
//  - One address ("host:port", a DNS name that may stand for several replicas) or a target
//    with its own scheme ("dns:///name:port", "ipv4:a:1,b:2", "unix:/path"): the target as
//    given; gRPC resolves it (every address of a DNS name, re-resolved when connections fail).
//  - Several, comma-separated ("a:1,b:2", "[::1]:1,[::1]:2"): every host is resolved now
//    (IP literals as written, names with getaddrinfo) and the addresses become one ipv4: (or,
//    when some host has only IPv6 addresses, ipv6:) target. `authority` and `tls_name` are
//    then the first address and its host: the :authority of every call and the name a TLS
//    server's certificate must carry (every replica presents a certificate for that name).
//
// INVALID_ARGUMENT naming the fault, e.g. `empty address in "a:1,,b:2"`, for an empty
// address, one without a port or with a port outside 1..65535 (a lone address's port too,
// when it has one), an IPv6 literal without its "]" (a lone address's too), or IPv4-only
// hosts mixed with IPv6-only ones; UNAVAILABLE when a host does not resolve.
struct ServerTarget {
  std::string target;
  std::string authority;  // empty: gRPC's default (the target itself)
  std::string tls_name;   // empty: the target's host
};
absl::StatusOr<ServerTarget> ResolveServerTarget(absl::string_view servers);

// The service config of every channel made here: the round_robin policy, which spreads calls
// over every address of the target that is connected and skips one whose connection failed,
// and a retry of unary calls that fail UNAVAILABLE (up to 4 attempts, 100 ms to 1 s apart), so
// that a call to a replica that died is resent to another. CreateProject and CreateKey are not
// retried (a retry after a lost response would answer ALREADY_EXISTS or make a second key);
// SubmitAnnotations streams resend their unacknowledged batches themselves (see
// VerityClient::SubmitAnnotations).
extern const char kReplicaServiceConfig[];

// An insecure channel to the target `address` (taken as given, not resolved like a list) that
// accepts messages up to kMaxReceiveMessageBytes, with kReplicaServiceConfig. Connection
// happens lazily on the first call.
std::shared_ptr<grpc::Channel> CreateInsecureChannel(
    const std::string& address);

// PEM files of a TLS connection; all empty: plaintext.
struct ChannelSecurity {
  std::string ca_file;    // CA bundle that signed the server's certificate (TLS on when set)
  std::string cert_file;  // client certificate chain, for servers run with --tls_client_ca
  std::string key_file;   // its private key
};

// Whether `api_key` may travel to `address` over the transport `security` gives: always with
// TLS (a CA named), with no key, to a loopback address (common/loopback.h; with a list of
// several, every one loopback) or a unix: socket,
// or when `allow_plaintext` (the caller opted in). Otherwise INVALID_ARGUMENT saying how to
// set up TLS: a plaintext key can be read by anyone on the path.
absl::Status CheckKeyTransport(const std::string& address, const std::string& api_key,
                               const ChannelSecurity& security, bool allow_plaintext);

// A channel to `address` (one address or several, see ResolveServerTarget) with TLS when
// `security` names a CA, else plaintext; same message limit and service config as
// CreateInsecureChannel. INVALID_ARGUMENT when a client certificate or key is given without
// the CA or without the other, when the CA file holds no PEM certificate (the message names
// --tls_ca and the file), or for a bad address list (the message starts "--server: ");
// UNAVAILABLE when a host of a list does not resolve; NOT_FOUND naming an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& address,
                                                             const ChannelSecurity& security);

struct ClientOptions {
  // Deadline of each unary RPC. Default 30 s.
  absl::Duration deadline = absl::Seconds(30);
  // API key sent with every call (`authorization: Bearer <key>`); empty = none (a server with
  // authentication off, the loopback default).
  std::string api_key;
};

// Sums of the BatchAck counts of a SubmitAnnotations call.
struct SubmitRejection {
  int64_t index = 0;   // Position of the annotation in the submitted span.
  std::string reason;  // The server's reason.
};

struct SubmitTotals {
  int64_t accepted = 0;
  int64_t duplicate = 0;
  int64_t revised = 0;
  int64_t stale = 0;  // Older (client_time) than the live label: history only.
  int64_t rejected = 0;
  // The first SubmitOptions::max_rejections rejections, in submission order.
  std::vector<SubmitRejection> rejections;
  // Streams reopened after a retryable failure.
  int64_t retries = 0;
};

struct SubmitProgress {
  int64_t acked = 0;  // Annotations whose batch has been acknowledged.
  int64_t total = 0;  // Annotations submitted in all.
};

struct SubmitOptions {
  // Annotations per AnnotationBatch, 1 to 10,000. Default 1,000.
  int batch_size = 1000;
  // Batches written ahead of their acks on the stream. Default 8.
  int max_unacked_batches = 8;
  // Streams reopened in a row without any batch getting through before the
  // call gives up with the last retryable error. Default 4 (5 attempts).
  int max_retries = 4;
  // Back-off before reopening: initial_backoff, doubled after each further
  // attempt without progress, at most max_backoff. Defaults 200 ms and 5 s.
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(5);
  // Deadline of each stream: ClientOptions::deadline plus the time to send
  // the annotations still unacknowledged at this rate (annotations/s).
  // Default 1,000/s, far below the server's target, so it only catches a
  // stream that hangs.
  double min_throughput = 1000;
  // Rejections kept in SubmitTotals::rejections. Default 10.
  int max_rejections = 10;
  // Called after each acknowledged batch. May be empty.
  std::function<void(const SubmitProgress&)> on_progress;
  // Sleeps for the back-off; empty = absl::SleepFor. Tests inject a recorder.
  std::function<void(absl::Duration)> sleep;
};

// Totals of a chunked AddItems or AddAnnotators.
struct AddItemsTotals {
  int64_t added = 0;
  int64_t updated = 0;
};

class VerityClient {
 public:
  // Items per AddItems RPC and item ids per GetPosteriors RPC (the API's
  // limit).
  static constexpr int kMaxItemsPerCall = 10000;
  // Encoded items or annotators per AddItems or AddAnnotators RPC, well under the server's
  // 16 MiB message limit (10,000 items of 512 features are about 20 MB).
  static constexpr size_t kMaxRequestBytes = 4 << 20;

  VerityClient(std::shared_ptr<grpc::ChannelInterface> channel,
               ClientOptions options);

  // ProjectService.
  absl::StatusOr<v1::Project> CreateProject(const v1::Project& project) const;
  absl::StatusOr<v1::Project> GetProject(absl::string_view project) const;
  absl::StatusOr<std::vector<v1::Project>> ListProjects() const;
  // Replaces the project's settings whole; returns the updated project.
  absl::StatusOr<v1::Project> UpdateProjectSettings(
      absl::string_view project, const v1::ProjectSettings& settings) const;
  // One AddItems RPC per kMaxItemsPerCall items, or fewer where they pass
  // kMaxRequestBytes encoded (features), in order. If one fails, the chunks
  // before it stay written; the error names the failed chunk's range.
  absl::StatusOr<AddItemsTotals> AddItems(
      absl::string_view project, absl::Span<const v1::Item> items) const;
  // AddAnnotators, chunked and annotated like AddItems.
  absl::StatusOr<AddItemsTotals> AddAnnotators(
      absl::string_view project,
      absl::Span<const v1::Annotator> annotators) const;

  // TruthService.
  // One GetPosteriors RPC per kMaxItemsPerCall ids, or per half as many while
  // the server answers RESOURCE_EXHAUSTED (posteriors past its response
  // limit: many classes); posteriors in `items` order. NOT_FOUND if an item
  // is unknown.
  absl::StatusOr<std::vector<v1::Posterior>> GetPosteriors(
      absl::string_view project, absl::Span<const std::string> items) const;
  // One page; an empty next_page_token marks the last.
  absl::StatusOr<v1::ListPosteriorsResponse> ListPosteriors(
      absl::string_view project, int32_t page_size,
      absl::string_view page_token) const;
  // `annotators` empty = every annotator of the project (read page by page);
  // else one call per 10,000 ids, or per half as many while the server answers
  // RESOURCE_EXHAUSTED (profiles past its response limit: many classes).
  absl::StatusOr<std::vector<v1::AnnotatorProfile>> GetAnnotatorProfiles(
      absl::string_view project,
      absl::Span<const std::string> annotators) const;

  // ModelService.
  absl::StatusOr<v1::GetModelStatusResponse> GetModelStatus(
      absl::string_view project) const;
  // Newest first; `limit` 0 = the server default (20).
  absl::StatusOr<std::vector<v1::ModelVersion>> ListModelVersions(
      absl::string_view project, int32_t limit) const;
  // Fits the project now and returns the new version. A fit can take
  // minutes (a neural method on a large project), so the call's deadline is
  // `deadline` rather than ClientOptions::deadline. FAILED_PRECONDITION when
  // the project has no labels.
  absl::StatusOr<v1::ModelVersion> TrainModel(absl::string_view project,
                                              absl::Duration deadline) const;

  // AssignmentService. `candidate_items` empty = every open item of the
  // project (the server takes at most 100,000 candidates). Each suggestion
  // leases its item to `annotator` (see assignment.proto).
  absl::StatusOr<std::vector<v1::ItemSuggestion>> SuggestItems(
      absl::string_view project, absl::string_view annotator, int32_t k,
      absl::Span<const std::string> candidate_items) const;
  // `candidates` empty = the project's annotators (the server refuses an empty list with
  // INVALID_ARGUMENT for a project of more than max(10,000, 655,360,000 / classes²) of them).
  // Does not lease.
  absl::StatusOr<std::vector<v1::AnnotatorSuggestion>> SuggestAnnotators(
      absl::string_view project, absl::string_view item, int32_t k,
      absl::Span<const std::string> candidates) const;

  // IngestService: streams `annotations` to `project` in batches of
  // options.batch_size over one SubmitAnnotations stream, keeping up to
  // options.max_unacked_batches batches unacknowledged, and returns the summed
  // acks.
  //
  // A batch acked with error_code UNAVAILABLE or RESOURCE_EXHAUSTED, or a
  // stream that breaks with either code, is retried on a new stream after a
  // back-off (on a channel to several replicas the new stream goes to one
  // that is connected, so a replica that died is left behind),
  // resending from the first batch not yet acknowledged in order
  // (resending is idempotent on the server; resending the later in-flight
  // batches too keeps revisions in submission order). Each batch is counted
  // once, from its first successful ack, so annotations committed before a
  // failure but never acked may come back as duplicates. Gives up with the
  // last such error after options.max_retries reopenings in a row without
  // progress. Any other batch error (INVALID_ARGUMENT, NOT_FOUND, ...) or
  // stream error fails the call with that code and a message naming the
  // batch; batches acked before it stay written. INVALID_ARGUMENT for bad
  // options. An empty span returns zero totals without contacting the server.
  absl::StatusOr<SubmitTotals> SubmitAnnotations(
      absl::string_view project, absl::Span<const v1::Annotation> annotations,
      const SubmitOptions& options) const;

  // KeyService (admin key valid for every project). The response of CreateKey holds the
  // key's text, which the server never shows again.
  absl::StatusOr<v1::CreateKeyResponse> CreateKey(const v1::CreateKeyRequest& request) const;
  absl::StatusOr<std::vector<v1::ApiKey>> ListKeys(bool include_revoked) const;
  absl::StatusOr<v1::ApiKey> RevokeKey(absl::string_view key_id) const;

  // What every RPC is sent with: its deadline and the API key.
  struct CallSettings {
    std::chrono::system_clock::time_point deadline;
    const std::string* api_key;
  };

 private:
  // The settings of an RPC starting now.
  CallSettings Call() const;

  const ClientOptions options_;
  std::unique_ptr<v1::ProjectService::Stub> projects_;
  std::unique_ptr<v1::IngestService::Stub> ingest_;
  std::unique_ptr<v1::TruthService::Stub> truth_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::AssignmentService::Stub> assignment_;
  std::unique_ptr<v1::KeyService::Stub> keys_;
};

}  // namespace verity::client

#endif  // VERITY_CLIENT_VERITY_CLIENT_H_
