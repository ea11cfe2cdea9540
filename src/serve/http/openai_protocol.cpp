#include "meshtrain/serve/http/openai_protocol.h"

#include <algorithm>
#include <limits>

namespace meshtrain::serve::http {
namespace {

using nlohmann::json;

json parse_object(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw BadRequest("the request body is not valid JSON");
  if (!j.is_object()) throw BadRequest("the request body must be a JSON object");
  return j;
}

double number_field(const json& j, const char* key, double fallback, double lo, double hi, const char* range) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw BadRequest(cat("'", key, "' must be a number"), key);
  const double v = j[key].get<double>();
  if (!(v >= lo && v <= hi)) throw BadRequest(cat("'", key, "' is ", v, "; valid: ", range), key);
  return v;
}

int64_t integer_field(const json& j, const char* key, int64_t fallback, int64_t lo, const char* range) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) throw BadRequest(cat("'", key, "' must be an integer"), key);
  const int64_t v = j[key].get<int64_t>();
  if (v < lo) throw BadRequest(cat("'", key, "' is ", v, "; valid: ", range), key);
  return v;
}

// `stop`: a string or an array of up to 4 strings, as OpenAI's; empty strings are ignored.
void parse_stop(const json& j, CompletionRequest& r) {
  constexpr size_t kMaxStops = 4;
  if (!j.contains("stop") || j["stop"].is_null()) return;
  const json& s = j["stop"];
  if (s.is_string()) {
    r.stop.push_back(s.get<std::string>());
    return;
  }
  const auto is_string = [](const json& e) { return e.is_string(); };
  if (!s.is_array() || s.size() > kMaxStops || !std::all_of(s.begin(), s.end(), is_string))
    throw BadRequest("'stop' must be a string or an array of up to 4 strings", "stop");
  for (const json& e : s) r.stop.push_back(e.get<std::string>());
}

// The fields both endpoints share: model, max_tokens, sampling, stream, n.
void parse_common(const json& j, CompletionRequest& r) {
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw BadRequest("'model' must be a string (GET /v1/models lists it)", "model");
    r.model = j["model"].get<std::string>();
  }
  r.max_tokens = static_cast<int32_t>(std::min<int64_t>(
      integer_field(j, "max_tokens", 16, 1, "an integer >= 1"), std::numeric_limits<int32_t>::max()));
  r.sampling.temperature = number_field(j, "temperature", 1.0, 0, 100, "0 (greedy) to 100");
  r.sampling.top_p = number_field(j, "top_p", 1.0, 0, 1, "a number in (0, 1]");
  if (r.sampling.top_p <= 0) throw BadRequest("'top_p' is 0; valid: a number in (0, 1]", "top_p");
  r.sampling.top_k = integer_field(j, "top_k", 0, 0, "an integer >= 0 (0 = the whole vocabulary)");
  r.sampling.repetition_penalty = number_field(j, "repetition_penalty", 1.0, 1e-6, 100, "a number in (0, 100]");
  r.sampling.seed = static_cast<uint64_t>(integer_field(j, "seed", 0, 0, "an integer >= 0"));
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) throw BadRequest("'stream' must be true or false", "stream");
    r.stream = j["stream"].get<bool>();
  }
  parse_stop(j, r);
  if (integer_field(j, "n", 1, 1, "1") != 1) throw BadRequest("'n' must be 1 (one choice per request)", "n");
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body) {
  const json j = parse_object(body);
  CompletionRequest r;
  if (!j.contains("prompt")) throw BadRequest("'prompt' is required (a string or an array of token ids)", "prompt");
  const json& p = j["prompt"];
  if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt_text = p[0].get<std::string>();
  } else if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
  } else if (p.is_array() && !p.empty()) {
    for (const json& t : p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0)
        throw BadRequest("'prompt' as an array must hold token ids (integers >= 0)", "prompt");
      r.prompt_ids.push_back(t.get<int64_t>());
    }
  } else {
    throw BadRequest("'prompt' must be a non-empty string or array of token ids", "prompt");
  }
  parse_common(j, r);
  return r;
}

CompletionRequest parse_chat_request(std::string_view body) {
  const json j = parse_object(body);
  CompletionRequest r;
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw BadRequest("'messages' must be a non-empty array of {role, content}", "messages");
  for (const json& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw BadRequest("each message must be an object with a string 'role' and a string 'content'", "messages");
    r.messages.emplace_back(m["role"].get<std::string>(), m["content"].get<std::string>());
  }
  parse_common(j, r);
  return r;
}

std::string error_body(const std::string& message, const std::string& param, const std::string& type) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  json e = {{"message", line}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  return dump(json{{"error", e}});
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAborted: return "abort";
  }
  return "stop";
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace meshtrain::serve::http
