// FlightRecorder: the last N ops this process issued on any communicator (both backends), kept so that a hang
// or desync can be diagnosed from files after the fact. Each entry: group, op, dtype, numel/bytes, sequence
// number, issue/start/end wall-clock times and state. On a timeout or an asynchronous comm error the
// communicator dumps the ring as JSON (dump(), one file per process, see flight_dump_path) and asks the other
// ranks, through the store, to dump theirs (ProgressBoard); comparing the files shows which rank was where.
//
// One recorder per process (process()) because a desync often involves two groups; tests make their own.
// Thread-safe: ops are recorded by issuing threads and updated by op threads / watchdogs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace meshtrain::comm {

class FlightRecorder {
 public:
  enum class State { Scheduled, Started, Completed, Failed, TimedOut };

  struct Entry {
    std::uint64_t id = 0;       // process-wide issue order
    std::string group;          // communicator group name
    int group_rank = 0;
    int group_size = 1;
    std::uint64_t seq = 0;      // the communicator's sequence number (p2p: per peer)
    std::string op;             // "all_reduce(sum)", "send(to 3)", ...
    std::string dtype;          // "Float", "BFloat16", ...; empty for barrier
    std::int64_t numel = 0;
    std::int64_t bytes = 0;
    int peer = -1;              // p2p: the other rank; -1 for a collective
    State state = State::Scheduled;
    std::int64_t issued_us = 0;   // wall clock (µs since the Unix epoch), comparable across ranks
    std::int64_t started_us = 0;  // 0 until the op started (GPU: its start event completed)
    std::int64_t ended_us = 0;    // 0 until it ended
  };

  // Keeps the newest `capacity` entries (env MESHTRAIN_FLIGHT_ENTRIES overrides for process()).
  explicit FlightRecorder(std::size_t capacity = 1024);

  // The process-wide recorder every communicator uses.
  static FlightRecorder& process();

  // Records a new op (its id, issued_us and state are set here) and returns its id.
  std::uint64_t issued(Entry e);
  // Updates an op; ignored if it has already been pushed out of the ring.
  void started(std::uint64_t id);
  void ended(std::uint64_t id, State state);

  // Oldest first.
  std::vector<Entry> entries() const;
  std::size_t capacity() const { return capacity_; }

  // {"rank", "pid", "reason", "dumped_us", "entries": [...]} with states as lowercase names.
  std::string to_json(int rank, const std::string& reason) const;
  // Writes to_json to `path` (through a temporary file and rename, so a reader never sees half a file).
  // Returns false (and logs a warning) when the file cannot be written: a failed dump must not hide the error
  // that caused it.
  bool dump(const std::string& path, int rank, const std::string& reason) const;
  // dump() to flight_dump_path(preferred dir) for this process's global rank; returns the path, or "" when the
  // file could not be written.
  std::string dump(const std::string& reason);
  // dump(reason) unless this recorder has dumped before: for requests from other ranks, which must not
  // overwrite the dump of this rank's own failure.
  std::string dump_if_first(const std::string& reason);

  // The run directory the dump should go to unless MESHTRAIN_FLIGHT_DIR says otherwise (set by the factory).
  void set_preferred_dir(const std::string& dir);

  static const char* state_name(State s);
  static std::int64_t now_us();

 private:
  std::size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Entry> ring_;  // slot id % capacity_
  std::uint64_t next_id_ = 0;
  std::string preferred_dir_;
  bool dumped_ = false;
};

// Where this process's dump goes: <dir>/comm_flight_rank<RANK>.json, with <dir> the first of
//   1. env MESHTRAIN_FLIGHT_DIR;
//   2. `preferred_dir` (the trainer passes train.out_dir);
//   3. the folder of TORCHELASTIC_ERROR_FILE (meshrun: <log-dir>/<run-id>/attempt_<k>/<rank>/);
//   4. the system temp dir.
// RANK is the global rank (0 for a process outside a launcher).
std::string flight_dump_path(const std::string& preferred_dir = "");

}  // namespace meshtrain::comm
