// What every `meshtrain` command shares: option parsing with --help, repeated-flag lists, a resolved config,
// byte sizes with K/M/G suffixes, and JSON result files. Commands are declared in commands.h.
#pragma once

// A repeatable flag keeps each value whole: cxxopts would split it at commas, which cuts list-valued config
// keys apart (`--set model.lora_targets=q,v`). Every file of this binary includes cxxopts through this header,
// so all agree on the delimiter (one definition of its templates); argv strings never hold a NUL.
#define CXXOPTS_VECTOR_DELIMITER '\0'
#include <cxxopts.hpp>

#include <string>
#include <vector>

#include "meshtrain/core/config.h"

namespace meshtrain::cli {

// What a model argument may be (generate, eval, serve, export; ckpt/model_path.h), for their --help.
inline constexpr const char* kModelArgumentHelp =
    " CHECKPOINT is a meshtrain checkpoint (a step directory or the directory holding `latest`), a Hugging Face "
    "model directory (config.json, model.safetensors or model.safetensors.index.json and its shards, tokenizer.json, "
    "tokenizer_config.json, generation_config.json: read in place, nothing converted on disk), or org/name from the "
    "local Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub; refs/main names the "
    "snapshot; nothing is downloaded).";

// Parses argv; on --help prints the options and exits 0.
cxxopts::ParseResult parse(cxxopts::Options& o, int argc, char** argv);

// The values of a repeatable (or positional) option; empty when it was not given.
std::vector<std::string> strings(const cxxopts::ParseResult& r, const std::string& name);

// Each value split at commas, blanks trimmed, empty pieces dropped: for flags whose one value is a list
// (`--unfuse norm,gelu`), the values of repeated flags taken together.
std::vector<std::string> split_commas(const std::vector<std::string>& values);

// FILE + --set values, with the model shape taken from checkpoint.init_from where the config gives none
// (ckpt/source_model.h; logged once): what every command that runs or sizes a training config loads.
Config load_run_config(const std::string& path, const std::vector<std::string>& sets);

// CONFIG + repeated --set into a resolved, validated Config for `world_size` ranks (inputs checked to exist).
Config load_resolved(const std::vector<std::string>& positional, const std::vector<std::string>& sets,
                     int world_size);

// Writes `text` to the file named by --json when that option was given; UserError when it cannot be written.
void write_json_option(const cxxopts::ParseResult& r, const std::string& text);

}  // namespace meshtrain::cli
