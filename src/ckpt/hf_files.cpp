#include "meshtrain/ckpt/hf_files.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/hf_convert.h"
#include "meshtrain/ckpt/hf_hub_cache.h"
#include "meshtrain/ckpt/hf_model_dir.h"
#include "meshtrain/ckpt/imported_checkpoint.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/lora_export.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text;
  MT_USER_CHECK(out, p.string(), ": cannot write");
}

at::ScalarType export_dtype(const std::string& d, at::ScalarType saved) {
  if (d == "keep") return saved;
  if (d == "fp32") return at::kFloat;
  if (d == "bf16") return at::kBFloat16;
  if (d == "fp16") return at::kHalf;
  throw UserError(cat("--dtype: given '", d, "'; valid: keep, fp32, bf16, fp16"));
}

std::string hf_dtype_name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bfloat16" : t == at::kHalf ? "float16" : "float32";
}

// The first of the model's tokenizer directories (inference_checkpoint.h tokenizer_dirs) holding a tokenizer.json.
std::optional<fs::path> tokenizer_source(const InferenceCheckpoint& ck, const std::string& base) {
  for (const std::string& d : tokenizer_dirs(ck, base))
    if (!d.empty() && fs::is_regular_file(fs::path(d) / "tokenizer.json")) return fs::path(d);
  return std::nullopt;
}

}  // namespace

std::vector<std::string> copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir) {
  const fs::path from = from_dir, to = to_dir;
  std::vector<std::string> copied;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "chat_template.jinja"}) {
    if (!fs::is_regular_file(from / name)) continue;
    const fs::path tmp = to / (std::string(name) + ".tmp");
    std::error_code ec;
    fs::copy_file(from / name, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, to / name, ec);
    MT_USER_CHECK(!ec, (to / name).string(), ": cannot copy the tokenizer file there: ", ec.message());
    copied.push_back(name);
  }
  return copied;
}

ExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, const ExportOptions& opts) {
  const InferenceCheckpoint ck = open_for_inference(checkpoint);  // the architecture known before any read
  auto model = load_model_tensors(ck, opts.base);
  MT_USER_CHECK(!model.empty(), ck.dir, ": no model.* tensors (not a meshtrain training checkpoint?)");
  Config cfg = ck.config;
  resolve(cfg, 1);
  std::map<std::string, at::Tensor> ours;
  for (auto& [name, t] : model) ours[name.substr(6)] = t;
  // LoRA: the adapters folded into their weights (ckpt/lora_export.h), a plain model of the base's shape.
  ours = merge_lora(cfg.model, std::move(ours));
  const at::ScalarType dt = export_dtype(opts.dtype, ours.begin()->second.scalar_type());
  auto hf = to_hf_tensors(cfg.model, ours);
  for (auto& [name, t] : hf) t = t.to(dt).contiguous();

  fs::create_directories(out_dir);
  ExportResult res;
  for (const auto& [name, t] : hf) res.bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  res.tensors = static_cast<int64_t>(hf.size());
  // Greedy split in name order: a file closes before the tensor that would take it over the limit.
  std::vector<std::map<std::string, at::Tensor>> files(1);
  uint64_t in_file = 0;
  for (const auto& [name, t] : hf) {
    const uint64_t n = static_cast<uint64_t>(t.numel()) * t.element_size();
    if (in_file > 0 && in_file + n > opts.max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back()[name] = t;
    in_file += n;
  }
  res.files = static_cast<int>(files.size());
  ProgressMeter progress("export: write", res.bytes);
  // Each file under a temporary name until it is complete: a crash leaves no truncated weights behind.
  const auto write_file = [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors) {
    const fs::path final_path = fs::path(out_dir) / name, tmp = final_path.string() + ".tmp";
    write_safetensors(tmp.string(), tensors, {{"format", "pt"}}, {}, &progress);
    fs::rename(tmp, final_path);
  };
  if (files.size() == 1) {
    write_file("model.safetensors", files[0]);
  } else {
    nlohmann::json index = {{"metadata", {{"total_size", res.bytes}}}, {"weight_map", nlohmann::json::object()}};
    for (size_t i = 0; i < files.size(); ++i) {
      const std::string f = log::sprintf("model-%05zu-of-%05zu.safetensors", i + 1, files.size());
      write_file(f, files[i]);
      for (const auto& [name, t] : files[i]) index["weight_map"][name] = f;
    }
    write_text(fs::path(out_dir) / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  progress.finish();
  write_text(fs::path(out_dir) / "config.json", hf_config_from(cfg.model, hf_dtype_name(dt)).dump(2) + "\n");
  // The tokenizer, chat template and generation settings import kept (or the run's own copies), so that
  // AutoTokenizer.from_pretrained(out_dir) works as AutoModelForCausalLM's does.
  if (const auto from = tokenizer_source(ck, opts.base)) res.tokenizer_files = copy_tokenizer_files(*from, out_dir);
  return res;
}

ImportResult import_hf(const std::string& hf_dir, const std::string& out_dir) {
  // The directory, or the Hub cache's snapshot of an org/name; config.json and every header checked first.
  const std::string dir = fs::exists(hf_dir) || !is_hub_model_id(hf_dir) ? hf_dir : hub_snapshot(hf_dir, "");
  const HfModelDir hf(dir);
  Config cfg;
  cfg.model = hf.model();
  const auto tensors = read_safetensors(hf.weight_files(), "import: read");
  const auto ours = from_hf_tensors(cfg.model, tensors, dir);
  cfg.source = hf.config_file();
  ImportResult res = write_imported_checkpoint(cfg, ours, out_dir, fs::absolute(dir).string());
  res.tokenizer_files = copy_tokenizer_files(dir, out_dir);
  return res;
}

}  // namespace meshtrain::ckpt
