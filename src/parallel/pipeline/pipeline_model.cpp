#include "meshtrain/parallel/pipeline/pipeline_model.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/fp8_linear.h"
#include "meshtrain/parallel/autocast_guard.h"
#include "meshtrain/parallel/pipeline/pipeline_split.h"
#include "parallel/pipeline/pipeline_batch.h"
#include "parallel/pipeline/pipeline_links.h"
#include "parallel/pipeline/tied_embedding.h"

namespace meshtrain::parallel {
namespace {

using Op = PipeAction::Op;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

// What one step keeps per (chunk, micro-batch) between its forward and its backward, and the sends still in
// flight (their tensors must outlive the transfer).
struct PipelineModel::Step {
  struct Slot {
    at::Tensor input;   // the received activation (leaf; its .grad goes back), undefined on the first stage
    at::Tensor output;  // the sent activation, or the loss as backpropagated (× weight, or / m) on the last stage
    at::Tensor grad;    // the output's gradient kept between I and W
  };
  std::vector<PipelinePiece> pieces;  // [m] micro-batches
  std::map<std::pair<int, int>, Slot> slots;  // by (chunk, micro)
  std::vector<std::pair<comm::WorkPtr, at::Tensor>> sends;
  std::vector<int> backwards_done;  // per chunk: syncs on its last
  at::Tensor loss_sum;  // Σ of the pieces' losses as backpropagated (mean × weight, or mean / m)
  int live = 0;
  Clock::time_point t0;
};

PipelineModel::PipelineModel(const model::Transformer& net, const ParallelGroups& groups, const Config& cfg,
                             const at::Device& device, const TrainablePolicy& policy, const LayoutFn& layout)
    : ParallelModel(net, nullptr), pp_(groups.pp), device_(device) {
  const ParallelConfig& p = cfg.parallel;
  MT_CHECK(pp_ && pp_->size() == p.pp, "PipelineModel: parallel.pp ", p.pp, " without a pp group of that size");
  rank_ = pp_->rank();
  world_rank_ = groups.world ? groups.world->rank() : 0;
  const int v = static_cast<int>(p.pp_virtual_stages), m = static_cast<int>(p.pp_microbatches);
  schedule_ = make_pipeline_schedule(p.pp_schedule, static_cast<int>(p.pp), m, v);
  d_model_ = cfg.model.d_model;
  sp_split_ = p.sequence_parallel && p.tp > 1 ? p.tp : 1;
  trace_step_ = p.pp_trace_step;
  trace_path_ = cfg.train.out_dir + "/pipeline_trace/rank_" + std::to_string(world_rank_) + ".json";

  policy.apply(*net_);  // checks every pattern against the whole model (UserError for one matching nothing)
  const auto spans = split_pipeline_stages(stage_sizes(*net_), schedule_.virtual_stages(), p.pp_first_stage_blocks,
                                           p.pp_last_stage_blocks);
  for (int c = 0; c < v; ++c) {
    const model::ModelSpan& span = spans[static_cast<size_t>(schedule_.virtual_stage(rank_, c))];
    model::Transformer stage(cfg.model, at::TensorOptions().device(at::kMeta), span);
    for (auto& item : stage->named_parameters())
      if (!policy.trains(item.key())) item.value().requires_grad_(false);
    stage->set_loss_chunk_bytes(cfg.train.loss_chunk_mb << 20);
    stage->use_kernels(cfg.train);
    if (cfg.train.fp8 != Fp8Scaling::off) model::use_fp8(*stage, cfg.train.fp8, cfg.train.fp8_min_width);
    stage->train();
    chunks_.push_back(layout(stage));
  }
  links_ = std::make_unique<PipelineLinks>(pp_, /*wrap=*/v > 1);
  tied_ = std::make_unique<TiedEmbedding>(pp_, groups.world, cfg.model.tie_embeddings, chunks_);
}

PipelineModel::~PipelineModel() = default;

std::vector<model::ModelSpan> PipelineModel::spans() const {
  std::vector<model::ModelSpan> out;
  for (const auto& c : chunks_) out.push_back(c->net()->span());
  return out;
}

std::vector<int64_t> PipelineModel::activation_shape(int64_t rows, int64_t seq_len) const {
  return {rows, seq_len / sp_split_, d_model_};
}

at::Tensor PipelineModel::forward_backward(const std::vector<MicroBatch>& batches) {
  MT_CHECK(!batches.empty(), "forward_backward: no micro-batches");
  Step st;
  // The step's rows re-cut into the schedule's m, each with its documents and loss weight.
  st.pieces = cut_pipeline_batch(batches, schedule_.microbatches);
  st.backwards_done.assign(chunks_.size(), 0);
  st.loss_sum = at::zeros({}, batches.front().tokens.options().dtype(at::kFloat));
  stats_ = PipelineStepStats{};
  st.t0 = Clock::now();
  for (const PipeAction& a : schedule_.ranks[rank_]) {
    if (a.op == Op::F)
      run_forward(st, a);
    else
      run_backward(st, a);
  }
  for (auto& [work, tensor] : st.sends) work->wait();
  tied_->sum_gradients();
  // The trainer reads count × the loss backpropagated (its grad_accum micro-batches: parallel_model.h).
  at::Tensor loss = broadcast_loss(st.loss_sum * static_cast<double>(batches.size()));
  stats_.seconds = since(st.t0);
  double busy = 0;
  for (const auto& t : stats_.actions) busy += t.end - t.start;
  stats_.bubble = stats_.seconds > 0 ? std::max(0.0, 1.0 - busy / stats_.seconds) : 0.0;
  if (++steps_run_ == trace_step_) write_trace();
  return loss;
}

void PipelineModel::run_forward(Step& st, const PipeAction& a) {
  const int vs = schedule_.virtual_stage(rank_, a.chunk), last = schedule_.virtual_stages() - 1;
  Step::Slot& slot = st.slots[{a.chunk, a.micro}];
  const PipelinePiece& piece = st.pieces[static_cast<size_t>(a.micro)];
  const at::Tensor& tok = piece.tokens;
  if (vs > 0) {
    slot.input = at::empty(activation_shape(tok.size(0), tok.size(1)), tok.options().dtype(at::kFloat));
    links_->recv_activation(slot.input)->wait();
    slot.input.requires_grad_(true);
  }
  const double start = since(st.t0);
  at::Tensor out;
  {
    AutocastGuard ac(autocast_, autocast_device_);
    out = chunks_[a.chunk]->stage_forward(tok, slot.input, piece.targets, piece.docs.packed() ? &piece.docs : nullptr);
  }
  if (vs == last) {
    slot.output = piece.weight.defined() ? out * piece.weight : out / static_cast<double>(schedule_.microbatches);
    st.loss_sum += slot.output.detach().to(at::kFloat);
  } else {
    slot.output = out;
    at::Tensor msg = out.detach().to(at::kFloat).contiguous();
    st.sends.emplace_back(links_->send_activation(msg), msg);
  }
  stats_.actions.push_back({a, start, since(st.t0)});
  stats_.peak_live_activations = std::max(stats_.peak_live_activations, ++st.live);
}

void PipelineModel::run_backward(Step& st, const PipeAction& a) {
  const int vs = schedule_.virtual_stage(rank_, a.chunk), last = schedule_.virtual_stages() - 1;
  Step::Slot& slot = st.slots.at({a.chunk, a.micro});
  if (a.op != Op::W && vs < last) {
    slot.grad = at::empty(slot.output.sizes(), slot.output.options().dtype(at::kFloat));
    links_->recv_gradient(slot.grad)->wait();
    slot.grad = slot.grad.to(slot.output.scalar_type());
  }
  const double start = since(st.t0);
  auto send_input_grad = [&](const at::Tensor& g) {
    at::Tensor msg = g.to(at::kFloat).contiguous();
    st.sends.emplace_back(links_->send_gradient(msg), msg);
  };
  if (a.op == Op::I) {
    // The input's gradient only; the graph stays for W. The first stage has no input to differentiate.
    if (vs > 0) {
      auto g = torch::autograd::grad({slot.output}, {slot.input}, {slot.grad}, /*retain_graph=*/true);
      send_input_grad(g[0]);
    }
    stats_.actions.push_back({a, start, since(st.t0)});
    return;
  }
  // B, or W after I: the backward into the weights (W also recomputes the input's gradient, which is dropped).
  const bool sync = ++st.backwards_done[a.chunk] == schedule_.microbatches;
  chunks_[a.chunk]->stage_backward(slot.output, slot.grad, sync);
  if (a.op == Op::B && vs > 0) send_input_grad(slot.input.grad());
  st.slots.erase({a.chunk, a.micro});
  --st.live;
  stats_.actions.push_back({a, start, since(st.t0)});
}

at::Tensor PipelineModel::broadcast_loss(at::Tensor loss_sum) {
  at::Tensor l = loss_sum.detach().to(at::kFloat).contiguous();
  pp_->broadcast(l, pp_->size() - 1)->wait();
  return l;
}

at::Tensor PipelineModel::loss(const at::Tensor& tokens, const at::Tensor& targets, const model::Documents* docs) {
  if (docs && !docs->packed()) docs = nullptr;
  const int last = schedule_.virtual_stages() - 1;
  at::Tensor loss = at::zeros({}, tokens.options().dtype(at::kFloat));
  std::vector<std::pair<comm::WorkPtr, at::Tensor>> sends;
  for (int c = 0; c < static_cast<int>(chunks_.size()); ++c) {
    const int vs = schedule_.virtual_stage(rank_, c);
    at::Tensor x;
    if (vs > 0) {
      x = at::empty(activation_shape(tokens.size(0), tokens.size(1)), tokens.options().dtype(at::kFloat));
      links_->recv_activation(x)->wait();
    }
    at::Tensor out = chunks_[c]->stage_forward(tokens, x, targets, docs);
    if (vs == last) {
      loss = out.detach().to(at::kFloat);
    } else {
      at::Tensor msg = out.detach().to(at::kFloat).contiguous();
      sends.emplace_back(links_->send_activation(msg), msg);
    }
  }
  for (auto& [work, tensor] : sends) work->wait();
  return broadcast_loss(loss);
}

void PipelineModel::backward(const at::Tensor&, bool) {
  MT_CHECK(false, "PipelineModel::backward: the pipeline schedule runs the backwards (forward_backward)");
}

std::vector<ParallelModel::OptimParam> PipelineModel::optimizer_params() const {
  std::vector<OptimParam> out;
  for (const auto& c : chunks_)
    for (auto& p : c->optimizer_params()) out.push_back(std::move(p));
  return out;
}

at::Tensor PipelineModel::clip_grad_norm(double max_norm) {
  // Each chunk's norm already counts its dp/fsdp/tp shards once; the stages hold disjoint parameters, so the
  // squares add over pp — but for a tied embedding's two copies, whose summed gradient counts once.
  at::Tensor sq = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kFloat));
  for (auto& c : chunks_) sq += c->clip_grad_norm(0.0).to(at::kFloat).square();
  pp_->all_reduce(sq, comm::ReduceOp::Sum)->wait();
  if (tied_->active()) sq = (sq - tied_->counted_twice(device_)).clamp_min(0.0);
  at::Tensor total = sq.sqrt();
  std::vector<at::Tensor> grads;
  for (const auto& p : optimizer_params())
    if (p.param.grad().defined() && p.param.numel() > 0) grads.push_back(p.param.grad());
  clip_to(grads, total, max_norm);
  return total;
}

void PipelineModel::after_optimizer_step() {
  for (auto& c : chunks_) c->after_optimizer_step();
}

void PipelineModel::broadcast_parameters() {
  for (auto& c : chunks_) c->broadcast_parameters();
  tied_->broadcast();  // after the first stage's replicas agree
}

std::vector<ShardedTensor> PipelineModel::sharded_parameters() const {
  std::vector<ShardedTensor> out;
  for (const auto& c : chunks_)
    for (auto& s : c->sharded_parameters()) {
      // The head's copy of a tied embedding: loaded like the first stage's, never written (one tensor saved).
      if (!c->net()->span().embed && s.name == "tok_embed.weight") s.write = false;
      out.push_back(std::move(s));
    }
  return out;
}

std::string PipelineModel::describe() const {
  std::string layers;
  for (const auto& s : spans())
    layers += cat(layers.empty() ? "" : ", ", "blocks ", s.first_block, "-", s.end_block - 1,
                  s.embed ? " + embedding" : "", s.head ? " + head" : "",
                  s.head && tied_->active() ? " (with a copy of the tied embedding)" : "");
  return cat("pp ", pp_->size(), " (", schedule_.kind, ", ", schedule_.microbatches,
             " micro-batches", schedule_.chunks > 1 ? cat(", ", schedule_.chunks, " chunks") : "", "; stage ", rank_,
             ": ", layers, ") × ", chunks_.front()->describe());
}

std::vector<std::pair<std::string, double>> PipelineModel::step_metrics() const {
  return {{"pp_bubble", stats_.bubble}, {"pp_peak_activations", static_cast<double>(stats_.peak_live_activations)}};
}

// Chrome trace-event format (chrome://tracing, ui.perfetto.dev): one complete event per action, microseconds.
void PipelineModel::write_trace() const {
  namespace fs = std::filesystem;
  fs::create_directories(fs::path(trace_path_).parent_path());
  const std::string tmp = trace_path_ + ".tmp";
  {
    std::ofstream f(tmp);
    f << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    f << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << world_rank_
      << ", \"args\": {\"name\": \"pp stage " << rank_ << " (rank " << world_rank_ << ")\"}}";
    for (const auto& t : stats_.actions) {
      const char* names = "FBIW";
      std::string name = std::string(1, names[static_cast<int>(t.action.op)]) + std::to_string(t.action.micro);
      if (schedule_.chunks > 1) name += "." + std::to_string(t.action.chunk);
      f << ",\n{\"name\": \"" << name << "\", \"ph\": \"X\", \"pid\": " << world_rank_ << ", \"tid\": 0, \"ts\": "
        << t.start * 1e6 << ", \"dur\": " << (t.end - t.start) * 1e6 << "}";
    }
    f << "\n]}\n";
    MT_CHECK(f.good(), "writing ", tmp);
  }
  fs::rename(tmp, trace_path_);
}

}  // namespace meshtrain::parallel
