// ProgressBoard: each rank of a communicator publishes, through the rendezvous store, how far it has got in the
// group's sequence of collectives, so that a rank whose collective timed out can name the ranks that had not
// arrived at it (rather than only "it timed out"). Also carries the "please dump your flight recorder" request
// from the rank that saw a failure to every other rank.
//
// Keys (attempt = comm/attempt_key.h, so a restarted or regrouped job never reads the last incarnation's values):
//   meshtrain/progress/<attempt>/<group>/<rank>  = "<arrived> <completed>"  (counts of collectives)
//   meshtrain/flight/<attempt>/dump              = the reason of the first failure that asked for dumps
// Publishing every op would cost a store round trip per op; instead a background thread publishes the newest
// values every `period` when they changed, and checks the dump key. So a reader sees values at most about one
// period old: timeouts are far longer than that.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "meshtrain/comm/store.h"

namespace meshtrain::comm {

struct PeerProgress {
  int rank = 0;
  std::optional<std::uint64_t> arrived;    // collectives this rank had started; nullopt: no value in the store
  std::optional<std::uint64_t> completed;  // collectives it had completed
};

class ProgressBoard {
 public:
  // Publishes (0, 0) for `rank` at once, so every member's key exists once the communicator is built.
  // `on_dump_request(reason)` runs on the board's thread when another rank asks for flight-recorder dumps.
  ProgressBoard(StorePtr store, std::string group, int rank, int size,
                std::function<void(const std::string&)> on_dump_request,
                std::chrono::milliseconds period = std::chrono::milliseconds(200));
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // This rank has started / completed collective number `seq` (0-based): cheap, no store access.
  void arrived(std::uint64_t seq);
  void completed(std::uint64_t seq);

  // Publishes this rank's newest values now, not at the board thread's next tick.
  void flush();

  // Every rank's published values (store reads; for error paths only). Waits one period first so that this
  // rank's own newest values and those of the peers are out.
  std::vector<PeerProgress> read_all();

  // Ranks that had not started collective `seq`, from read_all(); "ranks 2, 3 (at 6, 6 collectives)" style
  // text for error messages, or "" when every rank had arrived.
  std::string not_arrived(std::uint64_t seq);

  // Asks every rank (every board of this job attempt) to dump its flight recorder; first reason wins.
  void request_dumps(const std::string& reason);

  // Store key prefix of this group's progress values, for tests.
  const std::string& prefix() const { return prefix_; }

 private:
  void publish();
  void run();

  StorePtr store_;
  std::string group_;
  int rank_, size_;
  std::function<void(const std::string&)> on_dump_request_;
  std::chrono::milliseconds period_;
  std::string prefix_, dump_key_;
  std::atomic<std::uint64_t> arrived_{0}, completed_{0};
  std::uint64_t published_arrived_ = 0, published_completed_ = 0;  // board thread (and constructor) only
  bool dump_seen_ = false;                                         // board thread only
  std::mutex mu_;  // store writes of publish(); stop_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace meshtrain::comm
