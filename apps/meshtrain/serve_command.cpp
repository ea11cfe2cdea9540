// meshtrain serve CHECKPOINT [--host H] [--port P] …: an OpenAI-compatible HTTP server over the serving engine
// (docs/serving.md "meshtrain serve"). One engine thread runs the scheduler and the model step by step; the
// HTTP server hands it requests and streams their tokens back. SIGINT or SIGTERM drains it (exit 0). Under meshrun
// every worker is a tensor-parallel rank (serve/engine/serving_ranks.h): rank 0 serves HTTP and leads each step,
// the others follow until rank 0 stops them.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli.h"
#include "commands.h"
#include "kv_cache_blocks.h"
#include "model_placement.h"
#include "serve_settings.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/core/byte_size.h"
#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/engine_loop.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/serving_ranks.h"
#include "meshtrain/serve/http/http_server.h"
#include "meshtrain/serve/http/openai_routes.h"
#include "meshtrain/serve/offline/model_text.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::cli {
namespace {

namespace fs = std::filesystem;

// The model's tokenizer, its stop tokens and its chat template, when a tokenizer.json is found (else byte-level).
serve::http::ModelText model_text(const cxxopts::ParseResult& r, const ckpt::InferenceCheckpoint& ck,
                                  const std::string& path, std::vector<serve::TokenId>& eos) {
  const auto json = r.count("tokenizer") ? std::optional(text::tokenizer_file(r["tokenizer"].as<std::string>(),
                                                                             "--tokenizer"))
                                         : text::find_tokenizer_file(ckpt::tokenizer_dirs(ck, path));
  serve::offline::ModelText loaded = serve::offline::load_model_text(json, ck.config.model.vocab_size);
  if (json && !loaded.chat)
    std::cerr << "meshtrain serve: /v1/chat/completions is unavailable: " << loaded.no_chat << std::endl;
  eos = std::move(loaded.eos_tokens);
  return {.model_name = r.count("model-name") ? r["model-name"].as<std::string>()
                                              : fs::path(path).lexically_normal().string(),
          .vocab_size = ck.config.model.vocab_size,
          .tokenizer = std::move(loaded.tokenizer),
          .chat = std::move(loaded.chat)};
}

// Takes a pending SIGINT or SIGTERM without waiting; true if there was one.
bool take_signal(const sigset_t& signals) {
  const timespec now{0, 0};
  return sigtimedwait(&signals, nullptr, &now) > 0;
}

// After the first SIGINT or SIGTERM (docs/serving.md "Shutdown"): new requests get 503 while the running and
// queued ones finish and their answers are written, then everything closes. A second signal or --drain-timeout
// cuts that short. Returns the exit code: 0 when nothing was cut off, 1 when a request was left unfinished.
int drain_and_stop(serve::EngineLoop& engine, serve::http::HttpServer& server, const sigset_t& signals,
                   std::chrono::seconds timeout) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kPoll = std::chrono::milliseconds(50);  // how soon a second signal is seen
  const Clock::time_point deadline = Clock::now() + timeout;
  std::string cut_by;
  // Polls done(until) until it holds, a second signal comes or the deadline passes.
  const auto wait_for = [&](const auto& done) {
    for (;;) {
      if (done(std::min(deadline, Clock::now() + kPoll))) return true;
      if (take_signal(signals)) return cut_by = "a second signal", false;
      if (Clock::now() >= deadline) return cut_by = cat("serve.drain_timeout_s ", timeout.count(), " s"), false;
    }
  };
  engine.drain();
  // The engine's requests first, then the connections writing their last bytes.
  const bool drained = wait_for([&](Clock::time_point t) { return engine.wait_idle(t); }) &&
                       wait_for([&](Clock::time_point t) { return server.finish(t) == 0; });
  const int64_t unfinished = engine.stop();  // ends what is left, which wakes the connections waiting for tokens
  const int64_t cut = server.stop();         // closes every connection, joins their threads
  if (drained || unfinished + cut == 0) {
    std::cout << "meshtrain serve: drained, stopped" << std::endl;
    return 0;
  }
  std::cerr << "meshtrain serve: stopped by " << cut_by << " with " << std::max(unfinished, cut)
            << " request(s) unfinished" << std::endl;
  return 1;
}

// A tensor-parallel rank other than 0: its share of every step rank 0 leads, until rank 0 stops (after its drain).
// SIGINT and SIGTERM (meshrun forwards them to every rank) stay blocked: rank 0's drain decides when this ends.
int follow_leader(model::TransformerImpl& net, const serve::SchedulerOptions& s, serve::TensorParallelSteps& steps) {
  serve::PagedKvCache cache(net, s.num_blocks, s.block_size);
  steps.follow(net, cache);
  return 0;
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  // SIGINT and SIGTERM are taken by sigwait below: blocked before any thread starts, so every thread inherits it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  cxxopts::Options o("meshtrain serve",
                     std::string("Serve a checkpoint over HTTP with OpenAI's API: /v1/completions, /v1/chat/completions, "
                     "/v1/models, /health, /metrics. Prints the address it listens on; SIGINT or SIGTERM drains it "
                     "(new requests get 503, those in flight finish), a second one stops it at once. Its settings are "
                     "the serve.* keys of the checkpoint's config (or of --config FILE), then --set, then the flags of "
                     "the same names." +
                         std::string(kModelArgumentHelp)));
  add_serve_flags(o);
  o.add_options()(
      "tokenizer", "tokenizer.json, or a directory holding it (default: found beside the checkpoint)",
      cxxopts::value<std::string>())("model-name", "the model's name in the API (default: the CHECKPOINT path)",
                                     cxxopts::value<std::string>())(
      "device", "where the model and its KV cache live: cpu, cuda or cuda:N",
      cxxopts::value<std::string>()->default_value("cpu"))(
      "dtype", "the weights' and the KV cache's precision: fp32 or bf16",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "quantization", "the blocks' linear weights held as none (as --dtype says) or fp8 (e4m3 with a scale per "
      "output row, each token's activations cast as it runs: half the bytes of bf16; a GPU with FP8 matmuls, "
      "under meshrun each rank its shards)", cxxopts::value<std::string>()->default_value("none"))(
      "tp-timeout", "under meshrun: seconds a collective of the tensor-parallel ranks may take before it is an "
      "error (an idle rank 0 sends a heartbeat every quarter of it); default: the checkpoint's parallel.timeout_s",
      cxxopts::value<double>())(
      "h,help", "show this help")("checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain serve: expected one CHECKPOINT directory");
  const std::string path = strings(r, "checkpoint")[0];
  check_serve_flags(r);  // a mistyped flag is named before the checkpoint is read
  const c10::TensorOptions placement =  // checked before any weight is read
      placement_from_flags(r["device"].as<std::string>(), r["dtype"].as<std::string>());
  const serve::WeightQuantization quant = serve::weight_quantization_from_flag(r["quantization"].as<std::string>());
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(path, serve_overrides(r));
  const ServeConfig settings = serve_settings(r, ck.config);
  serve::GenerateOptions gen{.scheduler = {.block_size = static_cast<int>(settings.block_size),
                                           .max_tokens_per_step = static_cast<int>(settings.max_step_tokens),
                                           .max_running = static_cast<int>(settings.max_running)},
                             .cuda_graphs = settings.cuda_graphs};
  const double tp_timeout = r.count("tp-timeout") ? r["tp-timeout"].as<double>() : ck.config.parallel.timeout_s;
  MT_USER_CHECK(tp_timeout >= 0.1, "--tp-timeout ", tp_timeout, ": must be at least 0.1 seconds");
  serve::http::ModelText model_files = model_text(r, ck, path, gen.eos_tokens);
  const serve::ServingRanks ranks =
      serve::join_serving_ranks(placement, std::chrono::milliseconds(static_cast<int64_t>(tp_timeout * 1000)));
  model::Transformer net = serve::load_serving_model(ck, ranks, quant);  // the engine follows the weights
  gen.scheduler.num_blocks =
      kv_cache_blocks(settings, ck.config.model, ranks, gen.scheduler, "meshtrain serve", std::cout);
  if (!ranks.leader()) return follow_leader(*net, gen.scheduler, *ranks.steps);
  gen.tp = ranks.steps;
  serve::EngineLoop engine(std::move(net), gen, static_cast<int>(settings.max_waiting));
  serve::http::OpenAiRoutes routes(engine, std::move(model_files));
  serve::http::HttpServer server({.host = settings.host, .port = static_cast<uint16_t>(settings.port),
                                  .body_limit = parse_bytes("serve.max_body", settings.max_body)},
                                 [&](const serve::http::HttpRequest& req, serve::http::ResponseWriter& out) {
                                   routes.handle(req, out);
                                 });
  std::cout << "meshtrain serve: listening on http://" << settings.host << ":" << server.port() << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cout << "meshtrain serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", draining: new requests get "
            << "503, those in flight finish (at most serve.drain_timeout_s " << settings.drain_timeout_s
            << " s; a second SIGINT or SIGTERM stops at once)" << std::endl;
  const int code = drain_and_stop(engine, server, stop_signals, std::chrono::seconds(settings.drain_timeout_s));
  if (ranks.steps) ranks.steps->stop();  // the engine thread has ended: the other ranks leave their loops
  return code;
}

}  // namespace meshtrain::cli
