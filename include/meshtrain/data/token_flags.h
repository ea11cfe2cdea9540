// TokenFlags: a shard's sidecar of one flag byte per token — which tokens the loss trains on and where
// documents start — memory-mapped, read-only (docs/data.md).
//
// File `<shard>.flags` beside the shard: 256 × int32 header (magic 20241014, version 1, header[2] = token
// count, the rest zero), then one byte per token: bit 0 (kLossFlag) = the loss is taken on this token as a
// target, bit 1 (kDocStartFlag) = the token starts a document. Written by scripts/prepare_instruct.py next to
// its llm.c shards; a shard without one trains on every token as one stream, as before.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace meshtrain::data {

inline constexpr int32_t kFlagsMagic = 20241014;
inline constexpr uint8_t kLossFlag = 1, kDocStartFlag = 2;

class TokenFlags {
 public:
  // The sidecar of the shard at `shard_path` when there is one. A sidecar whose count differs from
  // `shard_tokens`, or a bad header, is a UserError naming it.
  static std::optional<TokenFlags> open_for(const std::string& shard_path, int64_t shard_tokens);
  static std::string sidecar_path(const std::string& shard_path) { return shard_path + ".flags"; }
  static bool is_sidecar(const std::string& path);

  ~TokenFlags();
  TokenFlags(TokenFlags&& o) noexcept;
  TokenFlags& operator=(TokenFlags&&) = delete;
  TokenFlags(const TokenFlags&) = delete;
  TokenFlags& operator=(const TokenFlags&) = delete;

  int64_t size() const { return n_; }
  // The flag bytes of tokens [begin, begin + n).
  const uint8_t* at(int64_t begin, int64_t n) const;

 private:
  explicit TokenFlags(std::string path) : path_(std::move(path)) {}
  std::string path_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  const uint8_t* flags_ = nullptr;
  int64_t n_ = 0;
};

}  // namespace meshtrain::data
