// bench_serve.h's inputs: random prompts fixed by (seed, index) and within the vocabulary, and the JSONL prompt
// file (text or ids, an optional max_tokens, blank lines and CRLF) with each mistake named by file and line.
#include "meshtrain/serve/http/bench_serve.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "meshtrain/core/error.h"

namespace meshtrain::serve::http {
namespace {

TEST(BenchServe, RandomPromptsAreFixedBySeedAndIndex) {
  BenchServeOptions o;
  o.prompt_tokens = 64;
  o.output_tokens = 9;
  o.vocab = 50;
  const BenchPrompt a = random_prompt(o, 3);
  EXPECT_EQ(a.max_tokens, 9);
  ASSERT_EQ(a.prompt.size(), 64u);
  for (const auto& id : a.prompt) EXPECT_TRUE(id >= 0 && id < 50) << id;
  EXPECT_EQ(random_prompt(o, 3).prompt, a.prompt);
  EXPECT_NE(random_prompt(o, 4).prompt[0], a.prompt[0]) << "neighbouring requests share no prefix";
  o.seed = 1;
  EXPECT_NE(random_prompt(o, 3).prompt, a.prompt);
}

TEST(BenchServe, RequestsPerLevelDefaultToTwiceTheConcurrency) {
  BenchServeOptions o;
  EXPECT_EQ(o.requests_at(1), 4);
  EXPECT_EQ(o.requests_at(64), 128);
  o.requests = 5;
  EXPECT_EQ(o.requests_at(64), 5);
}

class BenchServePromptFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    std::ofstream(path_, std::ios::binary) << text;
    return path_;
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("bench_serve_prompts_" + std::to_string(::getpid()) + ".jsonl")).string();
};

TEST_F(BenchServePromptFile, TextAndIdsWithOrWithoutMaxTokens) {
  const auto ps = load_prompts_jsonl(write("{\"prompt\": \"In the beginning\", \"max_tokens\": 5, \"x\": 1}\r\n"
                                           "\n   \n{\"prompt\": [1, 2, 3]}\n"),
                                     7);
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0].prompt, "In the beginning");
  EXPECT_EQ(ps[0].max_tokens, 5);
  EXPECT_EQ(ps[1].prompt, nlohmann::json({1, 2, 3}));
  EXPECT_EQ(ps[1].max_tokens, 7);
}

TEST_F(BenchServePromptFile, MistakesNameFileAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"{\"prompt\": \"a\"}\nnot json\n", ":2: expected a JSON object with \"prompt\""},
      {"{\"text\": \"a\"}\n", ":1: expected a JSON object with \"prompt\""},
      {"{\"prompt\": \"\"}\n", ":1: \"prompt\" must be non-empty text"},
      {"{\"prompt\": [1, -2]}\n", ":1: \"prompt\" must be non-empty text"},
      {"{\"prompt\": []}\n", ":1: \"prompt\" must be non-empty text"},
      {"{\"prompt\": \"a\", \"max_tokens\": 0}\n", ":1: \"max_tokens\" must be a positive integer, given 0"},
      {"\n\n", ": holds no prompt"},
  };
  for (const auto& [text, needle] : cases) {
    const std::string path = write(text);
    try {
      load_prompts_jsonl(path, 4);
      ADD_FAILURE() << text;
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path + needle), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(load_prompts_jsonl(path_ + ".missing", 4), UserError);
}

}  // namespace
}  // namespace meshtrain::serve::http
