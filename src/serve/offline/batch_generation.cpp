#include "meshtrain/serve/offline/batch_generation.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/serve/stop_matcher.h"
#include "meshtrain/text/stream_decoder.h"

namespace meshtrain::serve::offline {
namespace {

using nlohmann::json;

// The line's prompt tokens, encoded as the server encodes a request's (serve/http/openai_routes.cpp).
std::vector<TokenId> line_tokens(const PromptLine& line, const ModelText& model_text) {
  const http::CompletionRequest& r = line.request;
  if (line.chat) {
    MT_USER_CHECK(model_text.chat && model_text.tokenizer, "'messages': ", model_text.no_chat);
    std::vector<text::ChatMessage> messages;
    for (const auto& [role, content] : r.messages) messages.push_back({role, content});
    return model_text.tokenizer->encode(model_text.chat->render(messages, /*add_generation_prompt=*/true), false);
  }
  if (!r.prompt_text) return r.prompt_ids;
  return model_text.tokenizer ? model_text.tokenizer->encode(*r.prompt_text, /*add_special_tokens=*/true)
                              : data::encode_bytes(*r.prompt_text);
}

// A default max_tokens lowered to the positions left in the model's context and the cache (at least 1: a prompt
// that leaves none is refused by check_fits).
int32_t fitting_max_tokens(size_t prompt, int32_t max_tokens, const BatchLimits& limits) {
  const int64_t room = std::min(limits.max_seq_len, limits.cache_tokens) - static_cast<int64_t>(prompt) + 1;
  return static_cast<int32_t>(std::clamp<int64_t>(room, 1, max_tokens));
}

// The checks the engine and the scheduler would make, here with the line's number, before any step runs.
void check_fits(const std::vector<TokenId>& prompt, int32_t max_tokens, const BatchLimits& limits) {
  const char* field = "'prompt'";
  MT_USER_CHECK(!prompt.empty(), field, " encodes to no token");
  const auto bad = std::find_if(prompt.begin(), prompt.end(), [&](TokenId t) { return t >= limits.vocab_size; });
  MT_USER_CHECK(bad == prompt.end(), field, ": token id ", bad == prompt.end() ? 0 : *bad,
                " is outside the model's vocabulary (", limits.vocab_size, " ids)");
  const int64_t positions = static_cast<int64_t>(prompt.size()) + max_tokens - 1;
  MT_USER_CHECK(positions <= limits.max_seq_len, "the prompt (", prompt.size(), " tokens) and max_tokens (",
                max_tokens, ") need ", positions, " positions, model.max_seq_len is ", limits.max_seq_len,
                "; shorten the prompt or lower max_tokens");
  MT_USER_CHECK(positions <= limits.cache_tokens, "the prompt (", prompt.size(), " tokens) and max_tokens (",
                max_tokens, ") need ", positions, " KV cache positions, the cache holds ", limits.cache_tokens,
                " (", limits.cache_source, "); make it larger or lower max_tokens");
}

// One reply's text as its tokens come: decoded as a stream, cut before the first stop string.
class ReplyText {
 public:
  // The reply is decoded as the continuation of `prompt` (a SentencePiece-style decoder would otherwise strip
  // its first space as the start of a text); an empty prompt: as a text of its own.
  ReplyText(const ModelText& model_text, std::vector<std::string> stops, const std::vector<TokenId>& prompt)
      : matcher_(std::move(stops)) {
    if (!model_text.tokenizer) return;
    decoder_.emplace(*model_text.tokenizer);
    decoder_->continue_after(prompt);
  }
  // Adds a token; true once a stop string is complete (the reply ends with this token).
  bool add(TokenId t) {
    text_ += matcher_.feed(decoder_ ? decoder_->step(t) : data::decode_bytes({t}));
    return matcher_.stopped();
  }
  // The whole text once the reply has ended; whether a stop string ended it.
  std::string finish(bool& stopped) {
    if (!matcher_.stopped()) text_ += matcher_.feed(decoder_ ? decoder_->finish() : "");
    if (!matcher_.stopped()) text_ += matcher_.finish();
    stopped = matcher_.stopped();
    return std::move(text_);
  }

 private:
  std::optional<text::StreamDecoder> decoder_;
  StopMatcher matcher_;
  std::string text_;
};

json output_line(const PromptLine& line, size_t index, size_t prompt_tokens, const GenerationResult& result,
                 std::string reply, bool stopped) {
  json o;
  if (line.id) o["id"] = *line.id;
  o["index"] = index;
  o["text"] = std::move(reply);
  o["token_ids"] = result.tokens;
  o["finish_reason"] = http::finish_reason_name(stopped ? FinishReason::kStop : result.reason);
  o["usage"] = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", result.tokens.size()},
                {"total_tokens", prompt_tokens + result.tokens.size()}};
  return o;
}

// The max_tokens a line's request runs with: the line's own, or its default lowered to what fits; checked.
int32_t fitted_max_tokens(const std::vector<TokenId>& prompt, const PromptLine& line, const BatchLimits& limits) {
  int32_t max_tokens = line.request.max_tokens;
  if (line.lower_max_tokens) max_tokens = fitting_max_tokens(prompt.size(), max_tokens, limits);
  check_fits(prompt, max_tokens, limits);
  return max_tokens;
}

// `f()`, its UserError prefixed with the file and line it is about.
template <typename F>
void at_line(const std::string& path, const PromptLine& line, F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    throw UserError(cat(path, ":", line.line, ": ", e.what()));
  }
}

}  // namespace

std::vector<GenerationRequest> encode_prompts(const std::vector<PromptLine>& lines, const ModelText& model_text,
                                              const std::string& path, const BatchLimits& limits) {
  std::vector<GenerationRequest> requests;
  requests.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    at_line(path, lines[i], [&] {
      std::vector<TokenId> prompt = line_tokens(lines[i], model_text);
      const int32_t max_tokens = fitted_max_tokens(prompt, lines[i], limits);
      requests.push_back({{static_cast<RequestId>(i), std::move(prompt), max_tokens}, lines[i].request.sampling});
      check_sampling_params(static_cast<RequestId>(i), lines[i].request.sampling);
    });
  }
  return requests;
}

void fit_prompts(std::vector<GenerationRequest>& requests, const std::vector<PromptLine>& lines,
                 const std::string& path, const BatchLimits& limits) {
  MT_CHECK(lines.size() == requests.size(), "fit_prompts: ", lines.size(), " lines, ", requests.size(), " requests");
  for (size_t i = 0; i < lines.size(); ++i) {
    Request& r = requests[i].request;
    at_line(path, lines[i], [&] { r.max_new_tokens = fitted_max_tokens(r.prompt, lines[i], limits); });
  }
}

std::string generate_batch(model::Transformer& model, const std::vector<PromptLine>& lines,
                           const std::vector<GenerationRequest>& requests, const ModelText& model_text,
                           GenerateOptions options) {
  MT_CHECK(lines.size() == requests.size(), "generate_batch: ", lines.size(), " lines, ", requests.size(),
           " requests");
  std::vector<ReplyText> replies;
  replies.reserve(lines.size());
  // A completion goes on from its prompt's text; a chat reply starts a text of its own (as generate --chat).
  for (size_t i = 0; i < lines.size(); ++i)
    replies.emplace_back(model_text, lines[i].request.stop,
                         lines[i].chat ? std::vector<TokenId>{} : requests[i].request.prompt);
  options.eos_tokens = model_text.eos_tokens;
  options.stop_at = [&](size_t i, TokenId t) { return replies[i].add(t); };
  const std::vector<GenerationResult> results = generate_all(model, requests, options);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    bool stopped = false;
    std::string reply = replies[i].finish(stopped);
    out += http::dump(output_line(lines[i], i, requests[i].request.prompt.size(), results[i], std::move(reply),
                                  stopped));
    out += '\n';
  }
  return out;
}

}  // namespace meshtrain::serve::offline
