// Byte-pair encoding of one pre-tokenized word: the word starts as one symbol per character and the ranked
// merges are applied lowest rank first (leftmost first among equal ranks), exactly the order of the
// `tokenizers` package's BPE model, so the ids agree with it. A character outside the vocabulary becomes its
// UTF-8 bytes as <0xNN> tokens with `byte_fallback` (SentencePiece-style vocabularies), else the unknown
// token (consecutive ones fused into one with `fuse_unk`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace meshtrain::text {

class Bpe {
 public:
  // `vocab`: token string → id; `merges`: pairs in rank order (rank = index), each pair's concatenation must
  // be in the vocabulary. `ignore_merges`: a word that is itself in the vocabulary is one token (Llama 3).
  // `unk`: the id a character outside the vocabulary becomes; without one such a character is dropped.
  Bpe(std::unordered_map<std::string, int64_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      bool ignore_merges, std::optional<int64_t> unk, bool byte_fallback = false, bool fuse_unk = false);

  // Appends the ids of `word` (a string of vocabulary characters, e.g. byte-level symbols) to `out`.
  void encode(std::string_view word, std::vector<int64_t>& out) const;

  const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    int64_t result;
  };
  static uint64_t key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  const Merge* find_merge(int64_t a, int64_t b) const;
  // The word's first symbols: one per character, with byte fallback and unknown tokens applied.
  std::vector<int64_t> initial_symbols(std::string_view word) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_;
  std::optional<int64_t> unk_;
  bool byte_fallback_, fuse_unk_;
  int64_t byte_ids_[256];  // <0xNN>'s id, or -1 where the vocabulary lacks it
};

}  // namespace meshtrain::text
