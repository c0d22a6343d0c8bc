// gRPC adapter for verity.v1.IngestService: the bidirectional SubmitAnnotations stream.
//
// Per stream, the handler thread reads batches, validates them (rejected annotations are
// reported in the ack and never block the rest of the batch) and submits the valid ones to
// the group-commit pipeline; a writer thread sends the acks in batch order as their commits
// complete. At most kMaxBatchesInFlight batches per stream wait for commit; beyond that the
// handler stops reading, so gRPC flow control slows the client down. At most max_streams streams
// are open at once: each holds two threads, so a stream past the limit is refused at once with
// RESOURCE_EXHAUSTED (retryable) rather than taking threads from the others.
#ifndef VERITY_SERVER_RPC_INGEST_SERVICE_H_
#define VERITY_SERVER_RPC_INGEST_SERVICE_H_

#include <atomic>

#include "server/rpc/server_core.h"
#include "verity/v1/ingest.grpc.pb.h"

namespace verity::server {

class IngestServiceImpl final : public v1::IngestService::Service {
 public:
  static constexpr int kMaxBatchesInFlight = 16;

  // At most `max_streams` streams are open at once (> 0).
  IngestServiceImpl(ServerCore core, int max_streams) : core_(core), max_streams_(max_streams) {}

  grpc::Status SubmitAnnotations(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::BatchAck, v1::AnnotationBatch>* stream) override;

 private:
  ServerCore core_;
  const int max_streams_;
  std::atomic<int> open_streams_{0};
};

}  // namespace verity::server

#endif  // VERITY_SERVER_RPC_INGEST_SERVICE_H_
