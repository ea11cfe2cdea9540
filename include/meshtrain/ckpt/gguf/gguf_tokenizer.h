// A byte-level BPE tokenizer as GGUF metadata (the keys convert_hf_to_gguf.py writes for GPT-2 and Llama 3
// style tokenizers) and back as the Hugging Face files meshtrain's text room and `generate --chat` read:
//   tokenizer.ggml.model       "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre         the pre-tokenizer's regex by llama.cpp's name: gpt-2, llama-bpe, qwen2
//   tokenizer.ggml.tokens      every id's token, the vocabulary padded to the model's with [PAD<i>] (unused)
//   tokenizer.ggml.token_type  1 normal, 3 control (special added tokens), 4 user-defined (other added), 5 unused
//   tokenizer.ggml.merges      "a b" per merge, in rank order
//   tokenizer.ggml.bos_token_id / eos_token_id, add_bos_token (the post-processor puts BOS first)
//   tokenizer.chat_template    tokenizer_config.json's chat_template (or chat_template.jinja)
#pragma once

#include <map>
#include <optional>
#include <string>

#include "meshtrain/ckpt/gguf/gguf_file.h"
#include "meshtrain/core/config.h"

namespace meshtrain::ckpt::gguf {

// The tokenizer.* keys for the tokenizer.json at `tokenizer_json` (tokenizer_config.json and
// chat_template.jinja beside it are read when present) feeding model `m` (resolved). UserError naming the file
// for a tokenizer that is not byte-level BPE, a pre-tokenizer llama.cpp has no name for, or more ids than the
// model's vocabulary.
Metadata tokenizer_metadata(const std::string& tokenizer_json, const ModelConfig& m);

// The files (name → text: tokenizer.json, tokenizer_config.json, generation_config.json) that carry the
// file's tokenizer and chat template; nullopt, with `why` set, for a tokenizer meshtrain cannot run (not
// byte-level BPE, e.g. SentencePiece's "llama", or a pre-tokenizer it does not know).
std::optional<std::map<std::string, std::string>> tokenizer_files_from_gguf(const GgufReader& r, std::string& why);

}  // namespace meshtrain::ckpt::gguf
