// A BPE tokenizer read from a Hugging Face `tokenizer.json` (the `tokenizers` package's format), of two kinds:
// - byte-level (GPT-2, Llama 3, Qwen): added/special tokens split out first (exact match), the pre-tokenizer
//   steps (the regex Split and ByteLevel) cut the rest into words, each word's bytes become byte-level
//   symbols and BPE merges them. Decoding: ids → bytes → UTF-8 with invalid sequences replaced.
// - SentencePiece-style (Llama 2, Mistral, Gemma): added tokens split out, each stretch between them
//   normalized (Prepend "▁", Replace " " → "▁") or pre-tokenized by Metaspace, BPE over characters with
//   byte fallback (<0xNN> tokens for a character outside the vocabulary). Decoding: the Replace /
//   ByteFallback / Fuse / Strip (or Metaspace) decoder chain (text/piece_decoder.h).
// The post-processor's template adds the BOS-style tokens when asked. StreamDecoder decodes token by token.
//
// What it reads is checked: a normaliser, model, pre-tokenizer step, post-processor or decoder other than the
// ones above is a UserError naming the file and the component, never a silently different tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/text/added_tokens.h"
#include "meshtrain/text/bpe.h"
#include "meshtrain/text/normalizer.h"
#include "meshtrain/text/piece_decoder.h"
#include "meshtrain/text/pre_tokenizer.h"

namespace meshtrain::text {

class Tokenizer {
 public:
  // Reads a tokenizer.json; `path` names it in every error.
  static Tokenizer from_file(const std::string& path);
  // The same from the file's text.
  static Tokenizer from_json_text(std::string_view json, const std::string& where);

  // Text → ids. `add_special_tokens`: wrap in the post-processor's template (e.g. Llama 3's BOS).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Ids → text; an id outside the vocabulary is skipped (as `tokenizers` does).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = true) const;

  // Byte-level tokenizers: the bytes one token decodes to ("" for special tokens when skipped, and for
  // unknown ids).
  std::string token_bytes(int64_t id, bool skip_special_tokens = true) const;
  // SentencePiece-style tokenizers: the decoder chain (nullptr for a byte-level tokenizer), and a token as
  // the vocabulary writes it (nullopt for a special token when skipped, and for an unknown id).
  const PieceDecoding* piece_decoding() const { return pieces_ ? &*pieces_ : nullptr; }
  std::optional<std::string> token_string(int64_t id, bool skip_special_tokens = true) const;
  // The pieces BPE sees (byte-level symbols, or the normalized text's pieces), for tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  std::optional<int64_t> token_to_id(std::string_view token) const;
  bool is_special(int64_t id) const;
  // One more than the largest id (vocabulary and added tokens).
  int64_t vocab_size() const { return vocab_size_; }

 private:
  Tokenizer(Bpe bpe, AddedTokens added, std::vector<PreTokenizeStep> steps);

  std::unique_ptr<Bpe> bpe_;
  AddedTokens added_;
  std::vector<PreTokenizeStep> steps_;
  std::vector<NormalizeStep> normalize_;
  std::optional<PieceDecoding> pieces_;  // set: a SentencePiece-style decoder chain
  std::vector<std::string> id_to_token_;  // the BPE vocabulary by id
  std::vector<int64_t> prefix_, suffix_;  // the post-processor's tokens around the text
  int64_t vocab_size_ = 0;
  friend struct TokenizerLoader;
};

}  // namespace meshtrain::text
