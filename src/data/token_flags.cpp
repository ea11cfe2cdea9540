// Token-flag sidecars, memory-mapped like the shards they describe.
#include "meshtrain/data/token_flags.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "meshtrain/core/error.h"
#include "meshtrain/data/token_shard.h"

namespace meshtrain::data {

bool TokenFlags::is_sidecar(const std::string& path) {
  constexpr std::string_view kSuffix = ".flags";
  return path.size() > kSuffix.size() && path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

std::optional<TokenFlags> TokenFlags::open_for(const std::string& shard_path, int64_t shard_tokens) {
  TokenFlags f(sidecar_path(shard_path));
  int fd = ::open(f.path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
  MT_USER_CHECK(fd >= 0, f.path_, ": cannot open token flags: ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  f.map_len_ = stat_ok ? static_cast<size_t>(st.st_size) : 0;
  const size_t header_bytes = kLlmcHeaderInts * sizeof(int32_t);
  if (stat_ok && f.map_len_ >= header_bytes) {
    f.map_ = ::mmap(nullptr, f.map_len_, PROT_READ, MAP_SHARED, fd, 0);
    if (f.map_ == MAP_FAILED) f.map_ = nullptr;
  }
  ::close(fd);  // the mapping keeps the file alive
  MT_USER_CHECK(f.map_, f.path_, ": not a token-flags file: ", f.map_len_, " bytes, smaller than its ", header_bytes,
                "-byte header (or unreadable)");
  int32_t header[3];
  std::memcpy(header, f.map_, sizeof header);
  MT_USER_CHECK(header[0] == kFlagsMagic && header[1] == 1, f.path_, ": not a token-flags file: magic ", header[0],
                " version ", header[1], "; valid: magic ", kFlagsMagic, " version 1 (scripts/prepare_instruct.py)");
  f.n_ = header[2];
  MT_USER_CHECK(f.n_ == shard_tokens, f.path_, ": flags for ", f.n_, " tokens, but its shard ", shard_path, " holds ",
                shard_tokens, ": written by another run? (prepare the data again)");
  MT_USER_CHECK(f.map_len_ >= header_bytes + static_cast<size_t>(f.n_), f.path_, ": truncated: header says ", f.n_,
                " flags, file has ", f.map_len_ - header_bytes);
  f.flags_ = static_cast<const uint8_t*>(f.map_) + header_bytes;
  return f;
}

TokenFlags::~TokenFlags() {
  if (map_) ::munmap(map_, map_len_);
}

TokenFlags::TokenFlags(TokenFlags&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_len_(o.map_len_),
      flags_(o.flags_),
      n_(o.n_) {}

const uint8_t* TokenFlags::at(int64_t begin, int64_t n) const {
  MT_CHECK(begin >= 0 && begin + n <= n_, path_, ": flags [", begin, ", ", begin + n, ") out of ", n_);
  return flags_ + begin;
}

}  // namespace meshtrain::data
