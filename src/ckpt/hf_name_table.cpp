// hf_name_table (hf_name_table.h): the Llama and GPT-2 tables, written once, shapes in the model's dimensions.
#include "meshtrain/ckpt/hf_name_table.h"

#include <utility>

#include "meshtrain/core/error.h"

namespace meshtrain::ckpt {
namespace {

// The model dimensions a shape is written in: d_model, d_ff, vocab_size, n_kv_head × head_dim, max_seq_len.
enum class Dim { D, F, V, KV, P };
using enum Dim;

struct Row {
  std::vector<const char*> ours;
  const char* hf;
  std::vector<Dim> shape;
  bool transposed = false;
};

// A family: the rows before the layers, each layer's (names under its layer prefix), the rows after.
struct FamilyTable {
  std::vector<Row> embed, layer, head;
  const char* hf_layer;  // the HF prefix of layer N, followed by "N."
};

const FamilyTable kLlama = {
    .embed = {{{"tok_embed.weight"}, "model.embed_tokens.weight", {V, D}}},
    .layer = {{{"attn_norm.weight"}, "input_layernorm.weight", {D}},
              {{"attn.wq.weight"}, "self_attn.q_proj.weight", {D, D}},
              {{"attn.wk.weight"}, "self_attn.k_proj.weight", {KV, D}},
              {{"attn.wv.weight"}, "self_attn.v_proj.weight", {KV, D}},
              {{"attn.wo.weight"}, "self_attn.o_proj.weight", {D, D}},
              {{"mlp_norm.weight"}, "post_attention_layernorm.weight", {D}},
              {{"mlp.w1.weight"}, "mlp.gate_proj.weight", {F, D}},
              {{"mlp.w3.weight"}, "mlp.up_proj.weight", {F, D}},
              {{"mlp.w2.weight"}, "mlp.down_proj.weight", {D, F}}},
    .head = {{{"final_norm.weight"}, "model.norm.weight", {D}}},
    .hf_layer = "model.layers."};

// GPT-2's Conv1D stores a Linear's weight transposed; c_attn's columns are q | k | v.
const FamilyTable kGpt2 = {
    .embed = {{{"tok_embed.weight"}, "transformer.wte.weight", {V, D}},
              {{"pos_embed.weight"}, "transformer.wpe.weight", {P, D}}},
    .layer = {{{"attn_norm.weight"}, "ln_1.weight", {D}},
              {{"attn_norm.bias"}, "ln_1.bias", {D}},
              {{"attn.wq.weight", "attn.wk.weight", "attn.wv.weight"}, "attn.c_attn.weight", {D, D}, true},
              {{"attn.wq.bias", "attn.wk.bias", "attn.wv.bias"}, "attn.c_attn.bias", {D}},
              {{"attn.wo.weight"}, "attn.c_proj.weight", {D, D}, true},
              {{"attn.wo.bias"}, "attn.c_proj.bias", {D}},
              {{"mlp_norm.weight"}, "ln_2.weight", {D}},
              {{"mlp_norm.bias"}, "ln_2.bias", {D}},
              {{"mlp.fc.weight"}, "mlp.c_fc.weight", {F, D}, true},
              {{"mlp.fc.bias"}, "mlp.c_fc.bias", {F}},
              {{"mlp.proj.weight"}, "mlp.c_proj.weight", {D, F}, true},
              {{"mlp.proj.bias"}, "mlp.c_proj.bias", {D}}},
    .head = {{{"final_norm.weight"}, "transformer.ln_f.weight", {D}},
             {{"final_norm.bias"}, "transformer.ln_f.bias", {D}}},
    .hf_layer = "transformer.h."};

// Both families' untied output head, the same name on both sides.
const Row kLmHead = {{"lm_head.weight"}, "lm_head.weight", {V, D}};

int64_t size_of(Dim d, const ModelConfig& m) {
  switch (d) {
    case D: return m.d_model;
    case F: return m.d_ff;
    case V: return m.vocab_size;
    case KV: return m.n_kv_head * (m.d_model / m.n_head);
    case P: return m.max_seq_len;
  }
  return 0;
}

// `row` with its names under the prefixes (a layer's, or none) and its shape in `m`'s sizes.
HfTensorName expand(const Row& row, const ModelConfig& m, const std::string& ours_prefix,
                    const std::string& hf_prefix) {
  HfTensorName out{.hf = hf_prefix + row.hf, .transposed = row.transposed};
  for (const char* o : row.ours) out.ours.push_back(ours_prefix + o);
  for (Dim d : row.shape) out.shape.push_back(size_of(d, m));
  return out;
}

}  // namespace

std::vector<HfTensorName> hf_name_table(const ModelConfig& m) {
  const FamilyTable& t = m.family == Family::llama ? kLlama : kGpt2;
  std::vector<HfTensorName> out;
  for (const Row& r : t.embed) out.push_back(expand(r, m, "", ""));
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string n = std::to_string(i) + ".";
    for (const Row& r : t.layer) out.push_back(expand(r, m, "blocks." + n, t.hf_layer + n));
  }
  for (const Row& r : t.head) out.push_back(expand(r, m, "", ""));
  if (!m.tie_embeddings) out.push_back(expand(kLmHead, m, "", ""));
  return out;
}

std::vector<int64_t> hf_shape(const HfTensorName& row) {
  std::vector<int64_t> s = row.shape;
  s[0] *= static_cast<int64_t>(row.ours.size());
  if (row.transposed) std::swap(s[0], s[1]);
  return s;
}

std::string llama_hf_layer_name(const std::string& ours) {
  if (ours.rfind("blocks.", 0) != 0) return "";
  const size_t dot = ours.find('.', 7);
  if (dot == std::string::npos) return "";
  const std::string layer = ours.substr(7, dot - 7), rest = ours.substr(dot + 1);
  for (const Row& r : kLlama.layer)
    if (rest == r.ours[0]) return std::string(kLlama.hf_layer) + layer + "." + r.hf;
  return "";
}

}  // namespace meshtrain::ckpt
