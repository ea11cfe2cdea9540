// Tokenizer metadata ↔ Hugging Face tokenizer files (gguf_tokenizer.h).
#include "meshtrain/ckpt/gguf/gguf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/text/split_pattern.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace meshtrain::ckpt::gguf {
namespace {

enum TokenType : int { kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5 };

// llama.cpp's names of the pre-tokenizer regexes meshtrain's text room knows.
const std::pair<text::SplitPattern, const char*> kPreNames[] = {
    {text::SplitPattern::Gpt2, "gpt-2"}, {text::SplitPattern::Llama3, "llama-bpe"}, {text::SplitPattern::Qwen2, "qwen2"}};

json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  MT_USER_CHECK(in, p.string(), ": cannot read");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw UserError(cat(p.string(), ": not valid JSON: ", e.what()));
  }
}

// The Split regex of the pre-tokenizer (a Sequence's or alone), "" for a lone ByteLevel (GPT-2's own regex).
std::string split_regex(const json& pre) {
  if (!pre.is_object()) return "";
  if (pre.value("type", "") == "Split" && pre.contains("pattern")) return pre["pattern"].value("Regex", "");
  if (pre.value("type", "") == "Sequence")
    for (const json& s : pre.value("pretokenizers", json::array()))
      if (std::string r = split_regex(s); !r.empty()) return r;
  return "";
}

const char* pre_name(const json& tok, const std::string& where) {
  const std::string regex = split_regex(tok.value("pre_tokenizer", json()));
  if (regex.empty()) return "gpt-2";
  const auto p = text::recognise_split_pattern(regex);
  MT_USER_CHECK(p, where, ": the pre-tokenizer's regex is none of GPT-2's, Llama 3's or Qwen 2's, which llama.cpp "
                "names gpt-2, llama-bpe, qwen2");
  for (const auto& [pat, name] : kPreNames)
    if (pat == *p) return name;
  return "gpt-2";
}

// Whether the post-processor puts a special token before the text (Llama 3's BOS).
bool adds_bos(const json& pp) {
  if (!pp.is_object()) return false;
  if (pp.value("type", "") == "Sequence") {
    for (const json& s : pp.value("processors", json::array()))
      if (adds_bos(s)) return true;
    return false;
  }
  const json single = pp.value("single", json::array());
  return pp.value("type", "") == "TemplateProcessing" && !single.empty() && single[0].contains("SpecialToken");
}

// tokenizer_config.json's chat template: a string, or a list of {name, template} (the one named "default").
std::string config_chat_template(const fs::path& dir) {
  if (fs::is_regular_file(dir / "chat_template.jinja")) {
    std::ifstream in(dir / "chat_template.jinja");
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  if (!fs::is_regular_file(dir / "tokenizer_config.json")) return "";
  const json cfg = read_json_file(dir / "tokenizer_config.json");
  const json t = cfg.value("chat_template", json());
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const json& e : t)
      if (e.value("name", "") == "default") return e.value("template", "");
  return "";
}

// A special token's content in tokenizer_config.json ("<s>" or {"content": "<s>"}), or "".
std::string config_token(const fs::path& dir, const char* key) {
  if (!fs::is_regular_file(dir / "tokenizer_config.json")) return "";
  const json cfg = read_json_file(dir / "tokenizer_config.json");
  const json v = cfg.value(key, json());
  return v.is_string() ? v.get<std::string>() : v.is_object() ? v.value("content", "") : "";
}

std::string merge_text(const json& mg) {
  return mg.is_array() ? mg.at(0).get<std::string>() + " " + mg.at(1).get<std::string>() : mg.get<std::string>();
}

}  // namespace

Metadata tokenizer_metadata(const std::string& tokenizer_json, const ModelConfig& m) {
  const json tok = read_json_file(tokenizer_json);
  const fs::path dir = fs::path(tokenizer_json).parent_path();
  try {
    const json& model = tok.at("model");
    MT_USER_CHECK(model.value("type", "") == "BPE", tokenizer_json, ": model '", model.value("type", "?"),
                  "' is not byte-level BPE (GGUF export writes tokenizer.ggml.model gpt2 only)");
    std::vector<std::string> tokens(static_cast<size_t>(m.vocab_size));
    std::vector<int> types(tokens.size(), kUnused);
    const auto put = [&](int64_t id, const std::string& text, int type) {
      MT_USER_CHECK(id >= 0 && id < m.vocab_size, tokenizer_json, ": token '", text, "' has id ", id,
                    ", outside the model's vocabulary of ", m.vocab_size, " (a tokenizer of another model?)");
      tokens[static_cast<size_t>(id)] = text;
      types[static_cast<size_t>(id)] = type;
    };
    for (const auto& [text, id] : model.at("vocab").items()) put(id.get<int64_t>(), text, kNormal);
    for (const json& a : tok.value("added_tokens", json::array()))
      put(a.at("id").get<int64_t>(), a.at("content").get<std::string>(), a.value("special", false) ? kControl : kUserDefined);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (types[i] == kUnused) tokens[i] = "[PAD" + std::to_string(i) + "]";
    json merges = json::array();
    for (const json& mg : model.at("merges")) merges.push_back(merge_text(mg));
    const auto id_of = [&](int64_t configured, const char* key) -> int64_t {
      if (configured >= 0) return configured;
      const std::string text = config_token(dir, key);
      for (size_t i = 0; i < tokens.size() && !text.empty(); ++i)
        if (tokens[i] == text && types[i] != kUnused) return static_cast<int64_t>(i);
      return -1;
    };
    Metadata md = {{"tokenizer.ggml.model", string_value("gpt2")},
                   {"tokenizer.ggml.pre", string_value(pre_name(tok, tokenizer_json))},
                   {"tokenizer.ggml.tokens", array_value(ValueType::String, tokens)},
                   {"tokenizer.ggml.token_type", array_value(ValueType::I32, types)},
                   {"tokenizer.ggml.merges", array_value(ValueType::String, merges)}};
    if (const int64_t bos = id_of(m.bos_token_id, "bos_token"); bos >= 0)
      md.push_back({"tokenizer.ggml.bos_token_id", u32_value(static_cast<uint64_t>(bos))});
    if (const int64_t eos = id_of(m.eos_token_id, "eos_token"); eos >= 0)
      md.push_back({"tokenizer.ggml.eos_token_id", u32_value(static_cast<uint64_t>(eos))});
    md.push_back({"tokenizer.ggml.add_bos_token", bool_value(adds_bos(tok.value("post_processor", json())))});
    if (const std::string t = config_chat_template(dir); !t.empty()) md.push_back({"tokenizer.chat_template", string_value(t)});
    return md;
  } catch (const json::exception& e) {
    throw UserError(cat(tokenizer_json, ": ", e.what()));
  }
}

namespace {

// tokenizer.json for the GGUF's vocabulary: ids of normal tokens in the BPE vocabulary, control and user-defined
// ones as added tokens, unused (padding) ids left out.
json tokenizer_json_from(const json& tokens, const json& types, const json& merges, text::SplitPattern pat,
                         int64_t bos, bool add_bos) {
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int t = types.is_array() && i < types.size() ? types[i].get<int>() : kNormal;
    if (t == kUnused) continue;
    if (t == kControl || t == kUserDefined) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", t == kControl}});
      continue;
    }
    vocab[tokens[i].get<std::string>()] = i;
  }
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  if (pat != text::SplitPattern::Gpt2) {
    json split = {{"type", "Split"}, {"pattern", {{"Regex", std::string(text::split_pattern_regex(pat))}}},
                  {"behavior", "Isolated"}, {"invert", false}};
    pre["use_regex"] = false;
    pre = {{"type", "Sequence"}, {"pretokenizers", {split, pre}}};
  }
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  if (add_bos && bos >= 0) {
    const std::string b = tokens[static_cast<size_t>(bos)].get<std::string>();
    const json bos_item = {{"SpecialToken", {{"id", b}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos_item,
                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{b, {{"id", b}, {"ids", {bos}}, {"tokens", {b}}}}}}};
  }
  return {{"version", "1.0"},   {"truncation", nullptr}, {"padding", nullptr},  {"added_tokens", added},
          {"normalizer", nullptr}, {"pre_tokenizer", pre}, {"post_processor", post},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                     {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}}}};
}

}  // namespace

std::optional<std::map<std::string, std::string>> tokenizer_files_from_gguf(const GgufReader& r, std::string& why) {
  const auto md = [&](const char* k) { return r.metadata().count(k) ? r.metadata().at(k).value : json(); };
  const std::string model = md("tokenizer.ggml.model").is_string() ? md("tokenizer.ggml.model").get<std::string>() : "";
  if (model != "gpt2") {
    why = "tokenizer.ggml.model '" + model + "' is not byte-level BPE (gpt2), which meshtrain's tokenizer reads";
    return std::nullopt;
  }
  const std::string pre = md("tokenizer.ggml.pre").is_string() ? md("tokenizer.ggml.pre").get<std::string>() : "gpt-2";
  std::optional<text::SplitPattern> pat;
  for (const auto& [p, name] : kPreNames)
    if (pre == name || (pre == "llama3" && p == text::SplitPattern::Llama3)) pat = p;
  if (!pat) {
    why = "tokenizer.ggml.pre '" + pre + "' is not a pre-tokenizer meshtrain knows (gpt-2, llama-bpe, qwen2)";
    return std::nullopt;
  }
  const json tokens = md("tokenizer.ggml.tokens"), merges = md("tokenizer.ggml.merges");
  if (!tokens.is_array() || !merges.is_array()) {
    why = "tokenizer.ggml.tokens or tokenizer.ggml.merges is missing (a gpt2 tokenizer needs both)";
    return std::nullopt;
  }
  const auto id = [&](const char* k) {
    const json v = md(k);
    return v.is_number_integer() && v.get<int64_t>() < static_cast<int64_t>(tokens.size()) ? v.get<int64_t>() : -1;
  };
  const int64_t bos = id("tokenizer.ggml.bos_token_id"), eos = id("tokenizer.ggml.eos_token_id");
  const bool add_bos = md("tokenizer.ggml.add_bos_token").is_boolean() && md("tokenizer.ggml.add_bos_token").get<bool>();
  std::map<std::string, std::string> files;
  files["tokenizer.json"] =
      tokenizer_json_from(tokens, md("tokenizer.ggml.token_type"), merges, *pat, bos, add_bos).dump() + "\n";
  json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"add_bos_token", add_bos},
              {"clean_up_tokenization_spaces", false}};
  if (bos >= 0) cfg["bos_token"] = tokens[static_cast<size_t>(bos)];
  if (eos >= 0) cfg["eos_token"] = tokens[static_cast<size_t>(eos)];
  if (md("tokenizer.chat_template").is_string()) cfg["chat_template"] = md("tokenizer.chat_template");
  files["tokenizer_config.json"] = cfg.dump(2) + "\n";
  json gen = json::object();
  if (bos >= 0) gen["bos_token_id"] = bos;
  json stops = json::array();  // the end of text and, for chat models, the end of a turn
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const int64_t e = id(k); e >= 0 && std::find(stops.begin(), stops.end(), json(e)) == stops.end()) stops.push_back(e);
  if (!stops.empty()) gen["eos_token_id"] = stops.size() == 1 ? stops[0] : stops;
  files["generation_config.json"] = gen.dump(2) + "\n";
  return files;
}

}  // namespace meshtrain::ckpt::gguf
