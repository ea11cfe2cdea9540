#include "meshtrain/text/chat_template.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "jinja_template.h"
#include "meshtrain/core/error.h"

namespace meshtrain::text {

using nlohmann::json;

ChatTemplate::ChatTemplate(const std::string& source, std::vector<std::pair<std::string, std::string>> special_tokens,
                           std::string where)
    : tmpl_(std::make_unique<jinja::Template>(source, std::move(where))), special_tokens_(std::move(special_tokens)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

namespace {

// A special token in tokenizer_config.json: a string, or an AddedToken object with "content".
std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

ChatTemplate ChatTemplate::from_tokenizer_dir(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  std::ifstream in(path);
  MT_USER_CHECK(in, path, ": cannot read it (the chat template lives there)");
  std::stringstream ss;
  ss << in.rdbuf();
  json cfg;
  try {
    cfg = json::parse(ss.str());
  } catch (const json::exception& e) {
    MT_USER_CHECK(false, path, ": not valid JSON: ", e.what());
  }
  std::string source, where = path + ": chat_template";
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    source = cfg["chat_template"].get<std::string>();
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_array()) {
    for (const json& t : cfg["chat_template"])
      if (t.value("name", std::string()) == "default") source = t.value("template", std::string());
  } else {
    // Newer transformers write the template beside the config instead.
    const std::string jinja_path = (std::filesystem::path(dir) / "chat_template.jinja").string();
    std::ifstream jinja_file(jinja_path);
    if (jinja_file) {
      where = jinja_path;
      std::stringstream js;
      js << jinja_file.rdbuf();
      source = js.str();
    }
  }
  MT_USER_CHECK(!source.empty(), path, ": no chat_template (and no chat_template.jinja beside it): the model has no "
                "chat format; use a plain prompt");
  std::vector<std::pair<std::string, std::string>> specials;
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (cfg.contains(k) && !token_text(cfg[k]).empty()) specials.emplace_back(k, token_text(cfg[k]));
  return ChatTemplate(source, std::move(specials), where);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  jinja::Value vars = jinja::Value::object();
  vars["messages"] = jinja::Value::array();
  for (const ChatMessage& m : messages) vars["messages"].push_back({{"role", m.role}, {"content", m.content}});
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["tools"] = nullptr;  // transformers passes both, as None, when the caller gives none
  vars["documents"] = nullptr;
  for (const auto& [k, v] : special_tokens_) vars[k] = v;
  return tmpl_->render(vars);
}

}  // namespace meshtrain::text
