// ProgressBoard; see progress_board.h.
#include "comm/diagnostics/progress_board.h"

#include <algorithm>
#include <sstream>

#include "meshtrain/comm/attempt_key.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

namespace {


void raise_to(std::atomic<std::uint64_t>& a, std::uint64_t v) {
  std::uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

ProgressBoard::ProgressBoard(StorePtr store, std::string group, int rank, int size,
                             std::function<void(const std::string&)> on_dump_request, std::chrono::milliseconds period)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      on_dump_request_(std::move(on_dump_request)),
      period_(period) {
  const std::string attempt = attempt_key();
  prefix_ = cat("meshtrain/progress/", attempt, "/", group_, "/");
  dump_key_ = cat("meshtrain/flight/", attempt, "/dump");
  store_->set(prefix_ + std::to_string(rank_), store_bytes("0 0"));
  thread_ = std::thread([this] { run(); });
}

ProgressBoard::~ProgressBoard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressBoard::arrived(std::uint64_t seq) { raise_to(arrived_, seq + 1); }
void ProgressBoard::completed(std::uint64_t seq) { raise_to(completed_, seq + 1); }

void ProgressBoard::publish() {
  const std::uint64_t a = arrived_.load(std::memory_order_relaxed);
  const std::uint64_t c = completed_.load(std::memory_order_relaxed);
  if (a == published_arrived_ && c == published_completed_) return;
  store_->set(prefix_ + std::to_string(rank_), store_bytes(cat(a, " ", c)));
  published_arrived_ = a;
  published_completed_ = c;
}

void ProgressBoard::run() {
  int tick = 0;
  int failures = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    try {
      publish();
      // The dump key is checked about once a second: it matters only after a failure.
      const int every = std::max<int>(1, static_cast<int>(std::chrono::milliseconds(1000) / period_));
      if (!dump_seen_ && ++tick % every == 0 && store_->check({dump_key_})) {
        dump_seen_ = true;
        const auto raw = store_->get(dump_key_);
        const std::string reason(raw.begin(), raw.end());
        lock.unlock();  // the callback writes a file: do not hold up the destructor's stop_ meanwhile
        if (on_dump_request_) on_dump_request_(reason);
        lock.lock();
      }
      failures = 0;
    } catch (const std::exception& e) {
      // The store goes away when the launcher tears the job down; progress reports are best effort.
      if (++failures == 3) log::debug("progress board '%s': store unreachable: %s", group_.c_str(),
                                   store_error_text(e).c_str());
      if (failures >= 3) return;
    }
  }
}

void ProgressBoard::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  publish();
}

std::vector<PeerProgress> ProgressBoard::read_all() {
  std::this_thread::sleep_for(period_ + period_ / 2);
  flush();
  std::vector<PeerProgress> out;
  for (int r = 0; r < size_; ++r) {
    PeerProgress p;
    p.rank = r;
    const std::string key = prefix_ + std::to_string(r);
    if (store_->check({key})) {
      const auto raw = store_->get(key);
      std::istringstream in(std::string(raw.begin(), raw.end()));
      std::uint64_t a = 0, c = 0;
      if (in >> a >> c) {
        p.arrived = a;
        p.completed = c;
      }
    }
    out.push_back(p);
  }
  return out;
}

std::string ProgressBoard::not_arrived(std::uint64_t seq) {
  std::vector<PeerProgress> all;
  try {
    all = read_all();
  } catch (const std::exception& e) {
    return cat("(could not read the other ranks' progress from the store: ", store_error_text(e), ")");
  }
  std::string ranks, where;
  for (const PeerProgress& p : all) {
    if (p.arrived && *p.arrived > seq) continue;
    ranks += cat(ranks.empty() ? "" : ", ", p.rank);
    where += cat(where.empty() ? "" : ", ",
                 p.arrived ? cat(*p.arrived, " started/", *p.completed, " completed") : std::string("no report"));
  }
  if (ranks.empty()) return "";
  return cat("ranks that had not arrived: ", ranks, " (collectives ", where, ")");
}

void ProgressBoard::request_dumps(const std::string& reason) {
  try {
    // compareSet with an empty expected value creates the key only if absent: the first failure's reason wins.
    store_->compareSet(dump_key_, {}, store_bytes(reason));
  } catch (const std::exception& e) {
    log::warn("progress board '%s': cannot ask the other ranks for flight-recorder dumps: %s", group_.c_str(),
              store_error_text(e).c_str());
  }
}

}  // namespace meshtrain::comm
