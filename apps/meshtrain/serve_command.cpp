// meshtrain serve CHECKPOINT [--host H] [--port P] …: an OpenAI-compatible HTTP server over the serving engine
// (docs/serving.md "meshtrain serve"). One engine thread runs the scheduler and the model step by step; the
// HTTP server hands it requests and streams their tokens back. SIGINT or SIGTERM stops it (exit 0).
#include <csignal>
#include <filesystem>
#include <iostream>
#include <torch/cuda.h>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/core/error.h"
#include "meshtrain/serve/engine/engine_loop.h"
#include "meshtrain/serve/http/http_server.h"
#include "meshtrain/serve/http/openai_routes.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::cli {
namespace {

namespace fs = std::filesystem;

int positive_int(const cxxopts::ParseResult& r, const char* flag) {
  const int64_t v = r[flag].as<int64_t>();
  MT_USER_CHECK(v >= 1 && v <= (int64_t{1} << 30), "--", flag, " ", v, ": must be a positive integer");
  return static_cast<int>(v);
}

// The model's tokenizer, its stop tokens and its chat template, when a tokenizer.json is found (else byte-level).
serve::http::ModelText model_text(const cxxopts::ParseResult& r, const ckpt::InferenceCheckpoint& ck,
                                  const std::string& path, std::vector<serve::TokenId>& eos) {
  serve::http::ModelText t{.model_name = r.count("model-name") ? r["model-name"].as<std::string>()
                                                                 : fs::path(path).lexically_normal().string(),
                           .vocab_size = ck.config.model.vocab_size};
  const auto json = r.count("tokenizer") ? std::optional(text::tokenizer_file(r["tokenizer"].as<std::string>(),
                                                                             "--tokenizer"))
                                         : text::find_tokenizer_file(ckpt::tokenizer_dirs(ck, path));
  if (!json) return t;
  const std::string dir = fs::path(*json).parent_path().string();
  t.tokenizer.emplace(text::model_tokenizer(*json, ck.config.model.vocab_size));
  eos = text::stop_token_ids(dir, *t.tokenizer);
  try {
    t.chat.emplace(text::ChatTemplate::from_tokenizer_dir(dir));
  } catch (const UserError& e) {
    std::cerr << "meshtrain serve: /v1/chat/completions is unavailable: " << e.what() << std::endl;
  }
  return t;
}

// --device and --dtype: where the model runs and in what precision (its checkpoint's fp32 on the CPU by default).
c10::TensorOptions model_placement(const cxxopts::ParseResult& r) {
  const std::string dev = r["device"].as<std::string>(), dt = r["dtype"].as<std::string>();
  MT_USER_CHECK(dev == "cpu" || dev.rfind("cuda", 0) == 0, "--device ", dev, ": expected cpu, cuda or cuda:N");
  c10::Device device = c10::Device(c10::kCPU);
  try {
    device = c10::Device(dev);
  } catch (const std::exception&) {
    throw UserError(cat("--device ", dev, ": expected cpu, cuda or cuda:N"));
  }
  if (device.is_cuda()) {
    const int n = static_cast<int>(torch::cuda::device_count());
    MT_USER_CHECK(n > 0, "--device ", dev, ": no CUDA device is visible (use --device cpu)");
    MT_USER_CHECK(device.index() < n, "--device ", dev, ": only ", n, " CUDA device(s) are visible");
  }
  MT_USER_CHECK(dt == "fp32" || dt == "bf16", "--dtype ", dt, ": expected fp32 or bf16");
  return c10::TensorOptions().device(device).dtype(dt == "bf16" ? at::kBFloat16 : at::kFloat);
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
                     "Serve a checkpoint over HTTP with OpenAI's API: /v1/completions, /v1/chat/completions, "
                     "/v1/models, /health, /metrics. Prints the address it listens on; SIGINT or SIGTERM stops it.");
  o.add_options()("host", "address to listen on", cxxopts::value<std::string>()->default_value("127.0.0.1"))(
      "port", "port to listen on; 0 = a free one (printed)", cxxopts::value<int64_t>()->default_value("8000"))(
      "blocks", "KV cache blocks", cxxopts::value<int64_t>()->default_value("256"))(
      "block-size", "tokens per KV block", cxxopts::value<int64_t>()->default_value("16"))(
      "max-running", "requests decoding at once", cxxopts::value<int64_t>()->default_value("16"))(
      "max-waiting", "requests waiting for admission at most; more get 503",
      cxxopts::value<int64_t>()->default_value("256"))(
      "max-step-tokens", "tokens per engine step (a decode counts 1, a prefill chunk its length)",
      cxxopts::value<int64_t>()->default_value("512"))(
      "tokenizer", "tokenizer.json, or a directory holding it (default: found beside the checkpoint)",
      cxxopts::value<std::string>())("model-name", "the model's name in the API (default: the CHECKPOINT path)",
                                     cxxopts::value<std::string>())(
      "max-body", "largest request body, e.g. 8M", cxxopts::value<std::string>()->default_value("8M"))(
      "device", "where the model and its KV cache live: cpu, cuda or cuda:N",
      cxxopts::value<std::string>()->default_value("cpu"))(
      "dtype", "the weights' and the KV cache's precision: fp32 or bf16",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "cuda-graphs", "replay decode steps as CUDA graphs on a GPU: on or off",
      cxxopts::value<std::string>()->default_value("on"))(
      "h,help", "show this help")("checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain serve: expected one CHECKPOINT directory");
  const int64_t port = r["port"].as<int64_t>();
  MT_USER_CHECK(port >= 0 && port <= 65535, "--port ", port, ": must be 0 to 65535");
  const std::string path = strings(r, "checkpoint")[0];

  serve::GenerateOptions gen{.scheduler = {.num_blocks = positive_int(r, "blocks"),
                                           .block_size = positive_int(r, "block-size"),
                                           .max_tokens_per_step = positive_int(r, "max-step-tokens"),
                                           .max_running = positive_int(r, "max-running")}};
  const int max_waiting = positive_int(r, "max-waiting");
  const std::string graphs = r["cuda-graphs"].as<std::string>();
  MT_USER_CHECK(graphs == "on" || graphs == "off", "--cuda-graphs ", graphs, ": expected on or off");
  gen.cuda_graphs = graphs == "on";
  const c10::TensorOptions placement = model_placement(r);  // checked before any weight is read
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(path);
  serve::http::ModelText model_files = model_text(r, ck, path, gen.eos_tokens);
  model::Transformer net = ckpt::load_model(ck);
  net->to(placement.device(), placement.dtype().toScalarType());  // the engine follows the weights (paged_kv_cache.h)
  serve::EngineLoop engine(std::move(net), gen, max_waiting);
  serve::http::OpenAiRoutes routes(engine, std::move(model_files));
  serve::http::HttpServer server({.host = r["host"].as<std::string>(), .port = static_cast<uint16_t>(port),
                                  .body_limit = parse_bytes("--max-body", r["max-body"].as<std::string>())},
                                 [&](const serve::http::HttpRequest& req, serve::http::ResponseWriter& out) {
                                   routes.handle(req, out);
                                 });
  std::cout << "meshtrain serve: listening on http://" << r["host"].as<std::string>() << ":" << server.port()
            << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::cout << "meshtrain serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping" << std::endl;
  engine.stop();  // ends every request in flight, which wakes the connections waiting for tokens
  server.stop();  // closes the listening socket and every connection, joins their threads
  return 0;
}

}  // namespace meshtrain::cli
