#include "meshtrain/train/cuda_graph_step.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/cuda.h>
#ifdef MESHTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <exception>

#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::train {

using MicroBatch = parallel::ParallelModel::MicroBatch;

#ifdef MESHTRAIN_WITH_CUDA
struct CudaGraphStep::Graph {
  explicit Graph(c10::DeviceIndex device) : stream(c10::cuda::getStreamFromPool(false, device)) {}
  c10::cuda::CUDAStream stream;  // the warm-up steps and the capture run here (capture cannot use the default)
  at::cuda::CUDAGraph graph;     // its memory: a private pool of the caching allocator
  bool captured = false;
  // Inputs, filled before each run: tokens and targets [B, T] (int64), and the float scalar the micro-batch's
  // mean loss is multiplied by before backward.
  at::Tensor tokens, targets, weight;
  // Outputs of the last run: the micro-batch's mean loss, and that × weight (what was backpropagated).
  at::Tensor loss, scaled;
};

namespace {

// `to` runs what is queued on it from now only after what `from` has queued so far (no host wait).
void wait_stream(const c10::cuda::CUDAStream& to, const c10::cuda::CUDAStream& from) {
  c10::cuda::CUDAEvent ev;
  ev.record(from);
  ev.block(to);
}

}  // namespace
#else
struct CudaGraphStep::Graph {};
#endif

CudaGraphStep::CudaGraphStep(parallel::ParallelModel& model, at::Device device) : model_(model), device_(device) {
  // The layout first: its answer does not depend on the machine, so a CPU test sees it too.
  MT_USER_CHECK(model.capturable(), "train.cuda_graph: given on with the layout '", model.describe(),
                "'; valid off, or on in a single process without tensor or pipeline parallelism (collectives and "
                "hooks in backward cannot be captured)");
  MT_USER_CHECK(device.is_cuda(), "train.cuda_graph: given on with the device ", device.str(),
                "; valid off, or on with a CUDA device");
#ifdef MESHTRAIN_WITH_CUDA
  graph_ = std::make_unique<Graph>(device.has_index() ? device.index() : c10::cuda::current_device());
#else
  MT_USER_CHECK(false, "train.cuda_graph: given on, but this meshtrain was built without CUDA; valid off");
#endif
  // The parameters the optimizer updates are the leaves that take the gradients in a capturable layout.
  for (const auto& p : model.optimizer_params()) {
    params_.push_back(p.param);
    grads_.push_back(at::zeros_like(p.param));
  }
}

CudaGraphStep::~CudaGraphStep() = default;

bool CudaGraphStep::captured() const {
#ifdef MESHTRAIN_WITH_CUDA
  return graph_ && graph_->captured;
#else
  return false;
#endif
}

void CudaGraphStep::attach_gradients() {
  at::NoGradGuard no_grad;
  // Zeroed in place: the captured backward accumulates into these addresses (`grad += g`, as autograd does
  // into a defined .grad), which is what the eager step's first micro-batch leaves there too.
  at::_foreach_zero_(grads_);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].grad().is_same(grads_[i])) params_[i].mutable_grad() = grads_[i];
}

#ifdef MESHTRAIN_WITH_CUDA

void CudaGraphStep::copy_in(const MicroBatch& b, double count) {
  Graph& g = *graph_;
  MT_USER_CHECK(!b.docs.packed(), "train.cuda_graph: given on with data.train of packed documents (their "
                "boundaries change with every batch); valid off, or on with data.packing false");
  if (!g.tokens.defined()) {
    g.tokens = at::empty(b.tokens.sizes(), b.tokens.options().memory_format(at::MemoryFormat::Contiguous));
    g.targets = at::empty(b.targets.sizes(), b.targets.options().memory_format(at::MemoryFormat::Contiguous));
    // The loss is fp32 (the fused and the composite loss both return it), so the product stays fp32 as in
    // the eager step.
    g.weight = at::empty({}, at::TensorOptions(at::kFloat).device(device_));
  }
  MT_CHECK(b.tokens.sizes() == g.tokens.sizes() && b.targets.sizes() == g.targets.sizes(),
           "train.cuda_graph: a micro-batch of shape ", b.tokens.sizes(), " after ", g.tokens.sizes(),
           ": the graph replays static shapes");
  g.tokens.copy_(b.tokens, /*non_blocking=*/true);
  g.targets.copy_(b.targets, /*non_blocking=*/true);
  const double w = b.loss_weight.value_or(-1);
  // No unmasked target: one made valid, weighted 0 (as ParallelModel::forward_backward does).
  if (w == 0) g.targets.view({-1}).narrow(0, 0, 1).fill_(0);
  // The float the eager step multiplies by: ATen's CUDA division by a host scalar is l × (1 / count) with the
  // reciprocal taken in float; a product with a host scalar rounds it to float. Same value, same kernel math.
  const float f = w < 0 ? 1.0f / static_cast<float>(count) : static_cast<float>(w);
  g.weight.fill_(static_cast<double>(f));
}

void CudaGraphStep::run_static() {
  Graph& g = *graph_;
  const at::Tensor l = model_.train_loss(g.tokens, g.targets);
  const at::Tensor scaled = l * g.weight;
  // sync = true: a capturable layout has nothing to defer (no reducer, no tensor-parallel sums).
  model_.backward(scaled, /*sync=*/true);
  // Kept alive, so their memory is not handed to anything else captured after them.
  g.loss = l.detach();
  g.scaled = scaled.detach();
}

void CudaGraphStep::capture() {
  Graph& g = *graph_;
  const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
  // As torch.cuda.graph does: nothing in flight, and the warm-up's cached blocks returned, so the private
  // pool does not sit beside memory nobody uses.
  torch::cuda::synchronize(device_.index());
  c10::cuda::CUDACachingAllocator::emptyCache();
  g.loss = g.scaled = at::Tensor();  // the warm-up's outputs: freed before capture, not during it
  wait_stream(g.stream, current);
  try {
    c10::cuda::CUDAStreamGuard on_side(g.stream);
    g.graph.capture_begin();
    run_static();  // recorded, not run: the gradients are untouched until the first replay
    g.graph.capture_end();
  } catch (const std::exception& e) {
    MT_CHECK(false, "train.cuda_graph: capturing the forward and backward failed (", e.what(),
             "); train.cuda_graph: off runs the step eagerly");
  }
  wait_stream(current, g.stream);
  g.captured = true;
  log::progress("train.cuda_graph: one micro-batch's forward and backward captured after %lld eager steps; "
                "replayed for every micro-batch from now on",
                static_cast<long long>(kWarmupSteps));
}

at::Tensor CudaGraphStep::forward_backward(const std::vector<MicroBatch>& batches) {
  MT_CHECK(!batches.empty(), "forward_backward: no micro-batches");
  Graph& g = *graph_;
  attach_gradients();
  const double count = static_cast<double>(batches.size());
  const bool eager = steps_ < kWarmupSteps;
  if (!eager && !g.captured) capture();
  const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
  // On the caller's stream, which reads it after the step.
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions(at::kFloat).device(device_));
  for (const MicroBatch& b : batches) {
    copy_in(b, count);  // on the caller's stream: ordered before the run that reads the inputs
    if (eager) {
      wait_stream(g.stream, current);
      {
        c10::cuda::CUDAStreamGuard on_side(g.stream);
        run_static();
      }
      wait_stream(current, g.stream);
    } else {
      g.graph.replay();
    }
    // The eager step's sum: the mean loss, or (weighted) the backpropagated loss × count.
    const double w = b.loss_weight.value_or(-1);
    loss_sum += w < 0 ? g.loss : g.scaled * count;
  }
  ++steps_;
  return loss_sum;
}

#else

void CudaGraphStep::copy_in(const MicroBatch&, double) {}
void CudaGraphStep::run_static() {}
void CudaGraphStep::capture() {}
at::Tensor CudaGraphStep::forward_backward(const std::vector<MicroBatch>&) {
  MT_CHECK(false, "train.cuda_graph: this meshtrain was built without CUDA");
  return {};
}

#endif

}  // namespace meshtrain::train
