#include "meshtrain/data/data_loader.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "meshtrain/core/clock.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/glob.h"
#include "meshtrain/core/log.h"

namespace meshtrain::data {
namespace {

// splitmix64: a portable, seedable generator, so the window order is the same with every standard library.
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fisher-Yates over `order` with splitmix64 from `state`.
void shuffle_windows(std::vector<int64_t>& order, uint64_t state) {
  if (order.size() < 2) return;
  for (size_t i = order.size() - 1; i > 0; --i) {
    size_t j = static_cast<size_t>(splitmix64(state) % (i + 1));
    std::swap(order[i], order[j]);
  }
}

}  // namespace

DataLoader::DataLoader(LoaderOptions opts) : opts_(std::move(opts)) {
  MT_CHECK(opts_.seq_len > 0 && opts_.batch_size > 0 && opts_.world_size > 0 && !opts_.sources.empty(),
           "bad loader options");
  open_sources();
  std::string without;  // a shard without a sidecar, for the message
  for (const auto& shard : shards_) {
    total_tokens_ += shard.size();
    if (auto f = TokenFlags::open_for(shard.path(), shard.size())) flags_.push_back(std::move(*f));
    else if (without.empty()) without = shard.path();
  }
  log_raw_shards();
  check_ids();
  MT_USER_CHECK(flags_.empty() || flags_.size() == shards_.size(), opts_.what, ": ", flags_.size(), " of ",
                shards_.size(), " shards have token flags (loss masks, documents) but ", without, " has no ",
                TokenFlags::sidecar_path(without), "; valid: all or none (prepare them in one run)");
  make_windows();
  const char* unit = flags_.empty() || opts_.packing ? " windows of " : " documents of up to ";
  if (num_sources() == 1) {
    fit_batch_to_windows();
    const int64_t need = opts_.batch_size * opts_.world_size;
    MT_USER_CHECK(num_windows() >= need, opts_.what, ": '", source_pattern(0), "' holds ", total_tokens_,
                  " tokens = ", num_windows(), unit, opts_.seq_len + 1, " tokens; ",
                  opts_.fit_batch ? cat("held-out data needs one a rank: ", opts_.world_size)
                                  : cat("one step needs batch(", opts_.batch_size, ") × ranks(", opts_.world_size,
                                        ") = ", need),
                  " windows");
    make_order();
    return;
  }
  // A mixture draws single windows from each source: one is enough for any of them.
  std::vector<double> weights;
  for (size_t s = 0; s < num_sources(); ++s) {
    MT_USER_CHECK(source_windows(s) > 0, opts_.what, ": '", source_pattern(s), "' holds 0", unit,
                  opts_.seq_len + 1, " tokens; each source of a mixture needs at least one");
    weights.push_back(opts_.sources[s].weighted ? opts_.sources[s].weight : static_cast<double>(source_windows(s)));
  }
  mix_.emplace(weights);
  state_.sources.resize(num_sources());
  drawn_.assign(num_sources(), 0);
  source_order_.resize(num_sources());
  for (size_t s = 0; s < num_sources(); ++s) make_source_order(s);
}

void DataLoader::open_sources() {
  for (size_t s = 0; s < num_sources(); ++s) {
    for (const auto& path : expand_glob(source_pattern(s), opts_.what)) {
      if (TokenFlags::is_sidecar(path)) continue;  // a glob such as data/x_train_* also matches the sidecars
      shards_.emplace_back(path, opts_.format);
      shard_source_.push_back(static_cast<int32_t>(s));
    }
  }
}

void DataLoader::fit_batch_to_windows() {
  const int64_t fits = num_windows() / opts_.world_size;
  if (!opts_.fit_batch || fits >= opts_.batch_size || fits < 1) return;
  log::progress("%s: '%s' holds %lld windows of %lld tokens: read in micro-batches of %lld (of the %lld asked) on "
                "each of %d rank(s)", opts_.what.c_str(), source_pattern(0).c_str(),
                static_cast<long long>(num_windows()), static_cast<long long>(opts_.seq_len + 1),
                static_cast<long long>(fits), static_cast<long long>(opts_.batch_size), opts_.world_size);
  opts_.batch_size = fits;
}

void DataLoader::make_windows() {
  const int64_t win = opts_.seq_len + 1;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const int64_t n = shards_[s].size();
    auto add = [&](int64_t start, int64_t len) {
      window_shard_.push_back(static_cast<int32_t>(s));
      window_start_.push_back(start);
      window_len_.push_back(len);
    };
    if (flags_.empty() || opts_.packing) {
      // Windows start every seq_len tokens and need seq_len + 1 tokens (the last target).
      for (int64_t start = 0; start + win <= n; start += opts_.seq_len) add(start, win);
      continue;
    }
    // One window per document (its first seq_len + 1 tokens); a one-token document has no target.
    const uint8_t* f = n > 0 ? flags_[s].at(0, n) : nullptr;
    int64_t doc = 0;
    for (int64_t i = 1; i <= n; ++i) {
      if (i < n && !(f[i] & kDocStartFlag)) continue;
      if (i - doc >= 2) add(doc, std::min(i - doc, win));
      doc = i;
    }
  }
  // Shards come source by source, so each source's windows are one range.
  source_first_.assign(num_sources() + 1, 0);
  for (const int32_t shard : window_shard_) ++source_first_[static_cast<size_t>(shard_source_[shard]) + 1];
  for (size_t s = 0; s < num_sources(); ++s) source_first_[s + 1] += source_first_[s];
}

void DataLoader::make_order() {
  order_.resize(window_start_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = static_cast<int64_t>(i);
  if (opts_.shuffle) shuffle_windows(order_, opts_.seed * 0x100000001B3ull + static_cast<uint64_t>(state_.epoch));
}

void DataLoader::make_source_order(size_t s) {
  std::vector<int64_t>& order = source_order_[s];
  order.resize(static_cast<size_t>(source_windows(s)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = source_first_[s] + static_cast<int64_t>(i);
  // Each source its own stream of orders: the same seed and epoch would give sources of equal size one order.
  const uint64_t seed = opts_.seed * 0x100000001B3ull + static_cast<uint64_t>(state_.sources[s].epoch);
  if (opts_.shuffle) shuffle_windows(order, seed ^ (static_cast<uint64_t>(s) + 1) * 0xD1B54A32D192ED03ull);
}

int64_t DataLoader::take_window(size_t s) {
  SourcePosition& p = state_.sources[s];
  const int64_t w = source_order_[s][static_cast<size_t>(p.cursor)];
  ++drawn_[s];
  if (++p.cursor == source_windows(s)) {  // its epoch is done: the next one's order now, so cursor < windows
    p.epoch += 1;
    p.cursor = 0;
    make_source_order(s);
  }
  return w;
}

std::vector<int64_t> DataLoader::deal_mixture() {
  const int64_t B = opts_.batch_size, first = static_cast<int64_t>(opts_.rank) * B;
  std::vector<int64_t> windows(static_cast<size_t>(B));
  // Every rank deals the whole micro-batch of every rank, so that all keep the same position.
  for (int64_t i = 0; i < B * opts_.world_size; ++i) {
    const int64_t w = take_window(mix_->pick(drawn_));
    if (i >= first && i < first + B) windows[static_cast<size_t>(i - first)] = w;
  }
  state_.cursor += B * opts_.world_size;
  return windows;
}

void DataLoader::reset() {
  LoaderState start;
  start.sources.resize(mix_ ? num_sources() : 0);
  restore(start);
}

void DataLoader::restore(const LoaderState& st) {
  const std::string changed = " (were data.train's sources, their shards or data.seq_len changed?)";
  MT_USER_CHECK(st.sources.size() == (mix_ ? num_sources() : 0), opts_.what, ": the saved data position holds ",
                st.sources.size(), " sources' positions, ", opts_.what, " has ", num_sources(), changed);
  if (!mix_) {
    MT_USER_CHECK(st.epoch >= 0 && st.cursor >= 0 && st.cursor <= num_windows(), opts_.what,
                  ": saved data position (epoch ", st.epoch, ", cursor ", st.cursor, ") does not fit ",
                  num_windows(), " windows", changed);
    const bool new_epoch = st.epoch != state_.epoch;
    state_ = st;
    if (new_epoch) make_order();
    return;
  }
  int64_t dealt = 0;
  for (size_t s = 0; s < num_sources(); ++s) {
    const SourcePosition& p = st.sources[s];
    MT_USER_CHECK(p.epoch >= 0 && p.cursor >= 0 && p.cursor < source_windows(s), opts_.what, ": saved position of '",
                  source_pattern(s), "' (epoch ", p.epoch, ", cursor ", p.cursor, ") does not fit its ",
                  source_windows(s), " windows", changed);
    dealt += p.epoch * source_windows(s) + p.cursor;
  }
  MT_USER_CHECK(dealt == st.cursor, opts_.what, ": the saved sources' positions add up to ", dealt,
                " windows, the saved stream to ", st.cursor, changed);
  state_ = st;
  for (size_t s = 0; s < num_sources(); ++s) {
    make_source_order(s);
    drawn_[s] = st.sources[s].epoch * source_windows(s) + st.sources[s].cursor;
  }
}

void DataLoader::check_ids() const {
  if (opts_.vocab_size <= 0) return;
  const auto t0 = Clock::now();
  for (const auto& shard : shards_) {
    const int64_t i = shard.find_token_at_least(opts_.vocab_size);
    if (i < 0) continue;
    int64_t id = 0;
    shard.read(i, 1, &id);
    throw UserError(cat(shard.path(), ": token ", i, " (counting from 0 after any header) is ", id,
                        ", not below model.vocab_size ", opts_.vocab_size, " (", opts_.what, "; were the shards "
                        "made with another tokenizer, or is data.format wrong?)"));
  }
  log::debug("%s: %lld tokens below model.vocab_size %lld (checked in %.3f s)", opts_.what.c_str(),
             static_cast<long long>(total_tokens_), static_cast<long long>(opts_.vocab_size), seconds_since(t0));
}

void DataLoader::log_raw_shards() const {
  if (opts_.format != ShardFormat::Auto) return;
  std::vector<std::string> raw;
  for (const auto& shard : shards_)
    if (shard.format() == ShardFormat::U16) raw.push_back(shard.path());
  if (raw.empty()) return;
  log::progress("%s: %s%s read as raw uint16 (no llm.c header magic %d; data.format: auto): set data.format: "
                "uint16 to say so, uint32 for 32-bit tokens", opts_.what.c_str(), raw.front().c_str(),
                raw.size() > 1 ? log::sprintf(" and %zu more of %zu shards", raw.size() - 1, shards_.size()).c_str()
                               : "",
                kLlmcMagic);
}

int64_t DataLoader::apply_flags(const uint8_t* f, int64_t n, int64_t* tgt, int64_t* pos,
                                std::vector<int32_t>* starts, int64_t row_offset) const {
  int64_t kept = 0;
  for (int64_t t = 0; t < opts_.seq_len; ++t) {
    // Target t is token t + 1: masked past the window (padding), where it starts a document (no token of the
    // previous document predicts it) and where the loss mask leaves it out.
    const bool keep = t + 1 < n && !(f[t + 1] & kDocStartFlag) && (!opts_.loss_mask || (f[t + 1] & kLossFlag));
    if (!keep) tgt[t] = -100;
    kept += keep;
    if (!pos) continue;
    pos[t] = t == 0 || (f[t] & kDocStartFlag) ? 0 : pos[t - 1] + 1;
    if (pos[t] == 0) starts->push_back(static_cast<int32_t>(row_offset + t));
  }
  return kept;
}

Batch DataLoader::make_batch(const at::Tensor& rows, const std::vector<int64_t>& windows) const {
  const int64_t B = rows.size(0), T = opts_.seq_len;
  // Copies, not views: with one row a narrowed view is already contiguous, and masking the targets in place
  // would then write into the inputs.
  Batch batch{rows.narrow(1, 0, T).clone(at::MemoryFormat::Contiguous),
              rows.narrow(1, 1, T).clone(at::MemoryFormat::Contiguous)};
  batch.loss_tokens = B * T;
  if (flags_.empty()) return batch;
  const bool packed = opts_.packing;
  if (packed) batch.positions = at::empty({B, T}, at::kLong);
  std::vector<int32_t> starts;
  batch.loss_tokens = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = windows[b];
    const uint8_t* f = flags_[window_shard_[w]].at(window_start_[w], window_len_[w]);
    batch.loss_tokens += apply_flags(f, window_len_[w], batch.targets.data_ptr<int64_t>() + b * T,
                                     packed ? batch.positions.data_ptr<int64_t>() + b * T : nullptr, &starts, b * T);
  }
  if (!packed) return batch;
  starts.push_back(static_cast<int32_t>(B * T));
  for (size_t i = 1; i < starts.size(); ++i)
    batch.max_doc_len = std::max<int64_t>(batch.max_doc_len, starts[i] - starts[i - 1]);
  batch.cu_seqlens = at::tensor(starts, at::kInt);
  return batch;
}

std::vector<int64_t> DataLoader::deal_one_source() {
  const int64_t B = opts_.batch_size;
  if (state_.cursor + B * opts_.world_size > num_windows()) {
    state_.epoch += 1;
    state_.cursor = 0;
    make_order();
  }
  const int64_t first = state_.cursor + static_cast<int64_t>(opts_.rank) * B;
  std::vector<int64_t> windows(order_.begin() + first, order_.begin() + first + B);
  state_.cursor += B * opts_.world_size;
  return windows;
}

Batch DataLoader::next() {
  const int64_t B = opts_.batch_size, T = opts_.seq_len;
  const std::vector<int64_t> windows = mix_ ? deal_mixture() : deal_one_source();
  auto buf = at::zeros({B, T + 1}, at::kLong);  // zeros: the padding of a document shorter than the window
  int64_t* out = buf.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t w = windows[static_cast<size_t>(b)];
    shards_[window_shard_[w]].read(window_start_[w], window_len_[w], out + b * (T + 1));
  }
  return make_batch(buf, windows);
}

}  // namespace meshtrain::data
