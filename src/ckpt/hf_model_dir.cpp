// HfModelDir (hf_model_dir.h): a Hugging Face directory's config and weights, read in place.
#include "meshtrain/ckpt/hf_model_dir.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/hf_convert.h"
#include "meshtrain/ckpt/hf_name_table.h"
#include "meshtrain/ckpt/range_reader.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/progress_meter.h"

namespace fs = std::filesystem;

namespace meshtrain::ckpt {
namespace {

nlohmann::json read_json(const fs::path& p, const std::string& what_it_is) {
  std::ifstream in(p);
  MT_USER_CHECK(in, p.string(), ": not found (expected ", what_it_is, ")");
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw UserError(cat(p.string(), ": ", e.what()));
  }
}

// The weight files: those model.safetensors.index.json maps tensors to, else model.safetensors.
std::vector<std::string> safetensors_files(const fs::path& dir) {
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    const nlohmann::json index = read_json(index_path, "the index of the safetensors shards");
    MT_USER_CHECK(index.contains("weight_map") && index["weight_map"].is_object(), index_path.string(),
                  ": no \"weight_map\" object (tensor name → file)");
    std::set<std::string> unique;
    for (const auto& [name, f] : index["weight_map"].items()) {
      MT_USER_CHECK(f.is_string() && f.get<std::string>().find('/') == std::string::npos, index_path.string(),
                    ": weight_map[\"", name, "\"] is ", f.dump(), "; valid a file name beside the index");
      unique.insert((dir / f.get<std::string>()).string());
    }
    return {unique.begin(), unique.end()};
  }
  MT_USER_CHECK(fs::exists(dir / "model.safetensors"), dir.string(),
                ": no model.safetensors or model.safetensors.index.json (only safetensors weights are read; "
                "convert pytorch_model.bin with transformers' save_pretrained(safe_serialization=True))");
  return {(dir / "model.safetensors").string()};
}

// One block's read: the rows [first, first + rows) of the HF tensor into `staged`, then its part copied out —
// or, where those rows are the block itself (Llama's dim-0 blocks in the file's dtype, in host memory), straight
// into it, as a checkpoint load reads a block that matches (checkpoint_reader.h).
struct RowRead {
  ShardedTensor* block;
  const HfTensorName* row;
  size_t part;
  at::Tensor staged;  // [rows, HF shape[1:]…] in the file's dtype; the block's `local` itself when `direct`
  bool direct = false;
};

// The rows of the HF tensor that hold `b` (part `part` of `row`): Llama's tensors and GPT-2's biases keep
// meshtrain's layout (part j's rows follow parts 0…j-1); GPT-2's transposed weights hold meshtrain's columns as
// rows. Returns {first row, rows}.
std::pair<int64_t, int64_t> hf_rows(const ShardedTensor& b, const HfTensorName& row, size_t part) {
  if (row.transposed) {
    MT_CHECK(b.global_shape.size() == 2, "hf_rows: a transposed tensor of rank ", b.global_shape.size());
    return {b.offsets[1], b.local.size(1)};
  }
  return {static_cast<int64_t>(part) * row.shape[0] + b.offsets[0], b.local.size(0)};
}

// The block's elements out of its staged rows.
at::Tensor block_of(const RowRead& r) {
  const ShardedTensor& b = *r.block;
  at::Tensor t = r.staged;
  if (r.row->transposed)  // [its columns, all of HF's columns] → meshtrain's rows of this part, its columns
    return t.t().narrow(0, static_cast<int64_t>(r.part) * r.row->shape[0] + b.offsets[0], b.local.size(0));
  for (int64_t d = 1; d < t.dim(); ++d) t = t.narrow(d, b.offsets[static_cast<size_t>(d)], b.local.size(d));
  return t;
}

void read_rows(std::vector<RowRead>& batch, std::vector<ReadRange>& ranges, ProgressMeter& progress) {
  ReadOptions opts = ReadOptions::from_env();
  opts.progress = &progress;
  read_ranges(ranges, opts);
  for (RowRead& r : batch)
    if (!r.direct) r.block->local.copy_(block_of(r));
  batch.clear();
  ranges.clear();
}

constexpr uint64_t kStageBytes = 1ull << 30;  // staged rows held at once

// Where block `b` (part `part` of `row`) is read to: its own storage where the rows are exactly it, else a
// staging tensor of the rows.
RowRead plan_row_read(ShardedTensor& b, const HfTensorName& row, size_t part, const TensorEntry& entry) {
  const at::ScalarType saved = dtype_from_safetensors(entry.dtype);
  std::vector<int64_t> shape = entry.shape;
  shape[0] = hf_rows(b, row, part).second;
  const bool direct = !row.transposed && b.local.is_cpu() && b.local.is_contiguous() &&
                      b.local.scalar_type() == saved && b.local.sizes().vec() == shape;
  return {&b, &row, part, direct ? b.local : at::empty(shape, at::TensorOptions().dtype(saved)), direct};
}

}  // namespace

bool HfModelDir::holds_hf_model(const std::string& dir) { return fs::is_regular_file(fs::path(dir) / "config.json"); }

HfModelDir::HfModelDir(const std::string& dir) : dir_(dir), config_file_((fs::path(dir) / "config.json").string()) {
  model_ = model_config_from_hf(read_json(config_file_, "a Hugging Face model directory"), config_file_);
  files_ = safetensors_files(dir);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& file : files_) {
    const SafetensorsReader r(file);
    for (const auto& [name, e] : r.entries()) {
      const std::string n = hf_table_name(model_, name);
      if (n.empty()) continue;
      const std::string where = cat(file, ": tensor '", name, "'");
      const auto [it, fresh] = tensors_.emplace(n, Located{file, e});
      MT_USER_CHECK(fresh, where, " is also in ", it->second.file);
      int64_t numel = 1;
      for (int64_t s : e.shape) numel *= s;
      const uint64_t need = static_cast<uint64_t>(numel) * c10::elementSize(dtype_from_safetensors(e.dtype, where));
      MT_USER_CHECK(e.end - e.begin == need, where, " has ", e.end - e.begin, " bytes, its shape and dtype need ",
                    need);
      shapes[n] = e.shape;
    }
  }
  check_hf_tensors(model_, shapes, dir_);
}

void HfModelDir::load(std::vector<ShardedTensor>& wanted, const std::string& what) const {
  at::NoGradGuard no_grad;  // `local` may be a parameter (a leaf that requires grad): filled in place
  const std::vector<HfTensorName> table = hf_name_table(model_);
  std::map<std::string, std::pair<const HfTensorName*, size_t>> part_of;  // meshtrain name → row, part
  for (const HfTensorName& row : table)
    for (size_t j = 0; j < row.ours.size(); ++j) part_of["model." + row.ours[j]] = {&row, j};
  const std::string where = cat(what.empty() ? "" : what + " ", dir_);
  // Every check before the first byte is read.
  std::vector<RowRead> reads;
  uint64_t total = 0;
  for (ShardedTensor& b : wanted) {
    const auto it = part_of.find(b.name);
    if (it == part_of.end())
      throw IncompatibleCheckpoint(cat(where, ": holds no tensor for '", b.name, "' (a ", model_.family,
                                       " model without it; a different model, or LoRA adapters?)"));
    const auto [row, part] = it->second;
    if (b.global_shape != row->shape)
      throw IncompatibleCheckpoint(cat(where, ": tensor '", b.name, "' has shape ", shape_text(row->shape),
                                       " there, the current run needs ", shape_text(b.global_shape)));
    if (b.local.numel() == 0) continue;
    reads.push_back(plan_row_read(b, *row, part, tensors_.at(row->hf).entry));
    total += static_cast<uint64_t>(reads.back().staged.numel()) * reads.back().staged.element_size();
  }
  ProgressMeter progress("load " + fs::path(dir_).filename().string(), total);
  std::vector<RowRead> batch;
  std::vector<ReadRange> ranges;
  uint64_t staged_bytes = 0;
  for (RowRead& r : reads) {
    const Located& at_file = tensors_.at(r.row->hf);
    const uint64_t bytes = static_cast<uint64_t>(r.staged.numel()) * r.staged.element_size();
    const uint64_t row_bytes = r.staged.size(0) > 0 ? bytes / static_cast<uint64_t>(r.staged.size(0)) : 0;
    const auto first = static_cast<uint64_t>(hf_rows(*r.block, *r.row, r.part).first);
    ranges.push_back({at_file.file, at_file.entry.begin + first * row_bytes, bytes, r.staged.data_ptr(), r.row->hf});
    staged_bytes += r.direct ? 0 : bytes;
    batch.push_back(std::move(r));
    if (staged_bytes >= kStageBytes) {
      read_rows(batch, ranges, progress);
      staged_bytes = 0;
    }
  }
  if (!batch.empty()) read_rows(batch, ranges, progress);
  progress.finish();
}

std::map<std::string, at::Tensor> HfModelDir::read_model() const {
  std::vector<ShardedTensor> wanted;
  for (const HfTensorName& row : hf_name_table(model_)) {
    const at::ScalarType dtype = dtype_from_safetensors(tensors_.at(row.hf).entry.dtype);
    for (const std::string& name : row.ours)
      wanted.push_back({"model." + name, row.shape, std::vector<int64_t>(row.shape.size(), 0),
                        at::empty(row.shape, at::TensorOptions().dtype(dtype)), true});
  }
  load(wanted);
  std::map<std::string, at::Tensor> out;
  for (ShardedTensor& w : wanted) out.emplace(w.name, std::move(w.local));
  return out;
}

void HfModelDir::check_model(const ModelConfig& m, const std::string& what) const {
  const ModelConfig& h = model_;
  const auto text = [](const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, bool>) return std::string(v ? "true" : "false");
    else return cat(v);
  };
  const auto differ = [&](const char* key, const auto& ours, const auto& theirs) {
    MT_USER_CHECK(ours == theirs, what, " ", dir_, ": model.", key, " is ", text(ours), " but ", config_file_,
                  " gives ", text(theirs), "; valid ", text(theirs),
                  " (`meshtrain import` writes the model section a run from it needs)");
  };
  differ("family", m.family, h.family);
  differ("vocab_size", m.vocab_size, h.vocab_size);
  differ("d_model", m.d_model, h.d_model);
  differ("n_layer", m.n_layer, h.n_layer);
  differ("n_head", m.n_head, h.n_head);
  differ("n_kv_head", m.n_kv_head > 0 ? m.n_kv_head : m.n_head, h.n_kv_head);
  differ("d_ff", m.d_ff, h.d_ff);
  differ("tie_embeddings", m.tie_embeddings, h.tie_embeddings);
  differ("rope_theta", m.rope_theta, h.rope_theta);
  differ("norm_eps", m.norm_eps, h.norm_eps);
}

}  // namespace meshtrain::ckpt
