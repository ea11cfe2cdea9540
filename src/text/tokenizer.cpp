#include "meshtrain/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "meshtrain/core/error.h"
#include "meshtrain/text/byte_level.h"
#include "meshtrain/text/unicode.h"

namespace meshtrain::text {

using nlohmann::json;

// Reads the components of tokenizer.json; each unsupported one is named in a UserError.
struct TokenizerLoader {
  const json& j;
  const std::string& where;

  static std::string type_of(const json& c) { return c.is_object() ? c.value("type", std::string("?")) : "?"; }
  static bool absent(const json& j, const char* key) { return !j.contains(key) || j[key].is_null(); }

  void check_normalizer() const {
    if (absent(j, "normalizer")) return;
    const json& n = j["normalizer"];
    MT_USER_CHECK(type_of(n) == "Sequence" && n.value("normalizers", json::array()).empty(), where,
                  ": normalizer '", type_of(n), "' is not supported (byte-level BPE tokenizers have none)");
  }

  void add_pre_tokenizer(const json& p, std::vector<PreTokenizeStep>& steps) const {
    const std::string type = type_of(p);
    if (type == "Sequence") {
      for (const json& s : p.at("pretokenizers")) add_pre_tokenizer(s, steps);
    } else if (type == "ByteLevel") {
      steps.push_back({PreTokenizeStep::Kind::ByteLevel, SplitPattern::Gpt2, p.value("add_prefix_space", false),
                       p.value("use_regex", true)});
    } else if (type == "Split") {
      const json& pat = p.at("pattern");
      MT_USER_CHECK(pat.contains("Regex"), where, ": pre_tokenizer Split with a String pattern is not supported");
      const std::string regex = pat["Regex"].get<std::string>();
      auto known = recognise_split_pattern(regex);
      MT_USER_CHECK(known, where, ": pre_tokenizer Split regex '", regex,
                    "' is not one this tokenizer knows (GPT-2, Llama 3, Qwen 2 patterns)");
      MT_USER_CHECK(p.value("behavior", std::string()) == "Isolated" && !p.value("invert", false), where,
                    ": pre_tokenizer Split needs behavior Isolated and invert false, got ", p.value("behavior", std::string()));
      steps.push_back({PreTokenizeStep::Kind::Split, *known, false, false});
    } else {
      MT_USER_CHECK(false, where, ": pre_tokenizer '", type, "' is not supported (ByteLevel, Split, Sequence are)");
    }
  }

  Bpe bpe() const {
    const json& m = j.at("model");
    MT_USER_CHECK(type_of(m) == "BPE", where, ": model '", type_of(m), "' is not supported (only BPE)");
    MT_USER_CHECK(!m.value("byte_fallback", false), where, ": model.byte_fallback is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      MT_USER_CHECK(absent(m, k) || m[k].get<std::string>().empty(), where, ": model.", k, " is not supported");
    MT_USER_CHECK(absent(m, "dropout") || m["dropout"].get<double>() == 0.0, where, ": model.dropout is not supported");
    std::unordered_map<std::string, int64_t> vocab;
    for (auto& [tok, id] : m.at("vocab").items()) vocab.emplace(tok, id.get<int64_t>());
    std::vector<std::pair<std::string, std::string>> merges;
    for (const json& mg : m.at("merges")) {
      if (mg.is_array()) {  // the format since tokenizers 0.20: ["a", "b"]
        merges.emplace_back(mg.at(0).get<std::string>(), mg.at(1).get<std::string>());
      } else {  // "a b"
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ');
        MT_USER_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where, ": merge '", s,
                      "' is not two tokens separated by one space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      }
    }
    std::optional<int64_t> unk;
    if (!absent(m, "unk_token")) {
      auto it = vocab.find(m["unk_token"].get<std::string>());
      if (it != vocab.end()) unk = it->second;
    }
    return Bpe(std::move(vocab), merges, m.value("ignore_merges", false), unk);
  }

  AddedTokens added() const {
    std::vector<AddedToken> out;
    for (const json& a : j.value("added_tokens", json::array()))
      out.push_back({a.at("id").get<int64_t>(), a.at("content").get<std::string>(), a.value("special", false),
                     a.value("single_word", false), a.value("lstrip", false), a.value("rstrip", false),
                     a.value("normalized", false)});
    return AddedTokens(std::move(out));
  }

  // The ids a TemplateProcessing's "single" template puts before and after the text.
  void post_processor(const json& p, Tokenizer& t) const {
    const std::string type = type_of(p);
    if (type == "Sequence") {
      for (const json& s : p.at("processors")) post_processor(s, t);
    } else if (type == "TemplateProcessing") {
      bool after = false;
      for (const json& item : p.at("single")) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        MT_USER_CHECK(p.at("special_tokens").contains(name), where, ": post_processor names special token '", name,
                      "' it does not define");
        for (const json& id : p["special_tokens"][name].at("ids")) (after ? t.suffix_ : t.prefix_).push_back(id.get<int64_t>());
      }
    } else {
      MT_USER_CHECK(type == "ByteLevel", where, ": post_processor '", type,
                    "' is not supported (ByteLevel, TemplateProcessing, Sequence are)");
    }
  }

  void check_decoder() const {
    if (absent(j, "decoder")) return;
    MT_USER_CHECK(type_of(j["decoder"]) == "ByteLevel", where, ": decoder '", type_of(j["decoder"]),
                  "' is not supported (only ByteLevel)");
  }

  Tokenizer load() const {
    MT_USER_CHECK(j.is_object(), where, ": not a tokenizer.json this reader understands (the top level is ",
                  j.type_name(), ", not an object)");
    check_normalizer();
    check_decoder();
    std::vector<PreTokenizeStep> steps;
    if (!absent(j, "pre_tokenizer")) add_pre_tokenizer(j["pre_tokenizer"], steps);
    MT_USER_CHECK(!steps.empty() && steps.back().kind == PreTokenizeStep::Kind::ByteLevel, where,
                  ": the pre_tokenizer has no ByteLevel step (not a byte-level BPE tokenizer)");
    Tokenizer t(bpe(), added(), std::move(steps));
    if (!absent(j, "post_processor")) post_processor(j["post_processor"], t);
    return t;
  }
};

Tokenizer::Tokenizer(Bpe bpe, AddedTokens added, std::vector<PreTokenizeStep> steps)
    : bpe_(std::make_unique<Bpe>(std::move(bpe))), added_(std::move(added)), steps_(std::move(steps)) {
  for (const auto& [tok, id] : bpe_->vocab()) {
    if (id >= static_cast<int64_t>(id_to_token_.size())) id_to_token_.resize(static_cast<size_t>(id) + 1);
    id_to_token_[static_cast<size_t>(id)] = tok;
    vocab_size_ = std::max(vocab_size_, id + 1);
  }
  for (const auto& a : added_.all()) vocab_size_ = std::max(vocab_size_, a.id + 1);
}

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    MT_USER_CHECK(false, where, ": not valid JSON: ", e.what());
  }
  try {
    return TokenizerLoader{j, where}.load();
  } catch (const json::exception& e) {  // a missing key or a value of the wrong type
    MT_USER_CHECK(false, where, ": not a tokenizer.json this reader understands: ", e.what());
  }
  return Tokenizer(Bpe({}, {}, false, std::nullopt), AddedTokens({}), {});  // unreachable
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MT_USER_CHECK(in, path, ": cannot read the tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json_text(ss.str(), path);
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const PreTokenizeStep& s : steps_) {
    std::vector<std::string> next;
    for (std::string& p : pieces) {
      if (s.kind == PreTokenizeStep::Kind::ByteLevel && s.add_prefix_space && p.rfind(' ', 0) != 0) p.insert(0, " ");
      if (s.kind == PreTokenizeStep::Kind::Split || s.use_regex) {
        for (std::string_view v : split_by_pattern(p, s.kind == PreTokenizeStep::Kind::Split ? s.pattern : SplitPattern::Gpt2))
          next.emplace_back(v);
      } else {
        next.push_back(std::move(p));
      }
    }
    pieces = std::move(next);
  }
  for (std::string& p : pieces) p = bytes_to_symbols(p);  // the ByteLevel step (the last) maps bytes
  return pieces;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_;
  for (const TextPiece& piece : added_.split(text)) {
    if (piece.token) {
      ids.push_back(*piece.token);
      continue;
    }
    for (const std::string& word : pre_tokenize(piece.text)) bpe_->encode(word, ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::string Tokenizer::token_bytes(int64_t id, bool skip_special_tokens) const {
  const std::string* tok = nullptr;
  if (const AddedToken* a = added_.by_id(id)) {
    if (a->special && skip_special_tokens) return "";
    tok = &a->content;
  } else if (id >= 0 && id < static_cast<int64_t>(id_to_token_.size())) {
    tok = &id_to_token_[static_cast<size_t>(id)];
  } else {
    return "";
  }
  // The ByteLevel decoder: a token made of byte symbols only is those bytes; any other stays as it is.
  std::string bytes;
  for (const CodePoint& c : decode_utf8(*tok)) {
    const int b = char_to_byte(c.cp);
    if (b < 0) return *tok;
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int64_t id : ids) bytes += token_bytes(id, skip_special_tokens);
  return utf8_lossy(bytes);
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const AddedToken* a = added_.by_content(token)) return a->id;
  auto it = bpe_->vocab().find(std::string(token));
  if (it == bpe_->vocab().end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int64_t id) const {
  const AddedToken* a = added_.by_id(id);
  return a && a->special;
}

}  // namespace meshtrain::text
