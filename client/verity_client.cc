#include "client/verity_client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/loopback.h"

namespace verity::client {
namespace {

// A target that names its resolver ("dns:///name:port", "ipv4:...", "unix:/path"): kept as
// the caller wrote it, commas included.
bool HasOwnScheme(absl::string_view target) {
  for (absl::string_view scheme :
       {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:"}) {
    if (absl::StartsWith(target, scheme)) return true;
  }
  return false;
}

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};

// "host:port" or "[ipv6]:port", one address of the list `servers`.
absl::StatusOr<HostPort> SplitHostPort(absl::string_view address, absl::string_view servers) {
  absl::string_view host, port;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || !absl::StartsWith(address.substr(close + 1), ":")) {
      return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" in \"", servers,
                                                     "\": expected [IPV6]:PORT"));
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" in \"", servers,
                                                     "\" has no port: expected HOST:PORT"));
    }
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
    if (absl::StrContains(host, ':')) {
      return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" in \"", servers,
                                                     "\": write an IPv6 address as [IPV6]:PORT"));
    }
  }
  int number = 0;
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" in \"", servers, "\" has no host"));
  }
  if (!absl::SimpleAtoi(port, &number) || number < 1 || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" in \"", servers,
                                                   "\": port must be 1 to 65535"));
  }
  return HostPort{std::string(host), number};
}

void AddOnce(std::string address, std::vector<std::string>& addresses) {
  if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) {
    addresses.push_back(std::move(address));
  }
}

// Arguments of every channel made here: the message limit, the replica service config, and,
// for a resolved list of several addresses, the authority and TLS name of its first address.
grpc::ChannelArguments ChannelArgumentsFor(const ServerTarget& target, bool tls) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  arguments.SetServiceConfigJSON(kReplicaServiceConfig);
  // Retries are on by default in gRPC 1.51; said here so that a build with them off still
  // fails over. A service config published in DNS TXT records would replace ours.
  arguments.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  arguments.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  if (!target.authority.empty()) arguments.SetString(GRPC_ARG_DEFAULT_AUTHORITY, target.authority);
  if (tls && !target.tls_name.empty()) arguments.SetSslTargetNameOverride(target.tls_name);
  return arguments;
}

// Adds the API key, if any, to a call's metadata.
void AddApiKey(const std::string& api_key, grpc::ClientContext& context) {
  if (!api_key.empty()) context.AddMetadata("authorization", absl::StrCat("Bearer ", api_key));
}

// Calls a unary RPC of a generated stub with `call`'s deadline and key.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(
    Stub& stub,
    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                 Response*),
    const Request& request, const VerityClient::CallSettings& call) {
  grpc::ClientContext context;
  context.set_deadline(call.deadline);
  AddApiKey(*call.api_key, context);
  Response response;
  grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

// BatchAck.error_code as a status code; a value outside google.rpc.Code is
// UNKNOWN.
absl::StatusCode AckErrorCode(int32_t code) {
  if (code <= 0 ||
      code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::StatusCode::kUnknown;
  }
  return static_cast<absl::StatusCode>(code);
}

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kResourceExhausted;
}

// Adds context in front of a status message, keeping the code.
absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, status.message()));
}

// Where the AddItems or AddAnnotators calls of `rows` end: consecutive chunks of at most
// kMaxItemsPerCall rows and at most kMaxRequestBytes of encoded rows (ByteSizeLong plus the
// field's tag and length prefix), so that a call stays under the server's message limit
// however many features the rows carry. A row alone past kMaxRequestBytes is a chunk of its own.
template <typename Row>
std::vector<size_t> ChunkEnds(absl::Span<const Row> rows) {
  std::vector<size_t> ends;
  size_t count = 0, bytes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    // At most 1 byte of tag and 10 of length prefix in the request.
    const size_t row_bytes = rows[i].ByteSizeLong() + 11;
    if (count > 0 && (count == static_cast<size_t>(VerityClient::kMaxItemsPerCall) ||
                      bytes + row_bytes > VerityClient::kMaxRequestBytes)) {
      ends.push_back(i);
      count = bytes = 0;
    }
    ++count;
    bytes += row_bytes;
  }
  if (count > 0) ends.push_back(rows.size());
  return ends;
}

// The state of one SubmitAnnotations call across its streams. Batch b holds
// annotations [b * batch_size, min((b + 1) * batch_size, n)) and is sent with
// batch_id b + 1.
class AnnotationStreamer {
 public:
  AnnotationStreamer(v1::IngestService::Stub& stub, absl::string_view project,
                     absl::Span<const v1::Annotation> annotations,
                     const SubmitOptions& options, absl::Duration rpc_deadline,
                     const std::string& api_key)
      : stub_(stub),
        api_key_(api_key),
        project_(project),
        annotations_(annotations),
        options_(options),
        rpc_deadline_(rpc_deadline),
        batch_size_(static_cast<size_t>(options.batch_size)),
        num_batches_((annotations.size() + batch_size_ - 1) / batch_size_),
        counted_(num_batches_, false) {}

  absl::StatusOr<SubmitTotals> Run() {
    int failures_in_a_row = 0;
    absl::Duration backoff = options_.initial_backoff;
    while (first_unfinished_ < num_batches_) {
      const size_t first_before = first_unfinished_;
      absl::Status status = RunStream();
      if (status.ok()) break;
      if (!IsRetryable(status.code())) return status;
      if (first_unfinished_ > first_before) {
        failures_in_a_row = 0;
        backoff = options_.initial_backoff;
      }
      if (failures_in_a_row >= options_.max_retries) {
        return Annotate(status,
                        absl::StrCat("gave up after ", failures_in_a_row + 1,
                                     " attempts: "));
      }
      ++failures_in_a_row;
      ++totals_.retries;
      if (options_.sleep) {
        options_.sleep(backoff);
      } else {
        absl::SleepFor(backoff);
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    return std::move(totals_);
  }

 private:
  size_t BatchBegin(size_t b) const { return b * batch_size_; }
  size_t BatchEnd(size_t b) const {
    return std::min(annotations_.size(), (b + 1) * batch_size_);
  }
  std::string BatchName(size_t b) const {
    return absl::StrCat("batch ", b + 1, " of ", num_batches_, " (annotations ",
                        BatchBegin(b), " to ", BatchEnd(b) - 1, ")");
  }

  // Fills `batch` (reused across batches to keep its allocations) with
  // batch b.
  void FillBatch(size_t b, v1::AnnotationBatch& batch) const {
    batch.Clear();
    batch.set_batch_id(b + 1);
    // Every batch names the project, so a batch can open a new stream.
    batch.set_project(project_);
    batch.mutable_annotations()->Reserve(
        static_cast<int>(BatchEnd(b) - BatchBegin(b)));
    for (size_t i = BatchBegin(b); i < BatchEnd(b); ++i) {
      *batch.add_annotations() = annotations_[i];
    }
  }

  void Count(size_t b, const v1::BatchAck& ack) {
    if (counted_[b]) return;
    counted_[b] = true;
    totals_.accepted += ack.accepted();
    totals_.duplicate += ack.duplicate();
    totals_.revised += ack.revised();
    totals_.stale += ack.stale();
    totals_.rejected += ack.rejected();
    for (const v1::Rejection& rejection : ack.rejections()) {
      if (static_cast<int>(totals_.rejections.size()) >=
          options_.max_rejections) {
        break;
      }
      totals_.rejections.push_back(
          {static_cast<int64_t>(BatchBegin(b)) + rejection.index(),
           rejection.reason()});
    }
    progress_.acked += static_cast<int64_t>(BatchEnd(b) - BatchBegin(b));
    progress_.total = static_cast<int64_t>(annotations_.size());
    if (options_.on_progress) options_.on_progress(progress_);
  }

  // Sends batches from first_unfinished_ on over one new stream. OK once every
  // batch is acknowledged; otherwise the error that ended the stream, with
  // first_unfinished_ at the first batch to resend.
  absl::Status RunStream() {
    const double unacked = static_cast<double>(annotations_.size() -
                                               BatchBegin(first_unfinished_));
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + rpc_deadline_ +
                           absl::Seconds(unacked / options_.min_throughput)));
    AddApiKey(api_key_, context);
    std::unique_ptr<grpc::ClientReaderWriter<v1::AnnotationBatch, v1::BatchAck>>
        stream = stub_.SubmitAnnotations(&context);

    std::deque<size_t> in_flight;
    size_t next = first_unfinished_;
    // False once a write failed or a batch must be resent: no more writes.
    bool writing = true;
    bool writes_done = false;
    // The first retryable batch error of this stream.
    absl::Status retry_status;
    v1::AnnotationBatch batch;
    v1::BatchAck ack;
    while (true) {
      if (writing && next < num_batches_ &&
          static_cast<int>(in_flight.size()) < options_.max_unacked_batches) {
        FillBatch(next, batch);
        if (stream->Write(batch)) {
          in_flight.push_back(next++);
        } else {
          writing = false;  // The stream is broken; Finish says why.
        }
        continue;
      }
      if (!writes_done && (!writing || next == num_batches_)) {
        stream->WritesDone();
        writes_done = true;
      }
      if (in_flight.empty() || !stream->Read(&ack)) break;
      const size_t b = in_flight.front();
      in_flight.pop_front();
      if (ack.batch_id() != b + 1) {
        context.TryCancel();
        stream->Finish().IgnoreError();
        return absl::InternalError(
            absl::StrCat("SubmitAnnotations: got the ack of batch id ",
                         ack.batch_id(), " while expecting batch id ", b + 1));
      }
      if (ack.error_code() != 0) {
        absl::Status batch_status(
            AckErrorCode(ack.error_code()),
            absl::StrCat(BatchName(b), ": ", ack.error_message()));
        if (!IsRetryable(batch_status.code())) {
          context.TryCancel();
          stream->Finish().IgnoreError();
          return batch_status;
        }
        if (retry_status.ok()) retry_status = batch_status;
        writing = false;
        continue;
      }
      Count(b, ack);
      // Acks come in order, so without an earlier failure b is the first
      // unfinished batch.
      if (retry_status.ok()) first_unfinished_ = b + 1;
    }
    const grpc::Status finish = stream->Finish();
    if (!retry_status.ok()) return retry_status;
    // Every batch acked means every batch is durable, whatever ended the
    // stream afterwards.
    if (first_unfinished_ == num_batches_) return absl::OkStatus();
    if (!finish.ok()) {
      return Annotate(FromGrpcStatus(finish),
                      absl::StrCat("SubmitAnnotations stream (at ",
                                   BatchName(first_unfinished_), "): "));
    }
    return absl::InternalError(
        absl::StrCat("SubmitAnnotations: the server ended the stream without "
                     "acknowledging ",
                     BatchName(first_unfinished_)));
  }

  v1::IngestService::Stub& stub_;
  const std::string& api_key_;
  const std::string project_;
  const absl::Span<const v1::Annotation> annotations_;
  const SubmitOptions& options_;
  const absl::Duration rpc_deadline_;
  const size_t batch_size_;
  const size_t num_batches_;
  // Batches before first_unfinished_ are acknowledged; counted_[b]: batch b's
  // ack is in totals_ (a batch after a failed one can be counted before it is
  // resent).
  size_t first_unfinished_ = 0;
  std::vector<bool> counted_;
  SubmitTotals totals_;
  SubmitProgress progress_;
};

// Calls `call(begin, end)` on consecutive ranges of `count` ids, each of up to `max_chunk`;
// while the server answers RESOURCE_EXHAUSTED (the answer would pass its response limit:
// many classes), the range is halved and asked again. The first other error is returned.
absl::Status CallInChunksThatFit(size_t count, size_t max_chunk,
                                 const std::function<absl::Status(size_t, size_t)>& call) {
  size_t chunk = max_chunk;
  for (size_t begin = 0; begin < count;) {
    const size_t end = std::min(count, begin + chunk);
    const absl::Status status = call(begin, end);
    if (absl::IsResourceExhausted(status) && end - begin > 1) {
      chunk = (end - begin) / 2;
      continue;
    }
    if (!status.ok()) return status;
    begin = end;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

const char kReplicaServiceConfig[] = R"json({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [
    {
      "name": [
        {"service": "verity.v1.ProjectService"},
        {"service": "verity.v1.TruthService"},
        {"service": "verity.v1.ModelService"},
        {"service": "verity.v1.AssignmentService"},
        {"service": "verity.v1.KeyService"}
      ],
      "retryPolicy": {
        "maxAttempts": 4,
        "initialBackoff": "0.1s",
        "maxBackoff": "1s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE"]
      }
    },
    {
      "name": [
        {"service": "verity.v1.ProjectService", "method": "CreateProject"},
        {"service": "verity.v1.KeyService", "method": "CreateKey"}
      ]
    }
  ]
})json";

absl::StatusOr<ServerTarget> ResolveServerTarget(absl::string_view servers) {
  ServerTarget result;
  if (HasOwnScheme(servers)) {
    result.target = std::string(servers);
    return result;
  }
  if (!absl::StrContains(servers, ',')) {
    // One address, kept for gRPC to resolve; but gRPC reads a port past 65535 modulo 65536
    // and would connect to another port (and send it the key), so its port is checked here.
    // An IPv6 literal missing its "]" is refused here too (gRPC: "DNS resolution failed").
    if (absl::StartsWith(servers, "[") && !absl::StrContains(servers, "]")) {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", servers, "\": expected [IPV6]:PORT"));
    }
    // The port: after "]:" of a bracketed IPv6 literal, else after the one colon of
    // HOST:PORT (a bare IPv6 literal, with several colons, has none). One that starts with a
    // digit must be all digits: gRPC reads "50051x" as 50051.
    absl::string_view port;
    if (absl::StartsWith(servers, "[")) {
      const size_t close = servers.find("]:");
      if (close != absl::string_view::npos) port = servers.substr(close + 2);
    } else if (std::count(servers.begin(), servers.end(), ':') == 1) {
      port = servers.substr(servers.find(':') + 1);
    }
    int number = 0;
    if (!port.empty() && absl::ascii_isdigit(port.front()) &&
        (!absl::SimpleAtoi(port, &number) || number < 1 || number > 65535)) {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", servers, "\": port must be 1 to 65535"));
    }
    result.target = std::string(servers);
    return result;
  }
  // Addresses in the order given, without repeats, by family.
  std::vector<std::string> ipv4, ipv6;
  bool every_host_has_ipv4 = true;
  bool every_host_has_ipv6 = true;
  // Every address well-formed before any is resolved.
  std::vector<HostPort> host_ports;
  for (absl::string_view part : absl::StrSplit(servers, ',')) {
    const absl::string_view address = absl::StripAsciiWhitespace(part);
    if (address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty address in \"", servers, "\""));
    }
    absl::StatusOr<HostPort> host_port = SplitHostPort(address, servers);
    if (!host_port.ok()) return host_port.status();
    if (result.authority.empty()) {
      result.authority = std::string(address);
      result.tls_name = host_port->host;
    }
    host_ports.push_back(*std::move(host_port));
  }
  for (const HostPort& host_port : host_ports) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(host_port.port);
    const int error = getaddrinfo(host_port.host.c_str(), port.c_str(), &hints, &found);
    if (error != 0) {
      return absl::UnavailableError(absl::StrCat("cannot resolve \"", host_port.host,
                                                 "\" of \"", servers,
                                                 "\": ", gai_strerror(error)));
    }
    bool has_ipv4 = false, has_ipv6 = false;
    for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char text[INET6_ADDRSTRLEN] = {};
      if (a->ai_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                  sizeof(text));
        AddOnce(absl::StrCat(text, ":", port), ipv4);
        has_ipv4 = true;
      } else if (a->ai_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                  sizeof(text));
        AddOnce(absl::StrCat("[", text, "]:", port), ipv6);
        has_ipv6 = true;
      }
    }
    freeaddrinfo(found);
    if (!has_ipv4 && !has_ipv6) {
      return absl::UnavailableError(absl::StrCat("\"", host_port.host, "\" of \"", servers,
                                                 "\" has no IPv4 or IPv6 address"));
    }
    every_host_has_ipv4 = every_host_has_ipv4 && has_ipv4;
    every_host_has_ipv6 = every_host_has_ipv6 && has_ipv6;
  }
  // One resolver scheme per target: IPv4 when every host has an IPv4 address.
  if (every_host_has_ipv4) {
    result.target = absl::StrCat("ipv4:", absl::StrJoin(ipv4, ","));
  } else if (every_host_has_ipv6) {
    result.target = absl::StrCat("ipv6:", absl::StrJoin(ipv6, ","));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", servers, "\" mixes hosts with only IPv4 addresses and hosts with only IPv6 "
        "addresses; list hosts of one family"));
  }
  return result;
}

std::shared_ptr<grpc::Channel> CreateInsecureChannel(
    const std::string& address) {
  ServerTarget target;
  target.target = address;
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   ChannelArgumentsFor(target, /*tls=*/false));
}

absl::Status CheckKeyTransport(const std::string& address, const std::string& api_key,
                               const ChannelSecurity& security, bool allow_plaintext) {
  if (api_key.empty() || !security.ca_file.empty() || allow_plaintext) return absl::OkStatus();
  absl::string_view host = address;
  if (absl::StartsWith(host, "unix:") || absl::StartsWith(host, "unix-abstract:")) {
    return absl::OkStatus();
  }
  for (absl::string_view scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&host, scheme)) break;
  }
  bool every_loopback = true;
  for (absl::string_view one : absl::StrSplit(host, ',')) {
    every_loopback = every_loopback && IsLoopbackAddress(absl::StripAsciiWhitespace(one));
  }
  if (every_loopback) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "refusing to send the API key in plaintext to ", address,
      ", which is not a loopback address: connect with TLS by giving --tls_ca=FILE (the PEM "
      "CA that signed the server's certificate; the server runs with --tls_cert and "
      "--tls_key, see docs/SECURITY.md), or pass --allow_plaintext_key if the network path "
      "is one you trust"));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& address,
                                                             const ChannelSecurity& security) {
  if (security.ca_file.empty() &&
      (!security.cert_file.empty() || !security.key_file.empty())) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key need --tls_ca");
  }
  if (!security.ca_file.empty() && security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert and --tls_key must be given together");
  }
  absl::StatusOr<ServerTarget> target = ResolveServerTarget(address);
  if (!target.ok()) return Annotate(target.status(), "--server: ");
  if (security.ca_file.empty()) {
    return grpc::CreateCustomChannel(target->target, grpc::InsecureChannelCredentials(),
                                     ChannelArgumentsFor(*target, /*tls=*/false));
  }
  auto read = [](const std::string& path) -> absl::StatusOr<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> ca = read(security.ca_file);
  if (!ca.ok()) return ca.status();
  // gRPC would only fail each call with "UNAVAILABLE: empty address list", naming neither.
  if (!absl::StrContains(*ca, "-----BEGIN CERTIFICATE-----")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_ca=", security.ca_file, ": not a PEM CA certificate (no \"-----BEGIN "
        "CERTIFICATE-----\" line)"));
  }
  ssl.pem_root_certs = *ca;
  if (!security.cert_file.empty()) {
    absl::StatusOr<std::string> cert = read(security.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = read(security.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::CreateCustomChannel(target->target, grpc::SslCredentials(ssl),
                                   ChannelArgumentsFor(*target, /*tls=*/true));
}

VerityClient::VerityClient(std::shared_ptr<grpc::ChannelInterface> channel,
                           ClientOptions options)
    : options_(std::move(options)),
      projects_(v1::ProjectService::NewStub(channel)),
      ingest_(v1::IngestService::NewStub(channel)),
      truth_(v1::TruthService::NewStub(channel)),
      models_(v1::ModelService::NewStub(channel)),
      assignment_(v1::AssignmentService::NewStub(channel)),
      keys_(v1::KeyService::NewStub(channel)) {}

VerityClient::CallSettings VerityClient::Call() const {
  return CallSettings{absl::ToChronoTime(absl::Now() + options_.deadline), &options_.api_key};
}

absl::StatusOr<v1::Project> VerityClient::CreateProject(
    const v1::Project& project) const {
  v1::CreateProjectRequest request;
  *request.mutable_project() = project;
  absl::StatusOr<v1::CreateProjectResponse> response =
      CallUnary(*projects_, &v1::ProjectService::Stub::CreateProject, request,
                Call());
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_project());
}

absl::StatusOr<v1::Project> VerityClient::GetProject(
    absl::string_view project) const {
  v1::GetProjectRequest request;
  request.set_project(std::string(project));
  absl::StatusOr<v1::GetProjectResponse> response = CallUnary(
      *projects_, &v1::ProjectService::Stub::GetProject, request, Call());
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_project());
}

absl::StatusOr<std::vector<v1::Project>> VerityClient::ListProjects() const {
  std::vector<v1::Project> projects;
  v1::ListProjectsRequest request;
  do {
    absl::StatusOr<v1::ListProjectsResponse> response =
        CallUnary(*projects_, &v1::ProjectService::Stub::ListProjects, request, Call());
    if (!response.ok()) return response.status();
    for (v1::Project& project : *response->mutable_projects()) {
      projects.push_back(std::move(project));
    }
    request.set_page_token(response->next_page_token());
  } while (!request.page_token().empty());
  return projects;
}

absl::StatusOr<v1::Project> VerityClient::UpdateProjectSettings(
    absl::string_view project, const v1::ProjectSettings& settings) const {
  v1::UpdateProjectSettingsRequest request;
  request.set_project(std::string(project));
  *request.mutable_settings() = settings;
  absl::StatusOr<v1::UpdateProjectSettingsResponse> response =
      CallUnary(*projects_, &v1::ProjectService::Stub::UpdateProjectSettings,
                request, Call());
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_project());
}

absl::StatusOr<AddItemsTotals> VerityClient::AddItems(
    absl::string_view project, absl::Span<const v1::Item> items) const {
  AddItemsTotals totals;
  const std::vector<size_t> ends = ChunkEnds(items);
  for (size_t chunk = 0, begin = 0; chunk < ends.size(); begin = ends[chunk++]) {
    const size_t end = ends[chunk];
    v1::AddItemsRequest request;
    request.set_project(std::string(project));
    request.mutable_items()->Reserve(static_cast<int>(end - begin));
    for (size_t i = begin; i < end; ++i) *request.add_items() = items[i];
    absl::StatusOr<v1::AddItemsResponse> response = CallUnary(
        *projects_, &v1::ProjectService::Stub::AddItems, request, Call());
    if (!response.ok()) {
      if (ends.size() == 1) return response.status();
      return Annotate(
          response.status(),
          absl::StrCat("AddItems of items ", begin, " to ", end - 1, " (the ",
                       begin, " items before were written): "));
    }
    totals.added += response->added();
    totals.updated += response->updated();
  }
  return totals;
}

absl::StatusOr<AddItemsTotals> VerityClient::AddAnnotators(
    absl::string_view project,
    absl::Span<const v1::Annotator> annotators) const {
  AddItemsTotals totals;
  const std::vector<size_t> ends = ChunkEnds(annotators);
  for (size_t chunk = 0, begin = 0; chunk < ends.size(); begin = ends[chunk++]) {
    const size_t end = ends[chunk];
    v1::AddAnnotatorsRequest request;
    request.set_project(std::string(project));
    request.mutable_annotators()->Reserve(static_cast<int>(end - begin));
    for (size_t i = begin; i < end; ++i) {
      *request.add_annotators() = annotators[i];
    }
    absl::StatusOr<v1::AddAnnotatorsResponse> response =
        CallUnary(*projects_, &v1::ProjectService::Stub::AddAnnotators,
                  request, Call());
    if (!response.ok()) {
      if (ends.size() == 1) return response.status();
      return Annotate(response.status(),
                      absl::StrCat("AddAnnotators of annotators ", begin,
                                   " to ", end - 1, " (the ", begin,
                                   " annotators before were written): "));
    }
    totals.added += response->added();
    totals.updated += response->updated();
  }
  return totals;
}

absl::StatusOr<std::vector<v1::Posterior>> VerityClient::GetPosteriors(
    absl::string_view project, absl::Span<const std::string> items) const {
  std::vector<v1::Posterior> posteriors;
  posteriors.reserve(items.size());
  absl::Status status = CallInChunksThatFit(
      items.size(), kMaxItemsPerCall, [&](size_t begin, size_t end) -> absl::Status {
        v1::GetPosteriorsRequest request;
        request.set_project(std::string(project));
        for (size_t i = begin; i < end; ++i) request.add_items(items[i]);
        absl::StatusOr<v1::GetPosteriorsResponse> response = CallUnary(
            *truth_, &v1::TruthService::Stub::GetPosteriors, request, Call());
        if (!response.ok()) return response.status();
        for (v1::Posterior& posterior : *response->mutable_posteriors()) {
          posteriors.push_back(std::move(posterior));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return posteriors;
}

absl::StatusOr<v1::ListPosteriorsResponse> VerityClient::ListPosteriors(
    absl::string_view project, int32_t page_size,
    absl::string_view page_token) const {
  v1::ListPosteriorsRequest request;
  request.set_project(std::string(project));
  request.set_page_size(page_size);
  request.set_page_token(std::string(page_token));
  return CallUnary(*truth_, &v1::TruthService::Stub::ListPosteriors, request,
                   Call());
}

absl::StatusOr<std::vector<v1::AnnotatorProfile>>
VerityClient::GetAnnotatorProfiles(
    absl::string_view project, absl::Span<const std::string> annotators) const {
  std::vector<v1::AnnotatorProfile> profiles;
  if (!annotators.empty()) {
    absl::Status status = CallInChunksThatFit(
        annotators.size(), kMaxItemsPerCall, [&](size_t begin, size_t end) -> absl::Status {
          v1::GetAnnotatorProfilesRequest request;
          request.set_project(std::string(project));
          for (size_t i = begin; i < end; ++i) request.add_annotators(annotators[i]);
          absl::StatusOr<v1::GetAnnotatorProfilesResponse> response = CallUnary(
              *truth_, &v1::TruthService::Stub::GetAnnotatorProfiles, request, Call());
          if (!response.ok()) return response.status();
          for (v1::AnnotatorProfile& profile : *response->mutable_profiles()) {
            profiles.push_back(std::move(profile));
          }
          return absl::OkStatus();
        });
    if (!status.ok()) return status;
    return profiles;
  }
  // Every annotator, a page at a time.
  v1::GetAnnotatorProfilesRequest request;
  request.set_project(std::string(project));
  do {
    absl::StatusOr<v1::GetAnnotatorProfilesResponse> response =
        CallUnary(*truth_, &v1::TruthService::Stub::GetAnnotatorProfiles, request,
                  Call());
    if (!response.ok()) return response.status();
    for (v1::AnnotatorProfile& profile : *response->mutable_profiles()) {
      profiles.push_back(std::move(profile));
    }
    request.set_page_token(response->next_page_token());
  } while (!request.page_token().empty());
  return profiles;
}

absl::StatusOr<v1::GetModelStatusResponse> VerityClient::GetModelStatus(
    absl::string_view project) const {
  v1::GetModelStatusRequest request;
  request.set_project(std::string(project));
  return CallUnary(*models_, &v1::ModelService::Stub::GetModelStatus, request,
                   Call());
}

absl::StatusOr<std::vector<v1::ModelVersion>> VerityClient::ListModelVersions(
    absl::string_view project, int32_t limit) const {
  v1::ListModelVersionsRequest request;
  request.set_project(std::string(project));
  request.set_limit(limit);
  absl::StatusOr<v1::ListModelVersionsResponse> response =
      CallUnary(*models_, &v1::ModelService::Stub::ListModelVersions, request,
                Call());
  if (!response.ok()) return response.status();
  return std::vector<v1::ModelVersion>(response->versions().begin(),
                                       response->versions().end());
}

absl::StatusOr<v1::ModelVersion> VerityClient::TrainModel(
    absl::string_view project, absl::Duration deadline) const {
  v1::TrainModelRequest request;
  request.set_project(std::string(project));
  absl::StatusOr<v1::TrainModelResponse> response =
      CallUnary(*models_, &v1::ModelService::Stub::TrainModel, request,
                CallSettings{absl::ToChronoTime(absl::Now() + deadline), &options_.api_key});
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_version());
}

absl::StatusOr<std::vector<v1::ItemSuggestion>> VerityClient::SuggestItems(
    absl::string_view project, absl::string_view annotator, int32_t k,
    absl::Span<const std::string> candidate_items) const {
  v1::SuggestItemsRequest request;
  request.set_project(std::string(project));
  request.set_annotator(std::string(annotator));
  request.set_k(k);
  request.mutable_candidate_items()->Reserve(
      static_cast<int>(candidate_items.size()));
  for (const std::string& item : candidate_items) {
    request.add_candidate_items(item);
  }
  absl::StatusOr<v1::SuggestItemsResponse> response =
      CallUnary(*assignment_, &v1::AssignmentService::Stub::SuggestItems,
                request, Call());
  if (!response.ok()) return response.status();
  return std::vector<v1::ItemSuggestion>(
      std::make_move_iterator(response->mutable_suggestions()->begin()),
      std::make_move_iterator(response->mutable_suggestions()->end()));
}

absl::StatusOr<std::vector<v1::AnnotatorSuggestion>>
VerityClient::SuggestAnnotators(absl::string_view project,
                                absl::string_view item, int32_t k,
                                absl::Span<const std::string> candidates) const {
  v1::SuggestAnnotatorsRequest request;
  request.set_project(std::string(project));
  request.set_item(std::string(item));
  request.set_k(k);
  for (const std::string& annotator : candidates) {
    request.add_candidates(annotator);
  }
  absl::StatusOr<v1::SuggestAnnotatorsResponse> response =
      CallUnary(*assignment_, &v1::AssignmentService::Stub::SuggestAnnotators,
                request, Call());
  if (!response.ok()) return response.status();
  return std::vector<v1::AnnotatorSuggestion>(
      std::make_move_iterator(response->mutable_suggestions()->begin()),
      std::make_move_iterator(response->mutable_suggestions()->end()));
}

absl::StatusOr<SubmitTotals> VerityClient::SubmitAnnotations(
    absl::string_view project, absl::Span<const v1::Annotation> annotations,
    const SubmitOptions& options) const {
  if (options.batch_size < 1 || options.batch_size > kMaxItemsPerCall) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_size ", options.batch_size, " is outside [1, 10000]"));
  }
  if (options.max_unacked_batches < 1) {
    return absl::InvalidArgumentError("max_unacked_batches must be positive");
  }
  if (options.max_retries < 0 || options.max_rejections < 0) {
    return absl::InvalidArgumentError(
        "max_retries and max_rejections must not be negative");
  }
  if (!(options.min_throughput > 0)) {
    return absl::InvalidArgumentError("min_throughput must be positive");
  }
  if (annotations.empty()) return SubmitTotals();
  AnnotationStreamer streamer(*ingest_, project, annotations, options,
                              options_.deadline, options_.api_key);
  return streamer.Run();
}

absl::StatusOr<v1::CreateKeyResponse> VerityClient::CreateKey(
    const v1::CreateKeyRequest& request) const {
  return CallUnary(*keys_, &v1::KeyService::Stub::CreateKey, request, Call());
}

absl::StatusOr<std::vector<v1::ApiKey>> VerityClient::ListKeys(bool include_revoked) const {
  v1::ListKeysRequest request;
  request.set_include_revoked(include_revoked);
  absl::StatusOr<v1::ListKeysResponse> response =
      CallUnary(*keys_, &v1::KeyService::Stub::ListKeys, request, Call());
  if (!response.ok()) return response.status();
  return std::vector<v1::ApiKey>(response->keys().begin(), response->keys().end());
}

absl::StatusOr<v1::ApiKey> VerityClient::RevokeKey(absl::string_view key_id) const {
  v1::RevokeKeyRequest request;
  request.set_key_id(std::string(key_id));
  absl::StatusOr<v1::RevokeKeyResponse> response =
      CallUnary(*keys_, &v1::KeyService::Stub::RevokeKey, request, Call());
  if (!response.ok()) return response.status();
  return response->key();
}

}  // namespace verity::client
