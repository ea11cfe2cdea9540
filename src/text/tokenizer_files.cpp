#include "meshtrain/text/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"

namespace fs = std::filesystem;

namespace meshtrain::text {

namespace {

// The JSON of `path`, or null when the file is absent; UserError when it is present but broken.
nlohmann::json read_optional_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    MT_USER_CHECK(false, path.string(), ": not valid JSON: ", e.what());
  }
  return nullptr;
}

}  // namespace

std::string tokenizer_file(const std::string& path, const std::string& flag) {
  if (fs::is_directory(path)) {
    const fs::path f = fs::path(path) / "tokenizer.json";
    MT_USER_CHECK(fs::is_regular_file(f), flag, " ", path, ": the directory has no tokenizer.json");
    return f.string();
  }
  MT_USER_CHECK(fs::is_regular_file(path), flag, " ", path, ": no such file or directory (expected a tokenizer.json "
                "or a directory holding one)");
  return path;
}

std::optional<std::string> find_tokenizer_file(const std::vector<std::string>& dirs) {
  for (const std::string& d : dirs)
    if (!d.empty() && fs::is_regular_file(fs::path(d) / "tokenizer.json")) return (fs::path(d) / "tokenizer.json").string();
  return std::nullopt;
}

Tokenizer model_tokenizer(const std::string& tokenizer_json, int64_t model_vocab) {
  Tokenizer tok = Tokenizer::from_file(tokenizer_json);
  MT_USER_CHECK(tok.vocab_size() <= model_vocab, tokenizer_json, ": the tokenizer has ", tok.vocab_size(),
                " ids but the model's vocabulary is ", model_vocab, " (a tokenizer of another model? see --tokenizer)");
  return tok;
}

std::vector<int64_t> stop_token_ids(const std::string& dir, const Tokenizer& tok) {
  std::vector<int64_t> ids;
  const auto add = [&](int64_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  const nlohmann::json cfg = read_optional_json(fs::path(dir) / "tokenizer_config.json");
  if (cfg.is_object() && cfg.contains("eos_token")) {
    const nlohmann::json& e = cfg["eos_token"];
    const std::string text = e.is_string() ? e.get<std::string>() : e.is_object() ? e.value("content", std::string()) : "";
    if (auto id = tok.token_to_id(text); id && !text.empty()) add(*id);
  }
  const nlohmann::json gen = read_optional_json(fs::path(dir) / "generation_config.json");
  if (gen.is_object() && gen.contains("eos_token_id")) {
    const nlohmann::json& e = gen["eos_token_id"];
    if (e.is_number_integer()) add(e.get<int64_t>());
    if (e.is_array())
      for (const auto& x : e)
        if (x.is_number_integer()) add(x.get<int64_t>());
  }
  return ids;
}

}  // namespace meshtrain::text
