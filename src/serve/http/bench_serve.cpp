#include "meshtrain/serve/http/bench_serve.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <latch>
#include <system_error>
#include <thread>

#include "meshtrain/core/error.h"
#include "meshtrain/core/trim.h"
#include "meshtrain/serve/http/sse_parser.h"
#include "meshtrain/serve/splitmix64.h"

namespace meshtrain::serve::http {
namespace {

using nlohmann::json;
using BenchClock = std::chrono::steady_clock;

double seconds_between(BenchClock::time_point from, BenchClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// An answer's body as one line: OpenAI's error message when it is one, else the body's first line.
std::string body_summary(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
      j["error"]["message"].is_string())
    return j["error"]["message"].get<std::string>();
  std::string line = trim_blanks(body.substr(0, body.find_first_of("\r\n")));
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

// The events of one streamed completion, turned into the request's record as they come.
class CompletionStreamReader {
 public:
  explicit CompletionStreamReader(RequestRecord& record) : record_(record) {}

  void on_event(const SseEvent& e, double at_s) {
    if (done_ || !record_.error.empty()) return;  // nothing counts after [DONE] or an error
    if (e.data == "[DONE]") {
      done_ = true;
      return;
    }
    const json chunk = json::parse(e.data, nullptr, /*allow_exceptions=*/false);
    if (!chunk.is_object()) {
      record_.error = cat("a stream chunk is not a JSON object: ", e.data.substr(0, 80));
    } else if (chunk.contains("error")) {
      record_.error = cat("the stream ended with an error: ", body_summary(e.data));
    } else if (const int64_t k = chunk_tokens(chunk); k > 0) {
      record_.arrivals.push_back({at_s, k});
    }
  }

  // The record's error when the stream ended without [DONE].
  void finish() {
    if (record_.error.empty() && !done_) record_.error = "the stream ended without data: [DONE]";
    record_.ok = record_.error.empty();
  }

 private:
  // The tokens a chunk carries: its token_ids (meshtrain serve sends them), else one for a non-empty text.
  static int64_t chunk_tokens(const json& chunk) {
    if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return 0;
    const json& c = chunk["choices"][0];
    if (c.contains("token_ids") && c["token_ids"].is_array()) return static_cast<int64_t>(c["token_ids"].size());
    return c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty() ? 1 : 0;
  }

  RequestRecord& record_;
  bool done_ = false;
};

std::string completion_body(const std::string& model, const BenchPrompt& p) {
  // temperature 0: greedy, so a run repeats; ignore_eos asks servers that know it (vLLM's) for exactly
  // max_tokens tokens; meshtrain serve ignores it, and the tokens received are what is counted.
  return json{{"model", model},          {"prompt", p.prompt},  {"max_tokens", p.max_tokens},
              {"temperature", 0},        {"stream", true},      {"ignore_eos", true}}
      .dump();
}

// One streamed completion over `client`, timed from its send on the level's clock `start`.
RequestRecord timed_completion(HttpClient& client, BenchClock::time_point start, const std::string& model,
                               const BenchPrompt& p) {
  RequestRecord r;
  r.tokens_requested = p.max_tokens;
  const std::string body = completion_body(model, p);
  CompletionStreamReader reader(r);
  SseParser sse;
  std::string error_body;
  const BenchClock::time_point sent = BenchClock::now();
  r.sent_s = seconds_between(start, sent);
  try {
    const int status = client.request("POST", "/v1/completions", body, [&](int code, std::string_view piece) {
      if (code != 200) {
        error_body += piece;
        return;
      }
      const double at = seconds_between(sent, BenchClock::now());
      for (const SseEvent& e : sse.feed(piece)) reader.on_event(e, at);
    });
    if (status != 200) r.error = cat("HTTP ", status, ": ", body_summary(error_body));
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.end_s = seconds_between(sent, BenchClock::now());
  reader.finish();
  return r;
}

BenchPrompt prompt_at(const BenchServeOptions& o, int64_t index) {
  return o.prompts.empty() ? random_prompt(o, index)
                           : o.prompts[static_cast<size_t>(index) % o.prompts.size()];
}

// N requests from C client threads, each on its own connection, opened before a common start.
std::vector<RequestRecord> run_level(const BenchServeOptions& o, const std::string& model, int c, int64_t n,
                                     int64_t first_index) {
  std::vector<RequestRecord> records(static_cast<size_t>(n));
  std::atomic<int64_t> next{0};
  std::latch connected(c);
  const BenchClock::time_point start = BenchClock::now();
  std::vector<std::thread> clients;
  auto client_loop = [&] {
    HttpClient client(o.url, o.timeout_s);
    try {
      client.connect();
    } catch (const std::exception&) {  // the first request tries again and records why it cannot
    }
    connected.arrive_and_wait();  // the level starts as a burst of C requests, as C clients would send them
    for (int64_t k; (k = next.fetch_add(1)) < n;)
      records[static_cast<size_t>(k)] = timed_completion(client, start, model, prompt_at(o, first_index + k));
  };
  try {
    for (int i = 0; i < c; ++i) clients.emplace_back(client_loop);
  } catch (const std::system_error& e) {  // out of threads: let the ones started go, sending nothing
    next = n;
    connected.count_down(c - static_cast<int>(clients.size()));
    for (auto& t : clients) t.join();
    throw Error(cat("cannot start ", c, " client threads (", clients.size(), " started): ", e.what()));
  }
  for (auto& t : clients) t.join();
  return records;
}

// The first model /v1/models lists; Error (one line) when the server does not answer as an OpenAI server.
std::string served_model(const BenchServeOptions& o) {
  HttpClient client(o.url, o.timeout_s);
  HttpResponse r;
  try {
    r = client.request("GET", "/v1/models");
  } catch (const Error& e) {
    throw Error(cat("cannot reach the server: ", e.what()));
  }
  const std::string where = cat("GET ", o.url.text(), "/v1/models");
  if (r.status != 200) throw Error(cat(where, ": HTTP ", r.status, ": ", body_summary(r.body)));
  const json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw Error(cat(where, ": expected {\"data\": [{\"id\": NAME}, ...]}, got: ", body_summary(r.body)));
  return j["data"][0]["id"].get<std::string>();
}

// Where the client ran: the load generator's own machine (the server's may be another).
json machine_json() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  utsname u{};
  ::uname(&u);
  return {{"host", host},
          {"platform", cat(u.sysname, " ", u.release, " ", u.machine)},
          {"cpus", std::thread::hardware_concurrency()}};
}

json ms_or_null(const std::optional<double>& s) { return s ? json(*s * 1000.0) : json(nullptr); }

std::string ms_cell(const std::optional<double>& s, int width) {
  char buf[32];
  if (s) std::snprintf(buf, sizeof buf, "%*.1f", width, *s * 1000.0);
  else std::snprintf(buf, sizeof buf, "%*s", width, "-");
  return buf;
}

json level_json(const LevelSummary& s) {
  json j = {{"concurrency", s.concurrency},
            {"requests", s.requests},
            {"ok", s.ok},
            {"failed", s.failed},
            {"first_error", s.failed ? json(s.first_error) : json(nullptr)},
            {"tokens_requested", s.tokens_requested},
            {"output_tokens", s.output_tokens},
            {"ended_early", s.ended_early},
            {"time_s", s.wall_s},
            {"tokens_per_s", s.output_tokens_per_s},
            {"requests_per_s", s.requests_per_s}};
  const std::pair<const char*, const Percentiles*> figures[] = {{"ttft", &s.ttft_s}, {"itl", &s.itl_s},
                                                               {"e2e", &s.e2e_s}};
  for (const auto& [name, p] : figures) {
    j[cat(name, "_ms_p50")] = ms_or_null(p->p50);
    j[cat(name, "_ms_p90")] = ms_or_null(p->p90);
    j[cat(name, "_ms_p99")] = ms_or_null(p->p99);
  }
  return j;
}

std::string prompts_description(const BenchServeOptions& o) {
  return o.prompts.empty() ? cat(o.prompt_tokens, " random token ids (seed ", o.seed, "), ", o.output_tokens,
                                 " output tokens")
                           : cat(o.prompts.size(), " prompts of ", o.prompts_file);
}

}  // namespace

int64_t BenchServeOptions::requests_at(int c) const { return requests > 0 ? requests : std::max<int64_t>(4, 2 * c); }

int64_t BenchServeResult::failed() const {
  int64_t n = 0;
  for (const auto& l : levels) n += l.failed;
  return n;
}

std::vector<BenchPrompt> load_prompts_jsonl(const std::string& path, int64_t default_max_tokens) {
  std::ifstream in(path);
  MT_USER_CHECK(in, "--prompts ", path, ": cannot open the file");
  std::vector<BenchPrompt> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.ends_with('\r')) line.pop_back();  // a file written with CRLF line ends
    if (trim_blanks(line).empty()) continue;
    const std::string where = cat(path, ":", n, ": ");
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    MT_USER_CHECK(j.is_object() && j.contains("prompt"), where,
                  "expected a JSON object with \"prompt\" (text or token ids) and optionally \"max_tokens\"");
    const json& p = j["prompt"];
    const bool ids = p.is_array() && !p.empty() &&
                     std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer() && t >= 0; });
    MT_USER_CHECK(ids || (p.is_string() && !p.get<std::string>().empty()), where,
                  "\"prompt\" must be non-empty text or a non-empty array of token ids >= 0");
    BenchPrompt b{p, default_max_tokens};
    if (j.contains("max_tokens")) {
      MT_USER_CHECK(j["max_tokens"].is_number_integer() && j["max_tokens"] >= 1, where,
                    "\"max_tokens\" must be a positive integer, given ", j["max_tokens"].dump());
      b.max_tokens = j["max_tokens"].get<int64_t>();
    }
    out.push_back(std::move(b));
  }
  MT_USER_CHECK(!out.empty(), "--prompts ", path, ": holds no prompt (one JSON object per line)");
  return out;
}

BenchPrompt random_prompt(const BenchServeOptions& o, int64_t index) {
  const uint64_t base = splitmix64(splitmix64(o.seed) + static_cast<uint64_t>(index));
  std::vector<int64_t> ids(static_cast<size_t>(o.prompt_tokens));
  for (size_t j = 0; j < ids.size(); ++j)
    ids[j] = static_cast<int64_t>(splitmix64(base + j) % static_cast<uint64_t>(o.vocab));
  return {json(ids), o.output_tokens};
}

BenchServeResult run_bench_serve(const BenchServeOptions& o) {
  BenchServeResult res;
  res.model = served_model(o);
  const std::string model = o.model.empty() ? res.model : o.model;
  int64_t index = 0;
  if (o.warmup > 0) {
    HttpClient client(o.url, o.timeout_s);
    for (; index < o.warmup; ++index) {
      const RequestRecord r = timed_completion(client, BenchClock::now(), model, prompt_at(o, index));
      if (!r.ok) throw Error(cat("the warm-up request failed: ", r.error));
    }
  }
  for (const int c : o.concurrency) {
    const int64_t n = o.requests_at(c);
    res.levels.push_back(summarize_level(c, run_level(o, model, c, n, index)));
    index += n;
  }
  return res;
}

std::string bench_serve_table(const BenchServeResult& r, const BenchServeOptions& o) {
  std::string out = cat("# meshtrain bench serve: ", o.url.text(), ", model ", o.model.empty() ? r.model : o.model,
                        "; ", prompts_description(o), "; streamed, greedy\n");
  char line[256];
  std::snprintf(line, sizeof line, "%5s %6s %5s %10s %7s | %8s %8s %8s | %7s %7s %7s | %8s  (ms)\n", "C", "reqs",
                "fail", "out tok/s", "req/s", "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99", "E2E p50");
  out += line;
  for (const LevelSummary& s : r.levels) {
    std::snprintf(line, sizeof line, "%5d %6lld %5lld %10.1f %7.2f | %s %s %s | %s %s %s | %s\n", s.concurrency,
                  static_cast<long long>(s.requests), static_cast<long long>(s.failed), s.output_tokens_per_s,
                  s.requests_per_s, ms_cell(s.ttft_s.p50, 8).c_str(), ms_cell(s.ttft_s.p90, 8).c_str(),
                  ms_cell(s.ttft_s.p99, 8).c_str(), ms_cell(s.itl_s.p50, 7).c_str(), ms_cell(s.itl_s.p90, 7).c_str(),
                  ms_cell(s.itl_s.p99, 7).c_str(), ms_cell(s.e2e_s.p50, 8).c_str());
    out += line;
  }
  for (const LevelSummary& s : r.levels) {
    if (s.output_tokens != s.tokens_requested)
      out += cat("C=", s.concurrency, ": ", s.output_tokens, " of ", s.tokens_requested, " tokens asked for came (",
                 s.ended_early, " requests ended early at an end-of-text token, ", s.failed, " failed)\n");
    if (s.failed) out += cat("C=", s.concurrency, ": ", s.failed, " failed; the first: ", s.first_error, "\n");
  }
  return out;
}

std::string bench_serve_json(const BenchServeResult& r, const BenchServeOptions& o) {
  json levels = json::array();
  for (const LevelSummary& s : r.levels) levels.push_back(level_json(s));
  json requests = json::object();
  for (const int c : o.concurrency) requests[std::to_string(c)] = o.requests_at(c);
  const json flags = {{"url", o.url.text()},
                      {"concurrency", o.concurrency},
                      {"requests", requests},
                      {"prompt_tokens", o.prompts.empty() ? json(o.prompt_tokens) : json(nullptr)},
                      {"output_tokens", o.output_tokens},
                      {"prompts", o.prompts_file.empty() ? json(nullptr) : json(o.prompts_file)},
                      {"vocab", o.vocab},
                      {"model", o.model.empty() ? json(nullptr) : json(o.model)},
                      {"seed", o.seed},
                      {"warmup", o.warmup},
                      {"timeout_s", o.timeout_s}};
  return json{{"impl", "meshtrain-bench-serve"}, {"model", r.model}, {"flags", flags},
              {"machine", machine_json()},     {"levels", levels}}
             .dump(1) +
         "\n";
}

}  // namespace meshtrain::serve::http
