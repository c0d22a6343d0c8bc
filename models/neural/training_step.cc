#include "models/neural/training_step.h"

#include <atomic>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef VERITY_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace verity::models::neural {
namespace {

// Eager full-size steps before the capture, on the capture stream: they create what a first
// step creates lazily (cuBLAS handles and workspaces, the caching allocator's blocks), which
// must not happen inside a capture.
constexpr int kWarmupSteps = 3;

// Set by a failed capture: every later step of the process runs eagerly.
std::atomic<bool> graphs_disabled{false};
std::atomic<int64_t> graph_replays{0};

}  // namespace

int64_t TrainingStep::GraphReplays() { return graph_replays.load(); }

#ifdef VERITY_CUDA_GRAPHS
namespace {

// While alive, LibTorch raises on any operation that waits for the device.
class SyncCheckRaising {
 public:
  SyncCheckRaising() : previous_(c10::cuda::warning_state().get_sync_debug_mode()) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  }
  ~SyncCheckRaising() { c10::cuda::warning_state().set_sync_debug_mode(previous_); }
  SyncCheckRaising(const SyncCheckRaising&) = delete;
  SyncCheckRaising& operator=(const SyncCheckRaising&) = delete;

 private:
  const c10::cuda::SyncDebugMode previous_;
};

}  // namespace

struct TrainingStep::Graph {
  explicit Graph(c10::DeviceIndex device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAGraph graph;
  torch::Tensor rows;  // the input the graph was captured with
  bool captured = false;
  bool failed = false;
};
bool CudaGraphsCompiledIn() { return true; }
#else
struct TrainingStep::Graph {};
bool CudaGraphsCompiledIn() { return false; }
#endif

TrainingStep::TrainingStep(FlatAmsGrad& optimizer, LossFunction loss, int64_t batch_size,
                           bool use_graph)
    : optimizer_(optimizer),
      loss_(std::move(loss)),
      batch_size_(batch_size),
      use_graph_(use_graph && CudaGraphsCompiledIn() && optimizer.on_device_step() &&
                 !graphs_disabled.load()) {}

TrainingStep::~TrainingStep() = default;

void TrainingStep::RunEagerly(const torch::Tensor& rows) {
  optimizer_.ZeroGrad();
  loss_(rows).backward();
  optimizer_.Step();
}

bool TrainingStep::replaying() const {
#ifdef VERITY_CUDA_GRAPHS
  return graph_ != nullptr && graph_->captured;
#else
  return false;
#endif
}

void TrainingStep::Run(const torch::Tensor& rows) {
#ifdef VERITY_CUDA_GRAPHS
  if (use_graph_ && rows.is_cuda() && rows.size(0) == batch_size_ &&
      (graph_ == nullptr || !graph_->failed)) {
    if (graph_ == nullptr) graph_ = std::make_unique<Graph>(rows.device().index());
    Graph& g = *graph_;
    if (g.captured) {
      g.rows.copy_(rows);
      g.graph.replay();
      graph_replays.fetch_add(1);
      return;
    }
    // The side stream starts after everything queued on the default stream so far, and the
    // default stream continues after it: a device-wide wait, a few times per fit.
    torch::cuda::synchronize(rows.device().index());
    if (eager_full_batches_ < kWarmupSteps) {
      ++eager_full_batches_;
      // The warm-up steps run with LibTorch's synchronisation check raising: a loss that waits
      // for the device (item(), nonzero(), a copy to the host) cannot be captured. Such a
      // step throws before its backward pass, so nothing was updated: it reruns eagerly, and
      // this loop stays eager. (The check is process-wide for the step's duration; only
      // training uses CUDA in this process, one fit at a time.)
      bool synchronises = false;
      {
        c10::cuda::CUDAStreamGuard guard(g.stream);
        SyncCheckRaising sync_check;
        try {
          RunEagerly(rows);
        } catch (const c10::Error& e) {
          if (std::string(e.what()).find("synchronizing CUDA operation") == std::string::npos) {
            throw;
          }
          synchronises = true;
        }
      }
      torch::cuda::synchronize(rows.device().index());
      if (synchronises) {
        g.failed = true;
        std::fprintf(stderr, "event=cuda_graph_skipped reason=\"the loss synchronises with the "
                             "device\" action=eager\n");
        RunEagerly(rows);
      }
      return;
    }
    g.rows = rows.clone();
    try {
      c10::cuda::CUDAStreamGuard guard(g.stream);
      g.graph.capture_begin();
      try {
        RunEagerly(g.rows);
      } catch (...) {
        // End the capture, or the stream (and, in global capture mode, the whole process's
        // CUDA work) stays in capture. The graph is invalid and is dropped with `g`.
        try {
          g.graph.capture_end();
        } catch (...) {
        }
        (void)cudaGetLastError();
        throw;
      }
      g.graph.capture_end();
    } catch (const std::exception& e) {
      // The parameters may have been touched halfway: fail this fit (the caller turns the
      // exception into an INTERNAL status) and run every later step of the process eagerly.
      // LibTorch's CUDA random generator may be left in capture mode (torch 2.11 leaves it so
      // when the capture is invalidated), which breaks later random ops on CUDA: restart the
      // process. The warm-up check above catches the usual cause before any capture.
      g.failed = true;
      graphs_disabled.store(true);
      std::fprintf(stderr, "event=cuda_graph_capture_failed action=eager_from_now_on\n");
      throw std::runtime_error(std::string("capturing a training step in a CUDA graph failed "
                                           "(later fits run eagerly; neural.cuda_graphs=false "
                                           "turns graphs off): ") +
                               e.what());
    }
    torch::cuda::synchronize(rows.device().index());
    g.captured = true;
    g.graph.replay();
    graph_replays.fetch_add(1);
    return;
  }
#endif
  RunEagerly(rows);
}

}  // namespace verity::models::neural
