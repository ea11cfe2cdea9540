"""Tokenizers trained in the test (nothing downloaded) and a torture text, for the tokenizer, chat-template
and generate tests.

train_tokenizer(style, kjv, out_dir) trains a small byte-level BPE on the KJV text (plus the torture text, so
that merges inside multi-byte characters exist) with each style's real pre-tokenizer configuration:
  gpt2               ByteLevel(add_prefix_space=False, use_regex=True), as GPT-2's tokenizer.json
  gpt2_prefix_space  the same with add_prefix_space=True
  llama3             Split(Llama 3 regex, Isolated) + ByteLevel(use_regex=False), ignore_merges, BOS template,
                     Llama 3's special tokens, an lstrip/rstrip added token and a single_word one
  qwen2              llama3 with Qwen 2's regex (single digits), without ignore_merges
It writes tokenizer.json into out_dir and returns the tokenizers.Tokenizer.

SentencePiece-style tokenizers (BPE over characters with byte_fallback, Llama 2's vocabulary layout: <unk>
<s> </s>, then the 256 byte tokens <0x00>…<0xFF>, then the trained pieces; the "<s> $A" template, a special
<tool> and a normalized added token "Moses") come from the same function with these styles:
  llama2           normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, decoder Replace("▁", " "),
                   ByteFallback, Fuse, Strip(" ", 1, 0): what transformers' converter writes for Llama 2 and
                   Mistral (legacy)
  mistral          no normalizer, Metaspace(prepend_scheme "first", split false), the same decoder: the
                   converter's non-legacy output
  gemma            normalizer Replace(" ", "▁") only, a literal Split(" ", MergedWithPrevious), decoder Replace,
                   ByteFallback, Fuse (no prefix, no strip)
  metaspace_split  Metaspace(prepend_scheme "always", split true) and the Metaspace decoder (no byte fallback
                   in the decoder: a <0xNN> token decodes as its text)
"""
from __future__ import annotations

import os
import random

import json

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors,
                        trainers)

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# Characters and strings that stress the pre-tokenizer: scripts, marks, digits of several kinds, every kind
# of white space (and U+001C, which Python calls space and Unicode does not), contractions in any case,
# emoji sequences, special-token look-alikes.
PIECES = [
    "In the beginning", " God", "'s", "'S", "'ll", "'LL", "'Re", "'ve", "'d", "'m", "'t", "'x", "'ſ", "n't", "''",
    "中文字符", "日本語のテキスト", "한국어", "العربية", "עברית", "हिन्दी", "ภาษาไทย", "Ελληνικά", "Русский",
    "naïve", "café", "e\u0301", "Å", "ǅ", "ʰ", "ﬁ",
    "0", "7", "12", "123", "1234", "12345678901", "٣٤٥", "１２３", "½", "Ⅻ", "²", "3.14", "1,000", "v2",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000", "\u2028", "\u0085",
    "\x0b", "\x0c", "\x1c", "\u200b", "\u2009",
    "😀", "👍🏽", "👩‍👩‍👧‍👦", "🇫🇷", "❤️", "🤖", "🧠",
    "!", "?!", "...", "—", "«»", "(", ")", "{", "}", "#", "@", "$", "%", "\\", "/", "_", "-", "==", "'", '"',
    "<|", "|>", "<|endoftext", "<|eot_id|", "<tool", "Moses", "said",
]
SP_STYLES = ("llama2", "mistral", "gemma", "metaspace_split")
SP_SPECIAL = ["<unk>", "<s>", "</s>"]
SPECIALS = {
    **{style: SP_SPECIAL + ["<tool>", "Moses"] for style in SP_STYLES},
    "gpt2": ["<|endoftext|>"],
    "gpt2_prefix_space": ["<|endoftext|>"],
    "llama3": LLAMA3_SPECIAL + ["<tool>", "Moses said"],
    "qwen2": LLAMA3_SPECIAL + ["<tool>", "Moses said"],
}


def torture_texts(style: str, seed: int = 0) -> list[str]:
    """A hand-written paragraph, the pieces one by one, and random mixes of them (with the style's special
    tokens among them)."""
    rng = random.Random(seed)
    pieces = PIECES + SPECIALS[style]
    hand = ("  Leading spaces; 'Tis the LORD'S day, they'RE here — we'll see.\r\n\tTabs\t\tand 123456 ½ ٣٤٥ "
            "中文 と 日本語 😀👍🏽 👩‍👩‍👧‍👦 café naïve\u00a0nbsp\u3000ideographic \n\n\n  trailing   ")
    mixes = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(300)]
    one_long = "".join(rng.choice(pieces) for _ in range(5000))
    return [hand, ""] + pieces + mixes + [one_long]


def _sentencepiece_style(style: str, tok: Tokenizer) -> None:
    sp_decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    if style == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    elif style == "mistral":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    elif style == "gemma":
        tok.normalizer = normalizers.Replace(" ", "▁")
        # Gemma's file carries this Split; after the normalizer no space is left for it to find.
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
        tok.decoder = sp_decoder
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)


def train_sentencepiece_style(style: str, lines: list[str], out_dir: str) -> Tokenizer:
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    _sentencepiece_style(style, tok)
    # A limited alphabet leaves rarer characters (most of the torture text's scripts and emoji) to byte fallback.
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=SP_SPECIAL, limit_alphabet=120,
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    j = json.loads(tok.to_str())
    vocab = {t: i for i, t in enumerate(SP_SPECIAL)}
    vocab.update({f"<0x{b:02X}>": len(SP_SPECIAL) + b for b in range(256)})
    for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(t, len(vocab))
    j["model"]["vocab"] = vocab
    tok = Tokenizer.from_str(json.dumps(j))
    tok.add_special_tokens([AddedToken("<tool>", special=True, normalized=False)])
    tok.add_tokens([AddedToken("Moses", normalized=True)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B:1",
                                                       special_tokens=[("<s>", vocab["<s>"])])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return tok


def train_tokenizer(style: str, kjv: str, out_dir: str) -> Tokenizer:
    if style in SP_STYLES:
        with open(kjv, encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
        return train_sentencepiece_style(style, lines + torture_texts(style) * 3, out_dir)
    llama_like = style in ("llama3", "qwen2")
    tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
    if llama_like:
        regex = LLAMA3_REGEX if style == "llama3" else QWEN2_REGEX
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=style == "gpt2_prefix_space", use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = LLAMA3_SPECIAL if llama_like else ["<|endoftext|>"]
    trainer = trainers.BpeTrainer(vocab_size=1200, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with open(kjv, encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    tok.train_from_iterator(lines + torture_texts(style) * 3, trainer=trainer)
    if llama_like:
        tok.add_special_tokens([AddedToken("<tool>", lstrip=True, rstrip=True, special=True, normalized=False)])
        tok.add_tokens([AddedToken("Moses said", single_word=True)])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return tok
