// gRPC adapter for verity.v1.IngestService: the bidirectional SubmitAnnotations stream.
//
// Per stream, the handler thread reads batches, validates them (rejected annotations are
// reported in the ack and never block the rest of the batch) and submits the valid ones to
// the group-commit pipeline; a writer thread sends the acks in batch order as their commits
// complete. At most kMaxBatchesInFlight batches per stream wait for commit; beyond that the
// handler stops reading, so gRPC flow control slows the client down. At most max_streams streams
// are open at once: each holds two threads, so a stream past the limit is refused at once with
// RESOURCE_EXHAUSTED (retryable) rather than taking threads from the others; so is a stream
// past max_streams_per_key open streams of one API key. A batch that would take its project
// past a limit (ProjectLimits) is refused whole, RESOURCE_EXHAUSTED in its ack; the check sees
// the project as the batch is read, so batches in flight on other streams at that moment may
// pass a limit by at most their own size.
#ifndef VERITY_SERVER_RPC_INGEST_SERVICE_H_
#define VERITY_SERVER_RPC_INGEST_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

#include "server/rpc/server_core.h"
#include "verity/v1/ingest.grpc.pb.h"

namespace verity::server {

class IngestServiceImpl final : public v1::IngestService::Service {
 public:
  static constexpr int kMaxBatchesInFlight = 16;

  // At most `max_streams` streams are open at once, `max_streams_per_key` of one API key (> 0).
  IngestServiceImpl(ServerCore core, int max_streams, int max_streams_per_key)
      : core_(core), max_streams_(max_streams), max_streams_per_key_(max_streams_per_key) {}

  grpc::Status SubmitAnnotations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override;

 private:
  ServerCore core_;
  const int max_streams_;
  const int max_streams_per_key_;
  std::atomic<int> open_streams_{0};
  absl::Mutex key_streams_mu_;
  absl::flat_hash_map<std::string, int> open_streams_by_key_ ABSL_GUARDED_BY(key_streams_mu_);
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_INGEST_SERVICE_H_
