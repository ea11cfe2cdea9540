// LoRA adapters out of a checkpoint; see lora_export.h.
#include "meshtrain/ckpt/lora_export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/hf_name_table.h"
#include "meshtrain/ckpt/recorded_config.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/linear/lora_linear.h"
#include "meshtrain/model/nf4_base.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

// "blocks.3.attn.wq.lora_A" → "blocks.3.attn.wq" (the adapted module).
std::string module_of(const std::string& adapter) { return adapter.substr(0, adapter.rfind('.')); }

// Text through a temporary name: never half a file under the final one.
void write_text_atomically(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    MT_USER_CHECK(out.good(), tmp.string(), ": cannot write");
  }
  fs::rename(tmp, p);
}

}  // namespace

std::map<std::string, at::Tensor> merge_lora(const ModelConfig& m, std::map<std::string, at::Tensor> params) {
  if (m.lora_rank == 0) return params;
  model::round_trip_nf4_base(m, params);
  const double scale = m.lora_alpha / static_cast<double>(m.lora_rank);
  std::set<std::string> modules;
  for (const auto& [name, t] : params)
    if (model::is_lora_parameter(name)) modules.insert(module_of(name));
  for (const auto& mod : modules) {
    const at::Tensor a = params.at(mod + ".lora_A").to(at::kFloat), b = params.at(mod + ".lora_B").to(at::kFloat);
    at::Tensor& w = params.at(mod + ".weight");
    w = (w.to(at::kFloat) + at::matmul(b, a) * scale).to(w.scalar_type());
    params.erase(mod + ".lora_A");
    params.erase(mod + ".lora_B");
  }
  return params;
}

ExportResult export_peft(const std::string& checkpoint, const std::string& out_dir) {
  LoadedCheckpoint info;
  auto adapters = load_full(checkpoint, "model.", &info);
  std::erase_if(adapters, [](const auto& kv) { return !model::is_lora_parameter(kv.first); });
  MT_USER_CHECK(!adapters.empty() && info.meta.state.contains("lora"), info.path,
                ": holds no LoRA adapters (model.lora_rank was 0); export it without --adapters");
  const Config cfg = recorded_config(info.path, info.meta);
  const ModelConfig& m = cfg.model;

  std::map<std::string, at::Tensor> peft;
  std::set<std::string> targets;  // HF module names: q_proj, …
  for (const auto& [name, t] : adapters) {
    const std::string mod = module_of(name.substr(6));  // without "model."
    const std::string hf = llama_hf_layer_name(mod + ".weight");
    MT_CHECK(!hf.empty(), "export: adapter '", name, "' of no Llama projection");
    const std::string hf_mod = hf.substr(0, hf.size() - 7);  // without ".weight"
    targets.insert(hf_mod.substr(hf_mod.rfind('.') + 1));
    peft["base_model.model." + hf_mod + name.substr(name.rfind('.')) + ".weight"] = t.to(at::kFloat).contiguous();
  }
  const nlohmann::json& rec = info.meta.state["lora"];
  nlohmann::json config = {
      {"peft_type", "LORA"},          {"task_type", "CAUSAL_LM"},       {"r", m.lora_rank},
      {"lora_alpha", m.lora_alpha},   {"lora_dropout", m.lora_dropout}, {"target_modules", targets},
      {"bias", "none"},               {"fan_in_fan_out", false},        {"inference_mode", true},
      {"init_lora_weights", true},    {"use_rslora", false},            {"modules_to_save", nullptr},
      {"base_model_name_or_path", rec.value("hf_dir", std::string())}};
  fs::create_directories(out_dir);
  write_safetensors((fs::path(out_dir) / "adapter_model.safetensors").string(), peft, {{"format", "pt"}});
  write_text_atomically(fs::path(out_dir) / "adapter_config.json", config.dump(2) + "\n");
  ExportResult res{.files = 1, .bytes = 0, .tensors = static_cast<int64_t>(peft.size())};
  for (const auto& [name, t] : peft) res.bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  return res;
}

}  // namespace meshtrain::ckpt
