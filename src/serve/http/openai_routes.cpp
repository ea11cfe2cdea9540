#include "meshtrain/serve/http/openai_routes.h"

#include <chrono>

#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/serve/http/prometheus_text.h"
#include "meshtrain/serve/stop_matcher.h"
#include "meshtrain/text/stream_decoder.h"

namespace meshtrain::serve::http {
namespace {

using nlohmann::json;
constexpr const char* kJson = "application/json";

void send_error(ResponseWriter& out, int status, const std::string& message, const std::string& param = "",
                const std::string& type = "invalid_request_error") {
  out.send(status, kJson, error_body(message, param, type));
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Token ids → text as they come: the tokenizer's streaming decoder, or bytes for a byte-level model. A completion
// is decoded as the continuation of its prompt (a SentencePiece-style decoder would otherwise strip its first
// space as the start of a text); a chat reply, given no prompt, as a text of its own (as generate --chat).
class TextStream {
 public:
  TextStream(const std::optional<text::Tokenizer>& tok, const std::vector<TokenId>& prompt) {
    if (!tok) return;
    decoder_.emplace(*tok);
    decoder_->continue_after(prompt);
  }
  std::string step(TokenId id) { return decoder_ ? decoder_->step(id) : data::decode_bytes({id}); }
  std::string finish() { return decoder_ ? decoder_->finish() : ""; }

 private:
  std::optional<text::StreamDecoder> decoder_;
};

// The fields every completion body and chunk share.
json envelope(const std::string& id, bool chat, bool chunk, const std::string& model, int64_t created) {
  const char* object = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return json{{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

json choice(bool chat, bool chunk, const std::string& content, const std::vector<TokenId>& ids,
            std::optional<FinishReason> finish) {
  json c = {{"index", 0}, {"token_ids", ids}};
  if (!chat) {
    c["text"] = content;
    c["logprobs"] = nullptr;
  } else if (chunk) {
    c["delta"] = content.empty() ? json::object() : json{{"content", content}};
  } else {
    c["message"] = {{"role", "assistant"}, {"content", content}};
  }
  c["finish_reason"] = finish ? json(finish_reason_name(*finish)) : json(nullptr);
  return c;
}

// How often a handler waiting for tokens looks whether its client is still there.
constexpr std::chrono::milliseconds kClientCheck{50};

// The stream's next part; nullopt (the request cancelled, its KV blocks freed before the next step) once the
// client has gone away — a client that is not reading a whole answer is noticed as soon as one that streams.
std::optional<StreamPart> next_part(RequestStream& stream, ResponseWriter& out) {
  for (;;) {
    if (out.client_gone()) {
      stream.cancel();
      return std::nullopt;
    }
    if (std::optional<StreamPart> part = stream.next_within(kClientCheck)) return part;
  }
}

}  // namespace

void OpenAiRoutes::handle(const HttpRequest& req, ResponseWriter& out) {
  http_requests_.fetch_add(1);
  try {
    const std::string path = req.target.substr(0, req.target.find('?'));
    auto only = [&](const char* method) {
      if (req.method == method) return true;
      send_error(out, 405, cat(path, " takes ", method, ", not ", req.method));
      return false;
    };
    if (path == "/health") {
      // A load balancer takes a draining server out of rotation on this 503.
      if (only("GET")) {
        if (engine_.draining())
          send_error(out, 503, "the server is shutting down", "", "server_error");
        else
          out.send(200, kJson, R"({"status": "ok"})");
      }
    } else if (path == "/v1/models") {
      if (only("GET"))
        out.send(200, kJson, dump(json{{"object", "list"}, {"data", json::array({json{
            {"id", text_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "meshtrain"}}})}}));
    } else if (path == "/v1/completions") {
      if (only("POST")) completion(req, out, false);
    } else if (path == "/v1/chat/completions") {
      if (only("POST")) completion(req, out, true);
    } else if (path == "/metrics") {
      if (only("GET")) out.send(200, "text/plain; version=0.0.4", metrics_text());
    } else {
      send_error(out, 404, cat("no endpoint ", path, " (the endpoints: /health, /v1/models, /v1/completions, "
                               "/v1/chat/completions, /metrics)"));
    }
  } catch (const BadRequest& e) {
    send_error(out, 400, e.what(), e.param());
  } catch (const UserError& e) {
    send_error(out, 400, e.what());
  } catch (const std::exception& e) {
    send_error(out, 500, e.what(), "", "server_error");
  }
}

std::vector<TokenId> OpenAiRoutes::prompt_tokens(const CompletionRequest& r, bool chat) const {
  if (chat) {
    if (!text_.chat || !text_.tokenizer)
      throw BadRequest("this model has no chat template (tokenizer_config.json); use /v1/completions", "messages");
    std::vector<text::ChatMessage> messages;
    for (const auto& [role, content] : r.messages) messages.push_back({role, content});
    return text_.tokenizer->encode(text_.chat->render(messages, /*add_generation_prompt=*/true), false);
  }
  if (r.prompt_text) {
    return text_.tokenizer ? text_.tokenizer->encode(*r.prompt_text, /*add_special_tokens=*/true)
                           : data::encode_bytes(*r.prompt_text);
  }
  for (TokenId id : r.prompt_ids)
    if (id >= text_.vocab_size)
      throw BadRequest(cat("'prompt' holds token id ", id, "; the model's vocabulary is ", text_.vocab_size), "prompt");
  return r.prompt_ids;
}

void OpenAiRoutes::completion(const HttpRequest& req, ResponseWriter& out, bool chat) {
  const CompletionRequest r = chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
  if (r.model && *r.model != text_.model_name)
    throw BadRequest(cat("'model' is \"", *r.model, "\"; this server serves \"", text_.model_name,
                         "\" (GET /v1/models)"), "model");
  const std::vector<TokenId> prompt = prompt_tokens(r, chat);
  if (prompt.empty()) throw BadRequest("'prompt' encodes to no token", "prompt");
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  const std::shared_ptr<RequestStream> stream = engine_.submit(prompt, r.max_tokens, r.sampling);
  const std::string id = cat(chat ? "chatcmpl-" : "cmpl-", next_id_.fetch_add(1));
  const int64_t created = unix_time();
  std::optional<StreamPart> next = next_part(*stream, out);  // before any header: a refused request is still a 400
  if (!next) return;
  StreamPart part = std::move(*next);
  if (!part.error.empty()) {
    const bool rejected = part.rejected;
    send_error(out, rejected ? 400 : 503, part.error, "", rejected ? "invalid_request_error" : "server_error");
    return;
  }
  TextStream decoder(text_.tokenizer, chat ? std::vector<TokenId>{} : prompt);
  StopMatcher matcher(r.stop);
  std::vector<TokenId> all;
  std::string text;
  std::optional<FinishReason> finish;
  bool first_chunk = true;
  if (r.stream) out.begin_stream(200, "text/event-stream");
  for (;;) {
    // Token by token: the one that completes a stop string is the last counted, and nothing after it is sent.
    std::string piece;
    std::vector<TokenId> ids;
    for (TokenId t : part.tokens) {
      ids.push_back(t);
      piece += matcher.feed(decoder.step(t));
      if (matcher.stopped()) break;
    }
    if (!matcher.stopped() && part.finish) {
      piece += matcher.feed(decoder.finish());
      piece += matcher.finish();  // ended otherwise: the held-back tail is text after all
    }
    if (matcher.stopped()) {
      stream->stop();  // the engine frees its blocks before the next step
      finish = FinishReason::kStop;
    } else {
      finish = part.finish;
    }
    all.insert(all.end(), ids.begin(), ids.end());
    if (r.stream) {
      json chunk = envelope(id, chat, true, text_.model_name, created);
      chunk["choices"] = json::array({choice(chat, true, piece, ids, std::nullopt)});
      if (chat && first_chunk) chunk["choices"][0]["delta"]["role"] = "assistant";  // as OpenAI's first delta
      first_chunk = false;
      if (!part.error.empty()) chunk = json::parse(error_body(part.error, "", "server_error"));
      if (!out.write(cat("data: ", dump(chunk), "\n\n"))) {
        stream->cancel();  // the client went away
        return;
      }
    } else {
      text += piece;
    }
    if (finish) break;
    if (!(next = next_part(*stream, out))) return;
    part = std::move(*next);
  }
  if (!part.error.empty() && !matcher.stopped() && !r.stream) {
    send_error(out, 503, part.error, "", "server_error");
    return;
  }
  const json usage = {{"prompt_tokens", n_prompt}, {"completion_tokens", all.size()},
                      {"total_tokens", n_prompt + static_cast<int64_t>(all.size())}};
  json body = envelope(id, chat, r.stream, text_.model_name, created);
  if (r.stream) {
    body["choices"] = json::array({choice(chat, true, "", {}, finish)});
    body["usage"] = usage;
    out.write(cat("data: ", dump(body), "\n\ndata: [DONE]\n\n"));
    out.end_stream();
  } else {
    body["choices"] = json::array({choice(chat, false, text, all, finish)});
    body["usage"] = usage;
    out.send(200, kJson, dump(body));
  }
}

std::string OpenAiRoutes::metrics_text() const {
  const EngineLoopMetrics m = engine_.metrics();
  return prometheus_metric("requests_running", "gauge", "Requests holding KV blocks.", m.running) +
         prometheus_metric("requests_waiting", "gauge", "Requests queued for admission.", m.waiting) +
         prometheus_metric("kv_blocks_used", "gauge", "KV cache blocks in use.", m.blocks_total - m.blocks_free) +
         prometheus_metric("kv_blocks_free", "gauge", "KV cache blocks free (cached prefixes included).",
                           m.blocks_free) +
         prometheus_metric("requests_finished_total", "counter", "Requests finished.", m.requests_finished) +
         prometheus_metric("requests_aborted_total", "counter",
                           "Requests ended unfinished because their client went away.", m.requests_aborted) +
         prometheus_metric("requests_refused_total", "counter",
                           "Requests refused with 503: the waiting queue was full.", m.requests_refused) +
         prometheus_metric("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
                           m.prompt_tokens) +
         prometheus_metric("generation_tokens_total", "counter", "Tokens generated.", m.generated_tokens) +
         prometheus_metric("engine_steps_total", "counter", "Engine steps run.", m.steps) +
         prometheus_metric("computed_tokens_total", "counter",
                           "Tokens through the model: prefill chunks and decodes.", m.computed_tokens) +
         prometheus_metric("prefix_cache_hit_tokens_total", "counter",
                           "Prompt tokens taken from cached KV blocks instead of computed.", m.prefix_hit_tokens) +
         prometheus_metric("kv_blocks_cached", "gauge",
                           "KV cache blocks holding a shareable prompt prefix (in use or free).", m.blocks_cached) +
         prometheus_gauge("generation_tokens_per_second", "Tokens generated per second over the last 10 s.",
                          m.generation_tokens_per_second) +
         prometheus_gauge("computed_tokens_per_second",
                          "Tokens through the model (prefill and decode) per second over the last 10 s.",
                          m.computed_tokens_per_second) +
         prometheus_metric("preemptions_total", "counter", "Sequences preempted for KV blocks.", m.preemptions) +
         prometheus_metric("http_requests_total", "counter", "HTTP requests received.", http_requests_.load()) +
         prometheus_histogram("time_to_first_token_seconds",
                              "From a request's arrival to the engine step that sampled its first token.",
                              m.time_to_first_token) +
         prometheus_histogram("time_between_tokens_seconds",
                              "Between the engine steps that sampled two consecutive tokens of a request.",
                              m.time_between_tokens) +
         prometheus_histogram("engine_step_seconds",
                              "One engine step: the scheduler's plan, the model's forward and the sampling.",
                              m.step_time);
}

}  // namespace meshtrain::serve::http
