// config_reference_markdown(): the text of docs/config.md, generated from the reflection table and the preset
// list so the reference cannot drift from the code (a unit test compares the checked-in file to it).
#include <sstream>

#include "meshtrain/core/config.h"
#include "meshtrain/core/config_schema.h"
#include "meshtrain/core/error.h"

namespace meshtrain {
namespace {

// Markdown tables split cells on '|', and renderers take "<train.out_dir>" for an HTML tag.
std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string default_cell(const FieldInfo& f) {
  FieldValue v = f.default_value();
  if (f.type == FieldType::String && std::get<std::string>(v).empty()) return "`\"\"`";
  return cat("`", format_field_value(v), "`");
}

constexpr const char* kIntro = R"(# Configuration reference

<!-- Generated from include/meshtrain/core/config.h by `meshtrain config --docs > docs/config.md`;
     do not edit by hand (tests/unit/core/config_print_test.cpp fails when this file is stale). -->

A run is described by one file with up to ten sections — `model`, `parallel`, `comm`, `data`, `optimizer`,
`schedule`, `train`, `checkpoint`, `logging`, `serve` — each a mapping of keys. Every key has a default; only
`data.train` must be given. `serve` is what `meshtrain serve` reads (docs/serving.md "Settings"): the checkpoint
records it with the rest, and `meshtrain serve --config FILE` takes another file's.

## Files

The extension picks the parser: `.yaml` / `.yml` → YAML (yaml-cpp), `.json` → JSON (nlohmann; `//` and
`/* */` comments are allowed). Any other extension is refused.

```yaml
model:
  preset: gpt2-124m        # shape first, then the keys below win
  max_seq_len: 512
parallel:
  tp: 2                    # dp = 0 (default): world size / (pp × fsdp × tp)
data:
  train: data/fineweb/train_*.bin
  val: data/fineweb/val_*.bin
optimizer:
  lr: 6e-4
train:
  steps: 5000
  micro_batch_size: 16
  out_dir: runs/gpt2-124m
```

Mistakes are one line naming the file and, for YAML, the line and column:

- malformed text: `cfg.yaml:3:5: <parser message>` (JSON: line and column computed from the byte offset);
- an unknown section or key: `cfg.yaml:7:3: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?`
  (the valid keys of the section are listed when nothing is close);
- a repeated key: `cfg.yaml:8:3: duplicate key 'optimizer.lr' (first at line 7)`;
- a value of the wrong type: `cfg.yaml:7:7: optimizer.lr: expected a finite number, got 'abc'`. YAML scalars are
  read by the key's type (`int`: an integer literal, `float`: any finite number — `inf`, `.inf`, `nan` and
  literals beyond a double are refused, in files and `--set` alike —, `bool`: true/false, `string`: any
  scalar; null is the empty string; `list`: a sequence, or one scalar split at its commas). JSON values must
  have the JSON type that fits (an `int` key takes `8`, not `8.0` or `"8"`);
- a value an enumeration does not have: `cfg.yaml:3:11: model.family: given 'lama'; valid gpt2 | llama (did
  you mean 'llama'?)`;
- a second YAML document (`---` followed by more keys): refused, since it would be ignored; nesting deeper
  than the YAML parser's limit is reported as such;
- a model too large to count: `cfg.yaml: model: 1.45e+25 parameters = tok_embed vocab_size(256) × …; their
  training state (16 bytes each) would be … bytes, more than 64-bit sizes hold` (the same for one
  micro-batch's logits). The trainer and `meshtrain eval` also compare this rank's share of the weights
  (training: + gradients and AdamW moments, as the layout shards them) with the device's memory before
  allocating anything (src/core/model_size.cpp).

## Order of application

1. the defaults below;
2. `model.preset`, if one is named (in the file or by `--set`; `--set` wins) — it sets every shape key;
3. the file's own keys;
4. `--set` overrides, left to right;
5. `resolve` fills derived values (next section); `validate` checks every rule and reports the first broken
   one as `FILE: section.key: given X; valid Y`.

## Overrides

`--set section.key=value` (repeatable) overrides one key after the file. The value is read as a YAML scalar
(`--set optimizer.lr=3e-4`, `--set train.sample_prompt='"Once upon"'`); a `string` key also takes text that is
not a plain YAML scalar (`--set train.sample_prompt=*Once*`) as typed, and a `list` key a flow sequence or one
comma-separated string, commas inside braces kept (`--set model.lora_targets=q,v`, `--set
'train.freeze=[blocks.0.*, tok_embed.weight]'`, `--set data.train=*.bin`, `--set data.train=a.bin:0.7,b.bin:0.3`).
A missing `=`, a missing section, an unknown key or a value of the wrong type is an error naming the `--set`
argument.

## Derived values

| key | when | value |
| --- | --- | --- |
| `model.n_kv_head` | 0 | `model.n_head` (multi-head attention) |
| `model.d_ff` | 0 | gpt2: 4 × `d_model`; llama: ⌈int(8 × `d_model` / 3) / 256⌉ × 256 (SwiGLU) |
| `data.seq_len` | 0 | `model.max_seq_len` |
| `parallel.dp` | 0 | world size / (`pp` × `fsdp` × `tp`) |
| `checkpoint.dir` | empty | `<train.out_dir>/checkpoints` |
| `logging.metrics` | empty | `<train.out_dir>/metrics.jsonl` |

## Model presets

Published shapes: GPT-2 (OpenAI, 2019; Hugging Face `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`) and
Llama 3.1 / 3.2 (Meta's `config.json`). `tiny` is for tests. All use `norm_eps` 1e-5; llama presets use
`rope_theta` 500000.

)";

constexpr const char* kPresetNotes = R"(
Llama presets set `max_seq_len` 8192, not the published 131072: the long context relies on Llama 3.1's RoPE
frequency scaling (`rope_scaling`, "llama3"), which meshtrain does not implement, and 8192 is the context
the models were pre-trained at. GPT-2's vocabulary is the published 50257 (llm.c pads it to 50304 for speed;
set `model.vocab_size` to do the same).

## Keys

Types: `int` (64-bit integer), `float` (double), `bool`, `string`; an enumeration's type is its values
(`gpt2 | llama`: any other is refused when the file is read, naming the valid ones); `list`: a YAML sequence
(`[q, v]`) or JSON array of strings, or one comma-separated string (`q,v`, as older configs and checkpoints
hold it).
)";

}  // namespace

std::string config_reference_markdown() {
  std::ostringstream md;
  md << kIntro;
  md << "| preset | family | n_layer | n_head | n_kv_head | d_model | d_ff | vocab_size | max_seq_len | tied |\n";
  md << "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const std::string& name : model_preset_names()) {
    ModelConfig m;
    apply_model_preset(name, m);
    md << "| `" << name << "` | " << m.family << " | " << m.n_layer << " | " << m.n_head << " | " << m.n_kv_head
       << " | " << m.d_model << " | " << m.d_ff << " | " << m.vocab_size << " | " << m.max_seq_len << " | "
       << (m.tie_embeddings ? "yes" : "no") << " |\n";
  }
  md << kPresetNotes;
  std::string_view section;
  for (const FieldInfo& f : config_fields()) {
    if (f.section != section) {
      section = f.section;
      md << "\n### " << section << "\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
    }
    md << "| `" << f.path() << "` | " << cell(f.type_name()) << " | " << default_cell(f) << " | " << cell(f.doc)
       << " |\n";
  }
  return md.str();
}

}  // namespace meshtrain
