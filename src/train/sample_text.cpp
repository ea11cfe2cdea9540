#include "meshtrain/train/sample_text.h"

#include <filesystem>

#include "meshtrain/ckpt/model_path.h"
#include "meshtrain/core/error.h"
#include "meshtrain/core/join.h"
#include "meshtrain/data/byte_tokens.h"
#include "meshtrain/text/tokenizer_files.h"
#include "meshtrain/text/unicode.h"

namespace fs = std::filesystem;

namespace meshtrain::train {
namespace {

// Where a run's tokenizer may be: its own directory, then the checkpoint its weights came from (a step
// directory's run directory too: `meshtrain import` writes the files beside `latest`).
std::vector<std::string> run_tokenizer_dirs(const Config& cfg) {
  std::vector<std::string> dirs{cfg.train.out_dir};
  if (!cfg.checkpoint.init_from.empty()) {
    const std::string from = ckpt::model_files_dir(cfg.checkpoint.init_from);  // a Hub id: its snapshot
    dirs.push_back(from);
    dirs.push_back(fs::path(from).parent_path().string());
  }
  return dirs;
}

}  // namespace

SampleText SampleText::for_run(const Config& cfg, bool instruction_data) {
  SampleText s;
  const std::vector<std::string> dirs = run_tokenizer_dirs(cfg);
  const auto file = text::find_tokenizer_file(dirs);
  if (!file) {
    s.describe_ = cat("byte-level (no tokenizer.json in ", join(dirs, " or "), ")");
    return s;
  }
  const std::string dir = fs::path(*file).parent_path().string();
  s.tok_.emplace(text::model_tokenizer(*file, cfg.model.vocab_size));
  s.stop_ = text::stop_token_ids(dir, *s.tok_);
  s.describe_ = *file;
  if (!instruction_data) return s;
  try {
    s.chat_.emplace(text::ChatTemplate::from_tokenizer_dir(dir));
    s.describe_ += " and its chat template";
  } catch (const UserError& e) {
    s.describe_ += cat(" (no chat template: ", e.what(), ")");  // plain prompts still sample
  }
  return s;
}

std::vector<int64_t> SampleText::prompt_ids(const std::string& prompt) const {
  if (!tok_) return data::encode_bytes(prompt.empty() ? "\n" : prompt);
  if (chat_) return tok_->encode(chat_->render({{"user", prompt}}, /*add_generation_prompt=*/true), false);
  std::vector<int64_t> ids = tok_->encode(prompt, /*add_special_tokens=*/true);
  // An empty prompt without a BOS token: the model still needs one token to continue from.
  return ids.empty() ? tok_->encode("\n", false) : ids;
}

std::string SampleText::decode(const std::vector<int64_t>& ids) const {
  // Byte-level samples may stop inside a character, or a small model may emit invalid sequences: U+FFFD for
  // those, so the text is valid UTF-8 for the log, the metrics' JSON and TensorBoard.
  return tok_ ? tok_->decode(ids) : text::utf8_lossy(data::decode_bytes(ids));
}

}  // namespace meshtrain::train
