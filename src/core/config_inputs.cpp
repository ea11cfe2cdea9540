// Checks that the files a config names exist and can fill one step, before any worker starts (meshrun,
// `meshtrain config/train`).
#include <filesystem>

#include "meshtrain/core/config.h"
#include "meshtrain/core/data_sources.h"
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

// UserError when `pattern` (the config key `key`) cannot fill `need` windows: batch × data-parallel ranks for a
// training source read on its own; one window for a source of a mixture, which draws single windows from each;
// one window a rank for held-out data, which reads smaller micro-batches where it holds fewer
// (LoaderOptions::fit_batch).
void check_fills(const Config& cfg, const std::string& where, const char* key, const std::string& pattern,
                 bool one_of_a_mixture, bool held_out = false) {
  const int64_t ranks = cfg.parallel.dp * cfg.parallel.fsdp;
  const int64_t need = one_of_a_mixture ? 1 : held_out ? ranks : cfg.train.micro_batch_size * ranks;
  if (ranks < 1 || cfg.data.seq_len < 1 || need < 1) return;  // validate() reports these
  const int64_t at_most = max_windows(expand_glob(pattern, where + key), cfg);
  if (one_of_a_mixture)
    MT_USER_CHECK(at_most >= need, where, key, ": '", pattern, "' holds no window of ", cfg.data.seq_len + 1,
                  " tokens (data.seq_len + 1); each source of a mixture needs one: give more data, or lower "
                  "data.seq_len");
  if (held_out)
    MT_USER_CHECK(at_most >= need, where, key, ": '", pattern, "' holds at most ", at_most, " windows of ",
                  cfg.data.seq_len + 1, " tokens (data.seq_len + 1); validation needs one a data-parallel rank(",
                  ranks, "): give more held-out data, or lower data.seq_len");
  MT_USER_CHECK(at_most >= need, where, key, ": '", pattern, "' holds at most ", at_most, " windows of ",
                cfg.data.seq_len + 1, " tokens (data.seq_len + 1); one step needs train.micro_batch_size(",
                cfg.train.micro_batch_size, ") × data-parallel ranks(", ranks, ") = ", need,
                " windows: give more data, or lower data.seq_len or train.micro_batch_size");
}

}  // namespace

void check_inputs_exist(const Config& cfg) {
  const std::string where = cfg.source.empty() ? "" : cfg.source + ": ";
  if (!is_synthetic_data(cfg.data.train)) {
    const auto train = parse_data_sources(cfg.data.train);
    for (const auto& s : train) check_fills(cfg, where, "data.train", s.pattern, train.size() > 1);
  }
  // Each validation source is read on its own; only where validation runs (train.eval_every > 0).
  for (const auto& s : parse_data_sources(cfg.data.val)) {
    if (cfg.train.eval_every > 0) check_fills(cfg, where, "data.val", s.pattern, false, /*held_out=*/true);
    else expand_glob(s.pattern, where + "data.val");
  }
}

}  // namespace meshtrain
