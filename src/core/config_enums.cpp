// Typed values of string settings; see config_enums.h.
#include "meshtrain/core/config_enums.h"

#include <algorithm>
#include <sstream>

#include "meshtrain/core/error.h"

namespace meshtrain {

Dtype parse_dtype(const std::string& value, const std::string& key) {
  if (value == "fp32") return Dtype::fp32;
  if (value == "bf16") return Dtype::bf16;
  throw UserError(cat(key, ": given '", value, "'; valid fp32 | bf16"));
}

Dtype compute_dtype(const TrainConfig& t, bool cuda) {
  if (t.dtype == "auto") return cuda ? Dtype::bf16 : Dtype::fp32;
  return parse_dtype(t.dtype, "train.dtype");
}

MasterLocation parse_master_location(const std::string& value) {
  MT_USER_CHECK(value != "host", "parallel.master_location: given 'host'; valid device (the master weights and "
                "optimizer state move to host memory with optimizer.offload: cpu)");
  MT_USER_CHECK(value == "device", "parallel.master_location: given '", value, "'; valid device");
  return MasterLocation::device;
}

Fp8Scaling parse_fp8(const TrainConfig& t) {
  if (t.fp8 == "off") return Fp8Scaling::off;
  if (t.fp8 == "tensorwise") return Fp8Scaling::tensorwise;
  if (t.fp8 == "rowwise") return Fp8Scaling::rowwise;
  throw UserError(cat("train.fp8: given '", t.fp8, "'; valid off | tensorwise | rowwise"));
}

bool cuda_graph_on(const TrainConfig& t) {
  if (t.cuda_graph == "off") return false;
  if (t.cuda_graph == "on") return true;
  throw UserError(cat("train.cuda_graph: given '", t.cuda_graph, "'; valid off | on"));
}

namespace {

constexpr AttentionBackend kAttentionBackends[] = {AttentionBackend::automatic, AttentionBackend::flash,
                                                   AttentionBackend::cudnn, AttentionBackend::efficient,
                                                   AttentionBackend::math};

}  // namespace

const char* attention_backend_name(AttentionBackend b) {
  static const char* const names[] = {"auto", "flash", "cudnn", "efficient", "math"};
  return names[static_cast<int>(b)];
}

AttentionBackend parse_attention_backend(const TrainConfig& t) {
  for (AttentionBackend b : kAttentionBackends)
    if (t.attention_backend == attention_backend_name(b)) return b;
  throw UserError(cat("train.attention_backend: given '", t.attention_backend,
                      "'; valid auto | flash | cudnn | efficient | math"));
}

OptimizerOffload parse_optimizer_offload(const std::string& value) {
  if (value == "none") return OptimizerOffload::none;
  if (value == "cpu") return OptimizerOffload::cpu;
  throw UserError(cat("optimizer.offload: given '", value, "'; valid none | cpu"));
}

std::vector<std::string> freeze_patterns(const TrainConfig& t) {
  std::vector<std::string> out;
  if (t.freeze.find_first_not_of(" \t") == std::string::npos) return out;
  std::stringstream ss(t.freeze);
  for (std::string part; std::getline(ss, part, ',');) {
    const size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    MT_USER_CHECK(b != std::string::npos, "train.freeze: given '", t.freeze,
                  "'; valid comma-separated globs over parameter names, none empty (e.g. blocks.0.*,tok_embed.weight)");
    out.push_back(part.substr(b, e - b + 1));
  }
  MT_USER_CHECK(t.freeze[t.freeze.find_last_not_of(" \t")] != ',', "train.freeze: given '", t.freeze,
                "'; valid comma-separated globs, none empty (a trailing comma leaves one empty)");
  return out;
}

namespace {

constexpr LoraTarget kLoraTargets[] = {LoraTarget::q,    LoraTarget::k,  LoraTarget::v,   LoraTarget::o,
                                       LoraTarget::gate, LoraTarget::up, LoraTarget::down};

}  // namespace

const char* lora_target_name(LoraTarget t) {
  static const char* const names[] = {"q", "k", "v", "o", "gate", "up", "down"};
  return names[static_cast<int>(t)];
}

std::vector<LoraTarget> lora_targets(const ModelConfig& m) {
  std::vector<LoraTarget> out;
  if (m.lora_rank == 0) return out;
  const std::string valid = "; valid comma-separated projections among q, k, v, o, gate, up, down (e.g. q,v)";
  std::stringstream ss(m.lora_targets);
  for (std::string part; std::getline(ss, part, ',');) {
    const size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    const std::string name = b == std::string::npos ? "" : part.substr(b, e - b + 1);
    auto it = std::find_if(std::begin(kLoraTargets), std::end(kLoraTargets),
                           [&](LoraTarget t) { return name == lora_target_name(t); });
    MT_USER_CHECK(it != std::end(kLoraTargets), "model.lora_targets: given '", m.lora_targets, "' ('", name,
                  "' is no projection)", valid);
    MT_USER_CHECK(std::find(out.begin(), out.end(), *it) == out.end(), "model.lora_targets: given '",
                  m.lora_targets, "' ('", name, "' twice)", valid);
    out.push_back(*it);
  }
  MT_USER_CHECK(!out.empty() && m.lora_targets.back() != ',', "model.lora_targets: given '", m.lora_targets, "'",
                valid);
  return out;
}

}  // namespace meshtrain
