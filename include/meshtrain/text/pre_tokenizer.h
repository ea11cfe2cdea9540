// The pre-tokenizer steps of tokenizer.json this reader reproduces, in order: `Split` with a known regex
// (text/split_pattern.h) or a literal string, `ByteLevel` (GPT-2's byte symbols, optionally a prefix space
// and the GPT-2 regex), and `Metaspace` (SentencePiece's "▁" for the space, prepended to the text's first
// piece or to every piece, optionally split before each "▁"). Each cuts a piece into smaller ones; BPE then
// encodes each piece on its own.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "meshtrain/text/split_pattern.h"

namespace meshtrain::text {

struct PreTokenizeStep {
  enum class Kind { Split, SplitLiteral, ByteLevel, Metaspace } kind = Kind::ByteLevel;
  // How a SplitLiteral match joins the pieces (the `tokenizers` SplitDelimiterBehavior).
  enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext };
  // Metaspace: where "▁" is prepended when a piece does not start with one.
  enum class Prepend { Always, First, Never };
  SplitPattern pattern = SplitPattern::Gpt2;  // Split: the regex
  std::string literal;                        // SplitLiteral: the string; Metaspace: the replacement ("▁")
  Behavior behavior = Behavior::Isolated;     // SplitLiteral
  bool add_prefix_space = false;              // ByteLevel: a piece not starting with ' ' gets one
  bool use_regex = true;                      // ByteLevel: also split with the GPT-2 regex
  Prepend prepend = Prepend::Always;          // Metaspace
  bool split = false;                         // Metaspace: a new piece before each replacement
};

// The pieces of `text` after `steps`. `at_start`: the text begins the input (Metaspace's First prepends only
// there); a ByteLevel step maps each piece's bytes to GPT-2's symbols at the end.
std::vector<std::string> pre_tokenize(std::string_view text, const std::vector<PreTokenizeStep>& steps, bool at_start);

}  // namespace meshtrain::text
