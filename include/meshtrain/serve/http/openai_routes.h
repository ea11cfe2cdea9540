// OpenAiRoutes: the server's endpoints (docs/serving.md "meshtrain serve") — GET /health, GET /v1/models,
// POST /v1/completions, POST /v1/chat/completions, GET /metrics — between the HTTP server and the engine loop:
// text in through the model's tokenizer (byte-level when it has none) or its chat template, tokens out through
// a streaming decoder, whole or as server-sent events.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "meshtrain/serve/engine/engine_loop.h"
#include "meshtrain/serve/http/http_server.h"
#include "meshtrain/serve/http/openai_protocol.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/tokenizer.h"

namespace meshtrain::serve::http {

struct ModelText {
  std::string model_name;                 // /v1/models' id and every response's `model`
  int64_t vocab_size = 0;                 // prompt token ids must be below it
  std::optional<text::Tokenizer> tokenizer;     // none: byte-level, one token per byte
  std::optional<text::ChatTemplate> chat;       // none: /v1/chat/completions answers 400
};

class OpenAiRoutes {
 public:
  OpenAiRoutes(EngineLoop& engine, ModelText text) : engine_(engine), text_(std::move(text)) {}

  // Never throws: every failure is an HTTP error response.
  void handle(const HttpRequest& req, ResponseWriter& out);

 private:
  void completion(const HttpRequest& req, ResponseWriter& out, bool chat);
  std::vector<TokenId> prompt_tokens(const CompletionRequest& r, bool chat) const;
  std::string metrics_text() const;

  EngineLoop& engine_;
  ModelText text_;
  std::atomic<int64_t> next_id_{1};
  std::atomic<int64_t> http_requests_{0};
};

}  // namespace meshtrain::serve::http
