// meshtrain generate CHECKPOINT [--prompt TEXT] [--chat] [--tokenizer DIR|FILE] …: sample text from a checkpoint
// (train/generate_text.h); with --input FILE --output FILE, every prompt of a JSONL file at once through the
// serving engine (serve/offline/batch_generation.h, docs/serving.md "Offline generation"); under meshrun with the
// model split over the ranks by tensor parallelism (serve/engine/serving_ranks.h), rank 0 writing the output.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "kv_cache_blocks.h"
#include "model_placement.h"
#include "serve_settings.h"
#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/fs.h"
#include "meshtrain/serve/engine/paged_kv_cache.h"
#include "meshtrain/serve/engine/serving_ranks.h"
#include "meshtrain/serve/offline/batch_generation.h"
#include "meshtrain/serve/offline/generation_progress.h"
#include "meshtrain/text/tokenizer_files.h"
#include "meshtrain/train/generate_text.h"

namespace meshtrain::cli {
namespace {

namespace fs = std::filesystem;

// The flags of one mode only, refused in the other with one line; with --input also the serve.* flags that size
// and run the engine (serve_settings.h).
constexpr const char* kBatchOnly[] = {"output", "top-p", "repetition-penalty", "quantization"};
constexpr const char* kSingleOnly[] = {"prompt", "chat", "system", "logits"};

void refuse_flags(const cxxopts::ParseResult& r, const char* const* begin, const char* const* end, const char* why) {
  for (const char* const* f = begin; f != end; ++f) MT_USER_CHECK(!r.count(*f), "--", *f, ": ", why);
}

void refuse_batch_flags(const cxxopts::ParseResult& r) {
  const char* why = "only with --input (a file of prompts)";
  refuse_flags(r, std::begin(kBatchOnly), std::end(kBatchOnly), why);
  for (const std::string& f : serve_flag_names(ServeFlags::engine)) MT_USER_CHECK(!r.count(f), "--", f, ": ", why);
}

int64_t positive_flag(const cxxopts::ParseResult& r, const char* flag) {
  const int64_t v = r[flag].as<int64_t>();
  MT_USER_CHECK(v >= 1 && v <= (int64_t{1} << 30), "--", flag, " ", v, ": must be a positive integer");
  return v;
}

// --max-tokens, or its older spelling --tokens.
int64_t max_tokens_flag(const cxxopts::ParseResult& r) {
  MT_USER_CHECK(!(r.count("max-tokens") && r.count("tokens")), "--tokens and --max-tokens: give one (the same)");
  return positive_flag(r, r.count("max-tokens") ? "max-tokens" : "tokens");
}

// The flags as the defaults of the lines that leave a field out.
serve::offline::PromptDefaults prompt_defaults(const cxxopts::ParseResult& r) {
  return {.max_tokens = static_cast<int32_t>(max_tokens_flag(r)),
          .lower_max_tokens = !r.count("max-tokens") && !r.count("tokens"),
          .sampling = {.temperature = r["temperature"].as<double>(),
                       .top_k = r["top-k"].as<int64_t>(),
                       .top_p = r["top-p"].as<double>(),
                       .repetition_penalty = r["repetition-penalty"].as<double>(),
                       .seed = r["seed"].as<uint64_t>()}};
}

// The directory `path` goes into must exist, and `path` must not be one: known before hours of generation.
void check_output_path(const std::string& path) {
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  MT_USER_CHECK(fs::is_directory(parent), "--output ", path, ": the directory ", parent.string(), " does not exist");
  MT_USER_CHECK(!fs::is_directory(path), "--output ", path, ": is a directory; give a file name");
}

// The limits every line must fit: the model's, and the cache's where its size is known before the weights load
// (serve.blocks, or the CPU's default); else only the model's until kv_cache_blocks has sized it.
serve::offline::BatchLimits batch_limits(const ModelConfig& m, const ServeConfig& settings,
                                         const c10::TensorOptions& placement) {
  const int64_t blocks = kv_blocks_before_loading(settings, placement);
  return {.vocab_size = m.vocab_size,
          .max_seq_len = m.max_seq_len,
          .cache_tokens = blocks > 0 ? blocks * settings.block_size : m.max_seq_len,
          .cache_source = "serve.blocks × serve.block_size"};
}

// --input FILE --output FILE: every line through the engine at once; the output written whole or not at all. The
// engine's settings are the serve.* keys, as `meshtrain serve` takes them (serve_settings.h).
int generate_file(const cxxopts::ParseResult& r, const std::string& checkpoint, const c10::TensorOptions& placement) {
  refuse_flags(r, std::begin(kSingleOnly), std::end(kSingleOnly), "not with --input (each line has its prompt)");
  MT_USER_CHECK(r.count("output"), "--input: give --output FILE for the results (one JSON line per prompt)");
  const std::string input = r["input"].as<std::string>(), output = r["output"].as<std::string>();
  check_output_path(output);
  check_serve_flags(r);  // a mistyped flag is named before the prompts and the checkpoint are read
  const auto lines = serve::offline::read_prompt_file(input, prompt_defaults(r));
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(checkpoint, serve_overrides(r));
  const ServeConfig settings = serve_settings(r, ck.config);
  serve::GenerateOptions gen{.scheduler = {.block_size = static_cast<int>(settings.block_size),
                                           .max_tokens_per_step = static_cast<int>(settings.max_step_tokens),
                                           .max_running = static_cast<int>(settings.max_running)},
                             .cuda_graphs = settings.cuda_graphs};
  const auto tokenizer_json = r.count("tokenizer") ? std::optional(text::tokenizer_file(r["tokenizer"].as<std::string>(),
                                                                             "--tokenizer"))
                                         : text::find_tokenizer_file(ckpt::tokenizer_dirs(ck, checkpoint));
  const serve::offline::ModelText model_text =
      serve::offline::load_model_text(tokenizer_json, ck.config.model.vocab_size);
  serve::offline::BatchLimits limits = batch_limits(ck.config.model, settings, placement);
  auto requests = serve::offline::encode_prompts(lines, model_text, input, limits);  // refused before the weights
  const serve::ServingRanks ranks = serve::join_serving_ranks(
      placement, std::chrono::milliseconds(static_cast<int64_t>(ck.config.parallel.timeout_s * 1000)));
  model::Transformer net = serve::load_serving_model(  // the engine follows the weights
      ck, ranks, serve::weight_quantization_from_flag(r["quantization"].as<std::string>()));
  gen.scheduler.num_blocks = kv_cache_blocks(settings, ck.config.model, ranks, gen.scheduler, "meshtrain generate",
                                             std::cerr, &limits.cache_source);
  if (!ranks.leader()) {  // a tensor-parallel rank: its share of each step rank 0 leads, until rank 0 is done
    serve::PagedKvCache cache(*net, gen.scheduler.num_blocks, gen.scheduler.block_size);
    ranks.steps->follow(*net, cache);
    return 0;
  }
  const int64_t cache_tokens = int64_t{gen.scheduler.num_blocks} * gen.scheduler.block_size;
  if (cache_tokens != limits.cache_tokens) {  // sized from the free memory: the lines checked against it now
    limits.cache_tokens = cache_tokens;
    serve::offline::fit_prompts(requests, lines, input, limits);
  }
  gen.tp = ranks.steps;
  serve::offline::GenerationProgress progress(std::cerr, isatty(STDERR_FILENO) == 1);
  serve::GenerateProgress last{.total = lines.size()};
  gen.on_step = [&](const serve::GenerateProgress& p) { progress.update(last = p); };
  const std::string out = serve::offline::generate_batch(net, lines, requests, model_text, gen);
  if (ranks.steps) ranks.steps->stop();  // every request finished: the other ranks leave their loops
  progress.finish(last);
  write_file_atomic(output, out);
  std::cerr << "meshtrain generate: wrote " << lines.size() << " lines to " << output << std::endl;
  return 0;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  cxxopts::Options o("meshtrain generate",
                     std::string("Sample text from a checkpoint. With the model's tokenizer.json (found beside the checkpoint, "
                     "in the Hugging Face directory it was imported from, or given by --tokenizer) the prompt is "
                     "BPE-encoded and the reply streamed as it is sampled, ending at the model's end-of-text "
                     "token; without one the model is byte-level (one token per byte). With --input FILE "
                     "--output FILE: every line of a JSONL file ({\"prompt\": text or token ids} or "
                     "{\"messages\": [{\"role\", \"content\"}]}, optional \"id\", \"max_tokens\", \"temperature\", "
                     "\"top_p\", \"top_k\", \"seed\", \"repetition_penalty\", \"stop\") generated at once through "
                     "the serving engine; FILE gets one JSON line per input line, in order: id, index, text, "
                     "token_ids, finish_reason, usage. The sampling flags are the defaults of the lines. The engine's "
                     "settings are the serve.* keys, layered as meshtrain serve layers them (the checkpoint's "
                     "recorded serve section or --config FILE's, then --set serve.KEY=VALUE, then the flags): on "
                     "CUDA the KV cache takes serve.gpu_memory_fraction of the memory the weights leave." +
                         std::string(kModelArgumentHelp)));
  o.add_options()("prompt", "text to continue (with --chat: the user's message)",
                  cxxopts::value<std::string>()->default_value("\n"))(
      "chat", "format the prompt with the model's chat template (tokenizer_config.json) and print the reply")(
      "system", "with --chat: a system message before the user's", cxxopts::value<std::string>())(
      "tokenizer", "tokenizer.json, or a directory holding it (default: found beside the checkpoint)",
      cxxopts::value<std::string>())(
      "max-tokens", "tokens to generate at most (default 200; with --input: each line's default, lowered to what "
      "fits the model's context and the KV cache unless given)", cxxopts::value<int64_t>())(
      "tokens", "the same as --max-tokens", cxxopts::value<int64_t>()->default_value("200"))(
      "temperature", "sampling temperature; 0 = greedy", cxxopts::value<double>()->default_value("0.8"))(
      "top-k", "sample among the k most likely tokens; 0 = all", cxxopts::value<int64_t>()->default_value("40"))(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1337"))(
      "logits", "instead of sampling, write the prompt's logits to this safetensors file (fp32 'logits' [T, V] "
      "and the prompt's 'ids' [T]), e.g. to compare with transformers", cxxopts::value<std::string>())(
      "device", "where the model runs: cpu, cuda or cuda:N", cxxopts::value<std::string>()->default_value("cpu"))(
      "dtype", "the weights' (and KV cache's) precision: fp32 or bf16",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "input", "a JSONL file of prompts, generated all at once (needs --output)", cxxopts::value<std::string>())(
      "output", "with --input: the JSONL results, written when all are done", cxxopts::value<std::string>())(
      "top-p", "with --input: nucleus sampling's mass; 1 = all", cxxopts::value<double>()->default_value("1"))(
      "repetition-penalty", "with --input: > 1 discourages tokens already in the sequence",
      cxxopts::value<double>()->default_value("1"))(
      "quantization", "with --input: the blocks' linear weights held as none (--dtype) or fp8 (e4m3, a scale per "
      "output row; a GPU with FP8 matmuls)", cxxopts::value<std::string>()->default_value("none"));
  add_serve_flags(o, ServeFlags::engine);  // with --input: the engine's serve.* settings
  o.add_options()("h,help", "show this help")("checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain generate: expected one CHECKPOINT directory");
  const c10::TensorOptions placement =
      placement_from_flags(r["device"].as<std::string>(), r["dtype"].as<std::string>());
  if (r.count("input")) return generate_file(r, strings(r, "checkpoint")[0], placement);
  refuse_batch_flags(r);
  MT_USER_CHECK(!r.count("system") || r.count("chat"), "--system: only with --chat (it is a chat turn)");
  train::GenerateOptions opts{.checkpoint = strings(r, "checkpoint")[0],
                              .prompt = r["prompt"].as<std::string>(),
                              .chat = r.count("chat") > 0,
                              .sample = {.max_new_tokens = max_tokens_flag(r),
                                         .temperature = r["temperature"].as<double>(),
                                         .top_k = r["top-k"].as<int64_t>(),
                                         .seed = r["seed"].as<uint64_t>()},
                              .device = placement.device(),
                              .dtype = placement.dtype().toScalarType()};
  if (r.count("system")) opts.system = r["system"].as<std::string>();
  if (r.count("tokenizer")) opts.tokenizer = r["tokenizer"].as<std::string>();
  if (r.count("logits")) opts.logits = r["logits"].as<std::string>();
  train::generate_text(opts, std::cout);
  return 0;
}

}  // namespace meshtrain::cli
