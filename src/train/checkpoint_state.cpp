#include "meshtrain/train/checkpoint_state.h"

#include <ATen/ATen.h>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::train {
namespace {

std::string rng_name(int rank, const std::string& stream) {
  return log::sprintf("rng.rank_%05d.%s", rank, stream.c_str());
}

}  // namespace

std::vector<ShardedTensor> model_blocks(const parallel::ParallelModel& par, const Optimizer* opt) {
  std::vector<ShardedTensor> out = par.sharded_parameters();
  for (auto& s : out) {
    s.name = "model." + s.name;
    if (!opt) continue;
    if (at::Tensor master = opt->master_of(s.local); master.defined()) s.local = master;
  }
  return out;
}

std::vector<ShardedTensor> optimizer_blocks(const std::vector<ShardedTensor>& model, const Optimizer& opt) {
  const auto state = opt.state_tensors();
  std::vector<ShardedTensor> out;
  for (const auto& m : model) {
    const std::string param = m.name.substr(6);  // without "model."
    if (!state.count(param + ".exp_avg")) continue;  // a frozen parameter: no optimizer state
    for (const char* k : {".exp_avg", ".exp_avg_sq"}) {
      const at::Tensor& t = state.at(param + k);
      MT_CHECK(t.sizes() == m.local.sizes(), "optimizer state ", param, k, " has shape ", t.sizes(),
               ", its parameter block ", m.local.sizes());
      out.push_back({"optim." + param + k, m.global_shape, m.offsets, t, m.write});
    }
    const at::Tensor& step = state.at(param + ".step");
    out.push_back({"optim." + param + ".step", step.sizes().vec(), std::vector<int64_t>(static_cast<size_t>(step.dim()), 0),
                   step, m.write});
  }
  return out;
}

std::vector<ShardedTensor> rng_blocks(int rank, const RngStreams& streams) {
  std::vector<ShardedTensor> out;
  for (const auto& [stream, gen] : streams) {
    at::Tensor st = gen.get_state();
    out.push_back({rng_name(rank, stream), st.sizes().vec(), {0}, st, true});
  }
  return out;
}

std::string restore_rng(const std::string& dir, const ckpt::CheckpointMeta& meta, int rank, RngStreams& streams,
                        uint64_t reseed) {
  std::vector<ShardedTensor> wanted;
  std::vector<at::Generator*> targets;
  std::string note;
  for (auto& [stream, gen] : streams) {
    std::string name = rng_name(rank, stream);
    if (!meta.tensors.count(name) && stream == "cpu") name = meta.tensors.count("rng.cpu") ? "rng.cpu" : rng_name(0, stream);
    auto it = meta.tensors.find(name);
    if (it == meta.tensors.end()) {
      gen.set_current_seed(reseed + static_cast<uint64_t>(rank));
      note += (note.empty() ? "" : ", ") + stream;
      continue;
    }
    wanted.push_back({name, it->second.shape, std::vector<int64_t>(it->second.shape.size(), 0),
                      at::empty(it->second.shape, at::kByte), true});
    targets.push_back(&gen);
  }
  ckpt::load_into(dir, wanted);
  for (size_t i = 0; i < wanted.size(); ++i) targets[i]->set_state(wanted[i].local);
  if (note.empty()) return note;
  return "random stream(s) " + note + " of rank " + std::to_string(rank) +
         " were not saved (the checkpoint's world was smaller): reseeded, so they differ from an uninterrupted run";
}

nlohmann::json data_position_json(const data::LoaderState& st) {
  nlohmann::json out = {{"epoch", st.epoch}, {"cursor", st.cursor}};
  for (const auto& p : st.sources) out["sources"].push_back({{"epoch", p.epoch}, {"cursor", p.cursor}});
  return out;
}

data::LoaderState loader_state_from(const nlohmann::json& position) {
  data::LoaderState st{position.at("epoch").get<int64_t>(), position.at("cursor").get<int64_t>(), {}};
  if (position.contains("sources"))
    for (const auto& p : position["sources"])
      st.sources.push_back({p.at("epoch").get<int64_t>(), p.at("cursor").get<int64_t>()});
  return st;
}

}  // namespace meshtrain::train
