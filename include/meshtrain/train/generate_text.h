// Text from a checkpoint (`meshtrain generate CKPT --prompt TEXT`): the model it recorded, loaded whole in this
// process (ckpt/inference_checkpoint.h), sampled with a KV cache (model/generate.h).
//
// With the model's tokenizer.json — the --tokenizer path, else the first found beside the checkpoint
// (ckpt::tokenizer_dirs) — the prompt is BPE-encoded (or, for a chat, rendered through the model's chat
// template) and the reply streamed as it is sampled, ending at the model's end-of-text tokens
// (docs/tokenizer.md); without one the model is byte-level (one token per byte). The tokenizer and the prompt
// are checked before any weight is read, so a mistake in either is reported at once.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "meshtrain/model/generate.h"

namespace meshtrain::train {

struct GenerateOptions {
  std::string checkpoint;                // a step directory or a directory holding `latest`
  std::string prompt = "\n";             // the text to continue; with `chat`, the user's message
  bool chat = false;                     // format the prompt with the model's chat template, print the reply only
  std::optional<std::string> system;     // with `chat`: a system message before the user's
  std::optional<std::string> tokenizer;  // a tokenizer.json or its directory; unset: found beside the checkpoint
  model::SampleOptions sample;           // its stop tokens come from the tokenizer's files
  std::string logits;                    // instead of sampling, write the prompt's logits to this safetensors file
  c10::Device device = c10::kCPU;        // where the model runs (--device)
  at::ScalarType dtype = at::kFloat;     // the weights' precision (--dtype); logits come back fp32 either way
};

// Writes the text (or the line naming the logits file) to `out` as it comes. UserError, one line, for a
// mistake in the options, the checkpoint or the tokenizer files.
void generate_text(const GenerateOptions& opts, std::ostream& out);

}  // namespace meshtrain::train
