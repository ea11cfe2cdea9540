// Memory-mapped token shards. The mapping is read-only and shared; read() copies what a batch needs.
#include "meshtrain/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "meshtrain/core/error.h"

namespace meshtrain::data {

namespace {

// llm.c writes its header as 256 int32: magic, version, token count, then zeros. A file whose first 1024
// bytes have that shape but another magic is an llm.c-style shard this reader does not know (or a damaged
// one); read as raw uint16 it would train on its header. Raw tokens with 506 zero tokens in a row right
// after the first six are not a plausible accident.
bool looks_like_llmc_header(const uint8_t* bytes, size_t len) {
  const size_t header_bytes = kLlmcHeaderInts * sizeof(int32_t);
  if (len < header_bytes) return false;
  int32_t first = 0;
  std::memcpy(&first, bytes, sizeof first);
  return first != 0 && std::all_of(bytes + 3 * sizeof(int32_t), bytes + header_bytes, [](uint8_t b) { return b == 0; });
}

// The position of the first of the n tokens at p that is ≥ limit, or -1. The maximum of each fixed-size block
// is a loop the compiler vectorises at -O2; only a block holding a bad token is searched for its position.
template <typename T>
int64_t first_token_at_least(const T* p, int64_t n, uint64_t limit) {
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const T* b = p + begin;
    T hi = 0;
    if (n - begin >= kBlock) {
      for (int64_t i = 0; i < kBlock; ++i) hi = std::max(hi, b[i]);
    } else {
      hi = *std::max_element(b, p + n);
    }
    if (hi < limit) continue;
    return begin + (std::find_if(b, p + n, [&](T t) { return t >= limit; }) - b);
  }
  return -1;
}

}  // namespace

ShardFormat detect_format(const std::string& path, const uint8_t* bytes, size_t len) {
  int32_t magic = 0;
  if (len >= sizeof(int32_t)) std::memcpy(&magic, bytes, sizeof magic);
  if (magic == kLlmcMagic) return ShardFormat::LlmC;
  int32_t version = 0;
  if (len >= 2 * sizeof(int32_t)) std::memcpy(&version, bytes + sizeof(int32_t), sizeof version);
  MT_USER_CHECK(!looks_like_llmc_header(bytes, len), path, ": has an llm.c header (1024 bytes, zero-padded) with "
                "magic ", magic, " and version ", version, "; valid: magic ", kLlmcMagic, " with version 1 (uint16 "
                "tokens) or 2 (uint32); set data.format: uint16 or uint32 to read the file as raw tokens instead");
  return ShardFormat::U16;
}

TokenShard::TokenShard(const std::string& path, ShardFormat format) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_USER_CHECK(fd >= 0, path, ": cannot open token shard: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw UserError(cat(path, ": cannot stat token shard: ", std::strerror(errno)));
  }
  map_len_ = static_cast<size_t>(st.st_size);
  if (map_len_ > 0) {
    map_ = ::mmap(nullptr, map_len_, PROT_READ, MAP_SHARED, fd, 0);
    if (map_ == MAP_FAILED) {
      map_ = nullptr;
      ::close(fd);
      throw UserError(cat(path, ": mmap failed: ", std::strerror(errno)));
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  const auto* bytes = static_cast<const uint8_t*>(map_);

  if (format == ShardFormat::Auto) format = detect_format(path, bytes, map_len_);
  format_ = format;

  if (format == ShardFormat::LlmC) {
    const size_t header_bytes = kLlmcHeaderInts * sizeof(int32_t);
    MT_USER_CHECK(map_len_ >= header_bytes, path, ": truncated llm.c shard: ", map_len_,
                  " bytes, smaller than its 1024-byte header");
    int32_t header[3];
    std::memcpy(header, bytes, sizeof header);
    MT_USER_CHECK(header[0] == kLlmcMagic, path, ": not an llm.c token shard: magic ", header[0], ", expected ",
                  kLlmcMagic, " (set data.format: uint16 or uint32 for raw token files)");
    MT_USER_CHECK(header[1] == 1 || header[1] == 2, path, ": llm.c shard version ", header[1],
                  " is not supported (valid: 1, uint16 tokens; 2, uint32 tokens for vocabularies over 65536)");
    bytes_per_token_ = header[1] == 1 ? 2 : 4;
    n_tokens_ = header[2];
    const size_t want = header_bytes + static_cast<size_t>(n_tokens_) * bytes_per_token_;
    const size_t in_file = (map_len_ - header_bytes) / bytes_per_token_;
    MT_USER_CHECK(n_tokens_ >= 0 && map_len_ >= want, path, ": truncated llm.c shard: header says ", n_tokens_,
                  " tokens (", want, " bytes with the header), file has ", map_len_, " bytes (", in_file, " tokens)");
    // More bytes than the count: the tokens after it would never be trained on (a shard appended to, or a
    // header written before the last tokens).
    MT_USER_CHECK(map_len_ == want, path, ": llm.c header says ", n_tokens_, " tokens (", want, " bytes with the "
                  "header), but the file has ", map_len_, " bytes (", in_file, " tokens): the rest would never be "
                  "read; valid: a file of exactly the header's count (write the shard again)");
    tokens_ = bytes + header_bytes;
  } else {
    bytes_per_token_ = format == ShardFormat::U32 ? 4 : 2;
    MT_USER_CHECK(map_len_ % bytes_per_token_ == 0, path, ": size ", map_len_, " bytes is not a multiple of ",
                  bytes_per_token_, " (", format == ShardFormat::U32 ? "uint32" : "uint16", " tokens): truncated?");
    n_tokens_ = static_cast<int64_t>(map_len_ / bytes_per_token_);
    tokens_ = bytes;
  }
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_len_);
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_len_(o.map_len_),
      tokens_(o.tokens_),
      bytes_per_token_(o.bytes_per_token_),
      n_tokens_(o.n_tokens_),
      format_(o.format_) {}

int64_t TokenShard::find_token_at_least(int64_t limit) const {
  if (limit <= 0) return n_tokens_ > 0 ? 0 : -1;
  // The mapping is page-aligned and the llm.c header 1024 bytes: the tokens are aligned for their type.
  if (bytes_per_token_ == 2)
    return first_token_at_least(reinterpret_cast<const uint16_t*>(tokens_), n_tokens_, static_cast<uint64_t>(limit));
  return first_token_at_least(reinterpret_cast<const uint32_t*>(tokens_), n_tokens_, static_cast<uint64_t>(limit));
}

void TokenShard::read(int64_t begin, int64_t n, int64_t* out) const {
  MT_CHECK(begin >= 0 && begin + n <= n_tokens_, path_, ": read [", begin, ", ", begin + n, ") out of ", n_tokens_);
  if (bytes_per_token_ == 2) {
    const uint8_t* p = tokens_ + begin * 2;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t t;
      std::memcpy(&t, p + 2 * i, 2);
      out[i] = t;
    }
  } else {
    const uint8_t* p = tokens_ + begin * 4;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t t;
      std::memcpy(&t, p + 4 * i, 4);
      out[i] = t;
    }
  }
}

void write_llmc_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  MT_USER_CHECK(tokens.size() < (1ull << 31), path, ": ", tokens.size(), " tokens exceed an llm.c shard's int32 count");
  int32_t header[kLlmcHeaderInts] = {};
  header[0] = kLlmcMagic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  MT_USER_CHECK(f, tmp, ": cannot write: ", std::strerror(errno));
  bool ok = std::fwrite(header, sizeof header, 1, f) == 1 &&
            (tokens.empty() || std::fwrite(tokens.data(), 2, tokens.size(), f) == tokens.size());
  ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw UserError(cat(path, ": write failed: ", std::strerror(errno)));
  }
  SYS_CHECK(::rename(tmp.c_str(), path.c_str()), "rename ", tmp, " → ", path);
}

}  // namespace meshtrain::data
