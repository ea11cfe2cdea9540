// GGUF export and import (gguf_files.h).
#include "meshtrain/ckpt/gguf_files.h"

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/gguf/gguf_export_type.h"
#include "meshtrain/ckpt/gguf/gguf_file.h"
#include "meshtrain/ckpt/gguf/gguf_llama.h"
#include "meshtrain/ckpt/gguf/gguf_tokenizer.h"
#include "meshtrain/ckpt/imported_checkpoint.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/lora_export.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/log.h"
#include "meshtrain/core/progress_meter.h"
#include "meshtrain/text/tokenizer_files.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

using gguf::GgmlType;

// The tokenizer.json to carry: the one --tokenizer names, else the first beside the checkpoint.
std::string export_tokenizer(const InferenceCheckpoint& ck, const std::string& given) {
  if (!given.empty()) return text::tokenizer_file(given, "--tokenizer");
  const auto dirs = tokenizer_dirs(ck, "");
  if (auto f = text::find_tokenizer_file(dirs)) return *f;
  std::string looked;
  for (const auto& d : dirs)
    if (!d.empty()) looked += (looked.empty() ? "" : ", ") + d;
  throw UserError(cat("export --gguf: no tokenizer.json beside ", ck.dir, " (looked in ", looked,
                      "); a GGUF file carries its tokenizer: pass --tokenizer FILE_OR_DIR"));
}

// ggml's ne: PyTorch's shape reversed.
std::vector<int64_t> ggml_shape(const std::vector<int64_t>& torch_shape) {
  return {torch_shape.rbegin(), torch_shape.rend()};
}

}  // namespace

GgufExportResult export_gguf(const std::string& checkpoint, const std::string& out_path, const GgufExportOptions& opts) {
  const gguf::ExportType type = gguf::export_type(opts.type);
  const InferenceCheckpoint ck = open_for_inference(checkpoint);
  Config cfg = ck.config;
  resolve(cfg, 1);
  const ModelConfig& m = cfg.model;
  MT_USER_CHECK(m.family == Family::llama, ck.dir, ": model.family ", m.family,
                " cannot be exported as GGUF (valid: llama; export GPT-2 with --format hf)");
  GgufExportResult res;
  res.tokenizer = export_tokenizer(ck, opts.tokenizer);
  gguf::Metadata md = gguf::llama_metadata(m, fs::path(out_path).stem().string(), type.file_type);
  for (auto& kv : gguf::tokenizer_metadata(res.tokenizer, m)) md.push_back(std::move(kv));

  auto model = load_model_tensors(ck, opts.base);
  MT_USER_CHECK(!model.empty(), ck.dir, ": no model.* tensors (not a meshtrain training checkpoint?)");
  std::map<std::string, at::Tensor> ours;
  for (auto& [name, t] : model) ours[name.substr(6)] = t;
  // LoRA: the adapters folded into their weights (ckpt/lora_export.h), a plain model of the base's shape.
  ours = merge_lora(m, std::move(ours));

  std::vector<gguf::TensorToWrite> tensors;
  if (const auto factors = gguf::llama_rope_factors(m); !factors.empty()) {
    tensors.push_back({"rope_freqs.weight", {static_cast<int64_t>(factors.size())}, GgmlType::F32, [factors] {
                         const auto* p = reinterpret_cast<const uint8_t*>(factors.data());
                         return std::vector<uint8_t>(p, p + factors.size() * sizeof(float));
                       }});
    ++res.types["F32"];
  }
  uint64_t total = 0;
  for (const gguf::LlamaTensorName& t : gguf::llama_tensor_names(m)) {
    auto it = ours.find(t.ours);
    MT_USER_CHECK(it != ours.end() && it->second.sizes().vec() == t.shape, ck.dir, ": tensor 'model.", t.ours,
                  "' is missing or mis-shaped (the config needs ", at::IntArrayRef(t.shape), ")");
    const GgmlType gt = gguf::tensor_type(type, t, m.n_layer, m.tie_embeddings);
    at::Tensor w = it->second;
    const int64_t heads = t.permute_heads;
    tensors.push_back({t.gguf, ggml_shape(t.shape), gt, [w, heads, gt] {
                         at::Tensor x = w.to(at::kFloat).contiguous();
                         if (heads > 0) x = gguf::permute_for_gguf(x, heads);
                         return gguf::quantize(gt, x.data_ptr<float>(), x.numel());
                       }});
    total += static_cast<uint64_t>(w.numel()) * 4;
    ++res.types[gguf::ggml_type_info(gt).name];
  }
  res.tensors = static_cast<int64_t>(tensors.size());
  if (!fs::path(out_path).parent_path().empty()) fs::create_directories(fs::path(out_path).parent_path());
  // Progress in the weights' fp32 bytes, a line every few seconds once the export takes a while.
  ProgressMeter progress("export: quantize + write", total);
  gguf::write_gguf(out_path, md, tensors, [&](size_t i) {
    int64_t n = 1;
    for (int64_t d : tensors[i].ne) n *= d;
    progress.add(static_cast<uint64_t>(n) * 4);
    progress.report();
  });
  progress.finish();
  res.bytes = fs::file_size(out_path);
  return res;
}

namespace {

// Tensor `t` of the file as fp32 in PyTorch's shape `shape`.
at::Tensor read_dequantized(const gguf::GgufReader& r, const gguf::TensorInfo& t, const std::vector<int64_t>& shape) {
  MT_USER_CHECK(t.ne == ggml_shape(shape), r.path(), ": tensor '", t.name, "' has ggml shape ",
                at::IntArrayRef(t.ne), ", the model's metadata needs ", at::IntArrayRef(ggml_shape(shape)));
  const std::vector<uint8_t> bytes = r.read(t);
  at::Tensor out = at::empty(shape, at::kFloat);
  gguf::dequantize(t.type, bytes.data(), t.numel(), out.data_ptr<float>());
  return out;
}

// rope_freqs.weight must hold the divisors meshtrain's Llama 3.1 scaling implies.
void check_rope_factors(const gguf::GgufReader& r, const ModelConfig& m) {
  const gguf::TensorInfo* t = r.find("rope_freqs.weight");
  if (!t) return;
  const auto want = gguf::llama_rope_factors(m);
  const at::Tensor got = read_dequantized(r, *t, {static_cast<int64_t>(want.size())});
  for (size_t i = 0; i < want.size(); ++i)
    MT_USER_CHECK(std::fabs(got.data_ptr<float>()[i] - want[i]) <= 1e-3f * want[i], r.path(),
                  ": rope_freqs.weight[", i, "] is ", got.data_ptr<float>()[i], ", Llama 3.1's scaling (factor 8 over "
                  "8192 positions, the one meshtrain applies) gives ", want[i]);
}

// The bos/eos ids the tokenizer keys name, inside the vocabulary (else none).
void read_special_ids(const gguf::GgufReader& r, ModelConfig& m) {
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &m.bos_token_id},
                         std::pair{"tokenizer.ggml.eos_token_id", &m.eos_token_id}}) {
    if (!r.has(key)) continue;
    const int64_t v = r.integer(key);
    *id = v >= 0 && v < m.vocab_size ? v : -1;
  }
}

}  // namespace

ImportResult import_gguf(const std::string& gguf_path, const std::string& out_dir) {
  const gguf::GgufReader r(gguf_path);
  Config cfg;
  cfg.model = gguf::llama_config_from_gguf(r);
  read_special_ids(r, cfg.model);
  ModelConfig& m = cfg.model;
  check_rope_factors(r, m);

  std::map<std::string, at::Tensor> ours;
  std::set<std::string> expected = {"rope_freqs.weight"};
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : r.tensors()) total += t.bytes;
  ProgressMeter progress("import: dequantize", total);
  for (const gguf::LlamaTensorName& n : gguf::llama_tensor_names(m)) {
    const gguf::TensorInfo* t = r.find(n.gguf);
    MT_USER_CHECK(t, gguf_path, ": tensor '", n.gguf, "' is missing (a Llama of ", m.n_layer, " layers needs it)");
    at::Tensor w = read_dequantized(r, *t, n.shape);
    ours[n.ours] = n.permute_heads > 0 ? gguf::unpermute_from_gguf(w, n.permute_heads) : w;
    expected.insert(n.gguf);
    progress.add(t->bytes);
    progress.report();
  }
  progress.finish();
  for (const gguf::TensorInfo& t : r.tensors())
    MT_USER_CHECK(expected.count(t.name), gguf_path, ": tensor '", t.name, "' is not a Llama weight meshtrain knows");

  std::string why;
  const auto tok_files = gguf::tokenizer_files_from_gguf(r, why);
  if (!tok_files)
    log::warn("%s: the tokenizer is not carried: %s; pass `generate --tokenizer` a tokenizer.json for this model",
              gguf_path.c_str(), why.c_str());

  cfg.source = gguf_path;
  ImportResult res = write_imported_checkpoint(cfg, ours, out_dir, fs::absolute(gguf_path).string());
  if (tok_files) {
    for (const auto& [name, text] : *tok_files) {
      write_file_atomic((fs::path(out_dir) / name).string(), text);
      res.tokenizer_files.push_back(name);
    }
  }
  return res;
}

}  // namespace meshtrain::ckpt
