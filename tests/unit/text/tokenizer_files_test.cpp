// A model directory's tokenizer files: finding tokenizer.json, --tokenizer given a file or a directory, and the
// end-of-text ids from tokenizer_config.json and generation_config.json.
#include <gtest/gtest.h>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/text/byte_level.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("meshtrain_tokfiles_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { remove_tree(path.string()); }
};

void write(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(); }

// Byte symbols 0..255 and two special tokens.
json minimal_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_symbols(std::string(1, static_cast<char>(b)))] = b;
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
          {"added_tokens", json::array({{{"id", 256}, {"content", "<|end|>"}, {"special", true}},
                                        {{"id", 257}, {"content", "<|eot|>"}, {"special", true}}})},
          {"pre_tokenizer", {{"type", "ByteLevel"}}}};
}

TEST(TokenizerFiles, FindsTheFileAndReadsTheStopTokens) {
  TempDir d;
  EXPECT_FALSE(find_tokenizer_file({"", (d.path / "missing").string(), d.path.string()}));
  write(d.path / "tokenizer.json", minimal_tokenizer());
  EXPECT_EQ(find_tokenizer_file({(d.path / "missing").string(), d.path.string()}), (d.path / "tokenizer.json").string());
  EXPECT_EQ(tokenizer_file(d.path.string(), "--tokenizer"), (d.path / "tokenizer.json").string());
  const Tokenizer tok = Tokenizer::from_file(tokenizer_file((d.path / "tokenizer.json").string(), "--tokenizer"));
  EXPECT_TRUE(stop_token_ids(d.path.string(), tok).empty());  // no side files: no stop tokens
  write(d.path / "tokenizer_config.json", {{"eos_token", {{"content", "<|eot|>"}, {"special", true}}}});
  EXPECT_EQ(stop_token_ids(d.path.string(), tok), (std::vector<int64_t>{257}));
  write(d.path / "generation_config.json", {{"eos_token_id", {256, 257}}});
  EXPECT_EQ(stop_token_ids(d.path.string(), tok), (std::vector<int64_t>{257, 256}));
  try {
    tokenizer_file((d.path / "nope").string(), "--tokenizer");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--tokenizer"), std::string::npos);
  }
}

}  // namespace
}  // namespace meshtrain::text
