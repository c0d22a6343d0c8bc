#include "tests/health_check.h"

#include <chrono>
#include <vector>

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/str_cat.h"

namespace verity::testing {

absl::StatusOr<Health> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                   const std::string& service) {
  std::string request;
  if (!service.empty()) {
    request.push_back(0x0a);
    request.push_back(static_cast<char>(service.size()));  // Names under 128 bytes.
    request += service;
  }
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  auto call =
      generic.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request_buffer, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  const bool finished = queue.Next(&tag, &ok);
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  if (!finished) return absl::InternalError("the health call never finished");
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::InternalError("unreadable health response");
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return Health::kUnknown;
  if (bytes.size() != 2 || bytes[0] != 0x08) {
    return absl::InternalError(absl::StrCat("unexpected health response of ", bytes.size(), " bytes"));
  }
  return static_cast<Health>(bytes[1]);
}

}  // namespace verity::testing
