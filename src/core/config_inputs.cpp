// Checks that the files a config names exist and can fill one step, before any worker starts (meshrun,
// `meshtrain config/train`).
#include <filesystem>

#include "meshtrain/core/config.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/glob.h"

namespace meshtrain {
namespace {

// At most how many windows of seq_len + 1 tokens `files` can hold, from their sizes alone: every format
// stores a token in at least 2 bytes (4 for data.format uint32), so a header or a sidecar only raises the bound.
// The loader counts them exactly when it opens the shards; this bound never refuses data that would fit.
int64_t max_windows(const std::vector<std::string>& files, const Config& cfg) {
  const int64_t bytes_per_token = cfg.data.format == ShardFormat::U32 ? 4 : 2, seq = cfg.data.seq_len;
  int64_t windows = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (ec) continue;  // the loader names a file it cannot read
    const int64_t tokens = static_cast<int64_t>(size) / bytes_per_token;
    // Packed: a window every seq_len tokens; one document per window (no packing): at most a window per 2 tokens.
    windows += cfg.data.packing ? (tokens > seq ? (tokens - 1) / seq : 0) : tokens / 2;
  }
  return windows;
}

// UserError when `pattern` (the config key `key`) cannot fill one step: batch × data-parallel ranks windows.
void check_fills_one_step(const Config& cfg, const std::string& where, const char* key, const std::string& pattern) {
  const int64_t ranks = cfg.parallel.dp * cfg.parallel.fsdp, need = cfg.train.micro_batch_size * ranks;
  if (ranks < 1 || cfg.data.seq_len < 1 || need < 1) return;  // validate() reports these
  const int64_t at_most = max_windows(expand_glob(pattern, where + key), cfg);
  MT_USER_CHECK(at_most >= need, where, key, ": '", pattern, "' holds at most ", at_most, " windows of ",
                cfg.data.seq_len + 1, " tokens (data.seq_len + 1); one step needs train.micro_batch_size(",
                cfg.train.micro_batch_size, ") × data-parallel ranks(", ranks, ") = ", need,
                " windows: give more data, or lower data.seq_len or train.micro_batch_size");
}

}  // namespace

void check_inputs_exist(const Config& cfg) {
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  if (cfg.data.train != kSyntheticData) {
    expand_glob(cfg.data.train, where + "data.train");
    check_fills_one_step(cfg, where, "data.train", cfg.data.train);
  }
  if (cfg.data.val.empty()) return;
  expand_glob(cfg.data.val, where + "data.val");
  // Read only where validation runs (train.eval_every > 0).
  if (cfg.train.eval_every > 0) check_fills_one_step(cfg, where, "data.val", cfg.data.val);
}

}  // namespace meshtrain
