// Where a model's tokenizer lives and what its side files say: a Hugging Face model directory holds
// tokenizer.json (the tokenizer), tokenizer_config.json (the chat template, bos/eos tokens) and
// generation_config.json (the ids that end a reply).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshtrain/text/tokenizer.h"

namespace meshtrain::text {

// `path` as given to --tokenizer: a tokenizer.json file or a directory holding one. Returns the file;
// UserError naming `flag` when there is none.
std::string tokenizer_file(const std::string& path, const std::string& flag);

// The first of `dirs` that holds a tokenizer.json (its path), or nullopt.
std::optional<std::string> find_tokenizer_file(const std::vector<std::string>& dirs);

// The tokenizer `tokenizer_json` holds, checked against the vocabulary of the model it will feed: UserError
// naming the file when it has more ids than the model (a tokenizer of another model).
Tokenizer model_tokenizer(const std::string& tokenizer_json, int64_t model_vocab);

// The tokens that end generation: tokenizer_config.json's eos_token and generation_config.json's
// eos_token_id (a number or a list), those of the files present in `dir`.
std::vector<int64_t> stop_token_ids(const std::string& dir, const Tokenizer& tok);

}  // namespace meshtrain::text
