#include "meshtrain/serve/offline/prompt_file.h"

#include <fstream>

#include "meshtrain/core/error.h"

namespace meshtrain::serve::offline {
namespace {

using nlohmann::json;

// The fields the line gave keep their values; the others take the defaults (openai_protocol.h fills OpenAI's).
void apply_defaults(const json& j, const PromptDefaults& d, http::CompletionRequest& r) {
  const auto absent = [&](const char* key) { return !j.contains(key) || j[key].is_null(); };
  if (absent("max_tokens")) r.max_tokens = d.max_tokens;  // PromptLine::lower_max_tokens says whether it is a cap
  if (absent("temperature")) r.sampling.temperature = d.sampling.temperature;
  if (absent("top_p")) r.sampling.top_p = d.sampling.top_p;
  if (absent("top_k")) r.sampling.top_k = d.sampling.top_k;
  if (absent("seed")) r.sampling.seed = d.sampling.seed;
  if (absent("repetition_penalty")) r.sampling.repetition_penalty = d.sampling.repetition_penalty;
  if (absent("stop")) r.stop = d.stop;
}

// One line's request; BadRequest (its message naming the field) for a mistake in it.
PromptLine parse_line(const std::string& text, const PromptDefaults& defaults) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw http::BadRequest("not valid JSON");
  if (!j.is_object()) throw http::BadRequest("must be a JSON object with 'prompt' or 'messages'");
  const bool prompt = j.contains("prompt"), chat = j.contains("messages");
  if (prompt == chat)
    throw http::BadRequest(prompt ? "has both 'prompt' and 'messages'; give one"
                                  : "has neither 'prompt' (text or token ids) nor 'messages' (a chat)");
  if (j.contains("stream") && j["stream"] == true) throw http::BadRequest("'stream' is for the server; remove it", "stream");
  PromptLine line{.id = j.contains("id") ? std::optional(j["id"]) : std::nullopt, .chat = chat,
                  .request = chat ? http::parse_chat_request(text) : http::parse_completion_request(text)};
  apply_defaults(j, defaults, line.request);
  line.lower_max_tokens = defaults.lower_max_tokens && (!j.contains("max_tokens") || j["max_tokens"].is_null());
  return line;
}

}  // namespace

std::vector<PromptLine> read_prompt_file(const std::string& path, const PromptDefaults& defaults) {
  std::ifstream in(path);
  MT_USER_CHECK(in.good(), "--input ", path, ": cannot be read");
  std::vector<PromptLine> lines;
  std::string text;
  for (int64_t n = 1; std::getline(in, text); ++n) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines separate nothing
    try {
      lines.push_back(parse_line(text, defaults));
    } catch (const UserError& e) {
      throw UserError(cat(path, ":", n, ": ", e.what()));
    }
    lines.back().line = n;
  }
  MT_USER_CHECK(!in.bad(), "--input ", path, ": read error");
  MT_USER_CHECK(!lines.empty(), "--input ", path, ": no prompt in it (one JSON object per line)");
  return lines;
}

}  // namespace meshtrain::serve::offline
