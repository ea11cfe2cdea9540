// The multi-node failure cause record and a failed job's exit code (see failure_cause.h).
#include "meshtrain/launch/failure_cause.h"

#include <charconv>

#include "meshtrain/core/error.h"

namespace meshtrain::launch {
namespace {

constexpr const char* kRecordForm = "'<exit code 1..255><TAB><stop 0|1><TAB><description>'";

// A store value as one printable line: control characters (a stranger's newlines, our own tabs) shown as
// '?', long values cut, so that the line naming the record stays one line.
std::string printable_record(const std::string& s) {
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > kMax) out += "...";
  return out;
}

// The whole of `s` as an integer, if it is one (no blanks, no trailing text, within long long).
std::optional<long long> whole_integer(const std::string& s) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string format_failure_cause(int exit_code, bool stop, const std::string& text) {
  return cat(exit_code, "\t", stop ? 1 : 0, "\t", printable_record(text));
}

FailureCause parse_failure_cause(const std::string& key, const std::string& record) {
  FailureCause c;
  const auto t1 = record.find('\t');
  const auto t2 = t1 == std::string::npos ? std::string::npos : record.find('\t', t1 + 1);
  const std::optional<long long> code =
      t2 == std::string::npos ? std::nullopt : whole_integer(record.substr(0, t1));
  const std::string stop = t2 == std::string::npos ? std::string() : record.substr(t1 + 1, t2 - t1 - 1);
  if (!code || (stop != "0" && stop != "1")) {
    c.stop = true;
    c.text = printable_record(record);
    c.problem = cat(key, " at the store is not a failure cause: '", c.text, "' (expected ", kRecordForm, ")");
    return c;
  }
  c.stop = stop == "1";
  c.text = printable_record(record.substr(t2 + 1));
  if (is_failure_exit_code(*code)) {
    c.exit_code = static_cast<int>(*code);
  } else {
    c.stop = true;
    c.problem = cat(key, " at the store gives exit code ", *code, " for '", c.text,
                    "', which is not a failure's exit code (1..255)");
  }
  return c;
}

JobExit failed_job_exit(const FailureCause& cause, std::optional<int> local, int attempts) {
  JobExit e;
  // This node's own workers are the best witness; a remote code only when it says failure; else 1.
  if (local && is_failure_exit_code(*local)) e.code = *local;
  else if (cause.problem.empty() && is_failure_exit_code(cause.exit_code)) e.code = cause.exit_code;
  else e.code = 1;
  e.line = cat("meshrun: job ", cause.stop && cause.problem.empty() ? "stopped" : "FAILED", " after ", attempts,
               " attempt(s): ", cause.problem.empty() ? cause.text : cause.problem, "; exiting with ", e.code);
  return e;
}

}  // namespace meshtrain::launch
