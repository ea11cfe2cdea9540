// The OpenAI JSON (serve/http/openai_protocol.h): prompts as text or ids, the sampling fields, and a BadRequest
// naming the field for each kind of mistake; the error object's shape and its one-line message.
#include "meshtrain/serve/http/openai_protocol.h"

#include <gtest/gtest.h>

namespace meshtrain::serve::http {
namespace {

std::string bad_param(std::string_view body) {
  try {
    parse_completion_request(body);
  } catch (const BadRequest& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    return e.param().empty() ? "(none)" : e.param();
  }
  return "(accepted)";
}

TEST(OpenAiProtocol, ParsesPromptsAndSampling) {
  auto r = parse_completion_request(
      R"({"prompt": "hi", "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 9,
          "repetition_penalty": 1.2, "stream": true, "model": "x", "user": "ignored"})");
  EXPECT_EQ(*r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.sampling.greedy());
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, 9u);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.2);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.model, "x");  // the routes compare it with the served name
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "x", "model": null})").model.has_value());
  EXPECT_EQ(parse_completion_request(R"({"prompt": [1, 2, 3]})").prompt_ids, (std::vector<TokenId>{1, 2, 3}));
  EXPECT_EQ(*parse_completion_request(R"({"prompt": ["one"]})").prompt_text, "one");
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x"})").max_tokens, 16);
  auto chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "yo"}]})");
  ASSERT_EQ(chat.messages.size(), 1u);
  EXPECT_EQ(chat.messages[0].second, "yo");
}

TEST(OpenAiProtocol, MistakesNameTheField) {
  EXPECT_EQ(bad_param("{not json"), "(none)");
  EXPECT_EQ(bad_param("[1]"), "(none)");
  EXPECT_EQ(bad_param(R"({"max_tokens": 3})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": []})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": [1, -2]})"), "prompt");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "temperature": "hot"})"), "temperature");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "top_p": 0})"), "top_p");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "top_k": -1})"), "top_k");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "stream": "yes"})"), "stream");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "n": 2})"), "n");
  EXPECT_EQ(bad_param(R"({"prompt": "x", "model": 7})"), "model");
  EXPECT_THROW(parse_chat_request(R"({"messages": [{"role": "user"}]})"), BadRequest);
}

TEST(OpenAiProtocol, StopIsAStringOrUpToFourStrings) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": "hi", "stop": "\n"})").stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b"]})").stop,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "hi", "stop": null})").stop.empty());
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]})"), "stop");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "stop": 3})"), "stop");
  EXPECT_EQ(bad_param(R"({"prompt": "hi", "stop": ["a", 1]})"), "stop");
}

TEST(OpenAiProtocol, ErrorBodyIsOpenAisObjectOnOneLine) {
  const auto j = nlohmann::json::parse(error_body("two\nlines", "temperature", "invalid_request_error"));
  EXPECT_EQ(j["error"]["message"], "two lines");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_TRUE(nlohmann::json::parse(error_body("m", "", "invalid_request_error"))["error"]["param"].is_null());
}

}  // namespace
}  // namespace meshtrain::serve::http
