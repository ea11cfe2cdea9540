#include "meshtrain/launch/root_cause.h"

#include <sys/wait.h>

#include <climits>
#include <ctime>
#include <tuple>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshtrain/launch/signal_names.h"

namespace meshtrain::launch {

int exit_code_of(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exit code " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    std::string s = "signal " + signal_name(WTERMSIG(st)) + " (" + std::to_string(WTERMSIG(st)) + ")";
    if (WCOREDUMP(st)) s += " (core dumped)";
    return s;
  }
  return "unknown wait status " + std::to_string(st);
}

std::string read_error_file(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 8192) text = text.substr(0, 8192) + "\n... (truncated)";
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("message")) {
    const auto& m = j["message"];
    if (m.is_string()) return m.get<std::string>();
    if (m.is_object()) {
      std::string out;
      if (m.contains("message") && m["message"].is_string()) out = m["message"].get<std::string>();
      if (m.contains("extraInfo") && m["extraInfo"].is_object() && m["extraInfo"].contains("py_callstack") &&
          m["extraInfo"]["py_callstack"].is_string())
        out += "\n" + m["extraInfo"]["py_callstack"].get<std::string>();
      if (!out.empty()) return out;
    }
  }
  return text;
}

namespace {

nlohmann::json error_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

std::optional<long long> error_file_timestamp(const std::string& path) {
  if (path.empty()) return std::nullopt;
  const nlohmann::json j = error_json(path);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_object()) return std::nullopt;
  const auto& m = j["message"];
  if (!m.contains("extraInfo") || !m["extraInfo"].is_object() || !m["extraInfo"].contains("timestamp"))
    return std::nullopt;
  const auto& t = m["extraInfo"]["timestamp"];
  if (t.is_number_integer()) return t.get<long long>();
  if (t.is_string()) {
    try {
      return std::stoll(t.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

bool failed_because_peer_vanished(const WorkerFailure& f) {
  static const char* const kSigns[] = {"Broken pipe", "BrokenPipeError", "Connection reset by peer",
                                       "ConnectionResetError", "closed its connection", "peer closed the connection",
                                       "Connection closed by peer", "ECONNRESET", "EPIPE"};
  std::string text = read_error_file(f.error_file);
  for (const auto& l : f.stderr_tail) text += "\n" + l;
  for (const char* s : kSigns)
    if (text.find(s) != std::string::npos) return true;
  return false;
}

size_t pick_root_cause(const std::vector<WorkerFailure>& failures) {
  auto key = [&](size_t i) {
    const auto ts = error_file_timestamp(failures[i].error_file);
    return std::make_tuple(failed_because_peer_vanished(failures[i]), ts.value_or(LLONG_MAX), i);
  };
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i)
    if (key(i) < key(best)) best = i;
  return best;
}

std::string format_root_cause(const WorkerFailure& f, int attempts, int world_size,
                              const std::vector<WorkerFailure>& consequences) {
  std::ostringstream o;
  char when[64];
  std::time_t t = std::chrono::system_clock::to_time_t(f.when);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  o << "meshrun: FAILED after " << attempts << (attempts == 1 ? " attempt" : " attempts") << "\n"
    << "  root cause (first worker to fail):\n"
    << "    rank       : " << f.rank << " (local rank " << f.local_rank << ", world size " << world_size << ")\n"
    << "    host       : " << f.host << "\n"
    << "    pid        : " << f.pid << "\n"
    << "    status     : " << describe_status(f.wait_status) << "\n"
    << "    time       : " << when << "\n";
  std::string err = read_error_file(f.error_file);
  if (!err.empty()) {
    o << "    error file : " << f.error_file << "\n";
    std::istringstream lines(err);
    for (std::string l; std::getline(lines, l);) o << "      " << l << "\n";
  }
  if (!f.stderr_tail.empty()) {
    o << "    last stderr lines:\n";
    for (const auto& l : f.stderr_tail) o << "      " << l << "\n";
  }
  for (const auto& c : consequences)
    o << "  rank " << c.rank << " also failed (" << describe_status(c.wait_status) << ")"
      << (failed_because_peer_vanished(c) ? ": a consequence, its peer vanished" : ", after the root cause")
      << "\n";
  o << "  meshrun exits with " << exit_code_of(f.wait_status) << "\n";
  return o.str();
}

}  // namespace meshtrain::launch
