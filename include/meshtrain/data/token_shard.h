// TokenShard: one memory-mapped file of tokens, read-only.
// Formats: llm.c ("llmc": 256 × int32 header, magic 20240520, version 1 = uint16 tokens (version 2 = uint32
// tokens, meshtrain's extension for vocabularies over 65536), header[2] = token count, then the tokens) and raw
// little-endian uint16 / uint32 arrays (nanoGPT's .bin). "auto" takes llm.c when the magic is present, refuses a
// file shaped like an llm.c header with another magic (detect_format), and reads anything else as uint16
// (format() says which was taken). A wrong magic, or an llm.c file whose size is not its header's count of
// tokens (truncated, or bytes after them that would never be read), is a UserError naming it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "meshtrain/core/config_enums.h"

namespace meshtrain::data {

// auto | llmc | uint16 | uint32 (data.format; its spellings in core/config_enums.h).
using meshtrain::ShardFormat;

inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr int kLlmcHeaderInts = 256;

// What data.format auto means for a file whose first `len` bytes are `bytes`: llm.c with its magic, uint16
// otherwise — except a zero-padded 1024-byte llm.c-style header with another magic or version, which is a
// UserError naming `path`, the magic and version found and the valid ones.
ShardFormat detect_format(const std::string& path, const uint8_t* bytes, size_t len);

class TokenShard {
 public:
  TokenShard(const std::string& path, ShardFormat format);
  ~TokenShard();
  TokenShard(TokenShard&& o) noexcept;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return n_tokens_; }
  // The format the file is read in: llmc, uint16 or uint32 (data.format auto resolved).
  ShardFormat format() const { return format_; }
  // The position of the first token ≥ limit, or -1 when every token is below it: one pass over the whole
  // mapping (vectorised; docs/PERFORMANCE.md has its cost on a 1 GB shard).
  int64_t find_token_at_least(int64_t limit) const;
  // Copies tokens [begin, begin + n) as int64 into out.
  void read(int64_t begin, int64_t n, int64_t* out) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  const uint8_t* tokens_ = nullptr;
  int bytes_per_token_ = 2;
  int64_t n_tokens_ = 0;
  ShardFormat format_ = ShardFormat::U16;
};

// Writes tokens as an llm.c shard (uint16; every token must be < 65536) atomically (tmp + rename).
void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace meshtrain::data
