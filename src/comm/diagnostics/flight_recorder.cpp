// FlightRecorder; see flight_recorder.h.
#include "comm/diagnostics/flight_recorder.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "meshtrain/comm/world_info.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/log.h"

namespace meshtrain::comm {

FlightRecorder::FlightRecorder(std::size_t capacity) : capacity_(capacity > 0 ? capacity : 1) {
  ring_.reserve(capacity_);
}

FlightRecorder& FlightRecorder::process() {
  static FlightRecorder* rec = [] {
    std::size_t n = 1024;
    if (auto v = env_int(process_env(), "MESHTRAIN_FLIGHT_ENTRIES")) {
      MT_USER_CHECK(*v >= 1, "environment variable MESHTRAIN_FLIGHT_ENTRIES=", *v, " must be ≥ 1");
      n = static_cast<std::size_t>(*v);
    }
    return new FlightRecorder(n);  // never destroyed: communicators may record during static destruction
  }();
  return *rec;
}

std::int64_t FlightRecorder::now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::uint64_t FlightRecorder::issued(Entry e) {
  std::lock_guard<std::mutex> lock(mu_);
  e.id = next_id_++;
  e.issued_us = now_us();
  e.state = State::Scheduled;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(e));
  } else {
    ring_[e.id % capacity_] = std::move(e);
  }
  return next_id_ - 1;
}

void FlightRecorder::started(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= next_id_ || next_id_ - id > capacity_) return;
  Entry& e = ring_[id % capacity_];
  if (e.state == State::Scheduled) {
    e.state = State::Started;
    e.started_us = now_us();
  }
}

void FlightRecorder::ended(std::uint64_t id, State state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= next_id_ || next_id_ - id > capacity_) return;
  Entry& e = ring_[id % capacity_];
  if (e.state == State::Scheduled || e.state == State::Started) {
    e.ended_us = now_us();
    if (e.started_us == 0 && state == State::Completed) e.started_us = e.ended_us;
    e.state = state;
  }
}

std::vector<FlightRecorder::Entry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Entry> out;
  out.reserve(ring_.size());
  // The oldest live entry is next_id_ - size; slots wrap at capacity_.
  for (std::uint64_t id = next_id_ - ring_.size(); id < next_id_; ++id) out.push_back(ring_[id % capacity_]);
  return out;
}

const char* FlightRecorder::state_name(State s) {
  switch (s) {
    case State::Scheduled: return "scheduled";
    case State::Started: return "started";
    case State::Completed: return "completed";
    case State::Failed: return "failed";
    case State::TimedOut: return "timed_out";
  }
  return "?";
}

std::string FlightRecorder::to_json(int rank, const std::string& reason) const {
  nlohmann::ordered_json j;  // fields in the order written: rank and reason first, entries last
  j["rank"] = rank;
  j["pid"] = static_cast<long long>(::getpid());
  j["reason"] = reason;
  j["dumped_us"] = now_us();
  j["capacity"] = capacity_;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Entry& e : entries()) {
    list.push_back({{"id", e.id},
                    {"group", e.group},
                    {"group_rank", e.group_rank},
                    {"group_size", e.group_size},
                    {"seq", e.seq},
                    {"op", e.op},
                    {"dtype", e.dtype},
                    {"numel", e.numel},
                    {"bytes", e.bytes},
                    {"peer", e.peer},
                    {"state", state_name(e.state)},
                    {"issued_us", e.issued_us},
                    {"started_us", e.started_us},
                    {"ended_us", e.ended_us}});
  }
  j["entries"] = std::move(list);
  return j.dump(1) + "\n";
}

bool FlightRecorder::dump(const std::string& path, int rank, const std::string& reason) const {
  const std::string tmp = cat(path, ".tmp", ::getpid());
  try {
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    {
      std::ofstream out(tmp);
      out << to_json(rank, reason);
      if (!out) throw Error("write failed");
    }
    std::filesystem::rename(tmp, path);
    return true;
  } catch (const std::exception& e) {
    log::warn("flight recorder: cannot write %s: %s", path.c_str(), e.what());
    std::remove(tmp.c_str());
    return false;
  }
}

void FlightRecorder::set_preferred_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  preferred_dir_ = dir;
}

std::string FlightRecorder::dump_if_first(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dumped_) return "";
  }
  return dump(reason);
}

std::string FlightRecorder::dump(const std::string& reason) {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dir = preferred_dir_;
    dumped_ = true;
  }
  const std::string path = flight_dump_path(dir);
  const auto rank = env_int(process_env(), "RANK").value_or(0);
  if (!dump(path, static_cast<int>(rank), reason)) return "";
  log::error("flight recorder: last %zu comm ops written to %s", entries().size(), path.c_str());
  return path;
}

std::string flight_dump_path(const std::string& preferred_dir) {
  const auto env = process_env();
  std::string dir;
  if (auto d = env("MESHTRAIN_FLIGHT_DIR")) {
    dir = *d;
  } else if (!preferred_dir.empty()) {
    dir = preferred_dir;
  } else if (auto f = env("TORCHELASTIC_ERROR_FILE")) {
    dir = std::filesystem::path(*f).parent_path().string();
  }
  if (dir.empty()) dir = std::filesystem::temp_directory_path().string();
  return cat(dir, "/comm_flight_rank", env_int(env, "RANK").value_or(0), ".json");
}

}  // namespace meshtrain::comm
