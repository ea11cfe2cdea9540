// meshtrain generate CHECKPOINT [--prompt TEXT] [--chat] [--tokenizer DIR|FILE] …: sample text from a checkpoint
// (train/generate_text.h).
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "meshtrain/core/error.h"
#include "meshtrain/train/generate_text.h"

namespace meshtrain::cli {

int cmd_generate(int argc, char** argv) {
  cxxopts::Options o("meshtrain generate",
                     "Sample text from a checkpoint. With the model's tokenizer.json (found beside the checkpoint, "
                     "in the Hugging Face directory it was imported from, or given by --tokenizer) the prompt is "
                     "BPE-encoded and the reply streamed as it is sampled, ending at the model's end-of-text "
                     "token; without one the model is byte-level (one token per byte).");
  o.add_options()("prompt", "text to continue (with --chat: the user's message)",
                  cxxopts::value<std::string>()->default_value("\n"))(
      "chat", "format the prompt with the model's chat template (tokenizer_config.json) and print the reply")(
      "system", "with --chat: a system message before the user's", cxxopts::value<std::string>())(
      "tokenizer", "tokenizer.json, or a directory holding it (default: found beside the checkpoint)",
      cxxopts::value<std::string>())("tokens", "tokens to generate", cxxopts::value<int64_t>()->default_value("200"))(
      "temperature", "sampling temperature; 0 = greedy", cxxopts::value<double>()->default_value("0.8"))(
      "top-k", "sample among the k most likely tokens; 0 = all", cxxopts::value<int64_t>()->default_value("40"))(
      "seed", "sampling seed", cxxopts::value<uint64_t>()->default_value("1337"))(
      "logits", "instead of sampling, write the prompt's logits to this safetensors file (fp32 'logits' [T, V] "
      "and the prompt's 'ids' [T]), e.g. to compare with transformers", cxxopts::value<std::string>())(
      "h,help", "show this help")(
      "checkpoint", "", cxxopts::value<std::vector<std::string>>());
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  auto r = parse(o, argc, argv);
  MT_USER_CHECK(r.count("checkpoint") == 1, "meshtrain generate: expected one CHECKPOINT directory");
  MT_USER_CHECK(!r.count("system") || r.count("chat"), "--system: only with --chat (it is a chat turn)");
  train::GenerateOptions opts{.checkpoint = strings(r, "checkpoint")[0],
                              .prompt = r["prompt"].as<std::string>(),
                              .chat = r.count("chat") > 0,
                              .sample = {.max_new_tokens = r["tokens"].as<int64_t>(),
                                         .temperature = r["temperature"].as<double>(),
                                         .top_k = r["top-k"].as<int64_t>(),
                                         .seed = r["seed"].as<uint64_t>()}};
  if (r.count("system")) opts.system = r["system"].as<std::string>();
  if (r.count("tokenizer")) opts.tokenizer = r["tokenizer"].as<std::string>();
  if (r.count("logits")) opts.logits = r["logits"].as<std::string>();
  train::generate_text(opts, std::cout);
  return 0;
}

}  // namespace meshtrain::cli
