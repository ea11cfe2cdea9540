// The tokenizer assembled from a small tokenizer.json written here: added tokens split out first, the
// pre-tokenizer steps, byte-level symbols through BPE, the BOS template, decoding, and the errors for
// components it does not support.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "meshtrain/core/error.h"
#include "meshtrain/text/byte_level.h"
#include "meshtrain/text/stream_decoder.h"
#include "meshtrain/text/tokenizer.h"

namespace meshtrain::text {
namespace {

using nlohmann::json;

// All 256 byte symbols (ids 0..255), then the merges' results, then the added tokens.
json tiny_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes_to_symbols(std::string(1, static_cast<char>(b)))] = b;
  const std::string sp = bytes_to_symbols(" ");  // "Ġ"
  vocab[sp + "h"] = 256;
  vocab["he"] = 257;
  vocab[sp + "he"] = 258;
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({sp, "h"}), "h e",
                                                                        json::array({sp + "h", "e"})})}};
  j["added_tokens"] = json::array({{{"id", 259}, {"content", "<|bos|>"}, {"special", true}},
                                   {{"id", 260}, {"content", "<sep>"}, {"special", false}, {"lstrip", true}}});
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {259}}, {"tokens", {"<|bos|>"}}}}}}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

Tokenizer tiny() { return Tokenizer::from_json_text(tiny_tokenizer_json().dump(), "tiny.json"); }

TEST(Tokenizer, EncodesThroughTheMerges) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.vocab_size(), 261);
  EXPECT_EQ(t.encode("he he"), (std::vector<int64_t>{257, 258}));
  EXPECT_EQ(t.encode("he he", true), (std::vector<int64_t>{259, 257, 258}));
  EXPECT_EQ(t.pre_tokenize("he he!"), (std::vector<std::string>{"he", "\xC4\xA0he", "!"}));
}

TEST(Tokenizer, AddedTokensSplitFirstAndDecodeAsWritten) {
  const Tokenizer t = tiny();
  // "<sep>" takes the space on its left (lstrip); "<|bos|>" inside a word is still one token.
  EXPECT_EQ(t.encode("he <sep>x<|bos|>he"), (std::vector<int64_t>{257, 260, 'x', 259, 257}));
  EXPECT_EQ(t.decode({257, 260, 259, 258}), "he<sep> he");
  EXPECT_EQ(t.decode({257, 260, 259, 258}, false), "he<sep><|bos|> he");
  EXPECT_TRUE(t.is_special(259));
  EXPECT_FALSE(t.is_special(260));
  EXPECT_EQ(t.token_to_id("<sep>"), 260);
  EXPECT_EQ(t.decode({999, 257}), "he");  // an id outside the vocabulary is skipped
}

TEST(Tokenizer, StreamDecoderHoldsBackAnUnfinishedCharacter) {
  const Tokenizer t = tiny();
  const auto ids = t.encode("a\xE4\xB8\xAD" "b");  // a 中 b: the CJK character is three byte tokens
  ASSERT_EQ(ids.size(), 5u);
  StreamDecoder s(t);
  EXPECT_EQ(s.step(ids[0]), "a");
  EXPECT_EQ(s.step(ids[1]), "");
  EXPECT_EQ(s.step(ids[2]), "");
  EXPECT_EQ(s.step(ids[3]), "\xE4\xB8\xAD");
  EXPECT_EQ(s.step(ids[4]), "b");
  EXPECT_EQ(s.finish(), "");
  StreamDecoder cut(t);
  EXPECT_EQ(cut.step(0xE4), "");
  EXPECT_EQ(cut.step('z'), "\xEF\xBF\xBD" "z");  // can never complete: replaced, as decode() does
  EXPECT_EQ(cut.step(0xE4), "");
  EXPECT_EQ(cut.finish(), "\xEF\xBF\xBD");
}

void expect_refused(json j, const std::string& fragment) {
  try {
    Tokenizer::from_json_text(j.dump(), "m/tokenizer.json");
    FAIL() << "expected a UserError mentioning " << fragment;
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("m/tokenizer.json"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(Tokenizer, UnsupportedComponentsAreNamed) {
  json j = tiny_tokenizer_json();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_refused(j, "normalizer 'NFKC'");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  expect_refused(j, "pre_tokenizer 'WhitespaceSplit'");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_refused(j, "has no ByteLevel step");
  j = tiny_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}};
  expect_refused(j, "regex '\\w+'");
  j = tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, "model 'WordPiece'");
  j = tiny_tokenizer_json();
  j["decoder"] = {{"type", "Metaspace"}};
  expect_refused(j, "a ByteLevel pre_tokenizer with a decoder other than ByteLevel");
  j = tiny_tokenizer_json();
  j["decoder"] = {{"type", "CTC"}};
  expect_refused(j, "decoder 'CTC'");
  j = tiny_tokenizer_json();
  j.erase("model");
  expect_refused(j, "not a tokenizer.json this reader understands");
  expect_refused(json("not an object"), "not a tokenizer.json");
  try {
    Tokenizer::from_json_text("{", "m/tokenizer.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

// SentencePiece-style (Llama 2's layout): <unk> <s> </s>, the 256 byte tokens, then the pieces; normalizer
// Prepend("▁") + Replace(" ", "▁"); decoder Replace, ByteFallback, Fuse, Strip(" ", 1, 0).
json sp_tokenizer_json() {
  static const char* hex = "0123456789ABCDEF";
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">"] = 3 + b;
  const std::string sp = "\xE2\x96\x81";  // ▁
  vocab[sp] = 259;
  vocab["h"] = 260;
  vocab["i"] = 261;
  vocab[sp + "h"] = 262;
  vocab[sp + "hi"] = 263;
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({sp, "h"}), json::array({sp + "h", "i"})})},
                {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"}};
  j["added_tokens"] = json::array();
  for (int id = 0; id < 3; ++id)
    j["added_tokens"].push_back({{"id", id}, {"content", id == 0 ? "<unk>" : id == 1 ? "<s>" : "</s>"}, {"special", true}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", sp}},
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({
      {{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}}, {{"type", "ByteFallback"}},
      {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return j;
}

TEST(Tokenizer, SentencePieceStyleNormalizesEachStretchAndFallsBackToBytes) {
  const Tokenizer t = Tokenizer::from_json_text(sp_tokenizer_json().dump(), "sp.json");
  EXPECT_EQ(t.pre_tokenize("hi hi"), (std::vector<std::string>{"\xE2\x96\x81hi\xE2\x96\x81hi"}));
  EXPECT_EQ(t.encode("hi hi"), (std::vector<int64_t>{263, 263}));
  EXPECT_EQ(t.encode("hi", true), (std::vector<int64_t>{1, 263}));
  EXPECT_EQ(t.encode("<s>hi"), (std::vector<int64_t>{1, 263}));  // the stretch after <s> gets its own "▁"
  // "é" is not a piece: its two bytes, <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("h\xC3\xA9"), (std::vector<int64_t>{262, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.decode({263, 263}), "hi hi");  // "▁hi▁hi" → " hi hi", the first space stripped
  EXPECT_EQ(t.decode({1, 263}), "hi");
  EXPECT_EQ(t.decode({1, 263}, false), "<s> hi");
  EXPECT_EQ(t.decode({262, 3 + 0xC3, 3 + 0xA9}), "h\xC3\xA9");
  // A run of byte tokens that is not valid UTF-8 is one U+FFFD per byte.
  EXPECT_EQ(t.decode({262, 3 + 0xC3, 3 + 0xC3, 263}), "h\xEF\xBF\xBD\xEF\xBF\xBD hi");
}

TEST(Tokenizer, SentencePieceStreamHoldsAByteRunUntilItEnds) {
  const Tokenizer t = Tokenizer::from_json_text(sp_tokenizer_json().dump(), "sp.json");
  StreamDecoder s(t);
  EXPECT_EQ(s.step(1), "");    // <s>, skipped: the next token is still the text's start
  EXPECT_EQ(s.step(262), "h");  // " h", its space stripped
  EXPECT_EQ(s.step(3 + 0xC3), "");
  EXPECT_EQ(s.step(3 + 0xA9), "");  // é is complete, yet a later byte could still spoil the run
  EXPECT_EQ(s.step(263), "\xC3\xA9 hi");
  EXPECT_EQ(s.step(3 + 0xC3), "");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, AStreamAfterAPromptDecodesItsRestNotAStart) {
  const Tokenizer t = Tokenizer::from_json_text(sp_tokenizer_json().dump(), "sp.json");
  StreamDecoder fresh(t);
  EXPECT_EQ(fresh.step(263), "hi");  // the text's start: Strip takes the space
  StreamDecoder after(t);
  after.continue_after({1, 263});  // "<s> hi" already printed
  EXPECT_EQ(after.step(263), " hi");
  EXPECT_EQ(after.finish(), "");
  EXPECT_EQ(t.decode({1, 263}) + " hi", t.decode({1, 263, 263}));
}

TEST(Tokenizer, MetaspacePrependsOnlyAtTheInputsStartAndSplits) {
  json j = sp_tokenizer_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
  const Tokenizer t = Tokenizer::from_json_text(j.dump(), "ms.json");
  EXPECT_EQ(t.pre_tokenize("hi hi"), (std::vector<std::string>{"\xE2\x96\x81hi", "\xE2\x96\x81hi"}));
  EXPECT_EQ(t.encode("hi hi"), (std::vector<int64_t>{263, 263}));
  EXPECT_EQ(t.encode("<s>hi"), (std::vector<int64_t>{1, 260, 261}));  // after <s>: not the start, no "▁"
  EXPECT_EQ(t.decode({263, 263}), "hi hi");  // the first token's "▁" dropped, the others a space
  EXPECT_EQ(t.decode({1, 263}, false), "<s> hi");
}

TEST(Tokenizer, SentencePieceComponentsOutsideTheSubsetAreNamed) {
  json j = sp_tokenizer_json();
  j["decoder"]["decoders"] = json::array({{{"type", "Fuse"}}, {{"type", "ByteFallback"}}});
  expect_refused(j, "decoder 'ByteFallback' after a later step");
  j = sp_tokenizer_json();
  j["decoder"]["decoders"][3]["stop"] = 1;
  expect_refused(j, "decoder Strip with stop 1");
  j = sp_tokenizer_json();
  j["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
  expect_refused(j, "normalizer Replace with a Regex pattern");
  j = sp_tokenizer_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(j, "normalizer 'Lowercase'");
  j = sp_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}};
  expect_refused(j, "prepend_scheme 'sometimes'");
}

}  // namespace
}  // namespace meshtrain::text
