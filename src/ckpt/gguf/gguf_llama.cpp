// llama.cpp's Llama layout (gguf_llama.h).
#include "meshtrain/ckpt/gguf/gguf_llama.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

#include "meshtrain/ckpt/hf_name_table.h"
#include "meshtrain/core/error.h"
#include "meshtrain/model/rotary.h"

namespace meshtrain::ckpt::gguf {
namespace {

// Hugging Face name (after "model.layers.N.") → llama.cpp's (after "blk.N.").
const std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},   {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},     {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},      {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};
const std::pair<const char*, const char*> kOuterNames[] = {
    {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"}};

constexpr const char* kHfLayerPrefix = "model.layers.";

// "model.layers.3.self_attn.q_proj.weight" → {"blk.3.attn_q.weight", 3}.
std::pair<std::string, int64_t> gguf_name_of(const std::string& hf) {
  for (const auto& [h, g] : kOuterNames)
    if (hf == h) return {g, -1};
  MT_CHECK(hf.rfind(kHfLayerPrefix, 0) == 0, "gguf: no llama.cpp name for ", hf);
  const size_t start = std::string(kHfLayerPrefix).size(), dot = hf.find('.', start);
  const std::string layer = hf.substr(start, dot - start), rest = hf.substr(dot + 1);
  for (const auto& [h, g] : kLayerNames)
    if (rest == h) return {"blk." + layer + "." + g, std::stoll(layer)};
  MT_CHECK(false, "gguf: no llama.cpp name for ", hf);
  return {};
}

// The key under the architecture's prefix: "llama.context_length".
std::string llama_key(const char* k) { return std::string("llama.") + k; }

int64_t positive_key(const GgufReader& r, const std::string& k) {
  const int64_t v = r.integer(k);
  MT_USER_CHECK(v > 0, r.path(), ": metadata key '", k, "' is ", v, " (must be > 0)");
  return v;
}

}  // namespace

std::vector<LlamaTensorName> llama_tensor_names(const ModelConfig& m) {
  MT_CHECK(m.family == Family::llama, "llama_tensor_names: not a Llama");
  std::vector<LlamaTensorName> out;
  for (const HfTensorName& row : hf_name_table(m)) {
    auto [name, layer] = gguf_name_of(row.hf);
    int64_t heads = 0;
    if (name.ends_with("attn_q.weight")) heads = m.n_head;
    if (name.ends_with("attn_k.weight")) heads = m.n_kv_head;
    out.push_back({row.ours[0], name, row.shape, heads, layer});
  }
  return out;
}

at::Tensor permute_for_gguf(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  return w.reshape({heads, 2, rows / heads / 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

at::Tensor unpermute_from_gguf(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  return w.reshape({heads, rows / heads / 2, 2, w.size(1)}).transpose(1, 2).reshape(w.sizes()).contiguous();
}

Metadata llama_metadata(const ModelConfig& m, const std::string& name, uint32_t file_type) {
  const int64_t head_dim = m.d_model / m.n_head;
  return {{"general.architecture", string_value("llama")},
          {"general.type", string_value("model")},
          {"general.name", string_value(name)},
          {llama_key("block_count"), u32_value(static_cast<uint64_t>(m.n_layer))},
          {llama_key("context_length"), u32_value(static_cast<uint64_t>(m.max_seq_len))},
          {llama_key("embedding_length"), u32_value(static_cast<uint64_t>(m.d_model))},
          {llama_key("feed_forward_length"), u32_value(static_cast<uint64_t>(m.d_ff))},
          {llama_key("attention.head_count"), u32_value(static_cast<uint64_t>(m.n_head))},
          {llama_key("attention.head_count_kv"), u32_value(static_cast<uint64_t>(m.n_kv_head))},
          {llama_key("rope.freq_base"), f32_value(m.rope_theta)},
          {llama_key("attention.layer_norm_rms_epsilon"), f32_value(m.norm_eps)},
          {llama_key("attention.key_length"), u32_value(static_cast<uint64_t>(head_dim))},
          {llama_key("attention.value_length"), u32_value(static_cast<uint64_t>(head_dim))},
          {"general.file_type", u32_value(file_type)},
          {llama_key("vocab_size"), u32_value(static_cast<uint64_t>(m.vocab_size))},
          {llama_key("rope.dimension_count"), u32_value(static_cast<uint64_t>(head_dim))},
          {"general.quantization_version", u32_value(2)}};
}

std::vector<float> llama_rope_factors(const ModelConfig& m) {
  model::RopeScaling scaling;
  if (m.max_seq_len <= scaling.original_max_positions) return {};
  scaling.factor = 8.0;  // what model/transformer.cpp applies
  const int64_t head_dim = m.d_model / m.n_head;
  const at::Tensor plain = model::rope_inv_freq(head_dim, m.rope_theta, {});
  const at::Tensor scaled = model::rope_inv_freq(head_dim, m.rope_theta, scaling);
  const at::Tensor f = (plain.to(at::kDouble) / scaled.to(at::kDouble)).to(at::kFloat).contiguous();
  return {f.data_ptr<float>(), f.data_ptr<float>() + f.numel()};
}

ModelConfig llama_config_from_gguf(const GgufReader& r) {
  const std::string arch = r.string("general.architecture");
  MT_USER_CHECK(arch == "llama", r.path(), ": general.architecture '", arch,
                "' is not supported (valid: llama)");
  MT_USER_CHECK(!r.has(llama_key("expert_count")) || r.integer(llama_key("expert_count")) == 0, r.path(), ": llama.expert_count ",
                r.has(llama_key("expert_count")) ? r.integer(llama_key("expert_count")) : 0,
                ": a mixture of experts is not supported (meshtrain's Llama is dense)");
  MT_USER_CHECK(!r.has(llama_key("rope.scaling.type")) || r.string(llama_key("rope.scaling.type")) == "none", r.path(),
                ": llama.rope.scaling.type '", r.has(llama_key("rope.scaling.type")) ? r.string(llama_key("rope.scaling.type")) : "",
                "' is not supported (meshtrain applies Llama 3.1's scaling, carried as rope_freqs.weight, or none)");
  ModelConfig m;
  m.family = Family::llama;
  m.n_layer = positive_key(r, llama_key("block_count"));
  m.d_model = positive_key(r, llama_key("embedding_length"));
  m.d_ff = positive_key(r, llama_key("feed_forward_length"));
  m.n_head = positive_key(r, llama_key("attention.head_count"));
  m.n_kv_head = r.has(llama_key("attention.head_count_kv")) ? positive_key(r, llama_key("attention.head_count_kv")) : m.n_head;
  m.max_seq_len = positive_key(r, llama_key("context_length"));
  m.norm_eps = r.number(llama_key("attention.layer_norm_rms_epsilon"));
  m.rope_theta = r.has(llama_key("rope.freq_base")) ? r.number(llama_key("rope.freq_base")) : 10000.0;
  m.dropout = 0.0;
  MT_USER_CHECK(m.d_model % m.n_head == 0 && m.n_head % m.n_kv_head == 0, r.path(), ": embedding_length ", m.d_model,
                ", head_count ", m.n_head, " and head_count_kv ", m.n_kv_head, " do not divide");
  const int64_t head_dim = m.d_model / m.n_head;
  for (const char* k : {"rope.dimension_count", "attention.key_length", "attention.value_length"})
    MT_USER_CHECK(!r.has(llama_key(k)) || r.integer(llama_key(k)) == head_dim, r.path(), ": llama.", k, " ", r.integer(llama_key(k)),
                  " differs from embedding_length / head_count (", head_dim, "); meshtrain does not model that");
  const TensorInfo* embd = r.find("token_embd.weight");
  MT_USER_CHECK(embd && embd->ne.size() == 2, r.path(), ": tensor 'token_embd.weight' is missing or not 2-D");
  m.vocab_size = embd->ne[1];
  m.tie_embeddings = r.find("output.weight") == nullptr;
  // meshtrain applies Llama 3.1's scaling exactly when max_seq_len > 8192: the file must agree.
  const bool scaled = r.find("rope_freqs.weight") != nullptr, ours = m.max_seq_len > 8192;
  MT_USER_CHECK(scaled == ours, r.path(), scaled ? ": rope_freqs.weight (RoPE scaling) with context_length " :
                ": no rope_freqs.weight (no RoPE scaling) with context_length ", m.max_seq_len,
                " is not supported (meshtrain applies Llama 3.1's scaling exactly when the context exceeds 8192)");
  return m;
}

}  // namespace meshtrain::ckpt::gguf
