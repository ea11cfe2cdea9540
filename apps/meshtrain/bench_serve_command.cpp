// meshtrain bench serve [options]: a load generator for an OpenAI-compatible server (`meshtrain serve`, or any
// that streams /v1/completions): throughput, time to first token and between tokens at each concurrency level.
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/core/join.h"
#include "meshtrain/serve/http/bench_serve.h"

namespace meshtrain::cli {
namespace {

namespace fs = std::filesystem;
namespace sh = serve::http;

// An integer flag >= lo; read as text so that a mistake names the flag (cxxopts' own message does not).
int64_t at_least(const cxxopts::ParseResult& r, const char* flag, int64_t lo) {
  const std::string text = r[flag].as<std::string>();
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  MT_USER_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= lo, "--", flag, ": given '", text,
                "'; valid: an integer >= ", lo);
  return v;
}

double positive_seconds(const cxxopts::ParseResult& r, const char* flag) {
  const std::string text = r[flag].as<std::string>();
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  MT_USER_CHECK(ec == std::errc() && end == text.data() + text.size() && v > 0, "--", flag, ": given '", text,
                "'; valid: a positive number of seconds");
  return v;
}

// --concurrency 1,8,64: one level per value, in the order given.
std::vector<int> concurrency_levels(const std::vector<std::string>& values) {
  constexpr int kMax = 4096;  // one thread and one connection per client
  std::vector<int> levels;
  for (const std::string& v : split_commas(values)) {
    size_t used = 0;
    int c = 0;
    try {
      c = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MT_USER_CHECK(used > 0 && used == v.size() && c >= 1 && c <= kMax, "--concurrency: given '", v,
                  "'; valid: comma-separated integers from 1 to ", kMax, ", e.g. 1,8,64");
    levels.push_back(c);
  }
  MT_USER_CHECK(!levels.empty(), "--concurrency: no level given; valid: comma-separated integers, e.g. 1,8,64");
  return levels;
}

sh::BenchServeOptions bench_serve_options(const cxxopts::ParseResult& r) {
  const std::vector<std::string> what = strings(r, "what");
  MT_USER_CHECK(what.size() == 1, "meshtrain bench serve takes no argument after `serve`, given '",
                join({what.begin() + 1, what.end()}, " "), "' (options start with --)");
  sh::BenchServeOptions o;
  o.url = sh::parse_http_url(r["url"].as<std::string>(), "--url");
  o.concurrency = concurrency_levels({r["concurrency"].as<std::string>()});
  o.requests = at_least(r, "requests", 0);
  o.prompt_tokens = at_least(r, "prompt-tokens", 1);
  o.output_tokens = at_least(r, "output-tokens", 1);
  o.vocab = at_least(r, "vocab", 1);
  o.seed = static_cast<uint64_t>(at_least(r, "seed", 0));
  o.warmup = at_least(r, "warmup", 0);
  o.timeout_s = positive_seconds(r, "timeout");
  if (r.count("model")) o.model = r["model"].as<std::string>();
  if (r.count("prompts")) {
    MT_USER_CHECK(!r.count("prompt-tokens") && !r.count("vocab"), "--prompts ", r["prompts"].as<std::string>(),
                  ": takes the prompts from the file; drop --prompt-tokens and --vocab (they shape random prompts)");
    o.prompts_file = r["prompts"].as<std::string>();
    o.prompts = sh::load_prompts_jsonl(o.prompts_file, o.output_tokens);
  }
  if (r.count("json")) {  // checked now, not after a run of minutes
    const fs::path dir = fs::absolute(r["json"].as<std::string>()).parent_path();
    MT_USER_CHECK(fs::is_directory(dir), "--json ", r["json"].as<std::string>(), ": the directory ", dir.string(),
                  " does not exist");
  }
  return o;
}

}  // namespace

int cmd_bench_serve(int argc, char** argv) {
  cxxopts::Options o("meshtrain bench serve",
                     "Load generator for an OpenAI-compatible server (meshtrain serve): at each concurrency level, "
                     "that many clients on keep-alive connections send streamed, greedy /v1/completions requests; "
                     "prints output tokens/s, requests/s, time to first token, time between tokens and end-to-end "
                     "latency (percentiles). Exit 1 when a request failed or the server cannot be reached.");
  const sh::BenchServeOptions d;
  o.add_options()("url", "the server: http://HOST[:PORT][/PATH]",
                  cxxopts::value<std::string>()->default_value("http://127.0.0.1:8000"))(
      "concurrency", "clients at once, one level per value (comma-separated)",
      cxxopts::value<std::string>()->default_value("1,8,64"))(
      "requests", "requests per level (0: 2 × the level's concurrency, at least 4)",
      cxxopts::value<std::string>()->default_value("0"))(
      "prompt-tokens", "length of each random prompt in token ids",
      cxxopts::value<std::string>()->default_value(std::to_string(d.prompt_tokens)))(
      "output-tokens", "max_tokens of each request (a --prompts line may set its own)",
      cxxopts::value<std::string>()->default_value(std::to_string(d.output_tokens)))(
      "vocab", "random prompt ids are drawn from [0, N): below the model's vocabulary and its special tokens",
      cxxopts::value<std::string>()->default_value(std::to_string(d.vocab)))(
      "prompts", "JSONL file instead of random prompts: {\"prompt\": TEXT or [IDS], \"max_tokens\": N} per line, "
                 "taken in turn", cxxopts::value<std::string>())(
      "model", "the `model` field sent (default: the first model /v1/models lists)", cxxopts::value<std::string>())(
      "seed", "seed of the random prompts", cxxopts::value<std::string>()->default_value("0"))(
      "warmup", "requests sent one by one before the first level, not timed",
      cxxopts::value<std::string>()->default_value(std::to_string(d.warmup)))(
      "timeout", "seconds any one connect or read may take before the request fails",
      cxxopts::value<std::string>()->default_value("600"))(
      "json", "also write the result as JSON to FILE", cxxopts::value<std::string>())("h,help", "show this help")(
      "what", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"what"});
  o.positional_help("serve");
  const auto r = parse(o, argc, argv);
  const sh::BenchServeOptions bo = bench_serve_options(r);

  sh::BenchServeResult res;
  try {
    res = sh::run_bench_serve(bo);
  } catch (const UserError&) {
    throw;
  } catch (const Error& e) {  // the server cannot be reached or cannot serve: one line, exit 1
    std::fprintf(stderr, "meshtrain bench serve: %s\n", e.what());
    return 1;
  }
  std::printf("%s", sh::bench_serve_table(res, bo).c_str());
  std::fflush(stdout);
  if (r.count("json")) write_file_atomic(r["json"].as<std::string>(), sh::bench_serve_json(res, bo));
  if (const int64_t failed = res.failed(); failed > 0) {
    for (const auto& l : res.levels)
      if (l.failed) {
        std::fprintf(stderr, "meshtrain bench serve: %lld request(s) failed; the first (C=%d): %s\n",
                     static_cast<long long>(failed), l.concurrency, l.first_error.c_str());
        break;
      }
    return 1;
  }
  return 0;
}

}  // namespace meshtrain::cli
