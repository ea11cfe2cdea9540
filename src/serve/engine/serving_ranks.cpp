#include "meshtrain/serve/engine/serving_ranks.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <torch/cuda.h>

#ifdef MESHTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "meshtrain/comm/communicator_factory.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"
#include "meshtrain/model/fp8_weights.h"
#include "meshtrain/model/param_module.h"
#include "meshtrain/parallel/tp/tensor_parallel.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"

namespace meshtrain::serve {
namespace {

// This rank's device: the CPU, or under meshrun --device cuda the rank's own GPU.
c10::Device serving_rank_device(const c10::Device& given, const comm::WorldInfo& world) {
  if (!given.is_cuda()) return given;
  MT_USER_CHECK(!given.has_index(), "--device ", given.str(), ": under meshrun every rank takes its own GPU; give "
                "--device cuda (rank r on cuda:LOCAL_RANK)");
  const int gpus = static_cast<int>(torch::cuda::device_count());
  MT_USER_CHECK(!comm::nccl_built() || world.local_rank < gpus, "--device cuda under meshrun: local rank ",
                world.local_rank, " has no GPU of its own (", gpus, " visible); tensor-parallel serving takes one GPU "
                "per rank (NCCL): run at most ", gpus, " ranks per node");
  return comm::rank_cuda_device(CommBackend::automatic, world.local_rank, gpus, "--device");
}

// This rank's share of the model: built on the meta device, cut by the trainer's TP layers, given empty host
// storage, then filled with its blocks of the checkpoint (any layout reads into any other).
model::Transformer load_tensor_parallel_model(const ckpt::InferenceCheckpoint& ck, const ServingRanks& ranks) {
  Config cfg = ck.config;
  cfg.model.dropout = 0.0;  // inference: no dropout, which the TP layers refuse
  cfg.parallel.tp = ranks.tp();
  cfg.parallel.sequence_parallel = false;  // a decode's single token cannot be split over the group
  model::Transformer net(cfg.model, at::TensorOptions().device(at::kMeta));
  const auto tp = parallel::apply_tensor_parallel(*net, ranks.group, cfg, at::Device(at::kMeta));
  model::replace_parameters(*net, [](const std::string&, const at::Tensor& p) {
    return p.is_meta() ? at::empty(p.sizes(), p.options().device(at::kCPU)) : p;
  });
  std::vector<ShardedTensor> blocks = tp->sharded_parameters(*net);
  int64_t held = 0, total = 0;
  for (ShardedTensor& b : blocks) {
    b.name = "model." + b.name;
    held += b.local.numel();
    total += c10::multiply_integers(b.global_shape);
  }
  ckpt::load_model_weights(ck, blocks);
  log::info("tensor parallelism over %d ranks: rank %d holds %lld of the model's %lld parameters (its share of the "
            "heads, the MLP and the vocabulary; norms whole)", ranks.tp(), ranks.world.rank,
            static_cast<long long>(held), static_cast<long long>(total));
  return net;
}

// --quantization fp8: the blocks' weights in FP8, the bf16 ones' memory handed back to the device (the KV cache is
// sized from what is free next), and one line saying what changed.
void hold_serving_weights_in_fp8(model::TransformerImpl& net) {
  const std::string why = model::fp8_weights_refusal(net);
  MT_USER_CHECK(why.empty(), "--quantization fp8: ", why);
  const model::Fp8WeightsSummary s = model::hold_weights_in_fp8(net);
#ifdef MESHTRAIN_WITH_CUDA
  if (net.head_weight().is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  log::info("FP8 weights: %lld linear layers of the blocks, %s -> %s", static_cast<long long>(s.layers),
            memory_text(s.bytes_before).c_str(), memory_text(s.bytes_after).c_str());
}

}  // namespace

int64_t ServingRanks::min_over_ranks(int64_t v) const {
  if (!group) return v;
  auto t = at::tensor({v}, at::kLong).to(group->device());
  group->all_reduce(t, comm::ReduceOp::Min)->wait();
  return t.cpu().item<int64_t>();
}

ServingRanks join_serving_ranks(const c10::TensorOptions& placement, std::chrono::milliseconds timeout) {
  ServingRanks r{.world = comm::world_info_from_env(), .placement = placement};
  if (r.world.world_size == 1) return r;
  r.placement = placement.device(serving_rank_device(placement.device(), r.world));
  comm::CommSetup setup{.device = r.placement.device(), .timeout = timeout, .group = "serve", .origin = "--device"};
  r.group = comm::make_communicator(r.world, setup);
  r.steps = std::make_shared<TensorParallelSteps>(r.group, timeout / 4);
  return r;
}

void check_tensor_parallel_split(const ModelConfig& m, int tp) {
  if (tp == 1) return;
  const int64_t kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
  const auto split = [&](const char* what, int64_t n) {
    MT_USER_CHECK(n % tp == 0, "tensor parallelism over ", tp, " ranks (meshrun --nproc-per-node × --nnodes): ",
                  what, " ", n, " is not divisible by ", tp, " (", n, " % ", tp, " = ", n % tp,
                  "); run as many ranks as divide model.n_head (", m.n_head, "), model.n_kv_head (", kv,
                  ") and model.d_ff (", m.d_ff, ")");
  };
  split("model.n_head", m.n_head);
  split("model.n_kv_head", kv);
  split("model.d_ff", m.d_ff);
  MT_USER_CHECK(m.vocab_size >= tp, "tensor parallelism over ", tp, " ranks: model.vocab_size ", m.vocab_size,
                " is smaller than the ranks; run at most ", m.vocab_size);
}

WeightQuantization weight_quantization_from_flag(const std::string& value) {
  if (value == "none") return WeightQuantization::none;
  MT_USER_CHECK(value == "fp8", "--quantization ", value, ": expected none or fp8");
  return WeightQuantization::fp8;
}

model::Transformer load_serving_model(const ckpt::InferenceCheckpoint& ck, const ServingRanks& ranks,
                                      WeightQuantization quant) {
  check_tensor_parallel_split(ck.config.model, ranks.tp());
  model::Transformer net = ranks.group ? load_tensor_parallel_model(ck, ranks) : ckpt::load_model(ck);
  net->to(ranks.placement.device(), ranks.placement.dtype().toScalarType());  // the engine follows the weights
  net->eval();
  if (quant == WeightQuantization::fp8) hold_serving_weights_in_fp8(*net);  // each rank its own shards
  return net;
}

}  // namespace meshtrain::serve
