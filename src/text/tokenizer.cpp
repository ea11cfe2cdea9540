#include "meshtrain/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
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

  // A literal pattern ({"String": …}); a regex is refused.
  std::string literal_pattern(const json& pat, const std::string& what) const {
    MT_USER_CHECK(pat.contains("String"), where, ": ", what, " with a Regex pattern is not supported (only a String one)");
    return pat["String"].get<std::string>();
  }

  void add_normalizer(const json& n, std::vector<NormalizeStep>& steps) const {
    const std::string type = type_of(n);
    if (type == "Sequence") {
      for (const json& s : n.at("normalizers")) add_normalizer(s, steps);
    } else if (type == "Prepend") {
      steps.push_back({NormalizeStep::Kind::Prepend, "", n.at("prepend").get<std::string>()});
    } else if (type == "Replace") {
      steps.push_back({NormalizeStep::Kind::Replace, literal_pattern(n.at("pattern"), "normalizer Replace"),
                       n.at("content").get<std::string>()});
    } else {
      MT_USER_CHECK(false, where, ": normalizer '", type, "' is not supported (Prepend, Replace, Sequence are)");
    }
  }

  static PreTokenizeStep::Behavior behavior(const std::string& b, const std::string& where) {
    using B = PreTokenizeStep::Behavior;
    if (b == "Isolated") return B::Isolated;
    if (b == "Removed") return B::Removed;
    if (b == "MergedWithPrevious") return B::MergedWithPrevious;
    MT_USER_CHECK(b == "MergedWithNext", where, ": pre_tokenizer Split behavior '", b,
                  "' is not supported (Isolated, Removed, MergedWithPrevious, MergedWithNext are)");
    return B::MergedWithNext;
  }

  PreTokenizeStep metaspace(const json& p) const {
    PreTokenizeStep s;
    s.kind = PreTokenizeStep::Kind::Metaspace;
    s.literal = p.value("replacement", std::string("\xE2\x96\x81"));
    s.split = p.value("split", true);
    // Files from before prepend_scheme say add_prefix_space instead.
    const std::string scheme = p.contains("prepend_scheme") ? p["prepend_scheme"].get<std::string>()
                                                            : (p.value("add_prefix_space", true) ? "always" : "never");
    MT_USER_CHECK(scheme == "always" || scheme == "first" || scheme == "never", where,
                  ": pre_tokenizer Metaspace prepend_scheme '", scheme, "' is not one of always, first, never");
    s.prepend = scheme == "always" ? PreTokenizeStep::Prepend::Always
                : scheme == "first" ? PreTokenizeStep::Prepend::First : PreTokenizeStep::Prepend::Never;
    return s;
  }

  void add_pre_tokenizer(const json& p, std::vector<PreTokenizeStep>& steps) const {
    const std::string type = type_of(p);
    if (type == "Sequence") {
      for (const json& s : p.at("pretokenizers")) add_pre_tokenizer(s, steps);
    } else if (type == "ByteLevel") {
      PreTokenizeStep s;
      s.add_prefix_space = p.value("add_prefix_space", false);
      s.use_regex = p.value("use_regex", true);
      steps.push_back(s);
    } else if (type == "Metaspace") {
      steps.push_back(metaspace(p));
    } else if (type == "Split" && p.at("pattern").contains("String")) {
      MT_USER_CHECK(!p.value("invert", false), where, ": pre_tokenizer Split with invert true is not supported");
      PreTokenizeStep s;
      s.kind = PreTokenizeStep::Kind::SplitLiteral;
      s.literal = p["pattern"]["String"].get<std::string>();
      s.behavior = behavior(p.value("behavior", std::string()), where);
      steps.push_back(s);
    } else if (type == "Split") {
      const json& pat = p.at("pattern");
      MT_USER_CHECK(pat.contains("Regex"), where, ": pre_tokenizer Split needs a String or Regex pattern");
      const std::string regex = pat["Regex"].get<std::string>();
      auto known = recognise_split_pattern(regex);
      MT_USER_CHECK(known, where, ": pre_tokenizer Split regex '", regex,
                    "' is not one this tokenizer knows (GPT-2, Llama 3, Qwen 2 patterns)");
      MT_USER_CHECK(p.value("behavior", std::string()) == "Isolated" && !p.value("invert", false), where,
                    ": pre_tokenizer Split needs behavior Isolated and invert false, got ", p.value("behavior", std::string()));
      PreTokenizeStep s;
      s.kind = PreTokenizeStep::Kind::Split;
      s.pattern = *known;
      steps.push_back(s);
    } else {
      MT_USER_CHECK(false, where, ": pre_tokenizer '", type, "' is not supported (ByteLevel, Split, Metaspace, Sequence are)");
    }
  }

  Bpe bpe() const {
    const json& m = j.at("model");
    MT_USER_CHECK(type_of(m) == "BPE", where, ": model '", type_of(m), "' is not supported (only BPE)");
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
    return Bpe(std::move(vocab), merges, m.value("ignore_merges", false), unk, m.value("byte_fallback", false),
               m.value("fuse_unk", false));
  }

  AddedTokens added(const std::vector<NormalizeStep>& normalize) const {
    std::vector<AddedToken> out;
    for (const json& a : j.value("added_tokens", json::array()))
      out.push_back({a.at("id").get<int64_t>(), a.at("content").get<std::string>(), a.value("special", false),
                     a.value("single_word", false), a.value("lstrip", false), a.value("rstrip", false),
                     a.value("normalized", false)});
    return AddedTokens(std::move(out), normalize);
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

  // One step of a SentencePiece-style decoder chain, which must come in the order Replace / Metaspace,
  // ByteFallback, Fuse, Strip (`stage` is how far the chain has got).
  void add_piece_decoder(const json& d, PieceDecoding& out, int& stage) const {
    const std::string type = type_of(d);
    const int my_stage = type == "Replace" || type == "Metaspace" ? 0 : type == "ByteFallback" ? 1 : type == "Fuse" ? 2 : 3;
    MT_USER_CHECK(my_stage >= stage, where, ": decoder '", type,
                  "' after a later step is not supported (the order must be Replace/Metaspace, ByteFallback, Fuse, Strip)");
    stage = my_stage;
    if (type == "Replace") {
      out.replace.emplace_back(literal_pattern(d.at("pattern"), "decoder Replace"), d.at("content").get<std::string>());
    } else if (type == "Metaspace") {
      out.metaspace = d.value("replacement", std::string("\xE2\x96\x81"));
      out.metaspace_drop_first = metaspace(d).prepend != PreTokenizeStep::Prepend::Never;
    } else if (type == "ByteFallback") {
      out.byte_fallback = true;
    } else if (type == "Fuse") {
      out.fuse = true;
    } else {
      MT_USER_CHECK(type == "Strip", where, ": decoder '", type,
                    "' is not supported (ByteLevel; or Replace, Metaspace, ByteFallback, Fuse, Strip in a Sequence)");
      MT_USER_CHECK(d.value("stop", 0) == 0 && d.value("start", 0) >= 0, where,
                    ": decoder Strip with stop ", d.value("stop", 0), " is not supported (only stop 0)");
      out.strip_content = d.at("content").get<std::string>();
      out.strip_start = d.value("start", size_t{0});
    }
  }

  // nullopt: the ByteLevel decoder (or none, which byte-level files may leave out).
  std::optional<PieceDecoding> decoder() const {
    if (absent(j, "decoder") || type_of(j["decoder"]) == "ByteLevel") return std::nullopt;
    PieceDecoding out;
    int stage = 0;
    const json& d = j["decoder"];
    if (type_of(d) == "Sequence") {
      for (const json& step : d.at("decoders")) add_piece_decoder(step, out, stage);
    } else {
      add_piece_decoder(d, out, stage);
    }
    return out;
  }

  Tokenizer load() const {
    MT_USER_CHECK(j.is_object(), where, ": not a tokenizer.json this reader understands (the top level is ",
                  j.type_name(), ", not an object)");
    std::vector<NormalizeStep> normalize;
    if (!absent(j, "normalizer")) add_normalizer(j["normalizer"], normalize);
    std::optional<PieceDecoding> pieces = decoder();
    std::vector<PreTokenizeStep> steps;
    if (!absent(j, "pre_tokenizer")) add_pre_tokenizer(j["pre_tokenizer"], steps);
    const bool byte_level = !steps.empty() && steps.back().kind == PreTokenizeStep::Kind::ByteLevel;
    MT_USER_CHECK(pieces || byte_level, where,
                  ": the pre_tokenizer has no ByteLevel step, which the ByteLevel decoder needs (not a byte-level BPE tokenizer)");
    MT_USER_CHECK(!pieces || std::none_of(steps.begin(), steps.end(), [](const PreTokenizeStep& s) { return s.kind == PreTokenizeStep::Kind::ByteLevel; }),
                  where, ": a ByteLevel pre_tokenizer with a decoder other than ByteLevel is not supported");
    Tokenizer t(bpe(), added(normalize), std::move(steps));
    t.normalize_ = std::move(normalize);
    t.pieces_ = std::move(pieces);
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
  return text::pre_tokenize(normalize(text, normalize_), steps_, true);
}

// As `tokenizers` does: the added tokens matched in the raw text, each stretch between them normalized, the
// normalized added tokens matched in that, then each remaining stretch pre-tokenized and encoded by BPE.
std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids = prefix_;
  for (const TextPiece& piece : added_.split_raw(text)) {
    if (piece.token) {
      ids.push_back(*piece.token);
      continue;
    }
    const std::string normalized = normalize(piece.text, normalize_);
    const bool at_start = piece.text.data() == text.data();  // Metaspace's "first": the input's first stretch
    for (const TextPiece& sub : added_.split_normalized(normalized)) {
      if (sub.token) {
        ids.push_back(*sub.token);
      } else if (!sub.text.empty()) {
        for (const std::string& word : text::pre_tokenize(sub.text, steps_, at_start && sub.text.data() == normalized.data()))
          bpe_->encode(word, ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

std::optional<std::string> Tokenizer::token_string(int64_t id, bool skip_special_tokens) const {
  if (const AddedToken* a = added_.by_id(id)) {
    if (a->special && skip_special_tokens) return std::nullopt;
    return added_.matched(*a);
  }
  if (id >= 0 && id < static_cast<int64_t>(id_to_token_.size())) return id_to_token_[static_cast<size_t>(id)];
  return std::nullopt;
}

std::string Tokenizer::token_bytes(int64_t id, bool skip_special_tokens) const {
  const std::optional<std::string> tok = token_string(id, skip_special_tokens);
  if (!tok) return "";
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
  if (pieces_) {
    PieceDecoder d(*pieces_);
    std::string text;
    for (int64_t id : ids)
      if (auto t = token_string(id, skip_special_tokens)) text += d.push(*t);
    return text + d.finish();
  }
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
