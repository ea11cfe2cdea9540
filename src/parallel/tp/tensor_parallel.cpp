// apply_tensor_parallel: cut every parameter into this rank's block (narrowing the full tensor, or initialising
// only the block of a meta one), swap in the TP layers, install the head/loss hooks. See tensor_parallel.h.
#include "meshtrain/parallel/tp/tensor_parallel.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include "meshtrain/core/error.h"
#include "meshtrain/model/init.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/parallel/tp/tp_column_parallel_linear.h"
#include "meshtrain/parallel/tp/tp_cross_entropy.h"
#include "meshtrain/parallel/tp/tp_regions.h"
#include "meshtrain/parallel/tp/tp_row_parallel_linear.h"
#include "meshtrain/parallel/tp/tp_vocab_parallel_embedding.h"
#include "parallel/tp/tp_collectives.h"

namespace meshtrain::parallel {
namespace {

at::Device block_device(const Config& cfg) {
  const TrainDevice d = cfg.train.device;
  if (d == TrainDevice::cuda || (d == TrainDevice::automatic && at::hasCUDA())) return at::Device(at::kCUDA);
  return at::Device(at::kCPU);
}

// Cuts parameters into blocks and records where each block sits.
class Cutter {
 public:
  Cutter(const Config& cfg, int rank, int size, const at::Device& device)
      : cfg_(cfg), rank_(rank), size_(size), device_(device) {}

  // Rows/columns [start, start + len) of `dim` of parameter `name` (whose current tensor is `full`).
  at::Tensor block(const std::string& name, const at::Tensor& full, int64_t dim, int64_t start, int64_t len) {
    std::vector<int64_t> offsets(full.dim(), 0);
    offsets[dim] = start;
    layouts_[name] = {full.sizes().vec(), offsets, false};
    at::NoGradGuard no_grad;
    if (!full.is_meta()) return full.narrow(dim, start, len).clone(at::MemoryFormat::Contiguous);
    auto shape = full.sizes().vec();
    shape[dim] = len;
    auto b = at::empty(shape, full.options().device(device_));
    if (device_.is_meta()) return b;  // initialised later, by whoever allocates it (FSDP)
    model::init_parameter_block(cfg_.model, name, full.sizes().vec(), offsets, b, cfg_.train.seed);
    any_meta_ = true;
    return b;
  }
  // The block of `dim` that is this rank's equal share.
  at::Tensor even_block(const std::string& name, const at::Tensor& full, int64_t dim) {
    const int64_t n = full.size(dim) / size_;
    return block(name, full, dim, rank_ * n, n);
  }
  // A replicated parameter: recorded, and given storage if it is on the meta device.
  // `partial_grad`: each rank's gradient is its share of the sum (Layout::partial_grad).
  at::Tensor replicated(const std::string& name, const at::Tensor& full, bool partial_grad = false) {
    if (!layouts_.count(name))
      layouts_[name] = {full.sizes().vec(), std::vector<int64_t>(full.dim(), 0), true, partial_grad};
    if (!full.is_meta() || device_.is_meta()) return full;
    auto t = at::empty(full.sizes(), full.options().device(device_));
    model::init_parameter(cfg_.model, name, t, cfg_.train.seed);
    any_meta_ = true;
    return t;
  }

  std::map<std::string, TensorParallel::Layout>& layouts() { return layouts_; }
  bool any_meta() const { return any_meta_; }
  const at::Device& device() const { return device_; }

 private:
  const Config& cfg_;
  int rank_, size_;
  at::Device device_;
  std::map<std::string, TensorParallel::Layout> layouts_;
  bool any_meta_ = false;
};

// The registered name of `child` under `parent` (the model's Mlp names its layers per family).
std::string child_name(torch::nn::Module& parent, const std::shared_ptr<torch::nn::Module>& child) {
  for (const auto& item : parent.named_children())
    if (item.value() == child) return item.key();
  MT_CHECK(false, "tensor parallel: module not found under its parent");
  return {};
}

enum class Split { Column, Row };

// Replaces `member` (a Linear of `parent`, full name prefix `path`) by its column- or row-parallel block.
void shard_linear(torch::nn::Module& parent, const std::string& path, model::Linear& member, Split split,
                  Cutter& cut, const comm::CommPtr& tp, const SequenceParallelFlag& sp) {
  const std::string name = child_name(parent, member.ptr());
  const std::string prefix = path + name + ".";
  auto& lin = *member;
  std::shared_ptr<TpLinearImpl> repl;
  if (split == Split::Column) {
    auto w = cut.even_block(prefix + "weight", lin.weight, 0);
    auto b = lin.bias.defined() ? cut.even_block(prefix + "bias", lin.bias, 0) : at::Tensor();
    repl = std::make_shared<ColumnParallelLinearImpl>(w, b, tp, sp);
  } else {
    auto w = cut.even_block(prefix + "weight", lin.weight, 1);
    auto b = lin.bias.defined() ? cut.replicated(prefix + "bias", lin.bias) : at::Tensor();
    repl = std::make_shared<RowParallelLinearImpl>(w, b, tp, sp);
  }
  // LoRA: the adapters follow the weight's split on the dimension they share with it — B's output rows
  // (column) or A's input columns (row) — and the other piece, [out, r] or [r, in], stays whole.
  if (auto lora = std::dynamic_pointer_cast<model::LoraLinearImpl>(member.ptr())) {
    const bool column = split == Split::Column;
    auto a = column ? cut.replicated(prefix + "lora_A", lora->lora_A, /*partial_grad=*/true)
                    : cut.even_block(prefix + "lora_A", lora->lora_A, 1);
    auto b = column ? cut.even_block(prefix + "lora_B", lora->lora_B, 0)
                    : cut.replicated(prefix + "lora_B", lora->lora_B, /*partial_grad=*/true);
    repl->add_adapters(a, b, lora->scale(), lora->dropout());
  }
  std::shared_ptr<model::LinearImpl> as_linear = repl;
  member = model::Linear(parent.replace_module(name, as_linear));
}

// Logits and loss through the column-parallel head (rows `vb` of the vocabulary on this rank).
model::TransformerHooks head_hooks(model::TransformerImpl* m, comm::CommPtr tp, VocabBlock vb, int64_t vocab,
                                   SequenceParallelFlag sp) {
  // h: [B, T', D] → this rank's logits [B, T, rows]. Entering the region: copy (backward sums the ranks' input
  // gradients), or under sequence parallelism all-gather the tokens (backward reduce-scatters them).
  auto local_logits = [m, tp, sp](const at::Tensor& h) {
    auto in = sp && *sp ? gather_from_sp_region(h, tp) : copy_to_tp_region(h, tp);
    // Read at call time: the weight may have been replaced since (FSDP), and tied heads use tok_embed's rows.
    return at::linear(in, m->lm_head ? m->lm_head->weight : m->tok_embed->weight);
  };
  model::TransformerHooks hooks;
  if (sp) hooks.enter_blocks = [tp, sp](const at::Tensor& x) { return *sp ? scatter_to_sp_region(x, tp) : x; };
  hooks.logits = [local_logits, tp, vocab](const at::Tensor& h) {
    auto local = local_logits(h);
    const int64_t rows = local.size(-1), max_rows = (vocab + tp->size() - 1) / tp->size();
    // Blocks may differ by one row: pad to equal chunks for the gather, then drop the padding.
    auto all = gather_from_tp_region(at::constant_pad_nd(local, {0, max_rows - rows}), tp);  // [B, T, tp·max]
    std::vector<at::Tensor> parts;
    for (int r = 0; r < tp->size(); ++r) {
      auto b = vocab_block(vocab, r, tp->size());
      parts.push_back(all.narrow(-1, r * max_rows, b.rows()));
    }
    return at::cat(parts, -1);  // [B, T, V]
  };
  hooks.loss = [local_logits, tp, vb](const at::Tensor& h, const at::Tensor& targets) {
    auto local = local_logits(h);
    // Targets of -100 take no loss (masked): they are given a valid id and dropped from the mean.
    const auto flat = targets.reshape({-1});
    const auto valid = flat.ne(-100);
    auto per_token = vocab_parallel_cross_entropy(local.reshape({-1, local.size(-1)}), flat.clamp_min(0),
                                                  vb.start, tp);
    return per_token.masked_fill(valid.logical_not(), 0).sum() / valid.sum();
  };
  return hooks;
}

}  // namespace

TensorParallel::TensorParallel(comm::CommPtr tp, std::shared_ptr<bool> sp, std::map<std::string, Layout> layouts)
    : tp_(std::move(tp)), sp_(sp && *sp ? std::move(sp) : nullptr), layouts_(std::move(layouts)) {
  // Under sequence parallelism every replicated parameter after the split (all but pos_embed, which is added
  // before it) sees only this rank's tokens.
  // LoRA's replicated adapter pieces are partial under plain TP too.
  for (const auto& [name, l] : layouts_)
    if (l.partial_grad || (sp_ && l.replicated && name.rfind("pos_embed.", 0) != 0)) partial_grads_.push_back(name);
}

void TensorParallel::finish_gradients(const model::TransformerImpl& model) const {
  if (partial_grads_.empty()) return;
  const auto params = model.named_parameters();
  finish_gradients([&](const std::string& name) {
    const at::Tensor& p = params[name];
    MT_CHECK(!p.requires_grad() || p.grad().defined(), "tensor parallel: '", name,
             "' has no gradient; call finish_gradients after backward");
    return p.requires_grad() ? p.grad() : at::Tensor();
  });
}

void TensorParallel::finish_gradients(const std::function<at::Tensor(const std::string& name)>& grad_of) const {
  if (partial_grads_.empty()) return;
  std::vector<at::Tensor> grads, flat_parts;
  for (const auto& name : partial_grads_) {
    const at::Tensor g = grad_of(name);
    if (!g.defined()) continue;  // a frozen parameter: no gradient to finish
    grads.push_back(g);
    flat_parts.push_back(g.reshape({-1}));
  }
  if (grads.empty()) return;
  // One all-reduce for all of them (they are small: norms, biases, rank-r adapter pieces); every TP rank
  // freezes the same ones.
  auto flat = detail::all_reduce(at::cat(flat_parts, 0), *tp_);
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

bool TensorParallel::counts(const std::string& name) const { return !layout(name).replicated || tp_->rank() == 0; }

void TensorParallel::sum_over_group(at::Tensor& t) const {
  at::NoGradGuard no_grad;
  t.copy_(detail::all_reduce(t, *tp_));
}

std::string TensorParallel::describe() const {
  return cat("tp ", tp_->size(), sp_ ? " (sequence parallel)" : "");
}

const TensorParallel::Layout& TensorParallel::layout(const std::string& name) const {
  auto it = layouts_.find(name);
  MT_CHECK(it != layouts_.end(), "tensor parallel: no parameter '", name, "'");
  return it->second;
}

std::vector<ShardedTensor> TensorParallel::sharded_parameters(const model::TransformerImpl& model) const {
  std::vector<ShardedTensor> out;
  for (const auto& item : model.named_parameters()) {
    const auto& l = layout(item.key());
    out.push_back({item.key(), l.global_shape, l.offsets, item.value(), counts(item.key())});
  }
  return out;
}

std::shared_ptr<TensorParallel> apply_tensor_parallel(model::TransformerImpl& model, comm::CommPtr tp,
                                                      const Config& cfg) {
  return apply_tensor_parallel(model, std::move(tp), cfg, block_device(cfg));
}

std::shared_ptr<TensorParallel> apply_tensor_parallel(model::TransformerImpl& model, comm::CommPtr tp,
                                                      const Config& cfg, const at::Device& device) {
  const auto& mc = model.config();
  const int64_t P = tp->size();
  MT_CHECK(P == cfg.parallel.tp, "apply_tensor_parallel: group of ", P, " ranks for parallel.tp ", cfg.parallel.tp);
  // validate() refuses a parallel.tp that does not split these evenly (config_validate.cpp): a bug here.
  const bool sp_on = cfg.parallel.sequence_parallel && P > 1;
  MT_CHECK(P == 1 || (mc.n_head % P == 0 && mc.n_kv_head % P == 0 && mc.d_ff % P == 0 && mc.vocab_size >= P &&
                      mc.dropout == 0.0 && (!sp_on || cfg.data.seq_len <= 0 || cfg.data.seq_len % P == 0)),
           "apply_tensor_parallel: parallel.tp ", P, " must divide n_head ", mc.n_head, ", n_kv_head ", mc.n_kv_head,
           ", d_ff ", mc.d_ff, " (and seq_len ", cfg.data.seq_len, " under sequence parallelism), vocab_size ",
           mc.vocab_size, " ≥ tp, no dropout (validate() refuses it otherwise)");
  auto sp = sp_on ? std::make_shared<bool>(true) : nullptr;

  Cutter cut(cfg, tp->rank(), static_cast<int>(P), device);
  for (size_t i = 0; i < model.blocks->size(); ++i) {
    auto& block = *model.blocks->ptr<model::BlockImpl>(i);
    const std::string path = "blocks." + std::to_string(model.blocks->global_index(i)) + ".";
    auto& attn = *block.attn;
    // Contiguous row blocks of wq/wk/wv are whole heads ([H·hd] rows, head-major), and GQA's grouping holds
    // locally: query head j of this rank uses its key/value head j / (H / Hkv).
    for (auto* lin : {&attn.wq, &attn.wk, &attn.wv})
      shard_linear(attn, path + "attn.", *lin, Split::Column, cut, tp, sp);
    shard_linear(attn, path + "attn.", attn.wo, Split::Row, cut, tp, sp);
    auto& mlp = *block.mlp;
    if (mlp.gate) shard_linear(mlp, path + "mlp.", mlp.gate, Split::Column, cut, tp, sp);
    shard_linear(mlp, path + "mlp.", mlp.up, Split::Column, cut, tp, sp);
    shard_linear(mlp, path + "mlp.", mlp.down, Split::Row, cut, tp, sp);
  }

  const auto vb = vocab_block(mc.vocab_size, tp->rank(), static_cast<int>(P));
  if (model.tok_embed) {  // only the first pipeline stage, and the last with a tied copy for its head, hold it
    auto emb = cut.block("tok_embed.weight", model.tok_embed->weight, 0, vb.start, vb.rows());
    std::shared_ptr<model::EmbeddingImpl> vpe = std::make_shared<VocabParallelEmbeddingImpl>(emb, vb, tp);
    model.tok_embed = model::Embedding(model.replace_module("tok_embed", vpe));
  }
  if (model.lm_head)
    model.lm_head->replace_parameter("weight", cut.block("lm_head.weight", model.lm_head->weight, 0, vb.start,
                                                         vb.rows()));

  // Everything not cut above is replicated (norms, pos_embed, row-parallel biases).
  model::replace_parameters(model, [&](const std::string& name, const at::Tensor& p) {
    return cut.layouts().count(name) && !cut.layouts().at(name).replicated ? p : cut.replicated(name, p);
  });
  if (cut.any_meta()) {
    at::NoGradGuard no_grad;
    for (auto& b : model.buffers()) b.set_data(b.to(cut.device()));
  }
  model.set_hooks(head_hooks(&model, tp, vb, mc.vocab_size, sp));
  return std::make_shared<TensorParallel>(tp, std::move(sp), std::move(cut.layouts()));
}

}  // namespace meshtrain::parallel
