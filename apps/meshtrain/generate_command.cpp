// meshtrain generate CHECKPOINT [--prompt TEXT] [--chat] [--tokenizer DIR|FILE] …: sample text from a checkpoint.
// The text goes through the model's tokenizer.json when one is found (docs/tokenizer.md), else through bytes.
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli.h"
#include "commands.h"
#include "meshtrain/ckpt/adapter_checkpoint.h"
#include "meshtrain/ckpt/checkpoint.h"
#include "meshtrain/ckpt/checkpoint_reader.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/model/generate.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/stream_decoder.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::cli {

namespace {

namespace fs = std::filesystem;

// The tokenizer.json that --tokenizer names, or the first found beside the checkpoint: the directory given,
// the step directory, the run directory above it, the Hugging Face directory it was imported from, and the
// checkpoint a fine-tuning run started from (`meshtrain import` copies the tokenizer files there).
std::optional<std::string> locate_tokenizer(const cxxopts::ParseResult& r, const std::string& given,
                                            const std::string& step_dir, const ckpt::CheckpointMeta& meta,
                                            const Config& cfg) {
  if (r.count("tokenizer")) return text::tokenizer_file(r["tokenizer"].as<std::string>(), "--tokenizer");
  std::vector<std::string> dirs = {given, step_dir, fs::path(step_dir).parent_path().string(),
                                   meta.state.value("imported_from", std::string()), cfg.checkpoint.init_from};
  return text::find_tokenizer_file(dirs);
}

// The prompt's tokens: the chat template's rendering of [system,] user with the assistant's turn opened, or
// the plain text with the tokenizer's own special tokens (e.g. Llama 3's BOS), as transformers encodes them.
std::vector<int64_t> prompt_ids(const cxxopts::ParseResult& r, const text::Tokenizer& tok, const std::string& dir) {
  const std::string prompt = r["prompt"].as<std::string>();
  if (!r.count("chat")) return tok.encode(prompt, /*add_special_tokens=*/true);
  std::optional<text::ChatTemplate> tmpl;
  try {
    tmpl.emplace(text::ChatTemplate::from_tokenizer_dir(dir));
  } catch (const UserError& e) {
    throw UserError(cat(e.what(), "; --chat is unavailable for this model (a plain --prompt still works)"));
  }
  std::vector<text::ChatMessage> messages;
  if (r.count("system")) messages.push_back({"system", r["system"].as<std::string>()});
  messages.push_back({"user", prompt});
  return tok.encode(tmpl->render(messages, /*add_generation_prompt=*/true), /*add_special_tokens=*/false);
}

// The model's tokenizer, checked against the model's vocabulary.
text::Tokenizer load_tokenizer(const std::string& tokenizer_json, int64_t model_vocab) {
  text::Tokenizer tok = text::Tokenizer::from_file(tokenizer_json);
  MT_USER_CHECK(tok.vocab_size() <= model_vocab, tokenizer_json, ": the tokenizer has ", tok.vocab_size(),
                " ids but the model's vocabulary is ", model_vocab, " (a tokenizer of another model? see --tokenizer)");
  return tok;
}

// Samples with the tokenizer, printing the text as it comes (the prompt first, unless it is a chat); ends at
// the model's end-of-text tokens.
void generate_text(model::Transformer& net, const text::Tokenizer& tok, const std::vector<int64_t>& ids,
                   const std::string& dir, bool chat, model::SampleOptions opts) {
  opts.stop_tokens = text::stop_token_ids(dir, tok);
  text::StreamDecoder decoder(tok);
  if (!chat) std::cout << tok.decode(ids) << std::flush;
  opts.on_token = [&](int64_t id) { std::cout << decoder.step(id) << std::flush; };
  model::generate(net, ids, opts);
  std::cout << decoder.finish() << std::endl;
}

// The prompt's logits in eval mode (no dropout), fp32, beside the ids they were computed for.
int write_logits(model::Transformer& net, const std::vector<int64_t>& ids, const std::string& path) {
  MT_USER_CHECK(!ids.empty(), "--logits: the prompt encodes to no token");
  net->eval();
  at::NoGradGuard no_grad;
  const auto tokens = at::tensor(ids, at::kLong);
  const auto logits = net->forward(tokens.unsqueeze(0))[0].to(at::kFloat).contiguous();  // [T, V]
  ckpt::write_safetensors(path, {{"logits", logits}, {"ids", tokens}});
  std::printf("wrote %s: logits [%lld, %lld]\n", path.c_str(), static_cast<long long>(logits.size(0)),
              static_cast<long long>(logits.size(1)));
  return 0;
}

}  // namespace

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
  const std::string given = strings(r, "checkpoint")[0];
  const std::string dir = ckpt::resolve_checkpoint_dir(given);
  const ckpt::CheckpointMeta meta = ckpt::read_meta(dir);
  // The config is meta.json's own (format 2); earlier trainers kept it in the state.
  const nlohmann::json& cj = !meta.config.empty() ? meta.config : meta.state.value("config", meta.config);
  MT_USER_CHECK(!cj.empty(), dir, ": checkpoint carries no config");
  Config cfg = parse_config(cj.dump(), dir + "/meta.json", /*json=*/true);
  const auto tokenizer_json = locate_tokenizer(r, given, dir, meta, cfg);
  MT_USER_CHECK(tokenizer_json || !r.count("chat"), "--chat: no tokenizer.json found beside ", given,
                " (give the model's tokenizer directory with --tokenizer)");
  // The tokenizer and the prompt before the weights, so that a mistake in either is reported at once.
  std::optional<text::Tokenizer> tok;
  std::vector<int64_t> ids;
  const std::string tok_dir = tokenizer_json ? fs::path(*tokenizer_json).parent_path().string() : "";
  if (tokenizer_json) {
    tok.emplace(load_tokenizer(*tokenizer_json, cfg.model.vocab_size));
    ids = prompt_ids(r, *tok, tok_dir);
  } else {
    ids = data::encode_bytes(r["prompt"].as<std::string>());
  }
  model::Transformer net(cfg.model);
  // The model's tensors only (never the optimizer state); one that meta.json lacks is named.
  std::vector<ShardedTensor> wanted;
  for (auto& item : net->named_parameters())
    wanted.push_back({"model." + item.key(), item.value().sizes().vec(),
                      std::vector<int64_t>(static_cast<size_t>(item.value().dim()), 0), item.value(), true});
  ckpt::load_with_base(dir, wanted);  // an adapters-only LoRA checkpoint: its base from the recorded path
  if (r.count("logits")) return write_logits(net, ids, r["logits"].as<std::string>());
  const model::SampleOptions opts{.max_new_tokens = r["tokens"].as<int64_t>(),
                                  .temperature = r["temperature"].as<double>(),
                                  .top_k = r["top-k"].as<int64_t>(),
                                  .seed = r["seed"].as<uint64_t>()};
  if (tok) {
    generate_text(net, *tok, ids, tok_dir, r.count("chat") > 0, opts);
  } else {
    std::cout << data::decode_bytes(model::generate(net, ids, opts)) << std::endl;
  }
  return 0;
}

}  // namespace meshtrain::cli
