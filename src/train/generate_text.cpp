// generate_text (generate_text.h): checkpoint → tokenizer → prompt → model → sampled text, or the prompt's
// logits.
#include "meshtrain/train/generate_text.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "meshtrain/ckpt/inference_checkpoint.h"
#include "meshtrain/ckpt/safetensors.h"
#include "meshtrain/core/error.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/model/prompt_logits.h"
#include "meshtrain/text/chat_template.h"
#include "meshtrain/text/stream_decoder.h"
#include "meshtrain/text/tokenizer_files.h"

namespace meshtrain::train {
namespace {

namespace fs = std::filesystem;

// The tokenizer.json that --tokenizer names, or the first found beside the checkpoint.
std::optional<std::string> locate_tokenizer(const GenerateOptions& opts, const ckpt::InferenceCheckpoint& ck) {
  if (opts.tokenizer) return text::tokenizer_file(*opts.tokenizer, "--tokenizer");
  return text::find_tokenizer_file(ckpt::tokenizer_dirs(ck, opts.checkpoint));
}

// The prompt's tokens: the chat template's rendering of [system,] user with the assistant's turn opened, or
// the plain text with the tokenizer's own special tokens (e.g. Llama 3's BOS), as transformers encodes them.
std::vector<int64_t> prompt_ids(const GenerateOptions& opts, const text::Tokenizer& tok, const std::string& dir) {
  if (!opts.chat) return tok.encode(opts.prompt, /*add_special_tokens=*/true);
  std::optional<text::ChatTemplate> tmpl;
  try {
    tmpl.emplace(text::ChatTemplate::from_tokenizer_dir(dir));
  } catch (const UserError& e) {
    throw UserError(cat(e.what(), "; --chat is unavailable for this model (a plain --prompt still works)"));
  }
  std::vector<text::ChatMessage> messages;
  if (opts.system) messages.push_back({"system", *opts.system});
  messages.push_back({"user", opts.prompt});
  return tok.encode(tmpl->render(messages, /*add_generation_prompt=*/true), /*add_special_tokens=*/false);
}

// Samples with the tokenizer, writing the text as it comes (the prompt first, unless it is a chat); ends at
// the model's end-of-text tokens.
void sample_text(model::Transformer& net, const text::Tokenizer& tok, const std::vector<int64_t>& ids,
                 const std::string& dir, const GenerateOptions& opts, std::ostream& out) {
  model::SampleOptions sample = opts.sample;
  sample.stop_tokens = text::stop_token_ids(dir, tok);
  text::StreamDecoder decoder(tok);
  if (!opts.chat) {
    out << tok.decode(ids) << std::flush;
    decoder.continue_after(ids);  // the reply goes on from the prompt (no start-of-text space stripped)
  }
  sample.on_token = [&](int64_t id) { out << decoder.step(id) << std::flush; };
  model::generate(net, ids, sample);
  out << decoder.finish() << std::endl;
}

// The prompt's logits (fp32 'logits' [T, V]) beside the ids they were computed for.
void write_logits(model::Transformer& net, const std::vector<int64_t>& ids, const std::string& path,
                  std::ostream& out) {
  MT_USER_CHECK(!ids.empty(), "--logits: the prompt encodes to no token");
  const at::Tensor logits = model::prompt_logits(net, ids);
  ckpt::write_safetensors(path, {{"logits", logits}, {"ids", at::tensor(ids, at::kLong)}});
  out << "wrote " << path << ": logits [" << logits.size(0) << ", " << logits.size(1) << "]" << std::endl;
}

}  // namespace

void generate_text(const GenerateOptions& opts, std::ostream& out) {
  const ckpt::InferenceCheckpoint ck = ckpt::open_for_inference(opts.checkpoint);
  const auto tokenizer_json = locate_tokenizer(opts, ck);
  MT_USER_CHECK(tokenizer_json || !opts.chat, "--chat: no tokenizer.json found beside ", opts.checkpoint,
                " (give the model's tokenizer directory with --tokenizer)");
  std::optional<text::Tokenizer> tok;
  std::vector<int64_t> ids;
  const std::string tok_dir = tokenizer_json ? fs::path(*tokenizer_json).parent_path().string() : "";
  if (tokenizer_json) {
    tok.emplace(text::model_tokenizer(*tokenizer_json, ck.config.model.vocab_size));
    ids = prompt_ids(opts, *tok, tok_dir);
  } else {
    ids = data::encode_bytes(opts.prompt);
  }
  model::Transformer net = ckpt::load_model(ck);
  net->to(opts.device, opts.dtype);
  if (!opts.logits.empty()) {
    write_logits(net, ids, opts.logits, out);
  } else if (tok) {
    sample_text(net, *tok, ids, tok_dir, opts, out);
  } else {
    out << data::decode_bytes(model::generate(net, ids, opts.sample)) << std::endl;
  }
}

}  // namespace meshtrain::train
