#include "meshtrain/ckpt/hf_convert.h"

#include <ATen/ATen.h>

#include <set>
#include <utility>

#include "meshtrain/ckpt/hf_name_table.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::ckpt {
namespace {

// RoPE scaling meshtrain applies (model/transformer.cpp): Llama 3.1's, factor 8 over 8192 positions, once
// max_seq_len exceeds 8192.
nlohmann::json llama3_scaling() {
  return {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 8192}};
}

at::Tensor take(std::map<std::string, at::Tensor>& m, const std::string& name, const std::vector<int64_t>& shape,
                const std::string& where) {
  auto it = m.find(name);
  MT_USER_CHECK(it != m.end(), where, ": tensor '", name, "' is missing");
  at::Tensor t = it->second;
  MT_USER_CHECK(t.sizes().vec() == shape, where, ": tensor '", name, "' has shape ", t.sizes(), ", the config needs ",
                at::IntArrayRef(shape));
  m.erase(it);
  return t;
}

template <class T>
T get_or(const nlohmann::json& j, const std::string& k, T def) {
  return j.contains(k) && !j[k].is_null() ? j[k].get<T>() : def;
}

// meshtrain's -1 is HF's null.
nlohmann::json token_id_json(int64_t id) { return id >= 0 ? nlohmann::json(id) : nlohmann::json(nullptr); }

// HF's bos/eos: an id, null, or (several end tokens, as Llama 3 instruct models have) a list, whose first
// id meshtrain keeps.
int64_t token_id_from(const nlohmann::json& hf, const std::string& key) {
  const nlohmann::json v = get_or<nlohmann::json>(hf, key, nullptr);
  if (v.is_array()) return v.empty() ? -1 : v.front().get<int64_t>();
  return v.is_null() ? -1 : v.get<int64_t>();
}

// transformers' configs carry their class's default ids whatever the vocabulary (GPT2Config's bos and eos
// are 50256 even at vocab_size 256), and no such token exists: kept, the config check would refuse the
// import's config. None (-1) is what the model has — the id is dropped, with a line saying so.
void drop_ids_outside_vocab(ModelConfig& m, const std::string& where) {
  for (auto [key, id] : {std::pair{"bos_token_id", &m.bos_token_id}, std::pair{"eos_token_id", &m.eos_token_id}}) {
    if (*id < m.vocab_size) continue;
    log::warn("%s: %s %lld is outside the vocabulary (vocab_size %lld): imported as none (model.%s: -1); set "
              "model.%s if the model has such a token", where.c_str(), key, static_cast<long long>(*id),
              static_cast<long long>(m.vocab_size), key, key);
    *id = -1;
  }
}

}  // namespace

nlohmann::json hf_config_from(const ModelConfig& m, const std::string& dtype) {
  if (m.family == Family::llama) {
    nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
    nlohmann::json scaling = nullptr;
    if (m.max_seq_len > 8192) {
      scaling = llama3_scaling();
      rope = scaling;
      rope["rope_theta"] = m.rope_theta;
    }
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", m.vocab_size},
            {"hidden_size", m.d_model},
            {"intermediate_size", m.d_ff},
            {"num_hidden_layers", m.n_layer},
            {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.n_kv_head},
            {"head_dim", m.d_model / m.n_head},
            {"max_position_embeddings", m.max_seq_len},
            {"rms_norm_eps", m.norm_eps},
            // transformers ≥ 5 reads rope_parameters; earlier versions rope_theta / rope_scaling.
            {"rope_theta", m.rope_theta},
            {"rope_scaling", scaling},
            {"rope_parameters", rope},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", m.dropout},
            {"tie_word_embeddings", m.tie_embeddings},
            {"bos_token_id", token_id_json(m.bos_token_id)},
            {"eos_token_id", token_id_json(m.eos_token_id)},
            {"torch_dtype", dtype},
            {"dtype", dtype}};
  }
  MT_CHECK(m.family == Family::gpt2, "hf_config_from: unknown family ", m.family);
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", m.vocab_size},
          {"n_positions", m.max_seq_len},
          {"n_embd", m.d_model},
          {"n_layer", m.n_layer},
          {"n_head", m.n_head},
          {"n_inner", m.d_ff},
          {"activation_function", "gelu_new"},  // GELU, tanh approximation, as model/mlp.cpp
          {"layer_norm_epsilon", m.norm_eps},
          {"resid_pdrop", m.dropout},
          {"embd_pdrop", m.dropout},
          {"attn_pdrop", m.dropout},
          {"tie_word_embeddings", m.tie_embeddings},
          {"bos_token_id", token_id_json(m.bos_token_id)},
          {"eos_token_id", token_id_json(m.eos_token_id)},
          {"torch_dtype", dtype},
          {"dtype", dtype}};
}

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& where) {
  ModelConfig m;
  const std::string type = get_or<std::string>(hf, "model_type", "");
  try {
    m.bos_token_id = token_id_from(hf, "bos_token_id");
    m.eos_token_id = token_id_from(hf, "eos_token_id");
    if (type == "llama") {
      m.family = Family::llama;
      m.vocab_size = hf.at("vocab_size").get<int64_t>();
      m.d_model = hf.at("hidden_size").get<int64_t>();
      m.d_ff = hf.at("intermediate_size").get<int64_t>();
      m.n_layer = hf.at("num_hidden_layers").get<int64_t>();
      m.n_head = hf.at("num_attention_heads").get<int64_t>();
      m.n_kv_head = get_or<int64_t>(hf, "num_key_value_heads", m.n_head);
      m.max_seq_len = get_or<int64_t>(hf, "max_position_embeddings", 2048);
      m.norm_eps = get_or<double>(hf, "rms_norm_eps", 1e-6);
      m.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", false);
      m.dropout = get_or<double>(hf, "attention_dropout", 0.0);
      const nlohmann::json rope = get_or<nlohmann::json>(hf, "rope_parameters", nlohmann::json::object());
      m.rope_theta = get_or<double>(rope, "rope_theta", get_or<double>(hf, "rope_theta", 10000.0));
      MT_USER_CHECK(get_or<int64_t>(hf, "head_dim", m.d_model / m.n_head) == m.d_model / m.n_head, where,
                    ": head_dim ", hf["head_dim"], " differs from hidden_size / num_attention_heads (",
                    m.d_model / m.n_head, "); meshtrain does not model that");
      MT_USER_CHECK(!get_or<bool>(hf, "attention_bias", false) && !get_or<bool>(hf, "mlp_bias", false), where,
                    ": attention_bias/mlp_bias true is not supported (meshtrain's Llama has no biases)");
      MT_USER_CHECK(get_or<std::string>(hf, "hidden_act", "silu") == "silu", where, ": hidden_act '",
                    hf["hidden_act"].get<std::string>(), "' is not supported (valid: silu)");
      // What meshtrain applies: Llama 3.1 scaling (factor 8, 8192 positions) when max_seq_len > 8192, else none.
      nlohmann::json scaling = get_or<nlohmann::json>(hf, "rope_scaling", nullptr);
      if (scaling.is_null() && get_or<std::string>(rope, "rope_type", "default") != "default") scaling = rope;
      const bool scaled = !scaling.is_null() && get_or<std::string>(scaling, "rope_type", "default") != "default";
      const bool ours = m.max_seq_len > 8192;
      bool same = scaled == ours;
      if (scaled && ours) {
        const auto want = llama3_scaling();
        for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
          same = same && scaling.contains(k) && scaling[k].get<double>() == want[k].get<double>();
        same = same && scaling.value("rope_type", "") == "llama3";
      }
      MT_USER_CHECK(same, where, ": rope scaling ", scaling.dump(), " with max_position_embeddings ", m.max_seq_len,
                    " is not supported (meshtrain applies llama3 scaling factor 8 over 8192 positions exactly when "
                    "max_position_embeddings > 8192, and none otherwise)");
    } else if (type == "gpt2") {
      m.family = Family::gpt2;
      m.vocab_size = hf.at("vocab_size").get<int64_t>();
      m.d_model = hf.at("n_embd").get<int64_t>();
      m.n_layer = hf.at("n_layer").get<int64_t>();
      m.n_head = hf.at("n_head").get<int64_t>();
      m.n_kv_head = m.n_head;
      m.d_ff = get_or<int64_t>(hf, "n_inner", 4 * m.d_model);
      m.max_seq_len = hf.at("n_positions").get<int64_t>();
      m.norm_eps = get_or<double>(hf, "layer_norm_epsilon", 1e-5);
      m.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true);
      // One probability for meshtrain's embedding, attention and residual dropout: the residual one (HF's
      // default 0.1, which its embd_pdrop and attn_pdrop share unless a config sets them apart).
      m.dropout = get_or<double>(hf, "resid_pdrop", 0.1);
      const std::string act = get_or<std::string>(hf, "activation_function", "gelu_new");
      MT_USER_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", where, ": activation_function '", act,
                    "' is not supported (valid: gelu_new, gelu_pytorch_tanh)");
      MT_USER_CHECK(!get_or<bool>(hf, "scale_attn_by_inverse_layer_idx", false) &&
                        get_or<bool>(hf, "scale_attn_weights", true),
                    where, ": GPT-2 attention scaling options other than the default are not supported");
    } else {
      throw UserError(cat(where, ": model_type '", type, "' is not supported (valid: llama, gpt2)"));
    }
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat(where, ": ", e.what()));
  }
  MT_USER_CHECK(m.n_head > 0 && m.d_model % m.n_head == 0 && m.n_kv_head > 0 && m.n_head % m.n_kv_head == 0, where,
                ": hidden size ", m.d_model, ", ", m.n_head, " heads and ", m.n_kv_head, " key/value heads do not divide");
  drop_ids_outside_vocab(m, where);
  return m;
}

std::map<std::string, at::Tensor> to_hf_tensors(const ModelConfig& m, const std::map<std::string, at::Tensor>& ours_in) {
  auto ours = ours_in;
  std::map<std::string, at::Tensor> hf;
  const std::string where = "checkpoint";
  for (const HfTensorName& row : hf_name_table(m)) {
    std::vector<at::Tensor> parts;
    for (const auto& name : row.ours) parts.push_back(take(ours, name, row.shape, where));
    at::Tensor t = parts.size() == 1 ? parts[0] : at::cat(parts, 0);
    hf[row.hf] = row.transposed ? t.t().contiguous() : t;
  }
  MT_USER_CHECK(ours.empty(), "checkpoint: parameter '", ours.begin()->first, "' has no Hugging Face counterpart");
  return hf;
}

std::string hf_table_name(const ModelConfig& m, const std::string& file_name) {
  std::string n = file_name;
  if (m.family == Family::gpt2 && n.rfind("transformer.", 0) != 0 && n != "lm_head.weight") n = "transformer." + n;
  auto ends = [&](const std::string& s) { return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0; };
  if (ends(".attn.bias") || ends(".attn.masked_bias") || ends("rotary_emb.inv_freq")) return "";
  // A tied model's file may still carry lm_head.weight (a copy of the embedding): not a separate weight.
  if (m.tie_embeddings && n == "lm_head.weight") return "";
  return n;
}

void check_hf_tensors(const ModelConfig& m, const std::map<std::string, std::vector<int64_t>>& shapes_in,
                      const std::string& where) {
  auto shapes = shapes_in;
  for (const HfTensorName& row : hf_name_table(m)) {
    const auto it = shapes.find(row.hf);
    MT_USER_CHECK(it != shapes.end(), where, ": tensor '", row.hf, "' is missing");
    const std::vector<int64_t> want = hf_shape(row);
    MT_USER_CHECK(it->second == want, where, ": tensor '", row.hf, "' has shape ", at::IntArrayRef(it->second),
                  ", the config needs ", at::IntArrayRef(want));
    shapes.erase(it);
  }
  MT_USER_CHECK(shapes.empty(), where, ": tensor '", shapes.begin()->first, "' is not a ", m.family,
                " weight meshtrain knows (", shapes.size(), " unexpected)");
}

std::map<std::string, at::Tensor> from_hf_tensors(const ModelConfig& m, const std::map<std::string, at::Tensor>& hf_in,
                                                  const std::string& where) {
  std::map<std::string, at::Tensor> hf;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : hf_in) {
    const std::string n = hf_table_name(m, name);
    if (n.empty()) continue;
    hf[n] = t;
    shapes[n] = t.sizes().vec();
  }
  check_hf_tensors(m, shapes, where);
  std::map<std::string, at::Tensor> ours;
  for (const HfTensorName& row : hf_name_table(m)) {
    at::Tensor t = hf.at(row.hf);
    if (row.transposed) t = t.t();
    if (row.ours.size() == 1) {
      ours[row.ours[0]] = row.transposed ? t.contiguous() : t;
      continue;
    }
    const int64_t n = row.shape[0];  // a fused tensor: its parts in order along dim 0
    for (size_t j = 0; j < row.ours.size(); ++j)
      ours[row.ours[j]] = t.narrow(0, static_cast<int64_t>(j) * n, n).contiguous();
  }
  return ours;
}

}  // namespace meshtrain::ckpt
