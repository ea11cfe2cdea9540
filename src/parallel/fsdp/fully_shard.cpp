#include "meshtrain/parallel/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <map>

#include "meshtrain/core/error.h"
#include "meshtrain/model/init.h"
#include "meshtrain/model/nf4_base.h"
#include "meshtrain/model/nf4_tensor.h"
#include "meshtrain/model/param_module.h"
#include "meshtrain/parallel/post_accumulate_hook.h"

namespace meshtrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Releases a tensor's storage while keeping its shape: every tensor sharing the storage (autograd's saved
// views included) loses its memory with it, and refill_storage gives them all back new memory.
void release_storage(const at::Tensor& t) { t.storage().unsafeGetStorageImpl()->reset(); }

void refill_storage(const at::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  if (s->nbytes() >= n && s->data() != nullptr) return;
  s->set_data_ptr_noswap(s->allocator()->allocate(n));
  s->set_nbytes(n);
}

// Row j of `full` [n, row] is row j % c of rank j / c's piece; `chunks` [W, c·row] holds the pieces (a column
// block of the [W, S] all-gather buffer; padding rows past n are not part of `full`).
void chunks_to_full(const at::Tensor& full, const at::Tensor& chunks, int64_t c, int64_t row) {
  const int64_t n = full.size(0), W = chunks.size(0);
  if (n == 0 || c == 0) return;
  auto pieces = chunks.view({W, c, row});
  const int64_t k = n / c, rem = n - k * c;
  if (k > 0) full.narrow(0, 0, k * c).view({k, c, row}).copy_(pieces.narrow(0, 0, k));
  if (rem > 0) full.narrow(0, k * c, rem).copy_(pieces.select(0, k).narrow(0, 0, rem));
}

void full_to_chunks(const at::Tensor& chunks, const at::Tensor& full, int64_t c, int64_t row) {
  const int64_t n = full.size(0), W = chunks.size(0);
  if (n == 0 || c == 0) return;
  auto pieces = chunks.view({W, c, row});
  const int64_t k = n / c, rem = n - k * c;
  if (k > 0) pieces.narrow(0, 0, k).copy_(full.narrow(0, 0, k * c).view({k, c, row}));
  if (rem > 0) pieces.select(0, k).narrow(0, 0, rem).copy_(full.narrow(0, k * c, rem));
}

struct UnitRef : torch::CustomClassHolder {
  UnitRef(FullyShard* o, size_t u) : owner(o), unit(u) {}
  FullyShard* owner;  // outlives every graph built while it is installed
  size_t unit;
};

// Identity at a block's output whose backward runs before any of the block's own backward nodes: the moment
// to gather the block's parameters again (and prefetch the previous block's).
class PreBackward : public torch::autograd::Function<PreBackward> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const c10::intrusive_ptr<UnitRef>& ref) {
    ctx->saved_data["ref"] = c10::IValue::make_capsule(ref);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto ref = c10::static_intrusive_pointer_cast<UnitRef>(ctx->saved_data["ref"].toCapsule());
    ref->owner->pre_backward(ref->unit);
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

FullyShard::FullyShard(model::TransformerImpl& net, int64_t seed, const at::Device& device, comm::CommPtr shard,
                       comm::CommPtr replicate, FullyShardOptions opts, std::shared_ptr<const TensorParallel> tp)
    : root_(net.blocks->size()), shard_(std::move(shard)), replicate_(std::move(replicate)), tp_(std::move(tp)),
      opts_(opts), device_(device) {
  MT_CHECK(shard_, "FullyShard needs a shard communicator");
  MT_CHECK(opts_.zero_stage >= 1 && opts_.zero_stage <= 3, "FullyShard: zero_stage ", opts_.zero_stage);
  // The option exists so that offload arrives as a new piece; config validation rejects host today.
  MT_CHECK(opts_.master_location == MasterLocation::device, "FullyShard: master shards on the host are not built");
  if (replicate_ && replicate_->size() == 1) replicate_.reset();
  assign_units(net);
  assign_held(net);
  init_shards(net, seed);
  install_parameters(net);
  install_held(net, seed);
  for (auto& b : net.buffers()) b.set_data(b.to(device_));
  for (size_t k = 0; k < params_.size(); ++k)
    if (units_[params_[k].unit].trains) set_post_accumulate_hook(params_[k].full, [this, k] { on_gradient(k); });
}

void FullyShard::assign_units(model::TransformerImpl& net) {
  const int64_t W = shard_->size(), r = shard_->rank();
  // Which block owns each parameter, from the model's block list (the rest belongs to the root).
  std::map<const c10::TensorImpl*, size_t> block_of;
  for (size_t i = 0; i < root_; ++i)
    for (const auto& t : net.blocks->ptr(i)->parameters()) block_of[t.unsafeGetTensorImpl()] = i;
  const auto named = net.named_parameters();
  std::vector<std::pair<size_t, bool>> key;  // per parameter: (block, trains)
  for (const auto& item : named) {
    const auto it = block_of.find(item.value().unsafeGetTensorImpl());
    key.emplace_back(it == block_of.end() ? root_ : it->second, item.value().requires_grad());
  }
  // Units in block order (the root last), a block's trainable unit before its frozen one.
  std::map<std::pair<size_t, bool>, size_t> unit_of;
  block_units_.resize(root_ + 1);
  for (size_t b = 0; b <= root_; ++b)
    for (bool trains : {true, false}) {
      if (std::find(key.begin(), key.end(), std::pair{b, trains}) == key.end()) continue;
      unit_of[{b, trains}] = units_.size();
      block_units_[b].push_back(units_.size());
      units_.emplace_back();
      units_.back().block = b;
      units_.back().trains = trains;
    }
  size_t i = 0;
  for (const auto& item : named) {
    const size_t u = unit_of.at(key[i++]);
    Unit& unit = units_[u];
    Param p{item.key(), at::Tensor(), Dim0Shard(item.value().sizes().vec(), r, W), unit.numel, {}, {}};
    p.unit = u;
    unit.numel += p.layout.padded_numel();
    unit.params.push_back(params_.size());
    params_.push_back(std::move(p));
  }
}

void FullyShard::init_shards(model::TransformerImpl& net, int64_t seed) {
  at::NoGradGuard no_grad;
  const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(device_);
  for (auto& unit : units_) {
    unit.shard_flat = at::zeros({unit.numel}, unit.trains ? fp32 : fp32.dtype(stored_dtype(unit)));
    unit.pending = unit.trains ? unit.params.size() : 0;
  }
  std::map<std::string, at::Tensor> current;  // materialised parameters are sharded from their values
  for (const auto& item : net.named_parameters())
    if (!item.value().is_meta()) current[item.key()] = item.value().detach();
  for (Param& p : params_) {
    Unit& unit = units_[p.unit];
    p.shard = unit.shard_flat.narrow(0, p.offset, p.layout.local_numel()).view(p.layout.local_shape());
    if (p.layout.local_rows == 0 || p.held) continue;  // held rows: install_held
    if (auto it = current.find(p.name); it != current.end())
      p.shard.copy_(it->second.narrow(0, p.layout.row_begin, p.layout.local_rows));
    else
      model::init_parameter_block(net.config(), p.name, global_shape(p), global_offsets(p), p.shard, seed);
  }
}

void FullyShard::allocate_gradients() {
  if (sink_ || gradients_allocated_) return;
  gradients_allocated_ = true;
  at::NoGradGuard no_grad;
  for (auto& unit : units_)
    if (unit.trains) unit.grad_flat = at::zeros({unit.numel}, at::TensorOptions().dtype(at::kFloat).device(device_));
  for (Param& p : params_) {
    const Unit& unit = units_[p.unit];
    if (unit.trains)
      p.shard_grad = unit.grad_flat.narrow(0, p.offset, p.layout.local_numel()).view(p.layout.local_shape());
  }
}

at::ScalarType FullyShard::stored_dtype(const Unit& unit) const {
  if (unit.held) return at::kByte;
  return !unit.trains && opts_.frozen_dtype ? *opts_.frozen_dtype : at::kFloat;
}

at::ScalarType FullyShard::gathered_dtype(const Unit& unit) const {
  if (unit.held) return at::kByte;
  return !unit.trains && opts_.frozen_dtype ? *opts_.frozen_dtype : opts_.param_dtype;
}

void FullyShard::install_parameters(model::TransformerImpl& net) {
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < params_.size(); ++k) index[params_[k].name] = k;
  alias_ = shard_->size() == 1 && !replicate_ && opts_.param_dtype == at::kFloat &&
           (!opts_.frozen_dtype || *opts_.frozen_dtype == at::kFloat);
  // The module's parameters become full-shape tensors in param_dtype whose storage exists only while gathered
  // (or, aliased, the shards themselves with the flat gradients as their .grad).
  model::replace_parameters(net, [&](const std::string& name, const at::Tensor& cur) {
    Param& p = params_[index.at(name)];
    if (alias_) {
      p.full = p.shard.detach().view(cur.sizes());
      return p.full;
    }
    auto full = at::empty(cur.sizes(), at::TensorOptions().dtype(gathered_dtype(units_[p.unit])).device(device_));
    release_storage(full);
    p.full = full;
    return full;
  });
  if (!alias_) return;
  allocate_gradients();
  for (auto& p : params_)
    if (p.shard_grad.defined()) p.full.mutable_grad() = p.shard_grad.view(p.full.sizes());
  for (auto& unit : units_) unit.gathered = true, unit.stale = false;
}

FullyShard::~FullyShard() {
  for (auto& p : params_)
    if (units_[p.unit].trains) clear_post_accumulate_hook(p.full);
  for (auto& h : held_) {  // the layers outlive this object: their rows become their own (no store to call)
    std::vector<at::Tensor> rows;
    for (size_t j = 0; j < 3; ++j) rows.push_back(params_[h.first + j].full);
    h.layer->hold_nf4_rows(std::move(rows), {});
  }
}

void FullyShard::assign_held(model::TransformerImpl& net) {
  const int64_t W = shard_->size(), r = shard_->rank();
  for (size_t b = 0; b < root_; ++b) {
    size_t u = units_.size();
    for (const auto& item : net.blocks->ptr(b)->named_modules()) {
      auto layer = std::dynamic_pointer_cast<model::LinearImpl>(item.value());
      if (!layer || !layer->nf4_weight()) continue;
      if (u == units_.size()) {  // the block's first: its unit
        block_units_[b].push_back(u);
        units_.emplace_back();
        units_.back().block = b;
        units_.back().trains = false;
        units_.back().held = true;
      }
      Unit& unit = units_[u];
      const model::Nf4Tensor& q = *layer->nf4_weight();
      held_.push_back({layer, params_.size()});
      const std::string name = "blocks." + std::to_string(b) + "." + item.key() + ".weight";
      const char* parts[] = {"codes", "absmax_codes", "absmax_scale"};  // Nf4Tensor::as_rows' order
      for (size_t j = 0; j < 3; ++j) {
        const int64_t width = model::Nf4Tensor::kRowBytes[j];
        Param p{name + ":nf4_" + parts[j], at::Tensor(), Dim0Shard({q.rows(), width}, r, W), unit.numel, {}, {}};
        p.unit = u;
        p.held = true;
        unit.numel += p.layout.padded_numel();
        unit.params.push_back(params_.size());
        params_.push_back(std::move(p));
      }
    }
  }
}

void FullyShard::store_held(size_t first, const std::vector<at::Tensor>& rows) {
  at::NoGradGuard no_grad;
  for (size_t j = 0; j < 3; ++j) {
    Param& p = params_[first + j];
    if (p.layout.local_rows > 0)
      p.shard.copy_(rows[j].narrow(0, p.layout.row_begin, p.layout.local_rows));
    if (!alias_) units_[p.unit].stale = true;  // gathered again before its next use
  }
}

void FullyShard::install_held(model::TransformerImpl& net, int64_t seed) {
  at::NoGradGuard no_grad;
  for (const Held& h : held_) {
    // The layer's values: its NF4 storage, or (held by its sizes only: model::hold_base_nf4_sizes) the weight
    // drawn for `seed` — whole, in fp32, as every layout draws it — and quantized; one weight at a time.
    const model::Nf4Tensor& now = *h.layer->nf4_weight();
    std::optional<model::Nf4Tensor> values;
    if (!now.codes.is_meta()) {
      values = now;
    } else {
      const std::string& name = params_[h.first].name;
      values = model::Nf4Tensor::quantize(
          model::seeded_base_weight(net.config(), name.substr(0, name.find(':')), now.shape, device_, seed));
    }
    std::vector<at::Tensor> rows;
    for (size_t j = 0; j < 3; ++j) {
      Param& p = params_[h.first + j];
      if (alias_) {
        p.full = p.shard;  // a group of one: the shard is the whole
      } else {
        p.full = at::empty(p.layout.global_shape, at::TensorOptions().dtype(at::kByte).device(device_));
        release_storage(p.full);
      }
      rows.push_back(p.full);
    }
    h.layer->hold_nf4_rows(std::move(rows), [this, first = h.first](const std::vector<at::Tensor>& r) {
      store_held(first, r);
    });
    h.layer->hold_weight_as_nf4(std::move(*values));  // through the store: this rank's rows, then dropped
  }
}

int64_t FullyShard::held_gathered_bytes() const {
  int64_t n = 0;
  for (const auto& p : params_)
    if (p.held && units_[p.unit].gathered && !alias_) n += p.full.numel();
  return n;
}

int64_t FullyShard::held_shard_bytes() const {
  int64_t n = 0;
  for (const auto& unit : units_)
    if (unit.held) n += unit.shard_flat.numel();
  return n;
}

void FullyShard::zero_grad() {
  fresh_grads_ = true;
  if (alias_) {
    at::NoGradGuard no_grad;
    for (auto& unit : units_)
      if (unit.trains) unit.grad_flat.zero_();  // autograd accumulates into them
  }
}

void FullyShard::start_gather(size_t u) {
  Unit& unit = units_[u];
  if (alias_) return;
  if (unit.gather.started()) return;  // already in flight (prefetched)
  at::NoGradGuard no_grad;
  const at::ScalarType dtype = gathered_dtype(unit);
  at::Tensor in = unit.shard_flat.scalar_type() == dtype ? unit.shard_flat : unit.shard_flat.to(dtype);
  // A group of one gathers nothing: the shard is the whole unit.
  unit.gather_out = shard_->size() == 1 ? in : at::empty({shard_->size() * unit.numel}, in.options());
  // Bytes travel as 32-bit words (every row of NF4 bytes is a multiple of 4 long): the communicators move
  // words, not bytes.
  unit.gather = unit.held
                    ? PendingCollective::all_gather(*shard_, unit.gather_out.view(at::kInt), in.view(at::kInt))
                    : PendingCollective::all_gather(*shard_, unit.gather_out, in);
}

void FullyShard::ensure_gathered(size_t u) {
  Unit& unit = units_[u];
  if (unit.gathered && !unit.stale) return;
  start_gather(u);
  unit.gather.finish();
  at::NoGradGuard no_grad;
  auto chunks = unit.gather_out.view({shard_->size(), unit.numel});
  for (size_t k : unit.params) {
    Param& p = params_[k];
    refill_storage(p.full);
    // Written through an alias with its own version counter: autograd's saved references to this parameter
    // must not see an in-place modification (the values are the ones the forward used).
    auto dst = p.full.variable_data().view({p.layout.rows, p.layout.row_numel});
    chunks_to_full(dst, chunks.narrow(1, p.offset, p.layout.padded_numel()), p.layout.rows_per_rank,
                   p.layout.row_numel);
  }
  unit.gather = PendingCollective();
  unit.gather_out = at::Tensor();
  unit.gathered = true;
  unit.stale = false;
}

void FullyShard::free_unit(size_t u) {
  Unit& unit = units_[u];
  if (!unit.gathered || alias_) return;
  for (size_t k : unit.params) release_storage(params_[k].full);
  unit.gathered = false;
}

bool FullyShard::block_gathered(size_t b) const {
  for (size_t u : block_units_[b])
    if (!units_[u].gathered || units_[u].stale) return false;
  return true;
}

void FullyShard::start_gather_block(size_t b) {
  for (size_t u : block_units_[b])
    if (!units_[u].gathered || units_[u].stale) start_gather(u);
}

void FullyShard::ensure_block_gathered(size_t b) {
  start_gather_block(b);  // every unit in flight before the first wait
  for (size_t u : block_units_[b]) ensure_gathered(u);
}

void FullyShard::free_block(size_t b, bool frozen_only) {
  for (size_t u : block_units_[b])
    if (!frozen_only || !units_[u].trains) free_unit(u);
}

at::Tensor FullyShard::run_block(size_t b, const at::Tensor& x, const model::BlockFn& run) {
  ensure_block_gathered(b);
  if (b + 1 < root_ && !block_gathered(b + 1)) start_gather_block(b + 1);  // prefetch
  at::Tensor y = run(x);
  if (opts_.reshard_after_forward) free_block(b, /*frozen_only=*/false);
  if (at::GradMode::is_enabled() && y.requires_grad()) y = PreBackward::apply(y, c10::make_intrusive<UnitRef>(this, b));
  return y;
}

model::BlockRunner FullyShard::block_runner() {
  if (opts_.zero_stage != 3 || alias_) return {};
  return [this](int64_t layer, model::BlockImpl&, const at::Tensor& x, const model::BlockFn& run) {
    return run_block(static_cast<size_t>(layer), x, run);
  };
}

void FullyShard::pre_backward(size_t b) {
  // Block b + 1's backward is done (its input gradient reached here): its frozen units are needed no more.
  if (opts_.zero_stage == 3 && b + 1 < root_) free_block(b + 1, /*frozen_only=*/true);
  ensure_block_gathered(b);
  if (b > 0 && !block_gathered(b - 1)) start_gather_block(b - 1);  // prefetch
}

void FullyShard::ensure_root_gathered() {
  if (!alias_) ensure_block_gathered(root_);
}

void FullyShard::pre_forward() {
  if (alias_) return;
  if (opts_.zero_stage == 3) {
    if (root_ > 0 && !block_gathered(0)) start_gather_block(0);  // prefetch the first block
    ensure_block_gathered(root_);
    return;
  }
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].gathered || units_[u].stale) start_gather(u);
  for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
}

void FullyShard::on_gradient(size_t k) {
  // ZeRO-1 accumulation micro-step: the full gradients just accumulate.
  if (opts_.zero_stage == 1 && !requires_sync_) return;
  Param& p = params_[k];
  if (p.seen) return;
  p.seen = true;
  synced_ = false;
  if (--units_[p.unit].pending == 0) start_reduce(p.unit);
}

void FullyShard::start_reduce(size_t u) {
  Unit& unit = units_[u];
  if (alias_) {  // the gradients are in grad_flat already, and a group of one reduces nothing
    unit.reduce_started = true;
    return;
  }
  allocate_gradients();
  at::NoGradGuard no_grad;
  const int64_t W = shard_->size();
  // The first reduction of a step lands straight in the shard gradients (nothing to add to); with a group of
  // one the unit's flat gradient is already that reduction, so it is written there directly. Streaming: there
  // are no shard gradients, the reduction goes to a transient buffer the sink copies from.
  const bool into_grads = !sink_ && fresh_grads_ && opts_.reduce_dtype == at::kFloat;
  unit.rs_out = into_grads ? unit.grad_flat : at::Tensor();
  // Padding rows and missing gradients must read as zeros (they reduce to zero and never reach the
  // optimizer); everything else is overwritten below, so the buffer is cleared only when there are some.
  bool holes = false;
  for (size_t k : unit.params)
    holes = holes || !params_[k].full.grad().defined() || params_[k].layout.padded_numel() * W != params_[k].full.numel();
  const auto opts = at::TensorOptions().dtype(opts_.reduce_dtype).device(device_);
  at::Tensor in = W == 1 && unit.rs_out.defined() ? unit.rs_out : at::empty({W * unit.numel}, opts);
  if (holes) in.zero_();
  auto chunks = in.view({W, unit.numel});
  for (size_t k : unit.params) {
    Param& p = params_[k];
    const at::Tensor& g = p.full.grad();
    if (g.defined())
      full_to_chunks(chunks.narrow(1, p.offset, p.layout.padded_numel()), g.reshape({p.layout.rows, p.layout.row_numel}),
                     p.layout.rows_per_rank, p.layout.row_numel);
    p.full.mutable_grad() = at::Tensor();  // the full gradient is freed; its reduced rows live in the shard
  }
  if (!unit.rs_out.defined()) unit.rs_out = W == 1 ? in : at::empty({unit.numel}, opts);
  unit.reduce = PendingCollective::reduce_scatter(*shard_, unit.rs_out, in, comm::ReduceOp::Avg);
  unit.reduce_started = true;
  if (opts_.zero_stage == 3) free_unit(u);
  if (!sink_) return;
  // The reductions queued before this one are done or nearly: their gradients leave now, this one's later.
  for (size_t earlier : handing_) hand_over(earlier);
  handing_.assign(1, u);
}

void FullyShard::hand_over(size_t u) {
  Unit& unit = units_[u];
  at::NoGradGuard no_grad;
  unit.reduce.finish();
  if (replicate_) PendingCollective::all_reduce(*replicate_, unit.rs_out, comm::ReduceOp::Avg).finish();
  for (size_t k : unit.params) {
    const Param& p = params_[k];
    sink_->take_gradient(sink_index_[k],
                         unit.rs_out.narrow(0, p.offset, p.layout.local_numel()).view(p.layout.local_shape()));
  }
  unit.rs_out = at::Tensor();  // the sink keeps its memory until the copy out of it ran
  unit.reduce = PendingCollective();
}

bool FullyShard::stream_gradients(GradientSink& sink, at::ScalarType dtype) {
  if (opts_.zero_stage != 3 || tp_ || alias_) return false;
  MT_CHECK(!sink_, "FullyShard: gradients are streamed already");
  at::NoGradGuard no_grad;
  sink_ = &sink;
  sink_index_.assign(params_.size(), 0);
  size_t next = 0;  // optimizer parameters are the trainable ones in parameter order (ShardedModel)
  for (size_t k = 0; k < params_.size(); ++k)
    if (units_[params_[k].unit].trains) sink_index_[k] = next++;
  for (auto& unit : units_) {
    if (!unit.trains) continue;
    unit.shard_flat = unit.shard_flat.to(dtype);  // the master's cast; the sink holds the fp32 one
    unit.grad_flat = at::Tensor();
    unit.stale = true;
    for (size_t k : unit.params) {
      Param& p = params_[k];
      p.shard = unit.shard_flat.narrow(0, p.offset, p.layout.local_numel()).view(p.layout.local_shape());
      p.shard_grad = at::Tensor();
    }
  }
  return true;
}

void FullyShard::finish_gradient_sync() {
  if (synced_ || (opts_.zero_stage == 1 && !requires_sync_)) return;
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (unit.reduce_started || !unit.trains) continue;
    for (size_t k : unit.params) {
      Param& p = params_[k];
      if (p.seen) continue;
      MT_USER_CHECK(opts_.allow_unused, "sharded data parallel: parameter '", p.name,
                    "' received no gradient in this backward pass; every parameter must take part in the loss "
                    "(or set parallel.allow_unused_params: true)");
      p.seen = true;
      --unit.pending;
    }
    start_reduce(u);
  }
  at::NoGradGuard no_grad;
  if (sink_) {
    finish_streamed_sync();
    return;
  }
  for (auto& unit : units_) unit.reduce.finish();
  if (replicate_) {
    std::vector<PendingCollective> ops;
    for (auto& unit : units_)
      if (unit.trains) ops.push_back(PendingCollective::all_reduce(*replicate_, unit.rs_out, comm::ReduceOp::Avg));
    for (auto& op : ops) op.finish();
  }
  for (auto& unit : units_) {
    if (!unit.trains) {
      // Frozen: nothing reduced; under FSDP its parameters are needed no more once backward is over.
      if (opts_.zero_stage == 3) free_unit(static_cast<size_t>(&unit - units_.data()));
      continue;
    }
    if (alias_ || unit.rs_out.is_same(unit.grad_flat)) {
      // accumulated or reduced in place
    } else if (fresh_grads_) {
      unit.grad_flat.copy_(unit.rs_out);
    } else {
      unit.grad_flat.add_(unit.rs_out);
    }
    unit.rs_out = at::Tensor();
    unit.reduce = PendingCollective();
    unit.reduce_started = false;
    unit.pending = unit.params.size();
  }
  for (auto& p : params_) {
    p.seen = false;
    if (!units_[p.unit].trains) continue;
    if (!p.shard.grad().defined()) p.shard.mutable_grad() = p.shard_grad;
    const at::Tensor& g = p.full.grad();
    if (alias_ && (!g.defined() || g.data_ptr() != p.shard_grad.data_ptr())) {
      // Autograd replaced the view (it does when it cannot accumulate in place): its tensor holds the sum.
      at::NoGradGuard no_grad;
      auto view = p.shard_grad.view(p.full.sizes());
      if (g.defined()) view.copy_(g);
      p.full.mutable_grad() = view;
    }
  }
  fresh_grads_ = false;
  synced_ = true;
}

void FullyShard::finish_streamed_sync() {
  for (size_t u : handing_) hand_over(u);
  handing_.clear();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    if (!unit.trains) {
      free_unit(u);  // stage 3: the frozen parameters are needed no more once the backward is over
      continue;
    }
    unit.reduce_started = false;
    unit.pending = unit.params.size();
  }
  for (auto& p : params_) p.seen = false;
  synced_ = true;
}

void FullyShard::mark_parameters_stale() {
  if (alias_) return;  // the optimizer updated the module's parameters themselves
  for (auto& unit : units_) unit.stale = unit.stale || unit.trains;  // frozen shards never change
}

void FullyShard::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (!units_[u].gathered || units_[u].stale) start_gather(u);
  for (size_t u = 0; u < units_.size(); ++u) ensure_gathered(u);
}

std::vector<FullyShard::ShardParam> FullyShard::shard_parameters() const {
  std::vector<ShardParam> out;
  for (const auto& p : params_)
    if (!p.held) out.push_back({p.name, p.shard, units_[p.unit].trains});
  return out;
}

std::vector<int64_t> FullyShard::global_shape(const Param& p) const {
  return tp_ ? tp_->layout(p.name).global_shape : p.layout.global_shape;
}

std::vector<int64_t> FullyShard::global_offsets(const Param& p) const {
  auto offsets = p.layout.offsets();
  if (tp_) {
    const auto& block = tp_->layout(p.name).offsets;
    for (size_t d = 0; d < offsets.size(); ++d) offsets[d] += block[d];
  }
  return offsets;
}

std::vector<ShardedTensor> FullyShard::sharded_parameters() const {
  std::vector<ShardedTensor> out;
  const bool write = !replicate_ || replicate_->rank() == 0;
  for (const auto& p : params_)
    if (!p.held)
      out.push_back({p.name, global_shape(p), global_offsets(p), p.shard, write && (!tp_ || tp_->counts(p.name))});
  return out;
}

at::Tensor FullyShard::grad_norm_squared() {
  at::NoGradGuard no_grad;
  auto sq = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device_));
  if (sink_) {  // the step's gradients are on the host, summed in fp32 there (no TP when streaming)
    double local = 0;
    for (size_t k = 0; k < params_.size(); ++k)
      if (units_[params_[k].unit].trains) local += sink_->squared_norm(sink_index_[k]);
    sq.fill_(local);
  } else if (!tp_ || tp_->group()->rank() == 0) {
    for (auto& unit : units_)
      if (unit.trains) sq += unit.grad_flat.pow(2).sum();
  } else {  // this rank counts only its TP-sharded blocks; tp rank 0 counts the replicated parameters
    std::vector<at::Tensor> counted;
    for (const auto& p : params_)
      if (tp_->counts(p.name) && p.shard_grad.defined() && p.shard_grad.numel() > 0) counted.push_back(p.shard_grad);
    if (!counted.empty()) sq += at::stack(at::_foreach_norm(counted, 2)).pow(2).sum();
  }
  // Over the shard group first: its ranks share this rank's tp coordinate, so they count the same parameters.
  PendingCollective::all_reduce(*shard_, sq, comm::ReduceOp::Sum).finish();
  if (tp_) tp_->sum_over_group(sq);
  return sq.squeeze();
}

int64_t FullyShard::shard_numel() const {
  int64_t n = 0;
  for (const auto& unit : units_) n += unit.numel;
  return n;
}

}  // namespace meshtrain::parallel
